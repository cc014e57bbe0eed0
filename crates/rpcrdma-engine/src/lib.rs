//! The RPC-over-RDMA connection engine, sans-IO.
//!
//! One [`Connection`] is the whole protocol state of one RDMA connection,
//! as one `&mut` state machine: no runtime, no verbs, no clock (every input
//! that depends on time takes `now`). It holds a Requester half and a
//! Responder half which share the connection's generation, receives and
//! counters:
//!
//! | side    | Requester half          | Responder half          |
//! |---------|-------------------------|-------------------------|
//! | active  | forward calls (client)  | reverse calls (RFC 8167)|
//! | passive | reverse calls (RFC 8167)| forward calls (server)  |
//!
//! Forward and reverse credits are counted apart (RFC 8167 §4.1); the
//! reverse halves work only after [`Connection::enable_reverse`].
//!
//! # Inputs
//! - [`Connection::submit`]: a call to send (forward on the active side,
//!   reverse on the passive side); [`Connection::call_ready`] /
//!   [`Connection::call_failed`] once the driver registered its regions;
//! - [`Connection::reply`] / [`Connection::drop_call`]: the answer to a
//!   received call;
//! - [`Connection::handle_recv`]: a completed Receive (bytes, the
//!   generation of its queue pair, the STag a Send with Invalidate
//!   invalidated);
//! - [`Connection::handle_completion`]: a work request completed, by
//!   [`Token`];
//! - [`Connection::handle_timeout`]: time passed;
//!   [`Connection::cancel`]: a caller gave its call up;
//! - [`Connection::handle_connection_lost`] /
//!   [`Connection::handle_reconnected`].
//!
//! # Outputs
//! - [`Connection::poll_transmit`]: work requests to post, as
//!   [`Transmit`]s: prepare a call (register the regions of its
//!   `rpcrdma_proto` plan), RDMA Read a received call's chunk, RDMA Write a
//!   reply's results, Send a message. The engine names regions and
//!   segments; it never touches memory.
//! - [`Connection::poll_event`]: [`Event`]s: a call done (with its reply
//!   or why not), a call received, an abandoned call retired, the
//!   connection lost.
//! - [`Connection::poll_timeout`]: when to call `handle_timeout` next.
//! - [`Connection::recv_target`]: how many receives to keep posted.
//!
//! # The state of a call
//! Each call this side sends is in one [`CallState`]: `Queued` (waiting for
//! a credit, RFC 8166 §3.3.1) → `Preparing` (a credit is held, the driver
//! registers) → `Sent` (on the wire on one connection generation) → done
//! when its reply comes. A timeout (or [`Connection::cancel`]) ends the
//! call for its caller at once;
//! if it held a credit it stays `Abandoned`, credit and registrations held,
//! until its late reply (dropped) or the connection's end. When the active
//! side loses its connection, Preparing and Sent calls are queued again and
//! retransmitted with the same XID on the next generation; receives from
//! an older generation are dropped. The passive side never reconnects:
//! its reverse calls fail (RFC 8167 §5.4).
//!
//! Received messages are classified as CALL or REPLY before any XID lookup
//! ([`rpcrdma_proto::classify::route`]), so a reverse call and a forward
//! call with the same XID are two different transactions (RFC 8167 §2.4.1).
//!
//! # One call, driven by hand
//!
//! ```
//! use std::time::Instant;
//! use bytes::Bytes;
//! use rpcrdma_engine::{CallSpec, Config, Connection, Event, Side, Transmit};
//! use rpcrdma_proto::marshal::ReplyShape;
//! use rpcrdma_proto::stream::{gather, Item};
//!
//! let now = Instant::now();
//! let mut client = Connection::new(Config::new(Side::Active));
//! let mut server = Connection::new(Config::new(Side::Passive));
//!
//! // A NULL call: the RPC header (AUTH_NONE) is the only item.
//! let spec = CallSpec {
//!     items: vec![Item::Xdr(40)],
//!     reply: ReplyShape { max_reduced_len: 24, ..Default::default() },
//!     timeout: None,
//! };
//! let id = client.submit(now, spec).unwrap();
//! let xid = client.xid(id).unwrap();
//! let rpc: Vec<u8> = [xid, 0, 2, 100_003, 3, 0, 0, 0, 0, 0]
//!     .iter().flat_map(|w| w.to_be_bytes()).collect();
//!
//! // Client driver: register (nothing to register here), then Send.
//! let Some(Transmit::Prepare { id, plan, .. }) = client.poll_transmit(now) else { panic!() };
//! assert!(client.call_ready(now, id, &plan));
//! let Some(Transmit::Send { token, head, inline, .. }) = client.poll_transmit(now) else { panic!() };
//! let wire = [&head[..], &gather(&inline, &[&rpc])[..]].concat();
//! client.handle_completion(token, true);
//!
//! // Server: the Receive, the call, the reply.
//! server.handle_recv(now, server.generation(), Bytes::from(wire), None);
//! let Some(Event::IncomingCall(call)) = server.poll_event() else { panic!() };
//! let reply: Vec<u8> = [xid, 1, 0, 0, 0, 0].iter().flat_map(|w| w.to_be_bytes()).collect();
//! server.reply(call.id, &[Item::Xdr(24)]).unwrap();
//! let Some(Transmit::Send { head, inline, .. }) = server.poll_transmit(now) else { panic!() };
//! let wire = [&head[..], &gather(&inline, &[&reply])[..]].concat();
//!
//! // Client: the reply completes the call, and carries the grant.
//! client.handle_recv(now, client.generation(), Bytes::from(wire), None);
//! let Some(Event::CallDone { result: Ok(r), .. }) = client.poll_event() else { panic!() };
//! assert_eq!(&r.msg[r.header_len..], &reply[..]);
//! assert_eq!(client.requester_credits().limit, 32);
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod config;
pub mod connection;
mod incoming;
mod outgoing;
pub mod requester;
mod responder;
pub mod stats;
pub mod types;

pub use config::{Config, Side, Thresholds};
pub use connection::{Connection, CreditUse, Phase};
pub use requester::CallState;
pub use stats::Stats;
pub use types::{
    CallError, CallId, CallSpec, ChunkRef, Direction, EngineError, Event, IncomingCall, LostReason,
    MessageRef, Reply, SubmitError, Token, Transmit,
};
