//! RPC-over-RDMA Version One (RFC 8166) protocol core, sans-IO.
//!
//! No sockets, no async, no clock, no RDMA provider: only the rules.
//!
//! - [`wire`]: the transport header — zero-copy decoding ([`wire::Header`])
//!   and encoding into caller buffers ([`wire::HeaderRepr`]).
//! - [`validate`]: what a receiver must do with a call or a reply
//!   (deliver / ERR_VERS / ERR_CHUNK / GARBAGE_ARGS / discard), RFC 8166 §4.5.
//! - [`binding`]: the Upper-Layer Binding interface (RFC 8166 §6) and the
//!   RDMATEST binding.
//! - [`marshal`]: the Requester's plan for a call (Short, Chunked, Long;
//!   Write chunks; Reply chunk) and the regions to register.
//! - [`reassemble`]: rebuilding a call from inline bytes and Read chunks;
//!   locating DDP results of a reply.
//! - [`reply`]: the Responder's plan for a reply (Write chunks, Short or
//!   Long Reply, RDMA Writes to perform).
//! - [`credits`]: credit accounting (RFC 8166 §3.3).
//! - [`private_data`]: RFC 8797 connection private data.
//! - [`counters`]: counters for a mountstats-like line.
//!
//! Planning inputs are abstract [`stream::Item`] lists (XDR runs and
//! DDP-eligible opaque contents); outputs refer back to them with
//! [`stream::Span`]s, so a transport maps its own buffers onto them.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod binding;
pub mod counters;
pub mod credits;
pub mod error;
pub mod marshal;
pub mod private_data;
pub mod reassemble;
pub mod reply;
pub mod stream;
pub mod validate;
pub mod wire;

pub use error::{DecodeError, DecodeErrorKind, EmitError};
pub use wire::{
    Body, BodyRepr, ChunkLists, ChunkListsRepr, DecodeLimits, ErrorBody, Header, HeaderRepr, Proc,
    ReadSegment, Segment, WriteChunkRepr,
};
