//! # oncrpc — sans-IO ONC RPC (RFC 5531)
//!
//! The transport-independent core of ONC RPC version 2, shared by the TCP
//! transport (`oncrpc-tcp`) and RPC-over-RDMA (`rpcrdma`):
//!
//! * [`msg`]: call and reply headers with every `accept_stat` and
//!   `reject_stat` ([`CallHeader`], [`ReplyHeader`], [`AcceptStat`],
//!   [`RejectStat`]);
//! * [`auth`]: `opaque_auth` (≤ 400 bytes), `auth_stat`, AUTH_NONE and
//!   AUTH_SYS ([`AuthSys`], machine name ≤ 255, ≤ 16 gids);
//! * [`payload`]: the [`Payload`] every transport carries — XDR bytes plus
//!   [`Piece::Ddp`] pieces for DDP-eligible opaques (RFC 8166 §6) — with a
//!   [`PayloadBuilder`] and a cross-piece, zero-copy [`PayloadDecoder`];
//! * [`service`]: the [`Service`] trait and the [`Dispatcher`], which turns
//!   a received call message into a complete reply message and answers the
//!   protocol's errors itself;
//! * [`client`]: the sans-IO [`ClientCore`] (xids, outstanding calls,
//!   deadlines from a caller-supplied `now`), [`RpcError`], and the
//!   transport-neutral [`Request`] / [`Channel`] pair typed clients use;
//! * [`testing`]: [`LocalChannel`](testing::LocalChannel), a loopback
//!   channel into a dispatcher.
//!
//! No I/O, no clock, no runtime: transports drive these types.
//!
//! ```
//! use oncrpc::{Call, Dispatcher, Payload, ProcError, Request, Service, Channel};
//! use oncrpc::testing::LocalChannel;
//! use xdr::XdrRead;
//!
//! struct Adder;
//! impl Service for Adder {
//!     fn program(&self) -> u32 { 0x2000_0001 }
//!     fn versions(&self) -> std::ops::RangeInclusive<u32> { 1..=1 }
//!     async fn handle(&self, call: Call) -> Result<Payload, ProcError> {
//!         if call.procedure != 1 { return Err(ProcError::ProcUnavail); }
//!         let mut d = call.args.decoder();
//!         let (a, b) = (d.u32()?, d.u32()?);
//!         d.finish()?;
//!         let mut out = Payload::builder();
//!         out.u32(a.wrapping_add(b));
//!         Ok(out.finish())
//!     }
//! }
//!
//! let ch = LocalChannel::new(Dispatcher::builder().service(Adder).build());
//! let mut args = Payload::builder();
//! args.u32(2).u32(3);
//! let fut = ch.call(Request::new(0x2000_0001, 1, 1, args.finish()));
//! # let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
//! let res = rt.block_on(fut).unwrap();
//! assert_eq!(res.decoder().u32().unwrap(), 5);
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod auth;
pub mod client;
pub mod msg;
pub mod payload;
pub mod service;
pub mod testing;

pub use auth::{AuthFlavor, AuthStat, AuthSys, Credential, OpaqueAuth, MAX_AUTH_BYTES};
pub use client::{
    decode_reply, CallFuture, Channel, ClientCore, DynChannel, ReplyOutcome, Request, RpcError,
};
pub use msg::{
    AcceptStat, CallHeader, MessageHeader, MsgType, RejectStat, ReplyBody, ReplyHeader, RPC_VERSION,
};
pub use payload::{Payload, PayloadBuilder, PayloadDecoder, Piece, SMALL_COPY_MAX};
pub use service::{
    reply_message, Call, DispatchOutcome, Dispatcher, DispatcherBuilder, DropReason, ProcError,
    Service,
};

/// Re-export of the XDR crate, so users need not depend on it separately.
pub use xdr;

#[cfg(test)]
mod tests;
