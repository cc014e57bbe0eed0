//! RPC-over-RDMA Version One (RFC 8166) protocol core, sans-IO.
//!
//! No sockets, no async, no clock, no RDMA provider: only the rules.
//!
//! - [`wire`]: the transport header — zero-copy decoding ([`wire::Header`])
//!   and encoding into caller buffers ([`wire::HeaderRepr`]).
//! - [`classify`]: whether a received message is a Call or a Reply, before
//!   any XID lookup (RFC 8167 §5), and which half of an endpoint takes it.
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
//! - [`respond`]: what a Responder answers instead of a reply (the
//!   ERR_CHUNK cases and GARBAGE_ARGS, RFC 8166 §4.5).
//! - [`credits`]: credit accounting (RFC 8166 §3.3).
//! - [`private_data`]: RFC 8797 connection private data.
//! - [`counters`]: counters for a mountstats-like line.
//!
//! Planning inputs are abstract [`stream::Item`] lists (XDR runs and
//! DDP-eligible opaque contents); outputs refer back to them with
//! [`stream::Span`]s, so a transport maps its own buffers onto them.
//!
//! # A PUT, end to end
//!
//! ```
//! use rpcrdma_proto::binding::rdmatest::{procs, RdmatestBinding, PROGRAM, VERSION};
//! use rpcrdma_proto::marshal::{plan_call, CallKind, ChunkLimits, ReplyShape, Thresholds};
//! use rpcrdma_proto::reply::{plan_reply, ReplyKind};
//! use rpcrdma_proto::stream::{gather, Item};
//! use rpcrdma_proto::validate::{check_call, CallVerdict};
//! use rpcrdma_proto::wire::DecodeLimits;
//!
//! // Requester: RPC header (AUTH_NONE) + length word, then 8000 bytes of data.
//! let xid = 42u32;
//! let mut head = Vec::new();
//! for w in [xid, 0, 2, PROGRAM, VERSION, procs::PUT, 0, 0, 0, 0, 8000] {
//!     head.extend_from_slice(&w.to_be_bytes());
//! }
//! let data = vec![7u8; 8000];
//! let items = [Item::Xdr(head.len() as u32), Item::Ddp(8000)];
//! let reply = ReplyShape { write_chunks: vec![], max_reduced_len: 32, ..Default::default() };
//! let mut plan = plan_call(xid, 32, &items, &reply, &Thresholds::default(),
//!                          &ChunkLimits::default()).unwrap();
//! assert_eq!(plan.kind, CallKind::Chunked);
//! plan.set_region(0, 0x1234, 0x10_0000); // after registering `data`
//! let mut send = plan.header.to_vec();
//! send.extend_from_slice(&gather(plan.inline(), &[&head, &data]));
//!
//! // Responder: validate, then pull the Read chunk and rebuild the call.
//! let CallVerdict::Deliver(call) =
//!     check_call(&send, &DecodeLimits::default(), &RdmatestBinding, 16)
//! else { panic!() };
//! let chunk = &call.reassembly.chunks[0];
//! assert_eq!((chunk.position, chunk.len), (44, 8000));
//! let args = call.reassembly.to_contiguous(call.header.payload().unwrap(), &[&data]).unwrap();
//! assert_eq!(args.len(), 44 + 8000);
//!
//! // Responder: a short reply (RPC reply header + PUT result).
//! let results = vec![0u8; 32];
//! let r = plan_reply(xid, 16, &[Item::Xdr(32)], &call.offered, 1024).unwrap();
//! assert_eq!(r.kind, ReplyKind::Short);
//! assert!(r.writes.is_empty());
//! let _send = [r.header.to_vec(), gather(&r.inline, &[&results])].concat();
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod binding;
pub mod classify;
pub mod counters;
pub mod credits;
pub mod error;
pub mod marshal;
pub mod private_data;
pub mod reassemble;
pub mod reply;
pub mod respond;
pub mod stream;
pub mod validate;
pub mod wire;

pub use error::{DecodeError, DecodeErrorKind, EmitError};
pub use wire::{
    Body, BodyRepr, ChunkLists, ChunkListsRepr, DecodeLimits, ErrorBody, Header, HeaderRepr, Proc,
    ReadSegment, Segment, WriteChunkRepr,
};
