//! The Responder: [`RdmaServer`] serves an [`oncrpc::Dispatcher`] over
//! RPC-over-RDMA.
//!
//! Per connection: RFC 8797 private data is exchanged on accept (a peer
//! sending none is assumed to use 1024-byte thresholds); `credits + 4`
//! receives of the advertised size stay posted, so the grant (the configured
//! credits, never 0) is always backed; a requester exceeding it has its
//! connection closed.
//!
//! Per call: [`check_call`] decides (deliver, ERR_VERS, ERR_CHUNK,
//! GARBAGE_ARGS, discard); Read chunks (Position-Zero first, then the
//! argument chunks) are pulled with RDMA Read, at most ORD in flight; the
//! call is dispatched with DDP-eligible arguments as `Ddp` pieces that are
//! the RDMA Read sink buffers themselves; [`plan_reply`] decides Write chunk
//! placement and Short or Long Reply; RDMA Writes then one Send (with
//! Invalidate when RFC 8797 §6 allows it) complete the call.
//!
//! A connection that fails or misbehaves is torn down alone.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use oncrpc::{AcceptStat, DispatchOutcome, Dispatcher, Payload, ReplyHeader};
use rdma_verbs::{
    ConnParam, ConnectRequest, Device, Listener, MemoryRegion, QpState, QueuePair, RemoteAddr,
    SendOp, SendWr, Sge, VerbsError,
};
use rpcrdma_proto::classify::Side;
use rpcrdma_proto::counters::Counters;
use rpcrdma_proto::credits::ResponderCredits;
use rpcrdma_proto::marshal::CallKind;
use rpcrdma_proto::private_data::{Negotiated, PrivateData};
use rpcrdma_proto::reassemble::CallPiece;
use rpcrdma_proto::reply::{plan_reply, ReplyPlan};
use rpcrdma_proto::respond::{
    check_reads, check_send_queue_share, err_chunk, garbage_args, ErrChunk, NOT_A_CALL,
};
use rpcrdma_proto::stream::{gather_with, Span};
use rpcrdma_proto::validate::{check_call, Action, CallVerdict, ReceivedCall};
use rpcrdma_proto::wire::{ChunkLists, HeaderRepr};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinHandle;

use crate::config::RdmaConfig;
use crate::endpoint::{lock, Endpoint, RecvSink, RECV_MARGIN};
use crate::error::TransportError;
use crate::ulb::Bindings;

mod reads;
use reads::Pulled;

/// Responder statistics (relaxed atomics).
#[derive(Debug, Default)]
pub struct ServerStats {
    /// Protocol counters (calls by kind, replies, chunks, errors).
    pub counters: Counters,
    /// Largest number of calls in process on one connection ever observed
    /// (credits in use). Never exceeds the grant unless a requester
    /// overran it, which closes its connection and counts in
    /// [`credit_overruns`](Self::credit_overruns).
    pub max_outstanding: AtomicU64,
    /// Requesters that exceeded the grant (their connections were closed).
    pub credit_overruns: AtomicU64,
    /// Connections accepted.
    pub connections_accepted: AtomicU64,
    /// Connections ended (any reason).
    pub connections_closed: AtomicU64,
    /// Connection requests that failed during accept.
    pub accept_errors: AtomicU64,
    /// Connection requests rejected because
    /// [`RdmaConfig::max_connections`] were open.
    pub connections_rejected: AtomicU64,
    /// Waits for RDMA Reads given up because their connection's Reads
    /// made no progress for [`RdmaConfig::read_timeout`] (the connection
    /// is then closed; several calls of one connection may each count).
    pub read_timeouts: AtomicU64,
    /// Calls answered ERR_CHUNK because the server-wide read budget had no
    /// room for them within [`RdmaConfig::read_budget_wait`] (their
    /// connections stay open).
    pub read_budget_timeouts: AtomicU64,
    /// Connections closed because they were idle for
    /// [`RdmaConfig::idle_timeout`].
    pub idle_closes: AtomicU64,
    /// Calls whose handling panicked (their connections were closed).
    pub call_panics: AtomicU64,
    /// Replies sent with Send with Invalidate.
    pub send_with_invalidate: AtomicU64,
    /// Calls handed to the dispatcher.
    pub dispatched: AtomicU64,
    /// RDMA Read work requests posted.
    pub rdma_reads: AtomicU64,
    /// RDMA Write work requests posted.
    pub rdma_writes: AtomicU64,
}

struct SrvShared<D: Device> {
    dev: D,
    config: RdmaConfig,
    bindings: Bindings,
    dispatcher: Dispatcher,
    stats: Arc<ServerStats>,
    shutdown: watch::Sender<bool>,
    conns: Mutex<HashMap<u64, Arc<SConn<D>>>>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    next_conn: AtomicU64,
    /// One permit per open connection (or connection being set up).
    conn_slots: Arc<Semaphore>,
    /// Read-sink bytes all connections may hold, in [`BUDGET_UNIT`]s.
    read_budget: Arc<Semaphore>,
    read_budget_units: u64,
    /// RDMA Read sinks handed back after their call ended, for reuse by any
    /// connection (no allocation, page faults or zeroing on the next call).
    sinks: Mutex<Vec<BytesMut>>,
}

/// Read sinks kept for reuse.
const SINK_POOL: usize = 32;
/// Smallest sink worth keeping.
const SINK_MIN: usize = 64 << 10;

/// Units of the read-sink budget.
const BUDGET_UNIT: u64 = 4096;

struct SConn<D: Device> {
    ep: Endpoint<D>,
    neg: Negotiated,
    ord: Arc<Semaphore>,
    /// The negotiated ORD: RDMA Reads this side may have outstanding (0:
    /// none may be posted at all).
    ord_depth: u32,
    /// Read-sink bytes this connection may hold, in [`BUDGET_UNIT`]s.
    read_budget: Arc<Semaphore>,
    read_budget_units: u64,
    /// The grant and the calls in process (admitted, not yet answered or
    /// dropped).
    credits: Mutex<ResponderCredits>,
    /// Messages received on this connection (see
    /// [`RdmaConfig::idle_timeout`]).
    received: AtomicU64,
    srv: Arc<SrvShared<D>>,
    peer: SocketAddr,
    /// When an RDMA Read was last posted or completed on this connection
    /// (see [`RdmaConfig::read_timeout`]).
    read_progress: Arc<Mutex<tokio::time::Instant>>,
    /// Calls of this connection that got a task of their own (see
    /// [`run_calls`]): aborted when the connection ends.
    tasks: Mutex<Vec<tokio::task::AbortHandle>>,
}

/// An RPC-over-RDMA server (the Responder). Cheap to clone.
///
/// Dropping the last handle (the last clone) without
/// [`shutdown`](Self::shutdown) starts the same shutdown without waiting
/// for it, like dropping a `tokio::net::TcpListener`: the server stops
/// accepting at once, lets in-flight calls finish within
/// [`RdmaConfig::shutdown_grace`], then closes every connection. The server's own tasks do not count as handles.
pub struct RdmaServer<D: Device> {
    shared: Arc<SrvShared<D>>,
    local_addr: SocketAddr,
    accept: Arc<Mutex<Option<JoinHandle<()>>>>,
    /// Shared by the handles only: the last one dropped stops the server.
    _handle: Arc<StopOnDrop>,
}

/// Raises the shutdown flag when dropped (see [`RdmaServer`]).
struct StopOnDrop(watch::Sender<bool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        // Never blocks; the accept loop and the connections see the flag.
        self.0.send_replace(true);
    }
}

impl<D: Device> Clone for RdmaServer<D> {
    fn clone(&self) -> Self {
        RdmaServer {
            shared: self.shared.clone(),
            local_addr: self.local_addr,
            accept: self.accept.clone(),
            _handle: self._handle.clone(),
        }
    }
}

impl<D: Device> std::fmt::Debug for RdmaServer<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaServer")
            .field("local_addr", &self.local_addr)
            .finish_non_exhaustive()
    }
}

impl<D: Device> RdmaServer<D> {
    /// Listens on `addr` and serves `dispatcher` on every connection, in
    /// tasks of the current tokio runtime.
    pub async fn bind(
        dev: D,
        addr: SocketAddr,
        dispatcher: Dispatcher,
        config: RdmaConfig,
        bindings: Bindings,
    ) -> Result<Self, TransportError> {
        let listener = dev.listen(addr).await?;
        let local_addr = listener.local_addr();
        let config_max_connections = config.max_connections.clamp(1, Semaphore::MAX_PERMITS);
        let read_units = (config.max_read_bytes as u64 / BUDGET_UNIT)
            .clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize) as u64);
        let shared = Arc::new(SrvShared {
            dev,
            config,
            bindings,
            dispatcher,
            stats: Arc::new(ServerStats::default()),
            shutdown: watch::channel(false).0,
            conns: Mutex::new(HashMap::new()),
            tasks: Mutex::new(Vec::new()),
            next_conn: AtomicU64::new(1),
            conn_slots: Arc::new(Semaphore::new(config_max_connections)),
            read_budget: Arc::new(Semaphore::new(read_units as usize)),
            read_budget_units: read_units,
            sinks: Mutex::new(Vec::new()),
        });
        let sh = shared.clone();
        let accept = tokio::spawn(async move { sh.accept_loop(listener).await });
        tracing::info!(%local_addr, "rpcrdma server listening");
        let handle = Arc::new(StopOnDrop(shared.shutdown.clone()));
        Ok(RdmaServer {
            shared,
            local_addr,
            accept: Arc::new(Mutex::new(Some(accept))),
            _handle: handle,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Statistics and counters.
    pub fn stats(&self) -> Arc<ServerStats> {
        self.shared.stats.clone()
    }

    /// Connections currently open.
    pub fn connections(&self) -> usize {
        lock(&self.shared.conns).len()
    }

    /// Clean shutdown: stop accepting, let in-flight calls finish (up to
    /// [`RdmaConfig::shutdown_grace`]), then close every connection and wait
    /// for the connection tasks to end.
    pub async fn shutdown(&self) {
        self.shared.shutdown.send_replace(true);
        let accept = lock(&self.accept).take();
        if let Some(a) = accept {
            let _ = a.await;
        }
        let tasks: Vec<JoinHandle<()>> = lock(&self.shared.tasks).drain(..).collect();
        for t in tasks {
            let _ = t.await;
        }
    }

    /// Closes every open connection abruptly (fault injection for tests:
    /// requesters see the connection fail and reconnect).
    pub fn drop_connections(&self) {
        let conns: Vec<Arc<SConn<D>>> = lock(&self.shared.conns).values().cloned().collect();
        for c in conns {
            c.ep.qp.disconnect();
        }
    }
}

async fn wait_flag(mut rx: watch::Receiver<bool>) {
    loop {
        if *rx.borrow_and_update() {
            return;
        }
        if rx.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

impl<D: Device> SrvShared<D> {
    async fn accept_loop(self: Arc<Self>, listener: D::Listener) {
        let stop = wait_flag(self.shutdown.subscribe());
        tokio::pin!(stop);
        loop {
            tokio::select! {
                _ = &mut stop => break,
                r = listener.next_request() => match r {
                    Ok(req) => {
                        let Ok(permit) = self.conn_slots.clone().try_acquire_owned() else {
                            // Every connection slot is taken: reject, do not
                            // let connections grow without bound.
                            self.stats.connections_rejected.fetch_add(1, Relaxed);
                            tracing::warn!(peer = %req.peer_addr(), "max_connections reached; rejecting");
                            tokio::spawn(async move {
                                let _ = req.reject(&[]).await;
                            });
                            continue;
                        };
                        let sh = self.clone();
                        let h = tokio::spawn(async move {
                            sh.serve(req).await;
                            drop(permit);
                        });
                        let mut t = lock(&self.tasks);
                        t.retain(|h| !h.is_finished());
                        t.push(h);
                    }
                    Err(e) => {
                        self.stats.accept_errors.fetch_add(1, Relaxed);
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    }
                }
            }
        }
        drop(listener);
    }

    async fn serve(self: Arc<Self>, req: <D::Listener as Listener>::Request) {
        let peer = req.peer_addr();
        let conn = match self.accept(req).await {
            Ok(c) => c,
            Err(e) => {
                self.stats.accept_errors.fetch_add(1, Relaxed);
                tracing::warn!(%peer, error = %e, "connection setup failed");
                return;
            }
        };
        let id = self.next_conn.fetch_add(1, Relaxed);
        lock(&self.conns).insert(id, conn.clone());
        self.stats.connections_accepted.fetch_add(1, Relaxed);
        tracing::debug!(%peer, neg = ?conn.neg, "rpcrdma connection accepted");
        let c2 = conn.clone();
        let shutdown = {
            let c = conn.clone();
            let rx = self.shutdown.subscribe();
            async move {
                wait_flag(rx).await;
                // Let in-flight calls finish, within the grace period. A
                // grace period too long to represent (Duration::MAX) means
                // no deadline, not a panic.
                let deadline = Instant::now().checked_add(c.srv.config.shutdown_grace);
                while c.in_process() > 0 && deadline.is_none_or(|d| Instant::now() < d) {
                    tokio::time::sleep(std::time::Duration::from_millis(2)).await;
                }
            }
        };
        let idle = conn.clone().idle();
        let stop = async move {
            tokio::select! {
                _ = shutdown => {}
                _ = idle => {}
            }
        };
        let calls = CallBatch {
            conn: c2,
            admitted: Vec::new(),
        };
        conn.ep.run(calls, stop).await;
        conn.ep.qp.disconnect();
        conn.ep.fail_all();
        // Calls still running can no longer be answered: stop them, so that
        // what they hold (the connection, its socket and buffers, read
        // budget) goes with the connection and its slot.
        for h in lock(&conn.tasks).drain(..) {
            h.abort();
        }
        lock(&self.conns).remove(&id);
        self.stats.connections_closed.fetch_add(1, Relaxed);
        tracing::debug!(%peer, "rpcrdma connection closed");
    }

    async fn accept(
        self: &Arc<Self>,
        req: <D::Listener as Listener>::Request,
    ) -> Result<Arc<SConn<D>>, TransportError> {
        let cfg = &self.config;
        // RFC 8797 §8.2: no (valid) private data means 1024/1024.
        let theirs = PrivateData::from_received(req.private_data());
        let posted = cfg.effective_credits() + RECV_MARGIN;
        let ep = Endpoint::new(&self.dev, cfg, posted)?;
        let encoded = cfg.private_data().encode();
        let param = ConnParam::new(Bytes::copy_from_slice(&encoded), cfg.ord, cfg.ird);
        let peer = req.peer_addr();
        let info = tokio::time::timeout(cfg.connect_timeout, req.accept(&ep.qp, param))
            .await
            .map_err(|_| VerbsError::Timeout("accept"))??;
        let ours = PrivateData::find(&encoded).unwrap_or_default();
        let neg = Negotiated::server(&ours, &theirs);
        let grant = cfg.effective_credits();
        let units =
            (cfg.max_read_bytes_per_connection as u64 / BUDGET_UNIT).clamp(1, u32::MAX as u64);
        Ok(Arc::new(SConn {
            ep,
            neg,
            ord: Arc::new(Semaphore::new(info.initiator_depth.max(1) as usize)),
            ord_depth: u32::from(info.initiator_depth),
            read_budget: Arc::new(Semaphore::new(units as usize)),
            read_budget_units: units,
            // Every receive of the endpoint backs the grant: the endpoint
            // posts a receive again as soon as its message is copied out.
            credits: Mutex::new(ResponderCredits::new(grant, posted)),
            received: AtomicU64::new(0),
            srv: self.clone(),
            peer,
            read_progress: Arc::new(Mutex::new(tokio::time::Instant::now())),
            tasks: Mutex::new(Vec::new()),
        }))
    }
}

/// A call's future that turns a panic into closing its connection.
struct CatchPanic<D: Device> {
    inner: Pin<Box<dyn Future<Output = ()> + Send>>,
    conn: Arc<SConn<D>>,
}

impl<D: Device> Future for CatchPanic<D> {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        let this = &mut *self;
        let inner = &mut this.inner;
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| inner.as_mut().poll(cx))) {
            Ok(p) => p,
            Err(_) => {
                let c = &this.conn;
                c.srv.stats.call_panics.fetch_add(1, Relaxed);
                tracing::error!(peer = %c.peer, "a call panicked; closing its connection");
                c.ep.qp.disconnect();
                std::task::Poll::Ready(())
            }
        }
    }
}

/// Runs the calls admitted by the completion loop.
///
/// Most calls (no Read chunk, a synchronous procedure) finish in one poll
/// of their future: that poll runs right here in the completion loop (no
/// task hop, no spawn), and only calls that wait (RDMA Reads, slow
/// procedures) get a task of their own. The replies of the calls finished
/// here are posted together ([`Endpoint::batch_sends`]). (Measured: splitting the calls of
/// one CQ poll over two spawned tasks, so that two workers share them, gave
/// fewer NULL calls/s at depth 32 than running them all here.)
struct CallBatch<D: Device> {
    conn: Arc<SConn<D>>,
    admitted: Vec<CatchPanic<D>>,
}

impl<D: Device> RecvSink for CallBatch<D> {
    fn on_recv(&mut self, wc: rdma_verbs::WorkCompletion) {
        if let Some(call) = self.conn.on_recv(wc) {
            self.admitted.push(call);
        }
    }

    fn end_of_batch(&mut self) {
        if self.admitted.is_empty() {
            return;
        }
        let calls = &mut self.admitted;
        // The replies of the calls that finish here go out as one batch.
        self.conn.ep.batch_sends(|| run_calls(calls.drain(..)));
    }
}

/// Polls each call once; those not finished get their own task. A future
/// may be polled with different wakers: the task's poll registers the real
/// one.
fn run_calls<D: Device>(calls: impl Iterator<Item = CatchPanic<D>>) {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    for mut call in calls {
        if Pin::new(&mut call).poll(&mut cx).is_pending() {
            let conn = call.conn.clone();
            let h = tokio::spawn(call).abort_handle();
            let mut t = lock(&conn.tasks);
            t.retain(|h| !h.is_finished());
            t.push(h);
        }
    }
}

/// The call's unreduced Payload stream, with DDP-eligible arguments where
/// they were placed: inline pieces of the reduced stream and the data of
/// each Read chunk (RFC 8166 §3.4.5), zero-copy.
fn call_args(pieces: &[CallPiece], reduced: &Bytes, data: &[Bytes]) -> Payload {
    let mut args = Payload::new();
    for piece in pieces {
        match *piece {
            CallPiece::Inline { offset, len } => {
                let s = (offset as usize).min(reduced.len());
                let e = (offset.saturating_add(len) as usize).min(reduced.len());
                args.push_xdr(reduced.slice(s..e));
            }
            CallPiece::Chunk { chunk, len } => {
                let d = data.get(chunk).cloned().unwrap_or_default();
                let l = (len as usize).min(d.len());
                args.push_ddp(d.slice(..l));
            }
        }
    }
    args
}

impl<D: Device> SConn<D> {
    /// Ends when the connection has been idle (no message received, no
    /// call in process, no reply still going out) for
    /// [`RdmaConfig::idle_timeout`]; never when that
    /// is `None`. One timer per connection, a quarter of the timeout long,
    /// and a counter bumped per receive: nothing per call.
    async fn idle(self: Arc<Self>) {
        let Some(limit) = self.srv.config.idle_timeout else {
            return std::future::pending().await;
        };
        let period = (limit / 4).max(std::time::Duration::from_millis(1));
        let mut seen = self.received.load(Relaxed);
        let mut idle_since = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(period).await;
            let now_seen = self.received.load(Relaxed);
            // A reply still going out (its work requests not completed)
            // is activity too: a long reply over a slow path is not
            // idleness.
            if now_seen != seen || self.in_process() > 0 || self.ep.sends_pending() {
                seen = now_seen;
                idle_since = tokio::time::Instant::now();
            } else if idle_since.elapsed() >= limit {
                self.srv.stats.idle_closes.fetch_add(1, Relaxed);
                tracing::debug!(peer = %self.peer, "connection idle for {limit:?}; closing");
                return;
            }
        }
    }

    fn grant(&self) -> u32 {
        lock(&self.credits).grant()
    }

    /// Calls admitted and not yet answered or dropped.
    fn in_process(&self) -> u32 {
        lock(&self.credits).in_process()
    }

    /// A receive completed: admit the call under the credit rule (in
    /// arrival order, here in the completion loop) and return it to run.
    fn on_recv(self: &Arc<Self>, wc: rdma_verbs::WorkCompletion) -> Option<CatchPanic<D>> {
        self.received.fetch_add(1, Relaxed);
        let msg = self.ep.complete_recv(&wc)?;
        let admitted = {
            let mut c = lock(&self.credits);
            c.on_call().map(|()| {
                // `complete_recv` has posted the receive again.
                c.on_recv_posted(1);
                c.in_process()
            })
        };
        let stats = &self.srv.stats;
        let Ok(n) = admitted else {
            // RFC 8166 §3.3.1: a Requester MUST NOT exceed the grant.
            stats.credit_overruns.fetch_add(1, Relaxed);
            stats.counters.add_action(Action::Close);
            tracing::warn!(peer = %self.peer, "requester exceeded its credit grant; closing");
            self.ep.qp.disconnect();
            return None;
        };
        stats.max_outstanding.fetch_max(u64::from(n), Relaxed);
        let me = self.clone();
        let call = Box::pin(async move {
            let slot = AtomicBool::new(false);
            me.handle(msg, &slot).await;
            // A call that ended without a reply returns its credit here.
            me.release_credit(&slot);
        });
        // A panic while handling one call (a procedure's bug, a peer's
        // bytes reaching an unexpected path) must not unwind through the
        // CQ loop and leak the connection: it closes this connection only.
        Some(CatchPanic {
            inner: call,
            conn: self.clone(),
        })
    }

    /// Returns a call's credit, once: just before its reply is posted (so
    /// that a Requester reusing the credit the moment the reply arrives is
    /// never counted as an overrun, RFC 8166 §3.3.1), or when the call ends
    /// without a reply.
    fn release_credit(&self, slot: &AtomicBool) {
        if slot.swap(true, Relaxed) {
            return;
        }
        lock(&self.credits).on_call_done();
    }

    async fn handle(self: &Arc<Self>, msg: Bytes, slot: &AtomicBool) {
        let grant = self.grant();
        let cfg = &self.srv.config;
        let verdict = check_call(&msg, &cfg.decode_limits(), &self.srv.bindings, grant);
        match verdict {
            CallVerdict::Deliver(call) => {
                self.srv.stats.counters.add_action(Action::Deliver);
                let xid = call.header.xid;
                if let Err(e) = self.process(&msg, call, grant, slot).await {
                    self.on_failed_call(xid, grant, slot, &e);
                }
            }
            v => self.answer_verdict(v, grant, slot),
        }
    }

    /// `process` failed after the call was accepted. When no
    /// reply went out and the connection is still usable, answer
    /// RDMA_ERROR/ERR_CHUNK (RFC 8166 §4.5: the Responder could not convey
    /// the reply), which returns the Requester's credit. When the reply's
    /// own post failed, the connection cannot carry replies: close it, so
    /// that the Requester's connection loss frees its credits.
    fn on_failed_call(&self, xid: u32, grant: u32, slot: &AtomicBool, e: &TransportError) {
        let usable = !self.ep.is_dead() && self.ep.qp.state() == QpState::Connected;
        if slot.load(Relaxed) || !usable {
            tracing::debug!(peer = %self.peer, xid, error = %e, "call failed; closing");
            self.ep.qp.disconnect();
            return;
        }
        tracing::debug!(peer = %self.peer, xid, error = %e, "call failed: ERR_CHUNK");
        self.srv.stats.counters.add_action(Action::ReplyErrChunk);
        self.send_plain(&err_chunk(xid, grant), &[], slot);
    }

    /// Answers (and counts) a non-deliver verdict.
    fn answer_verdict(&self, v: CallVerdict<'_>, grant: u32, slot: &AtomicBool) {
        let counters = &self.srv.stats.counters;
        let action = v.action();
        match v {
            CallVerdict::ReplyError(h) => {
                counters.add_action(action);
                self.send_plain(&h, &[], slot)
            }
            CallVerdict::GarbageArgs { xid, chunks } => {
                let rpc = oncrpc::reply_message(
                    &ReplyHeader::accepted(xid, AcceptStat::GarbageArgs),
                    Payload::new(),
                )
                .flatten();
                let send_inline = self.neg.inline(Side::Server).send;
                match garbage_args(xid, grant, chunks, rpc.len(), send_inline) {
                    Ok(h) => {
                        counters.add_action(Action::GarbageArgs);
                        self.send_plain(&h, &rpc, slot);
                    }
                    Err(why) => self.refuse(xid, grant, slot, why),
                }
            }
            CallVerdict::Discard(reason) => {
                counters.add_action(action);
                tracing::debug!(peer = %self.peer, ?reason, "call discarded");
            }
            CallVerdict::Deliver(_) => {}
        }
    }

    /// Answers RDMA_ERROR/ERR_CHUNK to call `xid` (RFC 8166 §4.5: the
    /// Responder cannot convey the reply, or cannot pull the call's chunks,
    /// or the message is not a call), and counts it.
    fn refuse(&self, xid: u32, grant: u32, slot: &AtomicBool, why: ErrChunk) {
        tracing::debug!(peer = %self.peer, xid, %why, "ERR_CHUNK");
        self.srv.stats.counters.add_action(Action::ReplyErrChunk);
        self.send_plain(&why.header(xid, grant), &[], slot);
    }

    /// Sends a header plus inline bytes (error replies).
    fn send_plain(&self, h: &HeaderRepr, body: &[u8], slot: &AtomicBool) {
        let hl = h.buffer_len();
        let mut b = BytesMut::with_capacity(hl + body.len());
        b.resize(hl, 0);
        if h.emit(&mut b).is_err() {
            return;
        }
        b.extend_from_slice(body);
        self.release_credit(slot);
        let send = SendOp::Send { solicited: false };
        if let Err(e) = self.ep.post_send_msg(send, b.freeze(), Vec::new()) {
            // No reply can go out: close rather than leave the Requester's
            // credit held forever.
            tracing::debug!(peer = %self.peer, error = %e, "cannot post a reply; closing");
            self.ep.qp.disconnect();
        }
    }

    async fn process(
        self: &Arc<Self>,
        msg: &Bytes,
        // Boxed as the verdict had it: a call's future stays small.
        mut call: Box<ReceivedCall<'_>>,
        grant: u32,
        slot: &AtomicBool,
    ) -> Result<(), TransportError> {
        let stats = &self.srv.stats;
        let xid = call.header.xid;
        let Some(chunks) = call.header.chunks().copied() else {
            return Ok(());
        };
        let list = chunks.read_list;
        stats.counters.add_received_chunks(&call.header);
        let kind = call.reassembly.kind();
        stats.counters.add_call(kind);
        if let Err(why) = check_reads(self.ord_depth, &list) {
            self.refuse(xid, grant, slot, why);
            return Ok(());
        }
        // The Read chunks are pulled in a future of their own, boxed: most
        // calls have none, and their future (allocated per call) stays
        // small without the states of the RDMA Reads.
        let pulled = if kind == CallKind::Short {
            Pulled {
                reduced: msg.slice(call.header.header_len.min(msg.len())..),
                data: Vec::new(),
                read_bytes: 0,
                _budget: None,
            }
        } else {
            match Box::pin(self.pull_chunks(msg, &mut call, &list, grant, slot)).await? {
                Some(p) => p,
                None => return Ok(()),
            }
        };
        let Pulled {
            reduced,
            data,
            read_bytes,
            _budget,
        } = pulled;
        let args = call_args(&call.reassembly.pieces, &reduced, &data);
        stats.dispatched.fetch_add(1, Relaxed);
        let reply = match self.srv.dispatcher.dispatch(args).await {
            DispatchOutcome::Reply(r) => r,
            DispatchOutcome::Drop(reason) => {
                tracing::debug!(xid, ?reason, "RPC layer dropped the message");
                self.refuse(xid, grant, slot, NOT_A_CALL);
                return Ok(());
            }
        };
        // Item `i` of the plan is `pieces[i]` (borrowed: no clone, which
        // would make a `Vec`-backed `Bytes` allocate to become shared).
        let items = crate::ulb::stream_items(&reply);
        let send_inline = self.neg.inline(Side::Server).send;
        let plan = plan_reply(xid, grant, &items, &call.offered, send_inline)
            .map_err(ErrChunk::from)
            .and_then(|p| check_send_queue_share(&p, self.ep.sq_depth()).map(|()| p));
        let plan = match plan {
            Ok(p) => p,
            Err(why) => {
                self.refuse(xid, grant, slot, why);
                return Ok(());
            }
        };
        let written = self.send_reply(&plan, reply.pieces(), &chunks, slot)?;
        stats.counters.add_reply(plan.kind);
        stats.counters.add_chunk_bytes(read_bytes + written);
        drop(reply);
        let mut sinks = data;
        if kind == CallKind::Long {
            sinks.push(reduced);
        }
        self.recycle(sinks);
        Ok(())
    }

    /// Posts the reply's RDMA Writes into the Write chunks and the Reply
    /// chunk, then its Send after them in the same send queue, returning
    /// the call's credit just before the Send is posted. Returns the bytes
    /// written.
    fn send_reply(
        &self,
        plan: &ReplyPlan,
        pieces: &[oncrpc::Piece],
        chunks: &ChunkLists<'_>,
        slot: &AtomicBool,
    ) -> Result<u64, TransportError> {
        let mut sources: HashMap<usize, D::Mr> = HashMap::new();
        let mut extra: Vec<D::Mr> = Vec::new();
        let mut written = 0u64;
        if let Err(e) =
            self.post_writes(&plan.writes, pieces, &mut sources, &mut extra, &mut written)
        {
            // Writes already posted may still gather from these sources:
            // keep them until a later work request completes.
            self.ep.hold(sources.into_values().chain(extra));
            return Err(e);
        }
        let hl = plan.header.buffer_len();
        let inline_len = rpcrdma_proto::stream::spans_len(&plan.inline) as usize;
        let mut b = BytesMut::with_capacity(hl + inline_len);
        b.resize(hl, 0);
        if let Err(e) = plan.header.emit(&mut b) {
            self.ep.hold(sources.into_values().chain(extra));
            return Err(TransportError::Plan(e.to_string()));
        }
        gather_with(
            &plan.inline,
            |i| &pieces[i].bytes()[..],
            |x| b.extend_from_slice(x),
        );
        let op = self.reply_send_op(chunks);
        let mut mrs: Vec<D::Mr> = sources.into_values().collect();
        mrs.extend(extra);
        self.release_credit(slot);
        // On failure the endpoint keeps `mrs` (earlier Writes use them).
        self.ep.post_send_msg(op, b.freeze(), mrs)?;
        Ok(written)
    }

    /// Send, or Send with Invalidate of the call's STag when RFC 8797 §6
    /// allows it (both sides set R, and the call exposed that one STag).
    fn reply_send_op(&self, chunks: &ChunkLists<'_>) -> SendOp {
        let mut stags: Vec<u32> = chunks
            .read_list
            .segments()
            .map(|s| s.segment.handle)
            .collect();
        for c in chunks.write_list.chunks() {
            stags.extend(c.segments().map(|s| s.handle));
        }
        if let Some(rc) = chunks.reply_chunk {
            stags.extend(rc.segments().map(|s| s.handle));
        }
        match self.neg.send_with_invalidate(&stags) {
            Some(rkey) => {
                self.srv.stats.send_with_invalidate.fetch_add(1, Relaxed);
                SendOp::SendWithInvalidate {
                    invalidate_rkey: rkey,
                    solicited: false,
                }
            }
            None => SendOp::Send { solicited: false },
        }
    }

    /// Posts the reply's RDMA Writes; the registrations they gather from
    /// are left in `sources`/`extra` (also on error) for the caller.
    fn post_writes(
        &self,
        writes: &[rpcrdma_proto::reply::RdmaWrite],
        pieces: &[oncrpc::Piece],
        sources: &mut HashMap<usize, D::Mr>,
        extra: &mut Vec<D::Mr>,
        written: &mut u64,
    ) -> Result<(), TransportError> {
        let stats = &self.srv.stats;
        for w in writes {
            let sge = match w.source {
                Span::Item { item, offset, len } => {
                    let lkey = match sources.get(&item) {
                        Some(m) => m.lkey(),
                        None => {
                            let m = self.ep.register_source(
                                pieces
                                    .get(item)
                                    .map(|p| p.bytes().clone())
                                    .unwrap_or_default(),
                            )?;
                            let k = m.lkey();
                            sources.insert(item, m);
                            k
                        }
                    };
                    Sge::new(lkey, offset as u64, len)
                }
                Span::Zeros(n) => {
                    let m = self
                        .ep
                        .register_source(Bytes::from(vec![0u8; n as usize]))?;
                    let k = m.lkey();
                    extra.push(m);
                    Sge::new(k, 0, n)
                }
            };
            *written += sge.length as u64;
            let wr = SendWr::write(
                0,
                vec![sge],
                RemoteAddr {
                    rkey: w.handle,
                    offset: w.remote_offset,
                },
            );
            self.ep.post(wr, Vec::new(), None)?;
            stats.rdma_writes.fetch_add(1, Relaxed);
        }
        Ok(())
    }
}
