//! Failures of the file-system layer as RFC 1813 `nfsstat3` values, and
//! the mapping from `errno`.

use rustix::io::Errno;

/// A failed NFS operation: the `nfsstat3` value to answer (RFC 1813 §2.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[repr(u32)]
#[allow(missing_docs)] // the RFC's names
pub enum NfsErr {
    #[error("NFS3ERR_PERM")]
    Perm = 1,
    #[error("NFS3ERR_NOENT")]
    Noent = 2,
    #[error("NFS3ERR_IO")]
    Io = 5,
    #[error("NFS3ERR_NXIO")]
    Nxio = 6,
    #[error("NFS3ERR_ACCES")]
    Acces = 13,
    #[error("NFS3ERR_EXIST")]
    Exist = 17,
    #[error("NFS3ERR_XDEV")]
    Xdev = 18,
    #[error("NFS3ERR_NODEV")]
    Nodev = 19,
    #[error("NFS3ERR_NOTDIR")]
    Notdir = 20,
    #[error("NFS3ERR_ISDIR")]
    Isdir = 21,
    #[error("NFS3ERR_INVAL")]
    Inval = 22,
    #[error("NFS3ERR_FBIG")]
    Fbig = 27,
    #[error("NFS3ERR_NOSPC")]
    Nospc = 28,
    #[error("NFS3ERR_ROFS")]
    Rofs = 30,
    #[error("NFS3ERR_MLINK")]
    Mlink = 31,
    #[error("NFS3ERR_NAMETOOLONG")]
    Nametoolong = 63,
    #[error("NFS3ERR_NOTEMPTY")]
    Notempty = 66,
    #[error("NFS3ERR_DQUOT")]
    Dquot = 69,
    #[error("NFS3ERR_STALE")]
    Stale = 70,
    #[error("NFS3ERR_REMOTE")]
    Remote = 71,
    #[error("NFS3ERR_BADHANDLE")]
    Badhandle = 10001,
    #[error("NFS3ERR_NOT_SYNC")]
    NotSync = 10002,
    #[error("NFS3ERR_BAD_COOKIE")]
    BadCookie = 10003,
    #[error("NFS3ERR_NOTSUPP")]
    Notsupp = 10004,
    #[error("NFS3ERR_TOOSMALL")]
    Toosmall = 10005,
    #[error("NFS3ERR_SERVERFAULT")]
    Serverfault = 10006,
    #[error("NFS3ERR_BADTYPE")]
    Badtype = 10007,
    #[error("NFS3ERR_JUKEBOX")]
    Jukebox = 10008,
}

impl NfsErr {
    /// The wire value.
    pub fn code(self) -> u32 {
        self as u32
    }
}

impl From<Errno> for NfsErr {
    fn from(e: Errno) -> Self {
        match e {
            Errno::PERM => NfsErr::Perm,
            Errno::NOENT => NfsErr::Noent,
            Errno::NXIO => NfsErr::Nxio,
            Errno::ACCESS => NfsErr::Acces,
            Errno::EXIST => NfsErr::Exist,
            Errno::XDEV => NfsErr::Xdev,
            Errno::NODEV => NfsErr::Nodev,
            Errno::NOTDIR => NfsErr::Notdir,
            Errno::ISDIR => NfsErr::Isdir,
            Errno::INVAL => NfsErr::Inval,
            Errno::FBIG => NfsErr::Fbig,
            Errno::NOSPC => NfsErr::Nospc,
            Errno::ROFS => NfsErr::Rofs,
            Errno::MLINK => NfsErr::Mlink,
            Errno::NAMETOOLONG => NfsErr::Nametoolong,
            Errno::NOTEMPTY => NfsErr::Notempty,
            Errno::DQUOT => NfsErr::Dquot,
            Errno::STALE => NfsErr::Stale,
            // A symlink where the server refused to follow one (O_NOFOLLOW).
            Errno::LOOP => NfsErr::Acces,
            Errno::OPNOTSUPP => NfsErr::Notsupp,
            Errno::TXTBSY => NfsErr::Acces,
            Errno::AGAIN | Errno::INTR => NfsErr::Jukebox,
            _ => NfsErr::Io,
        }
    }
}

impl From<std::io::Error> for NfsErr {
    fn from(e: std::io::Error) -> Self {
        match e.raw_os_error() {
            Some(n) => Errno::from_raw_os_error(n).into(),
            None => NfsErr::Io,
        }
    }
}

/// Result of a file-system operation.
pub type NfsResult<T> = Result<T, NfsErr>;
