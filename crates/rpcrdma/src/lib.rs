//! # rpcrdma — the RPC-over-RDMA Version One transport (RFC 8166)
//!
//! Requester and Responder engines over any [`rdma_verbs::Device`]: the
//! software iWARP provider (crate `iwarp`), or the in-process
//! [`memfabric`] used by fast tests.
//!
//! - [`RdmaClient`]: the Requester; implements [`oncrpc::Channel`], so typed
//!   clients (e.g. `rdmatest::RdmatestClient`) run unchanged over RDMA and
//!   TCP. [`RdmaClient::call_with_report`] also returns a [`CallReport`] of
//!   what went on the wire.
//! - [`RdmaServer`]: the Responder; serves an [`oncrpc::Dispatcher`].
//! - [`RdmaConfig`]: inline thresholds, credits, chunk limits, timeouts,
//!   reconnect backoff, remote invalidation, ORD/IRD — with documented
//!   defaults.
//! - [`Bindings`]: the Upper-Layer Bindings (RFC 8166 §6) known to both
//!   sides, each with the [`ReplyLayout`] the requester needs to put
//!   Write-chunk data back in place.
//!
//! Every protocol rule lives in `rpcrdma-proto` (plans, validation,
//! credits, private data); this crate executes the plans with verbs.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod client;
pub mod config;
mod endpoint;
pub mod error;
pub mod memfabric;
pub mod report;
pub mod server;
pub mod ulb;

pub use client::{ClientStats, RdmaClient};
pub use config::{Backoff, RdmaConfig, MAX_CREDITS};
pub use error::TransportError;
pub use report::{CallReport, MessageKind, ReplyMode};
pub use rpcrdma_proto::binding::{DdpPlacement, LayoutError, ReplyLayout};
pub use rpcrdma_proto::marshal::{CallKind, Thresholds};
pub use server::{RdmaServer, ServerStats};
pub use ulb::Bindings;
