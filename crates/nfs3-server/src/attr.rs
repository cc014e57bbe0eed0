//! `statx` results as RFC 1813 attributes (`fattr3`, `wcc_attr`,
//! `wcc_data`).

use nfs3::types::{Fattr3, Ftype3, Nfstime3, PostOpAttr, PreOpAttr, Specdata3, WccAttr, WccData};
use rustix::fs::{Statx, StatxTimestamp};

use crate::export::{stat_fd, Export, Obj};

/// The `ftype3` of a `st_mode`.
pub fn ftype_of(mode: u32) -> Ftype3 {
    match mode & 0o170000 {
        0o040000 => Ftype3::Dir,
        0o120000 => Ftype3::Lnk,
        0o060000 => Ftype3::Blk,
        0o020000 => Ftype3::Chr,
        0o140000 => Ftype3::Sock,
        0o010000 => Ftype3::Fifo,
        _ => Ftype3::Reg,
    }
}

/// A `statx` time as `nfstime3` (seconds modulo 2^32, nanoseconds).
pub fn nfstime(t: &StatxTimestamp) -> Nfstime3 {
    Nfstime3 {
        seconds: t.tv_sec as u32,
        nseconds: t.tv_nsec,
    }
}

/// `fattr3` (RFC 1813 §2.6): fileid is the inode number, fsid the
/// export's, `used` is blocks × 512, times to the nanosecond.
pub fn fattr(export: &Export, st: &Statx) -> Fattr3 {
    let mode = u32::from(st.stx_mode);
    Fattr3 {
        ftype: ftype_of(mode),
        mode: mode & 0o7777,
        nlink: st.stx_nlink,
        uid: st.stx_uid,
        gid: st.stx_gid,
        size: st.stx_size,
        used: st.stx_blocks.saturating_mul(512),
        rdev: Specdata3 {
            specdata1: st.stx_rdev_major,
            specdata2: st.stx_rdev_minor,
        },
        fsid: export.fsid(),
        fileid: st.stx_ino,
        atime: nfstime(&st.stx_atime),
        mtime: nfstime(&st.stx_mtime),
        ctime: nfstime(&st.stx_ctime),
    }
}

/// `wcc_attr`: size, mtime and ctime before an operation.
pub fn wcc_attr(st: &Statx) -> WccAttr {
    WccAttr {
        size: st.stx_size,
        mtime: nfstime(&st.stx_mtime),
        ctime: nfstime(&st.stx_ctime),
    }
}

/// `post_op_attr` of an object, read now.
pub fn post_op(export: &Export, o: &Obj) -> PostOpAttr {
    stat_fd(std::os::fd::AsFd::as_fd(&*o.fd))
        .ok()
        .map(|st| fattr(export, &st))
}

/// `wcc_data` of an object: `before` as resolved, `after` read now.
pub fn wcc(export: &Export, before: &Statx, o: &Obj) -> WccData {
    WccData {
        before: Some(wcc_attr(before)) as PreOpAttr,
        after: post_op(export, o),
    }
}
