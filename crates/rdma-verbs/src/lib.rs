//! A provider-neutral, verbs-shaped RDMA interface.
//!
//! The RPC-over-RDMA transport is written against these traits; providers
//! (the software iWARP RNIC in crate `iwarp`, later libibverbs/rdma-cm through
//! `sideway`, a shared-memory or in-memory test fabric) implement them.
//!
//! # Shape
//!
//! The interface is **generic with associated types**, not object-safe: the
//! asynchronous methods return `impl Future + Send` (return-position `impl
//! Trait` in traits), which keeps the data path free of boxing and dynamic
//! dispatch. A consumer is written as `fn run<D: Device>(dev: D)`. The
//! objects are:
//!
//! | verbs / rdma-cm | here |
//! |---|---|
//! | `ibv_context` + `rdma_cm` | [`Device`] (cheap `Clone` handle) |
//! | `ibv_pd` | [`ProtectionDomain`] |
//! | `ibv_mr` (`ibv_reg_mr`, FRWR `ib_alloc_mr` + `IB_WR_REG_MR`) | [`MemoryRegion`], [`ProtectionDomain::register`], [`ProtectionDomain::alloc_mr`] + [`QueuePair::post_fast_reg`] |
//! | `ibv_cq` + completion channel | [`CompletionQueue`] (non-blocking [`CompletionQueue::poll`], async [`CompletionQueue::next`]) |
//! | `ibv_qp` | [`QueuePair`] (`post_send`, `post_recv`, their `_batch` forms for a list of work requests, events) |
//! | `rdma_listen` / `CONNECT_REQUEST` / `rdma_accept` / `rdma_reject` | [`Device::listen`], [`Listener::next_request`], [`ConnectRequest::accept`], [`ConnectRequest::reject`] |
//! | `rdma_connect` | [`Device::connect`] |
//! | `DISCONNECTED` / error events | [`QueuePair::next_event`] |
//!
//! # Memory ownership
//!
//! Memory a peer may write is owned by the registration, never borrowed: the
//! caller moves an [`MrBuffer`] (a `BytesMut`, a `Vec<u8>`, or for regions no
//! one writes an immutable `Bytes`) into [`ProtectionDomain::register`] and
//! gets it back from [`MemoryRegion::deregister`] or, after a local or remote
//! invalidation, [`MemoryRegion::take_buffer`]. So no safe code can alias bytes
//! a peer is writing, and a completed receive or RDMA Read sink can be turned
//! into `Bytes` without copying ([`MrBuffer::into_bytes`]).
//!
//! Keys and offsets: [`Sge`] offsets and [`RemoteAddr`] tagged offsets are
//! zero-based within their region. lkey and rkey may be equal (iWARP STags).
//!
//! # Strictness
//!
//! Providers behave like hardware: a Send arriving with no posted receive, or
//! larger than the posted receive, is a fatal connection error; a bad remote
//! key terminates the connection; failed work requests complete with an error
//! status and everything still outstanding is flushed
//! ([`WcStatus::WrFlushError`]).
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod access;
pub mod buffer;
pub mod cm;
pub mod error;
pub mod idhash;
pub mod wc;
pub mod wr;

pub use access::Access;
pub use buffer::MrBuffer;
pub use cm::{CmEvent, ConnError, ConnInfo, ConnParam, QpState, MAX_PRIVATE_DATA_IWARP};
pub use error::{PostBatchError, RegisterError, VerbsError};
pub use wc::{WcOpcode, WcStatus, WorkCompletion};
pub use wr::{FastRegWr, RecvWr, RemoteAddr, SendOp, SendWr, Sge};

use std::future::Future;
use std::net::SocketAddr;

/// Sizes of a new queue pair and the completion queues it reports to.
#[derive(Clone, Debug)]
pub struct QpInit<Cq> {
    /// Completion queue for send-queue work requests.
    pub send_cq: Cq,
    /// Completion queue for receives (may be the same CQ).
    pub recv_cq: Cq,
    /// Maximum outstanding send work requests.
    pub max_send_wr: u32,
    /// Maximum outstanding receive work requests.
    pub max_recv_wr: u32,
    /// Maximum SGEs per send work request.
    pub max_send_sge: u32,
    /// Maximum SGEs per receive work request.
    pub max_recv_sge: u32,
}

impl<Cq: Clone> QpInit<Cq> {
    /// One CQ for both queues and common defaults (128 WRs, 16 SGEs each).
    pub fn with_cq(cq: Cq) -> Self {
        QpInit {
            send_cq: cq.clone(),
            recv_cq: cq,
            max_send_wr: 128,
            max_recv_wr: 128,
            max_send_sge: 16,
            max_recv_sge: 16,
        }
    }
}

/// An RDMA device with its connection manager: the provider's entry point.
pub trait Device: Clone + Send + Sync + 'static {
    /// Protection domain type.
    type Pd: ProtectionDomain<Mr = Self::Mr>;
    /// Memory region type.
    type Mr: MemoryRegion;
    /// Completion queue type.
    type Cq: CompletionQueue;
    /// Queue pair type.
    type Qp: QueuePair<Mr = Self::Mr>;
    /// Listener type.
    type Listener: Listener<Qp = Self::Qp>;

    /// Provider name (e.g. `"iwarp-soft"`).
    fn name(&self) -> &str;

    /// Largest consumer private data accepted by connect/accept/reject.
    fn max_private_data(&self) -> usize;

    /// Allocates a protection domain.
    fn alloc_pd(&self) -> Result<Self::Pd, VerbsError>;

    /// Creates a completion queue holding up to `capacity` completions.
    fn create_cq(&self, capacity: usize) -> Result<Self::Cq, VerbsError>;

    /// Creates an unconnected queue pair in `pd`. Receives may be posted
    /// right away; sends only once connected.
    fn create_qp(&self, pd: &Self::Pd, init: QpInit<Self::Cq>) -> Result<Self::Qp, VerbsError>;

    /// Connects `qp` (active side) to a listener at `addr`. Resolves once
    /// the connection is established (or rejected: [`VerbsError::Rejected`]).
    fn connect(
        &self,
        qp: &Self::Qp,
        addr: SocketAddr,
        param: ConnParam,
    ) -> impl Future<Output = Result<ConnInfo, VerbsError>> + Send;

    /// Listens for connection requests on `addr` (port 0 picks one).
    fn listen(
        &self,
        addr: SocketAddr,
    ) -> impl Future<Output = Result<Self::Listener, VerbsError>> + Send;
}

/// A passive endpoint producing connection requests.
pub trait Listener: Send + Sync + 'static {
    /// Queue pair type the requests are accepted onto.
    type Qp;
    /// Connection request type.
    type Request: ConnectRequest<Qp = Self::Qp>;

    /// The bound address.
    fn local_addr(&self) -> SocketAddr;

    /// Waits for the next connection request (`RDMA_CM_EVENT_CONNECT_REQUEST`).
    fn next_request(&self) -> impl Future<Output = Result<Self::Request, VerbsError>> + Send;
}

/// An incoming connection request, to accept onto a QP or reject.
pub trait ConnectRequest: Send + 'static {
    /// Queue pair type.
    type Qp;

    /// The requester's address.
    fn peer_addr(&self) -> SocketAddr;
    /// The requester's private data.
    fn private_data(&self) -> &[u8];
    /// The requester's ORD (RDMA Reads it wants outstanding toward us).
    fn initiator_depth(&self) -> u16;
    /// The requester's IRD (RDMA Reads it accepts from us).
    fn responder_resources(&self) -> u16;

    /// Accepts onto `qp` (created beforehand, receives already posted).
    /// ORD/IRD in `param` are limits; the negotiated values are returned.
    fn accept(
        self,
        qp: &Self::Qp,
        param: ConnParam,
    ) -> impl Future<Output = Result<ConnInfo, VerbsError>> + Send;

    /// Rejects with private data.
    fn reject(self, private_data: &[u8]) -> impl Future<Output = Result<(), VerbsError>> + Send;
}

/// A protection domain: registrations and queue pairs in different domains
/// cannot reach each other.
pub trait ProtectionDomain: Send + Sync + 'static {
    /// Memory region type.
    type Mr;

    /// Registers `buffer` with `access` rights (like `ibv_reg_mr`): valid at
    /// once, with fresh unpredictable keys. On failure the buffer is returned.
    fn register(&self, buffer: MrBuffer, access: Access) -> Result<Self::Mr, RegisterError>;

    /// Allocates an empty, invalid region for fast registration of up to
    /// `max_len` bytes (like `ib_alloc_mr`); bind a buffer with
    /// [`QueuePair::post_fast_reg`].
    fn alloc_mr(&self, max_len: usize) -> Result<Self::Mr, VerbsError>;
}

/// A memory region: it owns its buffer while registered.
pub trait MemoryRegion: Send + Sync + 'static {
    /// Local key, used in [`Sge::lkey`].
    fn lkey(&self) -> u32;
    /// Remote key (STag) to advertise to the peer.
    fn rkey(&self) -> u32;
    /// Registered length in bytes (0 for an empty fast-registration region).
    fn len(&self) -> usize;
    /// True if the region holds no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Granted rights.
    fn access(&self) -> Access;
    /// True while the keys are valid (not invalidated locally or remotely).
    fn is_valid(&self) -> bool;
    /// After an invalidation (local or by the peer's Send with Invalidate),
    /// takes the buffer out; the region stays allocated for a new fast
    /// registration. Fails with [`VerbsError::RegionBusy`] while valid.
    fn take_buffer(&self) -> Result<MrBuffer, VerbsError>;
    /// Invalidates (if still valid) and deregisters, returning the buffer.
    /// Work requests that still name the region fail with a protection error.
    fn deregister(self) -> Option<MrBuffer>;

    /// Copies `dst.len()` bytes from byte `offset` of the registered buffer
    /// into `dst`, leaving the registration (and its keys) as it is: the
    /// local CPU reading registered memory, as a verbs consumer reads a
    /// receive buffer once its receive has completed and then posts the
    /// same buffer again (no deregistration and registration per message).
    ///
    /// The caller must not read memory that a posted work request or the
    /// peer may be writing at the same time (as with real memory, the bytes
    /// would be torn). Fails with [`VerbsError::InvalidArgument`] when the
    /// range is outside the buffer, [`VerbsError::RegionBusy`] when the
    /// region holds no buffer.
    ///
    /// Optional: the default implementation fails with
    /// [`VerbsError::InvalidState`]; a consumer then takes the buffer out
    /// with [`deregister`](Self::deregister) instead.
    fn read_at(&self, offset: usize, dst: &mut [u8]) -> Result<(), VerbsError> {
        let _ = (offset, dst);
        Err(VerbsError::InvalidState(
            "this provider cannot read registered memory in place",
        ))
    }

    /// Copies `src` into the registered buffer at byte `offset`, leaving the
    /// registration as it is: the local CPU writing registered memory, as a
    /// verbs consumer fills a pre-registered send buffer before posting it.
    ///
    /// The caller must not write memory that a posted work request may
    /// still gather from, or that the peer may access. Fails with
    /// [`VerbsError::InvalidAccess`] for an immutable ([`MrBuffer::Frozen`])
    /// buffer, [`VerbsError::InvalidArgument`] when the range is outside the
    /// buffer, [`VerbsError::RegionBusy`] when the region holds no buffer.
    ///
    /// Optional: the default implementation fails with
    /// [`VerbsError::InvalidState`]; a consumer then registers each message
    /// on its own.
    fn write_at(&self, offset: usize, src: &[u8]) -> Result<(), VerbsError> {
        let _ = (offset, src);
        Err(VerbsError::InvalidState(
            "this provider cannot write registered memory in place",
        ))
    }
}

/// A completion queue. Cloning yields another handle to the same queue.
pub trait CompletionQueue: Clone + Send + Sync + 'static {
    /// Non-blocking: moves up to `max` completions into `out`, returns how many.
    fn poll(&self, out: &mut Vec<WorkCompletion>, max: usize) -> usize;

    /// Non-blocking: the oldest completion, if any.
    fn poll_one(&self) -> Option<WorkCompletion>;

    /// Resolves when the queue is (probably) non-empty: the async
    /// notification (`ibv_req_notify_cq` + completion channel). Spurious
    /// wake-ups are allowed; poll afterwards.
    fn wait(&self) -> impl Future<Output = ()> + Send;

    /// Waits for and returns the next completion.
    fn next(&self) -> impl Future<Output = WorkCompletion> + Send {
        async move {
            loop {
                if let Some(wc) = self.poll_one() {
                    return wc;
                }
                self.wait().await;
            }
        }
    }
}

/// A reliable-connected queue pair. Cloning yields another handle.
pub trait QueuePair: Clone + Send + Sync + 'static {
    /// Memory region type (for fast registration).
    type Mr;

    /// The QP number (reported in completions).
    fn qp_num(&self) -> u32;
    /// Current state.
    fn state(&self) -> QpState;
    /// Posts a send-queue work request (requires [`QpState::Connected`]).
    /// Errors in the request itself that can be seen at once are returned;
    /// others complete with an error status.
    fn post_send(&self, wr: SendWr) -> Result<(), VerbsError>;
    /// Posts a fast registration binding `wr.buffer` to `mr` with a new key,
    /// ordered in the send queue; returns the new rkey (= lkey) at once.
    /// `mr` must be empty (allocated, or invalidated and its buffer taken).
    fn post_fast_reg(&self, mr: &Self::Mr, wr: FastRegWr) -> Result<u32, RegisterError>;
    /// Posts a receive (allowed before the connection is established).
    fn post_recv(&self, wr: RecvWr) -> Result<(), VerbsError>;
    /// Posts several send-queue work requests in order with one "doorbell",
    /// like `ibv_post_send` with a linked list of work requests: a provider
    /// may then transmit them together (one system call) rather than one
    /// by one. On failure the work requests before the failing one are
    /// posted, it and the later ones are not ([`PostBatchError::posted`]).
    ///
    /// The default implementation calls [`post_send`](Self::post_send) for
    /// each in turn.
    fn post_send_batch(&self, wrs: Vec<SendWr>) -> Result<(), PostBatchError> {
        for (posted, wr) in wrs.into_iter().enumerate() {
            self.post_send(wr)
                .map_err(|error| PostBatchError { posted, error })?;
        }
        Ok(())
    }
    /// Posts several receives in order (`ibv_post_recv` with a list), with
    /// the same failure rule as [`post_send_batch`](Self::post_send_batch).
    ///
    /// The default implementation calls [`post_recv`](Self::post_recv) for
    /// each in turn.
    fn post_recv_batch(&self, wrs: Vec<RecvWr>) -> Result<(), PostBatchError> {
        for (posted, wr) in wrs.into_iter().enumerate() {
            self.post_recv(wr)
                .map_err(|error| PostBatchError { posted, error })?;
        }
        Ok(())
    }
    /// The peer's address once connected.
    fn peer_addr(&self) -> Option<SocketAddr>;
    /// Our address once connected.
    fn local_addr(&self) -> Option<SocketAddr>;
    /// Starts an orderly disconnect; outstanding work is flushed.
    fn disconnect(&self);
    /// Waits for the next connection event (disconnect or error).
    fn next_event(&self) -> impl Future<Output = CmEvent> + Send;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A queue pair that records what is posted and refuses the work
    /// request with id `refuse`.
    #[derive(Clone, Default)]
    struct RecordingQp {
        sent: Arc<Mutex<Vec<u64>>>,
        recvd: Arc<Mutex<Vec<u64>>>,
        refuse: u64,
    }

    /// A region that only has the trait's default methods.
    struct PlainMr;

    impl MemoryRegion for PlainMr {
        fn lkey(&self) -> u32 {
            1
        }
        fn rkey(&self) -> u32 {
            1
        }
        fn len(&self) -> usize {
            8
        }
        fn access(&self) -> Access {
            Access::LOCAL_WRITE
        }
        fn is_valid(&self) -> bool {
            true
        }
        fn take_buffer(&self) -> Result<MrBuffer, VerbsError> {
            Err(VerbsError::RegionBusy("valid"))
        }
        fn deregister(self) -> Option<MrBuffer> {
            None
        }
    }

    impl QueuePair for RecordingQp {
        type Mr = PlainMr;
        fn qp_num(&self) -> u32 {
            1
        }
        fn state(&self) -> QpState {
            QpState::Connected
        }
        fn post_send(&self, wr: SendWr) -> Result<(), VerbsError> {
            if wr.wr_id == self.refuse {
                return Err(VerbsError::QueueFull("send queue"));
            }
            self.sent.lock().unwrap().push(wr.wr_id);
            Ok(())
        }
        fn post_fast_reg(&self, _mr: &PlainMr, wr: FastRegWr) -> Result<u32, RegisterError> {
            Err(RegisterError {
                error: VerbsError::InvalidState("not here"),
                buffer: wr.buffer,
            })
        }
        fn post_recv(&self, wr: RecvWr) -> Result<(), VerbsError> {
            if wr.wr_id == self.refuse {
                return Err(VerbsError::QueueFull("receive queue"));
            }
            self.recvd.lock().unwrap().push(wr.wr_id);
            Ok(())
        }
        fn peer_addr(&self) -> Option<SocketAddr> {
            None
        }
        fn local_addr(&self) -> Option<SocketAddr> {
            None
        }
        fn disconnect(&self) {}
        async fn next_event(&self) -> CmEvent {
            std::future::pending().await
        }
    }

    fn sends(ids: &[u64]) -> Vec<SendWr> {
        ids.iter().map(|&i| SendWr::send(i, Vec::new())).collect()
    }

    #[test]
    fn default_send_batch_posts_in_order() {
        let qp = RecordingQp::default();
        qp.post_send_batch(sends(&[1, 2, 3])).unwrap();
        assert_eq!(*qp.sent.lock().unwrap(), vec![1, 2, 3]);
    }

    #[test]
    fn default_send_batch_stops_at_the_refused_one() {
        let qp = RecordingQp {
            refuse: 3,
            ..Default::default()
        };
        let e = qp.post_send_batch(sends(&[1, 2, 3, 4])).unwrap_err();
        assert_eq!(e.posted, 2);
        assert_eq!(e.error, VerbsError::QueueFull("send queue"));
        assert_eq!(*qp.sent.lock().unwrap(), vec![1, 2]);
    }

    #[test]
    fn default_recv_batch_posts_in_order_and_stops_at_the_refused_one() {
        let qp = RecordingQp {
            refuse: 7,
            ..Default::default()
        };
        qp.post_recv_batch(vec![RecvWr::new(5, Vec::new()), RecvWr::new(6, Vec::new())])
            .unwrap();
        let e = qp
            .post_recv_batch(vec![RecvWr::new(7, Vec::new()), RecvWr::new(8, Vec::new())])
            .unwrap_err();
        assert_eq!(e.posted, 0);
        assert_eq!(*qp.recvd.lock().unwrap(), vec![5, 6]);
        assert!(qp.post_send_batch(Vec::new()).is_ok());
    }

    #[test]
    fn default_read_and_write_at_are_refused() {
        let mr = PlainMr;
        let mut b = [0u8; 4];
        assert!(matches!(
            mr.read_at(0, &mut b),
            Err(VerbsError::InvalidState(_))
        ));
        assert!(matches!(
            mr.write_at(0, &b),
            Err(VerbsError::InvalidState(_))
        ));
    }
}
