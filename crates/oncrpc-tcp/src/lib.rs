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
//! A peer that breaks record marking or exceeds the [`record::RecordLimits`]
//! has its connection closed; other connections are unaffected.
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

pub use client::{ClientConfig, TcpChannel};
pub use server::{RecordService, ServerConfig, ShutdownHandle, TcpServer};
