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
    if !just_created(o, std::time::SystemTime::now()) {
        // Between the create and the open of its name, a client may have
        // renamed another object over that name: never give that one away.
        return Err(c.refuse(
            NfsErr::Exist,
            "the name no longer holds the object just created",
        ));
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

/// How long after its birth an object still counts as just created (the
/// create and the open of its name are microseconds apart; this leaves room
/// for a loaded machine and the coarse clock of inode times).
const JUST_CREATED: std::time::Duration = std::time::Duration::from_secs(5);

/// Whether `o` still looks exactly as a create procedure left it: owned by
/// the server (root), one link (two for a directory), no permission bit
/// beyond the creation mode (0600 for files and nodes, 0700 plus an
/// inherited setgid bit for directories, 0777 for symlinks), and, where the file system keeps birth
/// times, born within [`JUST_CREATED`] of `now`. An object renamed over the
/// new name fails at least one of these unless root itself made it a moment
/// ago with the same mode.
pub(crate) fn just_created(o: &Obj, now: std::time::SystemTime) -> bool {
    let st = &o.st;
    let kind = u32::from(st.stx_mode) & S_IFMT;
    let perm = u32::from(st.stx_mode) & 0o7777;
    let (links, creation_mode) = match kind {
        // A directory made in a setgid directory inherits its setgid bit.
        crate::cred::S_IFDIR => (2, 0o700 | S_ISGID),
        S_IFLNK => (1, 0o777),
        _ => (1, 0o600),
    };
    if st.stx_uid != 0 || st.stx_nlink != links || perm & !creation_mode != 0 {
        return false;
    }
    if st.stx_mask & rfs::StatxFlags::BTIME.bits() == 0 {
        return true;
    }
    let born = std::time::UNIX_EPOCH
        .checked_add(std::time::Duration::new(
            u64::try_from(st.stx_btime.tv_sec).unwrap_or(0),
            st.stx_btime.tv_nsec.min(999_999_999),
        ))
        .unwrap_or(std::time::UNIX_EPOCH);
    now.duration_since(born)
        .map_or(true, |age| age <= JUST_CREATED)
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;
    use std::os::unix::fs::PermissionsExt;
    use std::sync::Arc;
    use std::time::{Duration, SystemTime};

    use rustix::fs::{self as rfs, Mode, OFlags};

    use super::just_created;
    use crate::export::{file_id, stat_fd, Obj};

    fn obj(path: &std::path::Path) -> Obj {
        let fd = rfs::open(path, OFlags::PATH | OFlags::NOFOLLOW, Mode::empty()).unwrap();
        let st = stat_fd(fd.as_fd()).unwrap();
        Obj {
            id: file_id(&st),
            fd: Arc::new(fd),
            st,
        }
    }

    /// The object renamed over a new name in the create race is told apart
    /// from the one just created: another owner, another link count, wider
    /// permissions, or (where birth times exist) an older birth.
    #[test]
    fn only_the_object_just_created_counts_as_just_created() {
        if !rustix::process::geteuid().is_root() {
            assert!(
                std::env::var_os("CI").is_none(),
                "needs root (objects the server creates are root's)"
            );
            eprintln!("skipped: needs root (objects the server creates are root's)");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let new = dir.path().join("new");
        std::fs::write(&new, b"").unwrap();
        std::fs::set_permissions(&new, std::fs::Permissions::from_mode(0o600)).unwrap();
        let now = SystemTime::now();
        assert!(just_created(&obj(&new), now));

        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(just_created(&obj(&sub), now));

        // Someone else's file.
        let other = dir.path().join("other");
        std::fs::write(&other, b"secret").unwrap();
        std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::chown(&other, Some(1001), Some(1001)).unwrap();
        assert!(!just_created(&obj(&other), now));

        // Root's file with a second link, or with wider permissions.
        let linked = dir.path().join("linked");
        std::fs::write(&linked, b"").unwrap();
        std::fs::set_permissions(&linked, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::hard_link(&linked, dir.path().join("link2")).unwrap();
        assert!(!just_created(&obj(&linked), now));
        let wide = dir.path().join("wide");
        std::fs::write(&wide, b"").unwrap();
        std::fs::set_permissions(&wide, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(!just_created(&obj(&wide), now));

        // An old object, where the file system keeps birth times.
        let o = obj(&new);
        if o.st.stx_mask & rfs::StatxFlags::BTIME.bits() != 0 {
            assert!(!just_created(&o, now + Duration::from_secs(60)));
        }
    }
}
