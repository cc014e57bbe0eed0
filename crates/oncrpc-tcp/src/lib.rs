//! ONC RPC (RFC 5531) over TCP on tokio.
//!
//! * [`record`]: the sans-IO record-marking codec (RFC 5531 §11).
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod record;
