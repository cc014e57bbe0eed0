//! ONC RPC (RFC 5531) over TCP on tokio.
//!
//! * [`record`]: the sans-IO record-marking codec (RFC 5531 §11).
//! * [`io`]: reading records from, and vectored writing of `Bytes` chains to,
//!   async streams.
//! * [`server`]: [`TcpServer`] serves an [`oncrpc::Dispatcher`] (or any
//!   [`RecordService`]): many connections, many concurrent calls per
//!   connection, replies in completion order, graceful shutdown.
//! * [`client`]: [`TcpChannel`], an [`oncrpc::Channel`] over one connection
//!   with many outstanding calls, per-call timeouts, and
//!   [`oncrpc::RpcError::ConnectionLost`] when the connection goes.
//!
//! # Hostile peers
//!
//! * A peer that breaks record marking or exceeds the
//!   [`record::RecordLimits`] (record size, default 64 MiB; fragments per
//!   record, default 16384) has its connection closed; other connections are
//!   unaffected. A record's buffer grows only as its bytes arrive.
//! * Per connection, at most [`ServerConfig::max_calls_per_connection`] calls
//!   are in progress, and they hold at most
//!   [`ServerConfig::max_bytes_per_connection`] bytes (default 64 MiB; the
//!   larger of a call's record and its reply), a call counting until its
//!   reply has been written: a peer that does not read its replies stops
//!   being read.
//! * [`ServerConfig::max_connections`] bounds connections;
//!   [`ServerConfig::idle_timeout`] closes connections with no call in
//!   progress that complete no record in time (also a half-sent one).
//! * A message that is not a decodable call gets no reply (the
//!   [`oncrpc::Dispatcher`] drops it) and the connection carries on.
//!
//! # Copies
//!
//! Received fragments are split off the read buffer without copying (a
//! single-fragment record is one contiguous `Bytes`, so opaque arguments and
//! results are slices of it). Replies and calls are written with vectored
//! writes of the message's pieces, XDR pads included: payloads are not
//! copied in user space. By default every message is sent as one fragment.
//!
//! ```no_run
//! # async fn demo(dispatcher: oncrpc::Dispatcher) -> std::io::Result<()> {
//! use std::sync::Arc;
//! use oncrpc::{Channel, Payload, Request};
//! use oncrpc_tcp::{ServerConfig, TcpChannel, TcpServer};
//!
//! let server = TcpServer::bind("127.0.0.1:0", Arc::new(dispatcher), ServerConfig::default()).await?;
//! let addr = server.local_addr()?;
//! let stop = server.shutdown_handle();
//! let task = tokio::spawn(server.run());
//!
//! let channel = TcpChannel::connect(addr).await?;
//! let results = channel.call(Request::new(0x2000_5244, 1, 0, Payload::new())).await;
//! stop.shutdown();
//! task.await??;
//! # let _ = results; Ok(()) }
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod client;
pub mod io;
pub mod record;
pub mod server;

pub use client::{ClientConfig, TcpChannel, DEFAULT_MAX_QUEUED_BYTES};
pub use server::{RecordService, ServerConfig, ShutdownHandle, TcpServer};
