//! # nfs3 — NFS version 3 and MOUNT version 3
//!
//! The protocol of RFC 1813 (NFS program 100003, version 3, and MOUNT
//! program 100005, version 3) on this workspace's `xdr` and `oncrpc`
//! crates, with the RFC 8267 Upper-Layer Binding that says which items
//! travel in RDMA chunks.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
