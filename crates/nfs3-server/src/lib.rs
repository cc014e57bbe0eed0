//! # nfs3-server — NFSv3 and MOUNT v3 over a local directory
//!
//! Serves one directory of the local file system (the export) as NFS
//! version 3 (RFC 1813) and MOUNT version 3, as `oncrpc` services that any
//! of the workspace's transports carry.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
