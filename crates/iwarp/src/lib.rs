//! Software iWARP RNIC in userspace: MPA (RFC 5044, RFC 6581), DDP (RFC 5041) and
//! RDMAP (RFC 5040) over TCP, implementing the `rdma-verbs` provider interface.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod capture;
pub mod cq;
pub mod crc;
pub mod engine;
pub mod mem;
pub mod wire;
