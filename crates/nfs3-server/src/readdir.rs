//! READDIR and READDIRPLUS (RFC 1813 §3.3.16, §3.3.17).
//!
//! Cookies are the file system's own directory offsets (`d_off` from
//! `getdents64`), which ext4, xfs and btrfs keep stable across calls and
//! restarts; the server seeks a fresh descriptor of the directory to the
//! cookie. The cookie verifier is derived from the directory's identity,
//! so it is the same across restarts; a non-zero cookie with another
//! non-zero verifier is NFS3ERR_BAD_COOKIE. Replies honour `count`
//! (READDIR), `dircount` and `maxcount` (READDIRPLUS), each at most
//! `max_io`; a first entry that does not fit is NFS3ERR_TOOSMALL.

use std::os::fd::AsFd;

use bytes::Bytes;
use nfs3::args::{Readdir3Args, Readdirplus3Args};
use nfs3::res::*;
use nfs3::types::*;
use rustix::fs::{self as rfs, Mode, OFlags};

use crate::attr::{fattr, post_op};
use crate::cred::{MAY_EXEC, MAY_READ};
use crate::ctx::{stat, Ctx};
use crate::export::{file_id, stat_at, Obj};
use crate::fh::fnv1a;
use crate::status::{NfsErr, NfsResult};

type R3<T, F> = nfs3::types::NfsResult<T, F>;

/// Most entries in one reply.
pub const MAX_ENTRIES: usize = 65_536;

/// Bytes of a READDIR(PLUS) reply besides its entries: status,
/// post_op_attr, cookieverf, the list's end marker and eof.
const FIXED: usize = 4 + 4 + FATTR3_LEN + 8 + 4 + 4;

fn xdr_name_len(n: usize) -> usize {
    4 + n.div_ceil(4) * 4
}

/// The cookie verifier of a directory.
pub fn cookieverf(d: &Obj) -> Cookieverf3 {
    Cookieverf3(
        fnv1a(&[
            &d.id.ino.to_be_bytes(),
            &d.id.btime_sec.to_be_bytes(),
            &d.id.btime_nsec.to_be_bytes(),
        ])
        .to_be_bytes(),
    )
}

/// One directory entry read.
struct Raw {
    ino: u64,
    name: Vec<u8>,
    cookie: u64,
}

/// Open `d` afresh, check the verifier and seek to `cookie`.
fn open_at_cookie(c: &Ctx<'_>, d: &Obj, cookie: u64, verf: &Cookieverf3) -> NfsResult<rfs::Dir> {
    if !d.is_dir() {
        return Err(NfsErr::Notdir);
    }
    c.require(
        &d.owner(),
        MAY_READ,
        "listing a directory without read permission",
    )?;
    if cookie != 0 && verf.0 != [0; 8] && *verf != cookieverf(d) {
        return Err(NfsErr::BadCookie);
    }
    let fd = rfs::openat(
        d.fd.as_fd(),
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let mut dir = rfs::Dir::new(fd)?;
    if cookie != 0 {
        let off = i64::try_from(cookie).map_err(|_| NfsErr::BadCookie)?;
        dir.seek(off).map_err(|_| NfsErr::BadCookie)?;
    }
    Ok(dir)
}

/// The next entry, or `None` at the end.
fn next(c: &Ctx<'_>, d: &Obj, dir: &mut rfs::Dir) -> NfsResult<Option<Raw>> {
    match dir.read() {
        None => Ok(None),
        Some(Err(e)) => Err(e.into()),
        Some(Ok(e)) => {
            let name = e.file_name().to_bytes().to_vec();
            let mut ino = e.ino();
            // The root's ".." names the root: nothing outside is shown.
            if name == b".." && c.ex.is_root(&d.id) {
                ino = d.id.ino;
            }
            Ok(Some(Raw {
                ino,
                name,
                cookie: e.offset() as u64,
            }))
        }
    }
}

/// What READDIR and READDIRPLUS share: resolve the directory, open it at
/// `cookie` (checking `verf`), let `list` build the reply's list from it,
/// and answer with the directory's `post_op_attr` (on failure too) and
/// its cookie verifier (§3.3.16, §3.3.17).
fn listing<L, T>(
    c: &Ctx<'_>,
    fh: &NfsFh3,
    cookie: u64,
    verf: &Cookieverf3,
    list: impl FnOnce(&Obj, rfs::Dir) -> NfsResult<L>,
    ok: impl FnOnce(PostOpAttr, Cookieverf3, L) -> T,
) -> R3<T, PostOpAttrFail> {
    let d = match c.resolve(fh) {
        Ok(d) => d,
        Err(e) => return R3::Fail(stat(e), PostOpAttrFail::default()),
    };
    match open_at_cookie(c, &d, cookie, verf).and_then(|dir| list(&d, dir)) {
        Ok(reply) => R3::Ok(ok(post_op(c.ex, &d), cookieverf(&d), reply)),
        Err(e) => R3::Fail(
            stat(e),
            PostOpAttrFail {
                attributes: post_op(c.ex, &d),
            },
        ),
    }
}

/// Read entries of `d` from `dir` while `take` turns each into a reply
/// entry (`take` sees how many are already taken; `None` means the reply
/// is full). The entries and whether the end was reached; when not even
/// the first entry fits, NFS3ERR_TOOSMALL.
fn fill<E>(
    c: &Ctx<'_>,
    d: &Obj,
    mut dir: rfs::Dir,
    mut take: impl FnMut(Raw, usize) -> Option<E>,
) -> NfsResult<(Vec<E>, bool)> {
    let mut entries = Vec::new();
    let mut eof = false;
    loop {
        let Some(e) = next(c, d, &mut dir)? else {
            eof = true;
            break;
        };
        match take(e, entries.len()) {
            Some(entry) => entries.push(entry),
            None => break,
        }
    }
    if entries.is_empty() && !eof {
        return Err(NfsErr::Toosmall);
    }
    Ok((entries, eof))
}

/// READDIR (§3.3.16).
pub fn readdir(c: &Ctx<'_>, a: Readdir3Args) -> Readdir3Res {
    let list = |d: &Obj, dir| {
        let count = (a.count.min(c.ex.options().max_io)) as usize;
        let mut used = FIXED;
        let (entries, eof) = fill(c, d, dir, |e, taken| {
            let size = 4 + 8 + xdr_name_len(e.name.len()) + 8;
            if used + size > count || taken >= MAX_ENTRIES {
                return None;
            }
            used += size;
            if e.name != b"." && e.name != b".." {
                c.ex.note_location(e.ino, d.id.ino, &e.name);
            }
            Some(Entry3 {
                fileid: e.ino,
                name: Filename3(Bytes::from(e.name)),
                cookie: e.cookie,
            })
        })?;
        Ok(Dirlist3 { entries, eof })
    };
    listing(
        c,
        &a.dir,
        a.cookie,
        &a.cookieverf,
        list,
        |dir_attributes, cookieverf, reply| Readdir3ResOk {
            dir_attributes,
            cookieverf,
            reply,
        },
    )
}

/// READDIRPLUS (§3.3.17): entries with attributes and handles (those need
/// search permission on the directory too; without it they are omitted).
pub fn readdirplus(c: &Ctx<'_>, a: Readdirplus3Args) -> Readdirplus3Res {
    let list = |d: &Obj, dir| {
        let max_io = c.ex.options().max_io;
        let maxcount = a.maxcount.min(max_io) as usize;
        let dircount = if a.dircount == 0 {
            maxcount
        } else {
            a.dircount.min(max_io) as usize
        };
        let search = c.who.may(&d.owner(), MAY_EXEC);
        let mut used = FIXED;
        let mut dirinfo = 0usize;
        let (entries, eof) = fill(c, d, dir, |e, taken| {
            let info = 8 + xdr_name_len(e.name.len()) + 8;
            let (attrs, handle) = if search {
                entry_attrs(c, d, &e.name)
            } else {
                (None, None)
            };
            let size = 4
                + info
                + 4
                + attrs.map_or(0, |_| FATTR3_LEN)
                + 4
                + handle
                    .as_ref()
                    .map_or(0, |h: &NfsFh3| xdr_name_len(h.len()));
            let first = taken == 0;
            if used + size > maxcount
                || (!first && dirinfo + info > dircount)
                || taken >= MAX_ENTRIES
            {
                return None;
            }
            used += size;
            dirinfo += info;
            Some(Entryplus3 {
                fileid: attrs.map_or(e.ino, |a| a.fileid),
                name: Filename3(Bytes::from(e.name)),
                cookie: e.cookie,
                name_attributes: attrs,
                name_handle: handle,
            })
        })?;
        Ok(Dirlistplus3 { entries, eof })
    };
    listing(
        c,
        &a.dir,
        a.cookie,
        &a.cookieverf,
        list,
        |dir_attributes, cookieverf, reply| Readdirplus3ResOk {
            dir_attributes,
            cookieverf,
            reply,
        },
    )
}

/// Attributes and handle of `name` in `d` (`.` is `d`, `..` its parent
/// inside the export); `None`s when it vanished meanwhile.
fn entry_attrs(c: &Ctx<'_>, d: &Obj, name: &[u8]) -> (PostOpAttr, PostOpFh3) {
    let obj_st = match name {
        b"." => Some((d.id, d.st)),
        b".." => c.ex.parent_of(d).ok().map(|p| (p.id, p.st)),
        _ => stat_at(d.fd.as_fd(), name).ok().map(|st| {
            c.ex.note_location(st.stx_ino, d.id.ino, name);
            (file_id(&st), st)
        }),
    };
    match obj_st {
        Some((id, st)) => (
            Some(fattr(c.ex, &st)),
            NfsFh3::new(Bytes::copy_from_slice(&c.ex.handle_of(id))).ok(),
        ),
        None => (None, None),
    }
}
