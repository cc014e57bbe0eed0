//! Software iWARP RNIC in userspace: MPA (RFC 5044, RFC 6581), DDP (RFC 5041) and
//! RDMAP (RFC 5040) over TCP, implementing the `rdma-verbs` provider interface.
//!
//! * [`device`]: [`Device`] implements [`rdma_verbs::Device`]; a tokio driver
//!   runs one reader and one writer task per connection (posters transmit
//!   inline when the writer is idle).
//! * [`engine`]: the sans-IO per-QP engine (receive half with direct
//!   placement from the socket into registered memory, transmit half with
//!   segmentation), testable without sockets.
//! * [`handshake`]: the MPA Request/Reply exchange, sans-IO.
//! * [`mem`]: STag table and protection checks.
//! * [`wire`], [`crc`], [`capture`]: wire formats, CRC32c, pcap capture.
//!
//! Like hardware, it is strict: a Send with no posted receive, a bad STag,
//! bounds or access violation, an MSN/MO error or a CRC error ends the
//! connection with the RFC's Terminate message, fails the affected work
//! request and flushes the rest.
//!
//! ```
//! use bytes::{Bytes, BytesMut};
//! use rdma_verbs::*;
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let dev = iwarp::Device::default();
//! let (pd_a, pd_b) = (dev.alloc_pd().unwrap(), dev.alloc_pd().unwrap());
//! let cq = dev.create_cq(64).unwrap();
//! let qp_a = dev.create_qp(&pd_a, QpInit::with_cq(cq.clone())).unwrap();
//! let qp_b = dev.create_qp(&pd_b, QpInit::with_cq(cq.clone())).unwrap();
//! // The passive side posts a receive before accepting.
//! let rbuf = pd_b.register(BytesMut::zeroed(64).into(), Access::LOCAL_WRITE).unwrap();
//! qp_b.post_recv(RecvWr::new(1, vec![Sge::new(rbuf.lkey(), 0, 64)])).unwrap();
//! let listener = dev.listen("127.0.0.1:0".parse().unwrap()).await.unwrap();
//! let addr = listener.local_addr();
//! let qb = qp_b.clone();
//! let server = tokio::spawn(async move {
//!     let req = listener.next_request().await.unwrap();
//!     req.accept(&qb, ConnParam::new(Bytes::new(), 1, 1)).await.unwrap()
//! });
//! dev.connect(&qp_a, addr, ConnParam::new(&b"hello"[..], 1, 1)).await.unwrap();
//! server.await.unwrap();
//! // Send from an immutable buffer (zero-copy to the socket).
//! let msg = pd_a.register(Bytes::from_static(b"ping").into(), Access::NONE).unwrap();
//! qp_a.post_send(SendWr::send(7, vec![Sge::new(msg.lkey(), 0, 4)])).unwrap();
//! let mut got = Vec::new();
//! while got.len() < 2 {
//!     got.push(cq.next().await);
//! }
//! let recv = got.iter().find(|wc| wc.opcode == WcOpcode::Recv).unwrap();
//! assert_eq!(recv.byte_len, 4);
//! // The received buffer becomes `Bytes` without a copy.
//! let bytes = rbuf.deregister().unwrap().into_bytes();
//! assert_eq!(&bytes[..4], b"ping");
//! # }
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod capture;
pub mod cq;
pub mod crc;
pub mod device;
pub mod engine;
pub mod handshake;
pub mod mem;
pub mod wire;

/// The provider interface this crate implements (re-exported so users and
/// fuzz targets can name `Access`, `SendWr`, … without another dependency).
pub use rdma_verbs;

pub use cq::Cq;
pub use device::{Config, ConnRequest, Device, Listener, Mr, Pd, Qp, DEFAULT_SEND_BUFFER};
pub use handshake::MpaConfig;
