//! The basic data types of NFS version 3 (RFC 1813 §2.5, §2.6): `nfsstat3`,
//! `ftype3`, `nfs_fh3`, `fattr3`, `post_op_attr`, `wcc_data`, `sattr3`,
//! `diropargs3`, and the `resok`/`resfail` result union [`NfsResult`].
//!
//! # Limits
//!
//! | item | RFC 1813 | limit here |
//! |---|---|---|
//! | `nfs_fh3` | `opaque data<NFS3_FHSIZE>` | 64 bytes ([`NFS3_FHSIZE`]) |
//! | `filename3` | `string` (no bound) | 255 bytes ([`Filename3::MAX`], NAME_MAX) |
//! | `nfspath3` | `string` (no bound) | 4096 bytes ([`Nfspath3::MAX`], PATH_MAX) |
//! | READ/WRITE `data` | `opaque data<>` | 1 MiB ([`MAX_IO_SIZE`]) |
//!
//! Names and paths are byte strings: RFC 1813 calls them `string` but the
//! bytes need not be UTF-8 (§3.2, filename3 and nfspath3 "are intended to
//! be ... treated as opaque").

use bytes::Bytes;
use oncrpc::PayloadBuilder;
use xdr::{Encoder, XdrDecode, XdrEncode, XdrRead};

use crate::codec::{bounded_bytes, fixed_opaque, xdr_enum, xdr_struct, PayloadEncode};

/// Largest file handle, in bytes (RFC 1813 §2.4 `NFS3_FHSIZE`).
pub const NFS3_FHSIZE: u32 = 64;
/// Size of a `cookieverf3` (RFC 1813 §2.4 `NFS3_COOKIEVERFSIZE`).
pub const NFS3_COOKIEVERFSIZE: usize = 8;
/// Size of a `createverf3` (RFC 1813 §2.4 `NFS3_CREATEVERFSIZE`).
pub const NFS3_CREATEVERFSIZE: usize = 8;
/// Size of a `writeverf3` (RFC 1813 §2.4 `NFS3_WRITEVERFSIZE`).
pub const NFS3_WRITEVERFSIZE: usize = 8;
/// Largest READ or WRITE `data` this crate encodes into a binding estimate
/// or decodes: 1 MiB (the largest `rtmax`/`wtmax` a server built on it
/// should report in FSINFO).
pub const MAX_IO_SIZE: u32 = 1 << 20;

xdr_enum! {
    /// `nfsstat3` (RFC 1813 §2.6): the status of every NFS version 3
    /// result. `Display` gives the RFC name (`NFS3ERR_NOENT`); the type is a
    /// [`std::error::Error`].
    pub enum Nfsstat3 ("nfsstat3") {
        /// `NFS3_OK`: success.
        Ok = 0 => "NFS3_OK",
        /// `NFS3ERR_PERM`: not owner.
        Perm = 1 => "NFS3ERR_PERM",
        /// `NFS3ERR_NOENT`: no such file or directory.
        Noent = 2 => "NFS3ERR_NOENT",
        /// `NFS3ERR_IO`: I/O error.
        Io = 5 => "NFS3ERR_IO",
        /// `NFS3ERR_NXIO`: no such device or address.
        Nxio = 6 => "NFS3ERR_NXIO",
        /// `NFS3ERR_ACCES`: permission denied.
        Acces = 13 => "NFS3ERR_ACCES",
        /// `NFS3ERR_EXIST`: file exists.
        Exist = 17 => "NFS3ERR_EXIST",
        /// `NFS3ERR_XDEV`: cross-device link.
        Xdev = 18 => "NFS3ERR_XDEV",
        /// `NFS3ERR_NODEV`: no such device.
        Nodev = 19 => "NFS3ERR_NODEV",
        /// `NFS3ERR_NOTDIR`: not a directory.
        Notdir = 20 => "NFS3ERR_NOTDIR",
        /// `NFS3ERR_ISDIR`: is a directory.
        Isdir = 21 => "NFS3ERR_ISDIR",
        /// `NFS3ERR_INVAL`: invalid argument.
        Inval = 22 => "NFS3ERR_INVAL",
        /// `NFS3ERR_FBIG`: file too large.
        Fbig = 27 => "NFS3ERR_FBIG",
        /// `NFS3ERR_NOSPC`: no space left on device.
        Nospc = 28 => "NFS3ERR_NOSPC",
        /// `NFS3ERR_ROFS`: read-only file system.
        Rofs = 30 => "NFS3ERR_ROFS",
        /// `NFS3ERR_MLINK`: too many hard links.
        Mlink = 31 => "NFS3ERR_MLINK",
        /// `NFS3ERR_NAMETOOLONG`: name too long.
        Nametoolong = 63 => "NFS3ERR_NAMETOOLONG",
        /// `NFS3ERR_NOTEMPTY`: directory not empty.
        Notempty = 66 => "NFS3ERR_NOTEMPTY",
        /// `NFS3ERR_DQUOT`: quota exceeded.
        Dquot = 69 => "NFS3ERR_DQUOT",
        /// `NFS3ERR_STALE`: stale file handle.
        Stale = 70 => "NFS3ERR_STALE",
        /// `NFS3ERR_REMOTE`: too many levels of remote in path.
        Remote = 71 => "NFS3ERR_REMOTE",
        /// `NFS3ERR_BADHANDLE`: illegal file handle.
        Badhandle = 10001 => "NFS3ERR_BADHANDLE",
        /// `NFS3ERR_NOT_SYNC`: SETATTR guard mismatch.
        NotSync = 10002 => "NFS3ERR_NOT_SYNC",
        /// `NFS3ERR_BAD_COOKIE`: READDIR cookie is stale.
        BadCookie = 10003 => "NFS3ERR_BAD_COOKIE",
        /// `NFS3ERR_NOTSUPP`: operation not supported.
        Notsupp = 10004 => "NFS3ERR_NOTSUPP",
        /// `NFS3ERR_TOOSMALL`: buffer or request too small.
        Toosmall = 10005 => "NFS3ERR_TOOSMALL",
        /// `NFS3ERR_SERVERFAULT`: an error the server cannot map.
        Serverfault = 10006 => "NFS3ERR_SERVERFAULT",
        /// `NFS3ERR_BADTYPE`: object type not supported.
        Badtype = 10007 => "NFS3ERR_BADTYPE",
        /// `NFS3ERR_JUKEBOX`: retry later.
        Jukebox = 10008 => "NFS3ERR_JUKEBOX",
    }
}

impl std::error::Error for Nfsstat3 {}

xdr_enum! {
    /// `ftype3` (RFC 1813 §2.5): the type of a file.
    pub enum Ftype3 ("ftype3") {
        /// `NF3REG`: regular file.
        Reg = 1 => "NF3REG",
        /// `NF3DIR`: directory.
        Dir = 2 => "NF3DIR",
        /// `NF3BLK`: block special device.
        Blk = 3 => "NF3BLK",
        /// `NF3CHR`: character special device.
        Chr = 4 => "NF3CHR",
        /// `NF3LNK`: symbolic link.
        Lnk = 5 => "NF3LNK",
        /// `NF3SOCK`: socket.
        Sock = 6 => "NF3SOCK",
        /// `NF3FIFO`: named pipe.
        Fifo = 7 => "NF3FIFO",
    }
}

xdr_enum! {
    /// `time_how` (RFC 1813 §2.5, `sattr3`): how SETATTR sets a time.
    pub enum TimeHow ("time_how") {
        /// `DONT_CHANGE`.
        DontChange = 0 => "DONT_CHANGE",
        /// `SET_TO_SERVER_TIME`.
        SetToServerTime = 1 => "SET_TO_SERVER_TIME",
        /// `SET_TO_CLIENT_TIME`.
        SetToClientTime = 2 => "SET_TO_CLIENT_TIME",
    }
}

xdr_enum! {
    /// `stable_how` (RFC 1813 §3.3.7): how far WRITE commits data.
    pub enum StableHow ("stable_how") {
        /// `UNSTABLE`.
        Unstable = 0 => "UNSTABLE",
        /// `DATA_SYNC`.
        DataSync = 1 => "DATA_SYNC",
        /// `FILE_SYNC`.
        FileSync = 2 => "FILE_SYNC",
    }
}

xdr_enum! {
    /// `createmode3` (RFC 1813 §3.3.8).
    pub enum Createmode3 ("createmode3") {
        /// `UNCHECKED`.
        Unchecked = 0 => "UNCHECKED",
        /// `GUARDED`.
        Guarded = 1 => "GUARDED",
        /// `EXCLUSIVE`.
        Exclusive = 2 => "EXCLUSIVE",
    }
}

/// ACCESS bits (RFC 1813 §3.3.4).
pub mod access {
    /// `ACCESS3_READ`: read data or a directory.
    pub const READ: u32 = 0x0001;
    /// `ACCESS3_LOOKUP`: look up a name in a directory.
    pub const LOOKUP: u32 = 0x0002;
    /// `ACCESS3_MODIFY`: rewrite data or modify a directory.
    pub const MODIFY: u32 = 0x0004;
    /// `ACCESS3_EXTEND`: write new data or add a directory entry.
    pub const EXTEND: u32 = 0x0008;
    /// `ACCESS3_DELETE`: delete a directory entry.
    pub const DELETE: u32 = 0x0010;
    /// `ACCESS3_EXECUTE`: execute a file.
    pub const EXECUTE: u32 = 0x0020;
    /// Every bit above.
    pub const ALL: u32 = 0x003f;
}

/// FSINFO `properties` bits (RFC 1813 §3.3.19).
pub mod fsf {
    /// `FSF3_LINK`: hard links are supported.
    pub const LINK: u32 = 0x0001;
    /// `FSF3_SYMLINK`: symbolic links are supported.
    pub const SYMLINK: u32 = 0x0002;
    /// `FSF3_HOMOGENEOUS`: PATHCONF is the same for every file.
    pub const HOMOGENEOUS: u32 = 0x0008;
    /// `FSF3_CANSETTIME`: SETATTR can set times.
    pub const CANSETTIME: u32 = 0x0010;
}

bounded_bytes! {
    /// `filename3` (RFC 1813 §2.5): one path component, at most 255 bytes
    /// here (RFC 1813 sets no bound).
    Filename3, 255
}

bounded_bytes! {
    /// `nfspath3` (RFC 1813 §2.5): a path (symbolic link contents), at most
    /// 4096 bytes here (RFC 1813 sets no bound).
    Nfspath3, 4096
}

fixed_opaque! {
    /// `cookieverf3` (RFC 1813 §2.5): READDIR cookie verifier.
    Cookieverf3, NFS3_COOKIEVERFSIZE
}

fixed_opaque! {
    /// `createverf3` (RFC 1813 §2.5): exclusive CREATE verifier.
    Createverf3, NFS3_CREATEVERFSIZE
}

fixed_opaque! {
    /// `writeverf3` (RFC 1813 §2.5): WRITE/COMMIT verifier.
    Writeverf3, NFS3_WRITEVERFSIZE
}

/// `nfs_fh3` (RFC 1813 §2.5): a file handle, at most [`NFS3_FHSIZE`]
/// bytes (enforced by [`NfsFh3::new`] and by the decoder).
#[derive(Clone, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct NfsFh3 {
    data: Bytes,
}

/// A file handle longer than [`NFS3_FHSIZE`] bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("file handle of {0} bytes exceeds NFS3_FHSIZE (64)")]
pub struct FhTooLong(pub usize);

impl NfsFh3 {
    /// A handle of these bytes; at most [`NFS3_FHSIZE`].
    pub fn new(data: impl Into<Bytes>) -> Result<Self, FhTooLong> {
        let data = data.into();
        if data.len() > NFS3_FHSIZE as usize {
            return Err(FhTooLong(data.len()));
        }
        Ok(NfsFh3 { data })
    }

    /// The handle's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.data
    }

    /// The handle's bytes as [`Bytes`].
    pub fn to_bytes(&self) -> Bytes {
        self.data.clone()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Whether the handle is empty (RFC 1813 never issues one).
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
}

impl core::fmt::Debug for NfsFh3 {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "NfsFh3(")?;
        for b in self.data.iter() {
            write!(f, "{b:02x}")?;
        }
        write!(f, ")")
    }
}

impl XdrEncode for NfsFh3 {
    fn encoded_len(&self) -> usize {
        xdr::opaque_encoded_len(self.data.len())
    }
    fn encode(&self, e: &mut Encoder<'_>) {
        e.opaque(&self.data)
    }
}

impl XdrDecode for NfsFh3 {
    fn decode<R: XdrRead + ?Sized>(r: &mut R) -> xdr::Result<Self> {
        Ok(NfsFh3 {
            data: r.opaque_bytes(NFS3_FHSIZE)?,
        })
    }
}

xdr_struct! {
    /// `specdata3` (RFC 1813 §2.5): device numbers.
    #[derive(Copy, Default, Hash)]
    pub struct Specdata3 {
        /// `specdata1` (major).
        pub specdata1: u32,
        /// `specdata2` (minor).
        pub specdata2: u32,
    }
}

xdr_struct! {
    /// `nfstime3` (RFC 1813 §2.5).
    #[derive(Copy, Default, Hash, PartialOrd, Ord)]
    pub struct Nfstime3 {
        /// Seconds since 1970-01-01 UTC.
        pub seconds: u32,
        /// Nanoseconds.
        pub nseconds: u32,
    }
}

xdr_struct! {
    /// `fattr3` (RFC 1813 §2.5): file attributes, 84 bytes on the wire.
    #[derive(Copy)]
    pub struct Fattr3 {
        /// `type`.
        pub ftype: Ftype3,
        /// `mode` (permission bits; the file type bits are not included).
        pub mode: u32,
        /// `nlink`.
        pub nlink: u32,
        /// `uid`.
        pub uid: u32,
        /// `gid`.
        pub gid: u32,
        /// `size`.
        pub size: u64,
        /// `used`: bytes of disk space used.
        pub used: u64,
        /// `rdev`.
        pub rdev: Specdata3,
        /// `fsid`.
        pub fsid: u64,
        /// `fileid`.
        pub fileid: u64,
        /// `atime`.
        pub atime: Nfstime3,
        /// `mtime`.
        pub mtime: Nfstime3,
        /// `ctime`.
        pub ctime: Nfstime3,
    }
}

/// Encoded size of a [`Fattr3`].
pub const FATTR3_LEN: usize = 84;

/// `post_op_attr` (RFC 1813 §2.6): attributes after an operation, if the
/// server returns them.
pub type PostOpAttr = Option<Fattr3>;

xdr_struct! {
    /// `wcc_attr` (RFC 1813 §2.6): attributes before an operation, 24 bytes.
    #[derive(Copy, Default)]
    pub struct WccAttr {
        /// `size`.
        pub size: u64,
        /// `mtime`.
        pub mtime: Nfstime3,
        /// `ctime`.
        pub ctime: Nfstime3,
    }
}

/// `pre_op_attr` (RFC 1813 §2.6).
pub type PreOpAttr = Option<WccAttr>;

xdr_struct! {
    /// `wcc_data` (RFC 1813 §2.6): weak cache consistency data.
    #[derive(Default)]
    pub struct WccData {
        /// `before`.
        pub before: PreOpAttr,
        /// `after`.
        pub after: PostOpAttr,
    }
}

/// `post_op_fh3` (RFC 1813 §2.6).
pub type PostOpFh3 = Option<NfsFh3>;

/// `set_mode3`, `set_uid3`, `set_gid3` (RFC 1813 §2.6): a value to set.
pub type SetU32 = Option<u32>;
/// `set_size3` (RFC 1813 §2.6).
pub type SetSize3 = Option<u64>;

/// `set_atime` / `set_mtime` (RFC 1813 §2.6): a union on [`TimeHow`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SetTime {
    /// `DONT_CHANGE`.
    #[default]
    DontChange,
    /// `SET_TO_SERVER_TIME`.
    SetToServerTime,
    /// `SET_TO_CLIENT_TIME` with the time.
    SetToClientTime(Nfstime3),
}

impl XdrEncode for SetTime {
    fn encoded_len(&self) -> usize {
        match self {
            SetTime::SetToClientTime(_) => 12,
            _ => 4,
        }
    }
    fn encode(&self, e: &mut Encoder<'_>) {
        match self {
            SetTime::DontChange => TimeHow::DontChange.encode(e),
            SetTime::SetToServerTime => TimeHow::SetToServerTime.encode(e),
            SetTime::SetToClientTime(t) => {
                TimeHow::SetToClientTime.encode(e);
                t.encode(e);
            }
        }
    }
}

impl XdrDecode for SetTime {
    fn decode<R: XdrRead + ?Sized>(r: &mut R) -> xdr::Result<Self> {
        Ok(match TimeHow::decode(r)? {
            TimeHow::DontChange => SetTime::DontChange,
            TimeHow::SetToServerTime => SetTime::SetToServerTime,
            TimeHow::SetToClientTime => SetTime::SetToClientTime(Nfstime3::decode(r)?),
        })
    }
}

xdr_struct! {
    /// `sattr3` (RFC 1813 §2.6): attributes to set.
    #[derive(Default)]
    pub struct Sattr3 {
        /// `mode`.
        pub mode: SetU32,
        /// `uid`.
        pub uid: SetU32,
        /// `gid`.
        pub gid: SetU32,
        /// `size`.
        pub size: SetSize3,
        /// `atime`.
        pub atime: SetTime,
        /// `mtime`.
        pub mtime: SetTime,
    }
}

xdr_struct! {
    /// `diropargs3` (RFC 1813 §2.6): a directory and a name in it.
    pub struct Diropargs3 {
        /// `dir`.
        pub dir: NfsFh3,
        /// `name`.
        pub name: Filename3,
    }
}

/// The `resok`/`resfail` union every NFS version 3 result is
/// (`union XXX3res switch (nfsstat3 status) { case NFS3_OK: XXX3resok
/// resok; default: XXX3resfail resfail; }`, RFC 1813 §3.3).
///
/// `Fail` carries the status; it must not be [`Nfsstat3::Ok`]. Such a
/// value is a caller bug: it is encoded as `NFS3ERR_SERVERFAULT` so the
/// stream stays decodable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NfsResult<T, F> {
    /// `NFS3_OK` and the `resok` arm.
    Ok(T),
    /// Any other status and the `resfail` arm.
    Fail(Nfsstat3, F),
}

impl<T, F> NfsResult<T, F> {
    /// The status on the wire.
    pub fn status(&self) -> Nfsstat3 {
        match self {
            NfsResult::Ok(_) => Nfsstat3::Ok,
            NfsResult::Fail(Nfsstat3::Ok, _) => Nfsstat3::Serverfault,
            NfsResult::Fail(s, _) => *s,
        }
    }

    /// The `resok` arm as a `Result`, dropping the `resfail` arm.
    pub fn into_result(self) -> Result<T, Nfsstat3> {
        match self {
            NfsResult::Ok(t) => Ok(t),
            f => Err(f.status()),
        }
    }

    /// Whether the status is `NFS3_OK`.
    pub fn is_ok(&self) -> bool {
        matches!(self, NfsResult::Ok(_))
    }
}

impl<T: XdrEncode, F: XdrEncode> XdrEncode for NfsResult<T, F> {
    fn encoded_len(&self) -> usize {
        4 + match self {
            NfsResult::Ok(t) => t.encoded_len(),
            NfsResult::Fail(_, f) => f.encoded_len(),
        }
    }
    fn encode(&self, e: &mut Encoder<'_>) {
        self.status().encode(e);
        match self {
            NfsResult::Ok(t) => t.encode(e),
            NfsResult::Fail(_, f) => f.encode(e),
        }
    }
}

impl<T: XdrDecode, F: XdrDecode> XdrDecode for NfsResult<T, F> {
    fn decode<R: XdrRead + ?Sized>(r: &mut R) -> xdr::Result<Self> {
        match Nfsstat3::decode(r)? {
            Nfsstat3::Ok => Ok(NfsResult::Ok(T::decode(r)?)),
            s => Ok(NfsResult::Fail(s, F::decode(r)?)),
        }
    }
}

impl<T: PayloadEncode, F: PayloadEncode> PayloadEncode for NfsResult<T, F> {
    fn encode_payload(&self, b: &mut PayloadBuilder) {
        b.u32(self.status() as u32);
        match self {
            NfsResult::Ok(t) => t.encode_payload(b),
            NfsResult::Fail(_, f) => f.encode_payload(b),
        }
    }
}
