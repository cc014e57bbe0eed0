//! Typed NFS version 3 and MOUNT version 3 clients over any
//! [`oncrpc::Channel`] (RPC-over-RDMA, TCP, or the in-memory
//! `oncrpc::testing::LocalChannel`).
//!
//! * [`Nfs3Client`]: one async method per NFS procedure, plus
//!   [`lookup_path`](Nfs3Client::lookup_path),
//!   [`readdir_all`](Nfs3Client::readdir_all) and
//!   [`readdirplus_all`](Nfs3Client::readdirplus_all);
//! * [`MountClient`]: MNT, UMNT, UMNTALL, DUMP, EXPORT, NULL;
//! * [`Error`]: NFS status, MOUNT status, RPC error, undecodable reply.
//!
//! READ places its data straight into a caller-provided buffer
//! ([`Nfs3Client::read_into`]: on RPC-over-RDMA the Responder writes it
//! there through a Write chunk) and returns it as a [`bytes::Bytes`]
//! without copying; WRITE sends the caller's `Bytes` as a DDP piece (a
//! Read chunk on RPC-over-RDMA). READDIR and READDIRPLUS replies larger
//! than the inline threshold come in a Reply chunk the transport provisions
//! from [`Nfs3Binding`](crate::binding::Nfs3Binding)'s estimate.
//!
//! ```
//! # use nfs3::client::{Nfs3Client, MountClient};
//! # async fn demo<C: oncrpc::Channel>(ch: C) -> Result<(), nfs3::client::Error> {
//! let mount = MountClient::new(&ch).with_auth_sys(1000, 1000, vec![], "host")?;
//! let root = mount.mnt("/export").await?.fhandle;
//! let nfs = Nfs3Client::new(&ch).with_auth_sys(1000, 1000, vec![], "host")?;
//! let (fh, _attrs) = nfs.lookup_path(&root, "dir/file").await?;
//! let data = nfs.read(&fh, 0, 4096).await?.data;
//! # let _ = data; Ok(()) }
//! ```

mod error;
mod mount;
mod nfs;

pub use error::Error;
pub use mount::MountClient;
pub use nfs::{Nfs3Client, DEFAULT_DIRCOUNT, DEFAULT_MAXCOUNT};

use oncrpc::{AuthSys, Credential};

/// An AUTH_SYS credential (RFC 5531 Appendix A) with stamp 0.
pub fn auth_sys(
    uid: u32,
    gid: u32,
    gids: Vec<u32>,
    machine_name: &str,
) -> Result<Credential, Error> {
    let a = AuthSys::new(
        0,
        bytes::Bytes::copy_from_slice(machine_name.as_bytes()),
        uid,
        gid,
        gids,
    )
    .map_err(|e| Error::InvalidArgument(e.to_string()))?;
    Ok(Credential::Sys(a))
}

#[cfg(test)]
mod tests;
