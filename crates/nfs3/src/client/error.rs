//! The clients' error type.

use oncrpc::RpcError;

use crate::mount::Mountstat3;
use crate::types::Nfsstat3;

/// Why a client call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The server answered with an NFS status other than `NFS3_OK`.
    #[error("{procedure}: {status}")]
    Nfs {
        /// The procedure name (`"LOOKUP"`).
        procedure: &'static str,
        /// The status (`Display`: `NFS3ERR_NOENT`).
        status: Nfsstat3,
    },
    /// The server answered MNT with a status other than `MNT3_OK`.
    #[error("MNT: {0}")]
    Mount(Mountstat3),
    /// The RPC call failed (transport, timeout, RPC-level rejection).
    #[error(transparent)]
    Rpc(#[from] RpcError),
    /// The reply's results could not be decoded.
    #[error("{procedure}: malformed reply: {source}")]
    Decode {
        /// The procedure name.
        procedure: &'static str,
        /// What was wrong.
        source: xdr::Error,
    },
    /// The reply decoded but contradicts the call (e.g. READ returned more
    /// bytes than asked for, or READDIR made no progress).
    #[error("{procedure}: {reason}")]
    Protocol {
        /// The procedure name.
        procedure: &'static str,
        /// What was wrong.
        reason: String,
    },
    /// An argument exceeds a protocol limit (a name over 255 bytes, WRITE
    /// data over 1 MiB, an AUTH_SYS machine name over 255 bytes, ...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

impl Error {
    /// The NFS status, if the server answered with one.
    pub fn nfs_status(&self) -> Option<Nfsstat3> {
        match self {
            Error::Nfs { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The MOUNT status, if the server answered with one.
    pub fn mount_status(&self) -> Option<Mountstat3> {
        match self {
            Error::Mount(s) => Some(*s),
            _ => None,
        }
    }
}
