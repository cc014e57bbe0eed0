//! ONC RPC (RFC 5531) over TCP on tokio.
//!
//! * [`record`]: the sans-IO record-marking codec (RFC 5531 §11).
//! * [`io`]: reading records from, and vectored writing of `Bytes` chains to,
//!   async streams.
//! * [`server`]: [`TcpServer`], many connections, many concurrent calls per
//!   connection, replies in completion order, graceful shutdown.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod io;
pub mod record;
pub mod server;

pub use server::{RecordService, ServerConfig, ShutdownHandle, TcpServer};
