//! # nfs3 — NFS version 3 and MOUNT version 3
//!
//! The protocol of RFC 1813 (NFS program 100003, version 3, and MOUNT
//! program 100005, version 3) on this workspace's `xdr` and `oncrpc`
//! crates, with the RFC 8267 Upper-Layer Binding that says which items
//! travel in RDMA chunks.
//!
//! * [`types`]: `nfsstat3`, `ftype3`, `nfs_fh3`, `fattr3`, `sattr3`,
//!   `wcc_data`, ... and the `resok`/`resfail` union [`NfsResult`];
//! * [`args`] and [`res`]: the argument and result of every procedure;
//! * [`procs`]: program and procedure numbers, and [`Nfs3Args`] /
//!   [`Nfs3Res`], any procedure's argument or result decoded by number;
//! * [`mount`]: the MOUNT protocol;
//! * [`binding`]: the RFC 8267 Upper-Layer Bindings ([`Nfs3Binding`],
//!   [`MountBinding`]) for `rpcrdma`;
//! * [`client`]: typed clients ([`client::Nfs3Client`],
//!   [`client::MountClient`]) over any `oncrpc::Channel`;
//! * [`codec`]: [`PayloadEncode`] (append to an `oncrpc::PayloadBuilder`,
//!   DDP-eligible opaques as DDP pieces) and [`decode_payload`].
//!
//! Every type implements [`xdr::XdrEncode`], [`xdr::XdrDecode`] and
//! [`PayloadEncode`]. Client and server use them the same way:
//!
//! ```
//! use bytes::Bytes;
//! use nfs3::{decode_payload, PayloadEncode};
//! use nfs3::args::Write3Args;
//! use nfs3::types::{NfsFh3, StableHow};
//!
//! let args = Write3Args {
//!     file: NfsFh3::new(&b"\x01\x02\x03\x04"[..]).unwrap(),
//!     offset: 0,
//!     count: 5,
//!     stable: StableHow::FileSync,
//!     data: Bytes::from_static(b"hello"),
//! };
//! let payload = args.to_payload();
//! // The data travels as a DDP piece (RFC 8267): an RDMA transport moves
//! // it in a Read chunk, TCP sends it inline.
//! assert_eq!(payload.ddp_count(), 1);
//! let back: Write3Args = decode_payload(&payload).unwrap();
//! assert_eq!(back, args);
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod args;
pub mod binding;
pub mod client;
pub mod codec;
pub mod mount;
pub mod procs;
pub mod res;
pub mod types;

pub use binding::{MountBinding, Nfs3Binding};
pub use codec::{decode_payload, PayloadEncode};
pub use mount::{MountArgs, MountRes, Mountstat3, MOUNT_PROGRAM, MOUNT_V3};
pub use procs::{proc3, DecodeError, Nfs3Args, Nfs3Res, NFS_PROGRAM, NFS_V3};
pub use types::{Fattr3, NfsFh3, NfsResult, Nfsstat3};

#[cfg(test)]
mod tests;
