//! The NFS version 3 program: numbers, and every procedure's argument and
//! result as one enum each ([`Nfs3Args`], [`Nfs3Res`]), decoded by
//! procedure number.

use oncrpc::PayloadBuilder;
use xdr::{XdrDecode, XdrEncode, XdrRead};

use crate::args::*;
use crate::codec::PayloadEncode;
use crate::res::*;

/// NFS program number (RFC 1813 §1.3).
pub const NFS_PROGRAM: u32 = 100_003;
/// NFS version 3.
pub const NFS_V3: u32 = 3;
/// NFSACL program number (no binding: nothing in it is DDP-eligible,
/// RFC 8267).
pub const NFSACL_PROGRAM: u32 = 100_227;

/// Procedure numbers (RFC 1813 §3.3).
pub mod proc3 {
    /// NFSPROC3_NULL.
    pub const NULL: u32 = 0;
    /// NFSPROC3_GETATTR.
    pub const GETATTR: u32 = 1;
    /// NFSPROC3_SETATTR.
    pub const SETATTR: u32 = 2;
    /// NFSPROC3_LOOKUP.
    pub const LOOKUP: u32 = 3;
    /// NFSPROC3_ACCESS.
    pub const ACCESS: u32 = 4;
    /// NFSPROC3_READLINK.
    pub const READLINK: u32 = 5;
    /// NFSPROC3_READ.
    pub const READ: u32 = 6;
    /// NFSPROC3_WRITE.
    pub const WRITE: u32 = 7;
    /// NFSPROC3_CREATE.
    pub const CREATE: u32 = 8;
    /// NFSPROC3_MKDIR.
    pub const MKDIR: u32 = 9;
    /// NFSPROC3_SYMLINK.
    pub const SYMLINK: u32 = 10;
    /// NFSPROC3_MKNOD.
    pub const MKNOD: u32 = 11;
    /// NFSPROC3_REMOVE.
    pub const REMOVE: u32 = 12;
    /// NFSPROC3_RMDIR.
    pub const RMDIR: u32 = 13;
    /// NFSPROC3_RENAME.
    pub const RENAME: u32 = 14;
    /// NFSPROC3_LINK.
    pub const LINK: u32 = 15;
    /// NFSPROC3_READDIR.
    pub const READDIR: u32 = 16;
    /// NFSPROC3_READDIRPLUS.
    pub const READDIRPLUS: u32 = 17;
    /// NFSPROC3_FSSTAT.
    pub const FSSTAT: u32 = 18;
    /// NFSPROC3_FSINFO.
    pub const FSINFO: u32 = 19;
    /// NFSPROC3_PATHCONF.
    pub const PATHCONF: u32 = 20;
    /// NFSPROC3_COMMIT.
    pub const COMMIT: u32 = 21;
    /// Number of procedures (0..COUNT).
    pub const COUNT: u32 = 22;
}

/// The name of NFS version 3 procedure `p` (`"READDIRPLUS"`), if defined.
pub fn proc_name(p: u32) -> Option<&'static str> {
    const NAMES: [&str; 22] = [
        "NULL",
        "GETATTR",
        "SETATTR",
        "LOOKUP",
        "ACCESS",
        "READLINK",
        "READ",
        "WRITE",
        "CREATE",
        "MKDIR",
        "SYMLINK",
        "MKNOD",
        "REMOVE",
        "RMDIR",
        "RENAME",
        "LINK",
        "READDIR",
        "READDIRPLUS",
        "FSSTAT",
        "FSINFO",
        "PATHCONF",
        "COMMIT",
    ];
    NAMES.get(p as usize).copied()
}

/// Why arguments or results of a procedure could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The procedure number is not defined (a server answers PROC_UNAVAIL).
    #[error("procedure {0} is not defined")]
    UnknownProcedure(u32),
    /// The XDR data is malformed or exceeds a limit (a server answers
    /// GARBAGE_ARGS).
    #[error(transparent)]
    Xdr(#[from] xdr::Error),
}

impl From<DecodeError> for oncrpc::ProcError {
    fn from(e: DecodeError) -> Self {
        match e {
            DecodeError::UnknownProcedure(_) => oncrpc::ProcError::ProcUnavail,
            DecodeError::Xdr(_) => oncrpc::ProcError::GarbageArgs,
        }
    }
}

macro_rules! proc_enum {
    (
        $(#[$m:meta])*
        pub enum $name:ident {
            $( $(#[$vm:meta])* $v:ident ( $t:ty ) = $p:path ),* $(,)?
        }
    ) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum $name {
            /// NULL (void).
            Null,
            $( $(#[$vm])* $v($t) ),*
        }

        impl $name {
            /// The procedure number.
            pub fn procedure(&self) -> u32 {
                match self {
                    $name::Null => proc3::NULL,
                    $( $name::$v(_) => $p, )*
                }
            }

            /// The procedure name.
            pub fn name(&self) -> &'static str {
                proc_name(self.procedure()).unwrap_or("?")
            }

            /// Decode the value of procedure `procedure` from `r` (not
            /// checking that the input ends after it).
            pub fn decode<R: XdrRead + ?Sized>(procedure: u32, r: &mut R) -> Result<Self, DecodeError> {
                Ok(match procedure {
                    proc3::NULL => $name::Null,
                    $( $p => $name::$v(<$t>::decode(r)?), )*
                    p => return Err(DecodeError::UnknownProcedure(p)),
                })
            }

            /// Decode a whole payload as the value of `procedure`: it must
            /// take every byte.
            pub fn decode_payload(procedure: u32, p: &oncrpc::Payload) -> Result<Self, DecodeError> {
                let mut d = p.decoder();
                let v = Self::decode(procedure, &mut d)?;
                d.finish()?;
                Ok(v)
            }
        }

        impl XdrEncode for $name {
            fn encoded_len(&self) -> usize {
                match self {
                    $name::Null => 0,
                    $( $name::$v(x) => x.encoded_len(), )*
                }
            }
            fn encode(&self, e: &mut xdr::Encoder<'_>) {
                match self {
                    $name::Null => {}
                    $( $name::$v(x) => x.encode(e), )*
                }
            }
        }

        impl PayloadEncode for $name {
            fn encode_payload(&self, b: &mut PayloadBuilder) {
                match self {
                    $name::Null => {}
                    $( $name::$v(x) => x.encode_payload(b), )*
                }
            }
        }
    };
}

proc_enum! {
    /// The arguments of any NFS version 3 procedure.
    pub enum Nfs3Args {
        /// GETATTR.
        Getattr(Getattr3Args) = proc3::GETATTR,
        /// SETATTR.
        Setattr(Setattr3Args) = proc3::SETATTR,
        /// LOOKUP.
        Lookup(Lookup3Args) = proc3::LOOKUP,
        /// ACCESS.
        Access(Access3Args) = proc3::ACCESS,
        /// READLINK.
        Readlink(Readlink3Args) = proc3::READLINK,
        /// READ.
        Read(Read3Args) = proc3::READ,
        /// WRITE.
        Write(Write3Args) = proc3::WRITE,
        /// CREATE.
        Create(Create3Args) = proc3::CREATE,
        /// MKDIR.
        Mkdir(Mkdir3Args) = proc3::MKDIR,
        /// SYMLINK.
        Symlink(Symlink3Args) = proc3::SYMLINK,
        /// MKNOD.
        Mknod(Mknod3Args) = proc3::MKNOD,
        /// REMOVE.
        Remove(Remove3Args) = proc3::REMOVE,
        /// RMDIR.
        Rmdir(Rmdir3Args) = proc3::RMDIR,
        /// RENAME.
        Rename(Rename3Args) = proc3::RENAME,
        /// LINK.
        Link(Link3Args) = proc3::LINK,
        /// READDIR.
        Readdir(Readdir3Args) = proc3::READDIR,
        /// READDIRPLUS.
        Readdirplus(Readdirplus3Args) = proc3::READDIRPLUS,
        /// FSSTAT.
        Fsstat(Fsstat3Args) = proc3::FSSTAT,
        /// FSINFO.
        Fsinfo(Fsinfo3Args) = proc3::FSINFO,
        /// PATHCONF.
        Pathconf(Pathconf3Args) = proc3::PATHCONF,
        /// COMMIT.
        Commit(Commit3Args) = proc3::COMMIT,
    }
}

proc_enum! {
    /// The results of any NFS version 3 procedure.
    pub enum Nfs3Res {
        /// GETATTR.
        Getattr(Getattr3Res) = proc3::GETATTR,
        /// SETATTR.
        Setattr(Setattr3Res) = proc3::SETATTR,
        /// LOOKUP.
        Lookup(Lookup3Res) = proc3::LOOKUP,
        /// ACCESS.
        Access(Access3Res) = proc3::ACCESS,
        /// READLINK.
        Readlink(Readlink3Res) = proc3::READLINK,
        /// READ.
        Read(Read3Res) = proc3::READ,
        /// WRITE.
        Write(Write3Res) = proc3::WRITE,
        /// CREATE.
        Create(Create3Res) = proc3::CREATE,
        /// MKDIR.
        Mkdir(Mkdir3Res) = proc3::MKDIR,
        /// SYMLINK.
        Symlink(Symlink3Res) = proc3::SYMLINK,
        /// MKNOD.
        Mknod(Mknod3Res) = proc3::MKNOD,
        /// REMOVE.
        Remove(Remove3Res) = proc3::REMOVE,
        /// RMDIR.
        Rmdir(Rmdir3Res) = proc3::RMDIR,
        /// RENAME.
        Rename(Rename3Res) = proc3::RENAME,
        /// LINK.
        Link(Link3Res) = proc3::LINK,
        /// READDIR.
        Readdir(Readdir3Res) = proc3::READDIR,
        /// READDIRPLUS.
        Readdirplus(Readdirplus3Res) = proc3::READDIRPLUS,
        /// FSSTAT.
        Fsstat(Fsstat3Res) = proc3::FSSTAT,
        /// FSINFO.
        Fsinfo(Fsinfo3Res) = proc3::FSINFO,
        /// PATHCONF.
        Pathconf(Pathconf3Res) = proc3::PATHCONF,
        /// COMMIT.
        Commit(Commit3Res) = proc3::COMMIT,
    }
}

impl Nfs3Res {
    /// The `nfsstat3` of the result (`NFS3_OK` for NULL).
    pub fn status(&self) -> crate::types::Nfsstat3 {
        match self {
            Nfs3Res::Null => crate::types::Nfsstat3::Ok,
            Nfs3Res::Getattr(r) => r.status(),
            Nfs3Res::Setattr(r) => r.status(),
            Nfs3Res::Lookup(r) => r.status(),
            Nfs3Res::Access(r) => r.status(),
            Nfs3Res::Readlink(r) => r.status(),
            Nfs3Res::Read(r) => r.status(),
            Nfs3Res::Write(r) => r.status(),
            Nfs3Res::Create(r) => r.status(),
            Nfs3Res::Mkdir(r) => r.status(),
            Nfs3Res::Symlink(r) => r.status(),
            Nfs3Res::Mknod(r) => r.status(),
            Nfs3Res::Remove(r) => r.status(),
            Nfs3Res::Rmdir(r) => r.status(),
            Nfs3Res::Rename(r) => r.status(),
            Nfs3Res::Link(r) => r.status(),
            Nfs3Res::Readdir(r) => r.status(),
            Nfs3Res::Readdirplus(r) => r.status(),
            Nfs3Res::Fsstat(r) => r.status(),
            Nfs3Res::Fsinfo(r) => r.status(),
            Nfs3Res::Pathconf(r) => r.status(),
            Nfs3Res::Commit(r) => r.status(),
        }
    }
}
