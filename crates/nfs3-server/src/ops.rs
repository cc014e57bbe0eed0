//! The NFSv3 procedures that read (RFC 1813 §3.3.1–§3.3.6, §3.3.18–§3.3.20)
//! and write (§3.3.2, §3.3.7–§3.3.15, §3.3.21), against the real file
//! system. READDIR and READDIRPLUS are in [`crate::readdir`].

use std::os::fd::AsFd;

use bytes::Bytes;
use nfs3::args::*;
use nfs3::res::*;
use nfs3::types::*;
use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags, Timespec, Timestamps};

use crate::attr::{fattr, post_op, wcc};
use crate::cred::{MAY_EXEC, MAY_READ, MAY_WRITE, S_IFMT, S_IFREG, S_ISGID, S_ISUID};
use crate::ctx::{stat, Ctx, NameKind};
use crate::export::{stat_at, stat_fd, Obj};
use crate::setattr;
use crate::status::{NfsErr, NfsResult};

fn fail<T, F: Default>(e: NfsErr) -> NfsResult3<T, F> {
    NfsResult3::Fail(stat(e), F::default())
}

type NfsResult3<T, F> = nfs3::types::NfsResult<T, F>;

/// The answer of a procedure whose two arms carry the same body (SETATTR,
/// REMOVE, RMDIR, RENAME, LINK): `body` with NFS3_OK, or with the status
/// of the error.
fn answer<T>(r: NfsResult<()>, body: T) -> NfsResult3<T, T> {
    match r {
        Ok(()) => NfsResult3::Ok(body),
        Err(e) => NfsResult3::Fail(stat(e), body),
    }
}

fn fh(c: &Ctx<'_>, o: &Obj) -> NfsFh3 {
    NfsFh3::new(Bytes::copy_from_slice(&c.ex.handle_of(o.id))).unwrap_or_default()
}

/// `post_op_attr` of a directory that may not have resolved.
fn dir_post(c: &Ctx<'_>, d: Option<&Obj>) -> PostOpAttr {
    d.and_then(|d| post_op(c.ex, d))
}

/// GETATTR (§3.3.1).
pub fn getattr(c: &Ctx<'_>, a: Getattr3Args) -> Getattr3Res {
    match c.resolve(&a.object) {
        Ok(o) => NfsResult3::Ok(Getattr3ResOk {
            obj_attributes: fattr(c.ex, &o.st),
        }),
        Err(e) => fail(e),
    }
}

/// SETATTR (§3.3.2), with the `ctime` guard.
pub fn setattr(c: &Ctx<'_>, a: Setattr3Args) -> Setattr3Res {
    let o = match c.resolve(&a.object) {
        Ok(o) => o,
        Err(e) => return fail(e),
    };
    let before = o.st;
    let r = (|| {
        c.writable()?;
        if let Some(g) = a.guard {
            if crate::attr::nfstime(&o.st.stx_ctime) != g {
                return Err(NfsErr::NotSync);
            }
        }
        setattr::check(c, &o, &a.new_attributes)?;
        setattr::apply(c, &o, &a.new_attributes)
    })();
    let w = Setattr3ResOk {
        obj_wcc: wcc(c.ex, &before, &o),
    };
    answer(r, w)
}

/// Look `name` up in `d` (search permission needed; `.` is `d`, `..` its
/// parent, the root's `..` the root).
pub fn lookup_in(c: &Ctx<'_>, d: &Obj, name: &Filename3) -> NfsResult<Obj> {
    let kind = c.name(name)?;
    c.require(&d.owner(), MAY_EXEC, "lookup without search permission")?;
    match kind {
        NameKind::Dot => Ok(d.clone()),
        NameKind::DotDot => {
            if c.ex.is_root(&d.id) {
                tracing::info!(proc = c.proc_name, caller = %c.who, "'..' of the export root is the root");
            }
            c.ex.parent_of(d)
        }
        NameKind::Plain(n) => {
            let o = c.ex.open_child(d.fd.as_fd(), n).map_err(|e| {
                if e == NfsErr::Acces {
                    c.refuse(e, "name refused (not followed)")
                } else {
                    e
                }
            })?;
            c.ex.note_location(o.id.ino, d.id.ino, n);
            Ok(o)
        }
    }
}

/// LOOKUP (§3.3.3).
pub fn lookup(c: &Ctx<'_>, a: Lookup3Args) -> Lookup3Res {
    let d = match c.resolve_dir(&a.what.dir) {
        Ok(d) => d,
        Err(e) => return fail(e),
    };
    match lookup_in(c, &d, &a.what.name) {
        Ok(o) => NfsResult3::Ok(Lookup3ResOk {
            object: fh(c, &o),
            obj_attributes: Some(fattr(c.ex, &o.st)),
            dir_attributes: dir_post(c, Some(&d)),
        }),
        Err(e) => NfsResult3::Fail(
            stat(e),
            Lookup3ResFail {
                dir_attributes: dir_post(c, Some(&d)),
            },
        ),
    }
}

/// The ACCESS bits (§3.3.4) the caller has on `o`.
pub fn access_bits(c: &Ctx<'_>, o: &Obj) -> u32 {
    let own = o.owner();
    let w = c.who;
    let mut bits = 0;
    if w.may(&own, MAY_READ) {
        bits |= access::READ;
    }
    if o.is_dir() {
        if w.may(&own, MAY_EXEC) {
            bits |= access::LOOKUP;
        }
        if w.may(&own, MAY_WRITE | MAY_EXEC) {
            bits |= access::MODIFY | access::EXTEND | access::DELETE;
        }
    } else {
        if w.may(&own, MAY_WRITE) {
            bits |= access::MODIFY | access::EXTEND;
        }
        if w.may(&own, MAY_EXEC) {
            bits |= access::EXECUTE;
        }
    }
    if c.ex.options().read_only {
        bits &= !(access::MODIFY | access::EXTEND | access::DELETE);
    }
    bits
}

/// ACCESS (§3.3.4): what the caller's credential allows, truthfully.
pub fn access(c: &Ctx<'_>, a: Access3Args) -> Access3Res {
    match c.resolve(&a.object) {
        Ok(o) => NfsResult3::Ok(Access3ResOk {
            obj_attributes: Some(fattr(c.ex, &o.st)),
            access: a.access & access_bits(c, &o),
        }),
        Err(e) => fail(e),
    }
}

/// READLINK (§3.3.5): the link's text, as stored (never followed here).
pub fn readlink(c: &Ctx<'_>, a: Readlink3Args) -> Readlink3Res {
    let o = match c.resolve(&a.symlink) {
        Ok(o) => o,
        Err(e) => return fail(e),
    };
    if u32::from(o.st.stx_mode) & S_IFMT != crate::cred::S_IFLNK {
        return NfsResult3::Fail(
            stat(NfsErr::Inval),
            PostOpAttrFail {
                attributes: Some(fattr(c.ex, &o.st)),
            },
        );
    }
    match rfs::readlinkat(o.fd.as_fd(), "", Vec::new()) {
        Ok(t) => NfsResult3::Ok(Readlink3ResOk {
            symlink_attributes: Some(fattr(c.ex, &o.st)),
            data: Nfspath3(Bytes::from(t.into_bytes())),
        }),
        Err(e) => fail(e.into()),
    }
}

/// Read up to `count` bytes at `offset` into one buffer (no copy after
/// the `pread`), reserving only what the file held at `size` past
/// `offset`: a large `count` on a small file allocates no more than the
/// data. Data appended after `size` was taken is left to the next READ
/// (a short read; the caller's `eof` comes from a fresh size).
fn pread_all(
    fd: std::os::fd::BorrowedFd<'_>,
    offset: u64,
    count: usize,
    size: u64,
) -> NfsResult<Vec<u8>> {
    let held = usize::try_from(size.saturating_sub(offset)).unwrap_or(usize::MAX);
    let mut v: Vec<u8> = Vec::with_capacity(count.min(held).max(1));
    let want = count.min(v.capacity());
    while v.len() < want {
        let at = offset.checked_add(v.len() as u64).ok_or(NfsErr::Inval)?;
        let n = rustix::io::pread(fd, rustix::buffer::spare_capacity(&mut v), at)?;
        if n == 0 {
            break;
        }
    }
    v.truncate(count);
    Ok(v)
}

/// READ (§3.3.6). Counts above `max_io` are clamped; `eof` is set when
/// the data ends at (or the offset is past) the end of the file. Read
/// permission, or execute permission, or ownership allows it (a client
/// checked the open; knfsd allows the same).
pub fn read(c: &Ctx<'_>, a: Read3Args) -> Read3Res {
    let o = match c.resolve(&a.file) {
        Ok(o) => o,
        Err(e) => return fail(e),
    };
    let attrs = |o: &Obj| PostOpAttrFail {
        attributes: post_op(c.ex, o),
    };
    if !o.is_reg() {
        let e = if o.is_dir() {
            NfsErr::Isdir
        } else {
            NfsErr::Inval
        };
        return NfsResult3::Fail(stat(e), attrs(&o));
    }
    let own = o.owner();
    if !c.who.owns(&own) && !c.who.may(&own, MAY_READ) && !c.who.may(&own, MAY_EXEC) {
        let e = c.refuse(NfsErr::Acces, "read without read permission");
        return NfsResult3::Fail(stat(e), attrs(&o));
    }
    let count = a.count.min(c.ex.options().max_io) as usize;
    let data = match pread_all(o.fd.as_fd(), a.offset, count, o.st.stx_size) {
        Ok(d) => d,
        Err(e) => return NfsResult3::Fail(stat(e), attrs(&o)),
    };
    let st = stat_fd(o.fd.as_fd()).unwrap_or(o.st);
    let n = data.len();
    let eof = a.offset.saturating_add(n as u64) >= st.stx_size;
    NfsResult3::Ok(Read3ResOk {
        file_attributes: Some(fattr(c.ex, &st)),
        count: n as u32,
        eof,
        data: Bytes::from(data),
    })
}

/// What WRITE and COMMIT both need: a writable export, a regular file
/// (NFS3ERR_ISDIR for a directory, NFS3ERR_INVAL for anything else), and
/// the caller owning it or allowed to write it (`refused` is logged).
fn may_write_file(c: &Ctx<'_>, o: &Obj, refused: &'static str) -> NfsResult<()> {
    c.writable()?;
    if !o.is_reg() {
        return Err(if o.is_dir() {
            NfsErr::Isdir
        } else {
            NfsErr::Inval
        });
    }
    let own = o.owner();
    if !c.who.owns(&own) && !c.who.may(&own, MAY_WRITE) {
        return Err(c.refuse(NfsErr::Acces, refused));
    }
    Ok(())
}

/// WRITE (§3.3.7). UNSTABLE replies once the data is in the file
/// (`pwrite`); DATA_SYNC `fdatasync`s and FILE_SYNC `fsync`s before
/// replying. A count above `max_io` is NFS3ERR_INVAL; past the largest
/// offset, NFS3ERR_FBIG. A write by anyone but root clears the set-user-ID
/// and set-group-ID bits, as a local write does.
pub fn write(c: &Ctx<'_>, a: Write3Args) -> Write3Res {
    let o = match c.resolve(&a.file) {
        Ok(o) => o,
        Err(e) => return fail(e),
    };
    let before = o.st;
    let r = (|| {
        may_write_file(c, &o, "write without write permission")?;
        let count = (a.count as usize).min(a.data.len());
        if count > c.ex.options().max_io as usize {
            return Err(NfsErr::Inval);
        }
        if a.offset
            .checked_add(count as u64)
            .is_none_or(|end| end > i64::MAX as u64)
        {
            return Err(NfsErr::Fbig);
        }
        let fd = o.fd.as_fd();
        let mut done = 0;
        while done < count {
            let n = rustix::io::pwrite(fd, &a.data[done..count], a.offset + done as u64)?;
            if n == 0 {
                return Err(NfsErr::Io);
            }
            done += n;
        }
        let mode = u32::from(before.stx_mode);
        if !c.who.is_root() && (mode & S_ISUID != 0 || mode & (S_ISGID | 0o010) == S_ISGID | 0o010)
        {
            let _ = setattr::chmod(&o, mode & 0o7777 & !(S_ISUID | S_ISGID));
        }
        let committed = match a.stable {
            StableHow::Unstable => StableHow::Unstable,
            StableHow::DataSync => {
                rfs::fdatasync(fd).inspect_err(|_| c.ex.sync_failed())?;
                StableHow::DataSync
            }
            StableHow::FileSync => {
                rfs::fsync(fd).inspect_err(|_| c.ex.sync_failed())?;
                StableHow::FileSync
            }
        };
        Ok((count as u32, committed))
    })();
    let w = wcc(c.ex, &before, &o);
    match r {
        Ok((count, committed)) => NfsResult3::Ok(Write3ResOk {
            file_wcc: w,
            count,
            committed,
            verf: Writeverf3(c.ex.write_verifier()),
        }),
        Err(e) => NfsResult3::Fail(stat(e), WccDataFail { wcc: w }),
    }
}

/// A directory about to change: resolved, writable, with write and search
/// permission for the caller.
fn dir_for_change(c: &Ctx<'_>, d: &Obj) -> NfsResult<()> {
    c.writable()?;
    c.require(
        &d.owner(),
        MAY_WRITE | MAY_EXEC,
        "changing a directory without write+search permission",
    )
}

/// The steps CREATE, MKDIR, SYMLINK and MKNOD share (§3.3.8–§3.3.11):
/// resolve the directory, require that it may change, take a plain name
/// (`.` and `..` are NFS3ERR_EXIST), let `make` create the object under
/// that name, and answer with [`created`].
fn create_entry<'n>(
    c: &Ctx<'_>,
    where_: &'n Diropargs3,
    make: impl FnOnce(&Obj, &'n [u8]) -> NfsResult<Obj>,
) -> Create3Res {
    let d = match c.resolve_dir(&where_.dir) {
        Ok(d) => d,
        Err(e) => return fail(e),
    };
    let before = d.st;
    let name = match dir_for_change(c, &d).and_then(|_| c.plain_name(&where_.name, NfsErr::Exist)) {
        Ok(n) => n,
        Err(e) => return created(c, &d, &before, Err(e), b""),
    };
    let r = make(&d, name);
    created(c, &d, &before, r, name)
}

/// Finish a creating procedure: the result with the new object's handle
/// and attributes and the directory's wcc data.
fn created(
    c: &Ctx<'_>,
    d: &Obj,
    before: &rfs::Statx,
    r: NfsResult<Obj>,
    name: &[u8],
) -> Create3Res {
    let dir_wcc = wcc(c.ex, before, d);
    match r {
        Ok(mut o) => {
            c.ex.note_location(o.id.ino, d.id.ino, name);
            let _ = o.restat();
            NfsResult3::Ok(Create3ResOk {
                obj: Some(fh(c, &o)),
                obj_attributes: Some(fattr(c.ex, &o.st)),
                dir_wcc,
            })
        }
        Err(e) => NfsResult3::Fail(stat(e), WccDataFail { wcc: dir_wcc }),
    }
}

/// Ownership and attributes for an object the caller just created: its
/// uid/gid (root may ask for others in `s`), mode exactly as asked (the
/// client applied its umask), then size and times.
fn init_new(c: &Ctx<'_>, d: &Obj, o: &Obj, s: &Sattr3, default_mode: u32) -> NfsResult<()> {
    let (mut uid, mut gid) = c.new_owner(d);
    if c.who.is_root() {
        uid = s.uid.unwrap_or(uid);
        gid = s.gid.unwrap_or(gid);
    }
    setattr::set_new_owner(c, o, uid, gid)?;
    let mut mode = s.mode.unwrap_or(default_mode) & 0o7777;
    if o.is_dir() && u32::from(d.st.stx_mode) & S_ISGID != 0 {
        mode |= S_ISGID;
    }
    if !c.who.is_root() && !c.who.in_group(gid) {
        mode &= !S_ISGID | if o.is_dir() { S_ISGID } else { 0 };
    }
    setattr::chmod(o, mode)?;
    let rest = Sattr3 {
        mode: None,
        uid: None,
        gid: None,
        size: s.size,
        atime: s.atime,
        mtime: s.mtime,
    };
    setattr::apply(c, o, &rest)
}

/// The EXCLUSIVE create verifier kept in the new file's times, as Linux
/// keeps it: the first four bytes as the mtime seconds, the last four as
/// the atime seconds, nanoseconds zero.
fn verf_times(v: &Createverf3) -> (u32, u32) {
    let v = v.0;
    (
        u32::from_be_bytes([v[0], v[1], v[2], v[3]]),
        u32::from_be_bytes([v[4], v[5], v[6], v[7]]),
    )
}

/// CREATE (§3.3.8) in UNCHECKED, GUARDED and EXCLUSIVE modes.
pub fn create(c: &Ctx<'_>, a: Create3Args) -> Create3Res {
    create_entry(c, &a.where_, |d, name| create_in(c, d, name, &a.how))
}

fn create_in(c: &Ctx<'_>, d: &Obj, name: &[u8], how: &Createhow3) -> NfsResult<Obj> {
    let dfd = d.fd.as_fd();
    let excl = OFlags::CREATE | OFlags::EXCL | OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match rfs::openat(dfd, name, excl, Mode::from_raw_mode(0o600)) {
        Ok(fd) => {
            drop(fd);
            let o = c.ex.open_child(dfd, name)?;
            match how {
                Createhow3::Unchecked(s) | Createhow3::Guarded(s) => init_new(c, d, &o, s, 0o644)?,
                Createhow3::Exclusive(v) => {
                    init_new(c, d, &o, &Sattr3::default(), 0o600)?;
                    let (m, at) = verf_times(v);
                    let t = Timestamps {
                        last_access: Timespec {
                            tv_sec: i64::from(at),
                            tv_nsec: 0,
                        },
                        last_modification: Timespec {
                            tv_sec: i64::from(m),
                            tv_nsec: 0,
                        },
                    };
                    rfs::utimensat(o.fd.as_fd(), "", &t, AtFlags::EMPTY_PATH)?;
                }
            }
            Ok(o)
        }
        Err(rustix::io::Errno::EXIST) => {
            let st = stat_at(dfd, name)?;
            let is_reg = u32::from(st.stx_mode) & S_IFMT == S_IFREG;
            match how {
                Createhow3::Guarded(_) => Err(NfsErr::Exist),
                Createhow3::Exclusive(v) => {
                    let (m, at) = verf_times(v);
                    let same = is_reg
                        && st.stx_mtime.tv_sec == i64::from(m)
                        && st.stx_atime.tv_sec == i64::from(at)
                        && st.stx_mtime.tv_nsec == 0
                        && st.stx_atime.tv_nsec == 0;
                    if same {
                        c.ex.open_child(dfd, name)
                    } else {
                        Err(NfsErr::Exist)
                    }
                }
                Createhow3::Unchecked(s) => {
                    if !is_reg {
                        return Err(NfsErr::Exist);
                    }
                    let o = c.ex.open_child(dfd, name)?;
                    // An existing file: only what the caller may change.
                    let s = Sattr3 {
                        mode: None,
                        uid: None,
                        gid: None,
                        ..s.clone()
                    };
                    setattr::check(c, &o, &s)?;
                    setattr::apply(c, &o, &s)?;
                    Ok(o)
                }
            }
        }
        Err(e) => Err(e.into()),
    }
}

/// MKDIR (§3.3.9).
pub fn mkdir(c: &Ctx<'_>, a: Mkdir3Args) -> Mkdir3Res {
    create_entry(c, &a.where_, |d, name| {
        rfs::mkdirat(d.fd.as_fd(), name, Mode::from_raw_mode(0o700))?;
        let o = c.ex.open_child(d.fd.as_fd(), name)?;
        init_new(c, d, &o, &a.attributes, 0o755)?;
        Ok(o)
    })
}

/// SYMLINK (§3.3.10): the text is stored as given; the server never
/// follows it.
pub fn symlink(c: &Ctx<'_>, a: Symlink3Args) -> Symlink3Res {
    create_entry(c, &a.where_, |d, name| {
        let target = a.symlink.symlink_data.as_bytes();
        if target.is_empty() || target.contains(&0) {
            return Err(NfsErr::Inval);
        }
        rfs::symlinkat(target, d.fd.as_fd(), name)?;
        let o = c.ex.open_child(d.fd.as_fd(), name)?;
        let (uid, gid) = c.new_owner(d);
        setattr::set_new_owner(c, &o, uid, gid)?;
        Ok(o)
    })
}

/// MKNOD (§3.3.11): FIFOs and sockets for anyone allowed to create;
/// character and block devices only for unsquashed root (NFS3ERR_PERM
/// otherwise); other types NFS3ERR_BADTYPE.
pub fn mknod(c: &Ctx<'_>, a: Mknod3Args) -> Mknod3Res {
    create_entry(c, &a.where_, |d, name| {
        let (ft, s, dev) = match &a.what {
            Mknoddata3::Fifo(s) => (FileType::Fifo, s, 0),
            Mknoddata3::Sock(s) => (FileType::Socket, s, 0),
            Mknoddata3::Chr(dd) | Mknoddata3::Blk(dd) => {
                if !c.who.is_root() {
                    return Err(c.refuse(NfsErr::Perm, "device node by non-root"));
                }
                let ft = if matches!(a.what, Mknoddata3::Chr(_)) {
                    FileType::CharacterDevice
                } else {
                    FileType::BlockDevice
                };
                (
                    ft,
                    &dd.dev_attributes,
                    rfs::makedev(dd.spec.specdata1, dd.spec.specdata2),
                )
            }
            Mknoddata3::Other(_) => return Err(NfsErr::Badtype),
        };
        rfs::mknodat(d.fd.as_fd(), name, ft, Mode::from_raw_mode(0o600), dev)?;
        let o = c.ex.open_child(d.fd.as_fd(), name)?;
        init_new(c, d, &o, s, 0o644)?;
        Ok(o)
    })
}

/// REMOVE (§3.3.12) and RMDIR (§3.3.13), with the sticky-directory rule.
pub fn remove(c: &Ctx<'_>, what: &Diropargs3, rmdir: bool) -> Remove3Res {
    let d = match c.resolve_dir(&what.dir) {
        Ok(d) => d,
        Err(e) => return fail(e),
    };
    let before = d.st;
    let r = (|| {
        c.writable()?;
        let name = match c.name(&what.name)? {
            NameKind::Plain(n) => n,
            NameKind::Dot => return Err(c.refuse(NfsErr::Inval, "removing '.'")),
            NameKind::DotDot => {
                return Err(c.refuse(
                    if rmdir {
                        NfsErr::Notempty
                    } else {
                        NfsErr::Inval
                    },
                    "removing '..'",
                ))
            }
        };
        c.require(
            &d.owner(),
            MAY_WRITE | MAY_EXEC,
            "removing without write+search permission on the directory",
        )?;
        let st = stat_at(d.fd.as_fd(), name)?;
        let victim = crate::export::owner_of(&st);
        let is_dir = victim.mode & S_IFMT == crate::cred::S_IFDIR;
        if rmdir && !is_dir {
            return Err(NfsErr::Notdir);
        }
        if !rmdir && is_dir {
            return Err(NfsErr::Isdir);
        }
        if !c.who.may_delete_from(&d.owner(), &victim) {
            return Err(c.refuse(NfsErr::Acces, "sticky directory: not the owner"));
        }
        let flags = if rmdir {
            AtFlags::REMOVEDIR
        } else {
            AtFlags::empty()
        };
        rfs::unlinkat(d.fd.as_fd(), name, flags)?;
        let id = crate::export::file_id(&st);
        c.ex.forget_location(id.ino, d.id.ino, name);
        if is_dir || st.stx_nlink <= 1 {
            c.ex.evict(&id);
        }
        Ok(())
    })();
    let w = WccDataFail {
        wcc: wcc(c.ex, &before, &d),
    };
    answer(r, w)
}

/// RENAME (§3.3.14), over an existing name too; the sticky rule applies
/// to the source and to a replaced target; moving a directory to another
/// parent needs write permission on it (its `..` changes).
pub fn rename(c: &Ctx<'_>, a: Rename3Args) -> Rename3Res {
    let fd_ = c.resolve_dir(&a.from.dir);
    let td_ = c.resolve_dir(&a.to.dir);
    let (fdir, tdir) = match (fd_, td_) {
        (Ok(f), Ok(t)) => (f, t),
        (Err(e), Ok(t)) => {
            return NfsResult3::Fail(
                stat(e),
                Rename3ResOk {
                    fromdir_wcc: WccData::default(),
                    todir_wcc: wcc(c.ex, &t.st, &t),
                },
            )
        }
        (Ok(f), Err(e)) => {
            return NfsResult3::Fail(
                stat(e),
                Rename3ResOk {
                    fromdir_wcc: wcc(c.ex, &f.st, &f),
                    todir_wcc: WccData::default(),
                },
            )
        }
        (Err(e), Err(_)) => return fail(e),
    };
    let (fb, tb) = (fdir.st, tdir.st);
    let r = (|| {
        c.writable()?;
        let from = c.plain_name(&a.from.name, NfsErr::Inval)?;
        let to = c.plain_name(&a.to.name, NfsErr::Inval)?;
        let need = MAY_WRITE | MAY_EXEC;
        c.require(
            &fdir.owner(),
            need,
            "rename out of a directory without write+search permission",
        )?;
        c.require(
            &tdir.owner(),
            need,
            "rename into a directory without write+search permission",
        )?;
        let st = stat_at(fdir.fd.as_fd(), from)?;
        let src = crate::export::owner_of(&st);
        if !c.who.may_delete_from(&fdir.owner(), &src) {
            return Err(c.refuse(
                NfsErr::Acces,
                "sticky directory: not the owner of the source",
            ));
        }
        let src_is_dir = src.mode & S_IFMT == crate::cred::S_IFDIR;
        if src_is_dir && fdir.id != tdir.id {
            c.require(
                &src,
                MAY_WRITE,
                "moving a directory without write permission on it",
            )?;
        }
        let old_target = stat_at(tdir.fd.as_fd(), to).ok();
        if let Some(t) = &old_target {
            if t.stx_ino == st.stx_ino {
                return Ok(()); // the same object: nothing to do (POSIX)
            }
            if !c
                .who
                .may_delete_from(&tdir.owner(), &crate::export::owner_of(t))
            {
                return Err(c.refuse(
                    NfsErr::Acces,
                    "sticky directory: not the owner of the target",
                ));
            }
        }
        rfs::renameat(fdir.fd.as_fd(), from, tdir.fd.as_fd(), to)?;
        c.ex.forget_location(st.stx_ino, fdir.id.ino, from);
        c.ex.note_location(st.stx_ino, tdir.id.ino, to);
        if let Some(t) = old_target {
            let id = crate::export::file_id(&t);
            c.ex.forget_location(id.ino, tdir.id.ino, to);
            if t.stx_nlink <= 1 || u32::from(t.stx_mode) & S_IFMT == crate::cred::S_IFDIR {
                c.ex.evict(&id);
            }
        }
        Ok(())
    })();
    let res = Rename3ResOk {
        fromdir_wcc: wcc(c.ex, &fb, &fdir),
        todir_wcc: wcc(c.ex, &tb, &tdir),
    };
    answer(r, res)
}

/// LINK (§3.3.15): a hard link to a non-directory. As with Linux's
/// protected hard links, the caller must own the file or be able to read
/// and write it.
pub fn link(c: &Ctx<'_>, a: Link3Args) -> Link3Res {
    let o = match c.resolve(&a.file) {
        Ok(o) => o,
        Err(e) => return fail(e),
    };
    let d = match c.resolve_dir(&a.link.dir) {
        Ok(d) => d,
        Err(e) => {
            return NfsResult3::Fail(
                stat(e),
                Link3ResOk {
                    file_attributes: Some(fattr(c.ex, &o.st)),
                    linkdir_wcc: WccData::default(),
                },
            )
        }
    };
    let before = d.st;
    let r = (|| {
        c.writable()?;
        let name = c.plain_name(&a.link.name, NfsErr::Exist)?;
        if o.is_dir() {
            return Err(NfsErr::Isdir);
        }
        c.require(
            &d.owner(),
            MAY_WRITE | MAY_EXEC,
            "link into a directory without write+search permission",
        )?;
        let own = o.owner();
        if o.is_reg() && !c.who.owns(&own) && !c.who.may(&own, MAY_READ | MAY_WRITE) {
            return Err(c.refuse(
                NfsErr::Perm,
                "hard link to a file the caller cannot read and write",
            ));
        }
        let r = rfs::linkat(o.fd.as_fd(), "", d.fd.as_fd(), name, AtFlags::EMPTY_PATH);
        if let Err(rustix::io::Errno::NOENT) = r {
            // Without CAP_DAC_READ_SEARCH: link through the descriptor's
            // /proc entry, which names exactly this inode.
            use std::os::fd::AsRawFd;
            let p = format!("/proc/self/fd/{}", o.fd.as_raw_fd());
            rfs::linkat(
                rfs::CWD,
                p.as_str(),
                d.fd.as_fd(),
                name,
                AtFlags::SYMLINK_FOLLOW,
            )?;
        } else {
            r?;
        }
        c.ex.note_location(o.id.ino, d.id.ino, name);
        Ok(())
    })();
    let res = Link3ResOk {
        file_attributes: post_op(c.ex, &o),
        linkdir_wcc: wcc(c.ex, &before, &d),
    };
    answer(r, res)
}

/// FSSTAT (§3.3.18) from `fstatvfs` of the export.
pub fn fsstat(c: &Ctx<'_>, a: Fsstat3Args) -> Fsstat3Res {
    let o = match c.resolve(&a.fsroot) {
        Ok(o) => o,
        Err(e) => return fail(e),
    };
    match rfs::fstatvfs(o.fd.as_fd()) {
        Ok(v) => NfsResult3::Ok(Fsstat3ResOk {
            obj_attributes: Some(fattr(c.ex, &o.st)),
            tbytes: v.f_blocks.saturating_mul(v.f_frsize),
            fbytes: v.f_bfree.saturating_mul(v.f_frsize),
            abytes: v.f_bavail.saturating_mul(v.f_frsize),
            tfiles: v.f_files,
            ffiles: v.f_ffree,
            afiles: v.f_favail,
            invarsec: 0,
        }),
        Err(e) => NfsResult3::Fail(
            stat(e.into()),
            PostOpAttrFail {
                attributes: Some(fattr(c.ex, &o.st)),
            },
        ),
    }
}

/// FSINFO (§3.3.19): `rtmax` = `wtmax` = `max_io`, preferred sizes 1 MiB
/// (or `max_io` when smaller), 1 ns time granularity.
pub fn fsinfo(c: &Ctx<'_>, a: Fsinfo3Args) -> Fsinfo3Res {
    let o = match c.resolve(&a.fsroot) {
        Ok(o) => o,
        Err(e) => return fail(e),
    };
    let max = c.ex.options().max_io;
    let pref = max.min(1 << 20);
    NfsResult3::Ok(Fsinfo3ResOk {
        obj_attributes: Some(fattr(c.ex, &o.st)),
        rtmax: max,
        rtpref: pref,
        rtmult: 4096,
        wtmax: max,
        wtpref: pref,
        wtmult: 4096,
        dtpref: 64 * 1024,
        maxfilesize: i64::MAX as u64,
        time_delta: Nfstime3 {
            seconds: 0,
            nseconds: 1,
        },
        properties: fsf::LINK | fsf::SYMLINK | fsf::HOMOGENEOUS | fsf::CANSETTIME,
    })
}

/// PATHCONF (§3.3.20).
pub fn pathconf(c: &Ctx<'_>, a: Pathconf3Args) -> Pathconf3Res {
    let o = match c.resolve(&a.object) {
        Ok(o) => o,
        Err(e) => return fail(e),
    };
    let name_max = rfs::fstatvfs(c.ex.root().map(|r| r.fd).unwrap_or(o.fd.clone()).as_fd())
        .map(|v| v.f_namemax.min(255) as u32)
        .unwrap_or(255);
    NfsResult3::Ok(Pathconf3ResOk {
        obj_attributes: Some(fattr(c.ex, &o.st)),
        linkmax: 65_000,
        name_max,
        no_trunc: true,
        chown_restricted: true,
        case_insensitive: false,
        case_preserving: true,
    })
}

/// COMMIT (§3.3.21): `fsync` the file before replying.
pub fn commit(c: &Ctx<'_>, a: Commit3Args) -> Commit3Res {
    let o = match c.resolve(&a.file) {
        Ok(o) => o,
        Err(e) => return fail(e),
    };
    let before = o.st;
    let r = (|| {
        // Only who may write the file may force it to disk.
        may_write_file(c, &o, "COMMIT without write permission")?;
        rfs::fsync(o.fd.as_fd()).inspect_err(|_| c.ex.sync_failed())?;
        Ok(())
    })();
    let w = wcc(c.ex, &before, &o);
    match r {
        Ok(()) => NfsResult3::Ok(Commit3ResOk {
            file_wcc: w,
            verf: Writeverf3(c.ex.write_verifier()),
        }),
        Err(e) => NfsResult3::Fail(stat(e), WccDataFail { wcc: w }),
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;

    use super::pread_all;

    /// A READ of 1 MiB from a 10-byte file reserves the 10 bytes, not the
    /// count; bytes past the size it was given are left for the next READ.
    #[test]
    fn pread_all_reserves_what_the_file_holds() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"0123456789").unwrap();
        let f = std::fs::File::open(&p).unwrap();
        let v = pread_all(f.as_fd(), 0, 1 << 20, 10).unwrap();
        assert_eq!(v, b"0123456789");
        assert!(v.capacity() < 64, "capacity {}", v.capacity());
        let v = pread_all(f.as_fd(), 2, 1 << 20, 6).unwrap();
        assert_eq!(v, b"2345");
        assert_eq!(pread_all(f.as_fd(), 2, 3, 10).unwrap(), b"234");
        assert!(pread_all(f.as_fd(), 20, 100, 10).unwrap().is_empty());
    }
}
