//! Changing attributes (`sattr3`, RFC 1813 §2.6 and §3.3.2) with the
//! checks a local kernel makes: only the owner (or unsquashed root) may
//! change the mode or set times to a given value; only root may give an
//! object to another user; the owner may change the group to one he is in;
//! truncating needs write permission (or ownership, as knfsd allows for
//! files the client opened); setting times to "now" needs ownership or
//! write permission.

use std::os::fd::{AsFd, AsRawFd};

use nfs3::types::{Sattr3, SetTime};
use rustix::fs::{self as rfs, AtFlags, Gid, Mode, Timespec, Timestamps, Uid};

use crate::cred::{MAY_WRITE, S_IFLNK, S_IFMT, S_ISGID};
use crate::ctx::Ctx;
use crate::export::Obj;
use crate::status::{NfsErr, NfsResult};

/// Check that the caller may apply `s` to `o` (nothing changed yet).
pub fn check(c: &Ctx<'_>, o: &Obj, s: &Sattr3) -> NfsResult<()> {
    let who = c.who;
    let own = o.owner();
    if s.uid == Some(u32::MAX) || s.gid == Some(u32::MAX) {
        return Err(NfsErr::Inval);
    }
    if s.mode.is_some() && !who.owns(&own) {
        return Err(c.refuse(NfsErr::Perm, "chmod by a non-owner"));
    }
    if let Some(uid) = s.uid {
        if uid != own.uid && !who.is_root() {
            return Err(c.refuse(NfsErr::Perm, "chown to another user by non-root"));
        }
    }
    if let Some(gid) = s.gid {
        if gid != own.gid && !(who.is_root() || (who.uid == own.uid && who.in_group(gid))) {
            return Err(c.refuse(NfsErr::Perm, "chgrp to a group the caller is not in"));
        }
    }
    if s.size.is_some() {
        if o.is_dir() {
            return Err(NfsErr::Isdir);
        }
        if !o.is_reg() {
            return Err(NfsErr::Inval);
        }
        if !who.owns(&own) && !who.may(&own, MAY_WRITE) {
            return Err(c.refuse(NfsErr::Acces, "truncate without write permission"));
        }
    }
    let client_time = matches!(s.atime, SetTime::SetToClientTime(_))
        || matches!(s.mtime, SetTime::SetToClientTime(_));
    let server_time = s.atime == SetTime::SetToServerTime || s.mtime == SetTime::SetToServerTime;
    if client_time && !who.owns(&own) {
        return Err(c.refuse(
            NfsErr::Perm,
            "setting times to a given value by a non-owner",
        ));
    }
    if server_time && !who.owns(&own) && !who.may(&own, MAY_WRITE) {
        return Err(c.refuse(NfsErr::Acces, "touching times without write permission"));
    }
    Ok(())
}

/// Apply `s` to `o` (checks done, or the caller just created `o`).
pub fn apply(c: &Ctx<'_>, o: &Obj, s: &Sattr3) -> NfsResult<()> {
    let fd = o.fd.as_fd();
    if let Some(size) = s.size {
        rfs::ftruncate(fd, size)?;
    }
    if s.uid.is_some() || s.gid.is_some() {
        rfs::chownat(
            fd,
            "",
            s.uid.map(Uid::from_raw),
            s.gid.map(Gid::from_raw),
            AtFlags::EMPTY_PATH,
        )?;
    }
    if let Some(mode) = s.mode {
        let mut mode = mode & 0o7777;
        let gid = s.gid.unwrap_or(o.st.stx_gid);
        if !c.who.is_root() && !c.who.in_group(gid) {
            mode &= !S_ISGID;
        }
        chmod(o, mode)?;
    }
    let ts = |t: &SetTime| match t {
        SetTime::DontChange => Timespec {
            tv_sec: 0,
            tv_nsec: rfs::UTIME_OMIT,
        },
        SetTime::SetToServerTime => Timespec {
            tv_sec: 0,
            tv_nsec: rfs::UTIME_NOW,
        },
        SetTime::SetToClientTime(t) => Timespec {
            tv_sec: i64::from(t.seconds),
            tv_nsec: i64::from(t.nseconds.min(999_999_999)),
        },
    };
    if s.atime != SetTime::DontChange || s.mtime != SetTime::DontChange {
        let times = Timestamps {
            last_access: ts(&s.atime),
            last_modification: ts(&s.mtime),
        };
        rfs::utimensat(fd, "", &times, AtFlags::EMPTY_PATH)?;
    }
    Ok(())
}

/// Set the permission bits of `o` exactly (no umask). Symbolic links have
/// no mode of their own on Linux: a mode for one is ignored.
pub fn chmod(o: &Obj, mode: u32) -> NfsResult<()> {
    let kind = u32::from(o.st.stx_mode) & S_IFMT;
    if o.is_dir() || o.is_reg() {
        rfs::fchmod(o.fd.as_fd(), Mode::from_raw_mode(mode))?;
    } else if kind != S_IFLNK {
        // Devices, FIFOs and sockets are held by an O_PATH descriptor,
        // which fchmod refuses; the descriptor's /proc link names exactly
        // that inode.
        let p = format!("/proc/self/fd/{}", o.fd.as_raw_fd());
        rfs::chmodat(
            rfs::CWD,
            p.as_str(),
            Mode::from_raw_mode(mode),
            AtFlags::empty(),
        )?;
    }
    Ok(())
}

/// Give a new object the caller's ownership (when the server runs as
/// root; otherwise it keeps the server's uid and gid).
pub fn set_new_owner(c: &Ctx<'_>, o: &Obj, uid: u32, gid: u32) -> NfsResult<()> {
    if !c.ex.server_is_root() || uid == u32::MAX || gid == u32::MAX {
        return Ok(());
    }
    rfs::chownat(
        o.fd.as_fd(),
        "",
        Some(Uid::from_raw(uid)),
        Some(Gid::from_raw(gid)),
        AtFlags::EMPTY_PATH,
    )?;
    Ok(())
}
