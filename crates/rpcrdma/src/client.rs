//! The Requester: [`RdmaClient`], an [`oncrpc::Channel`] over RPC-over-RDMA.
//!
//! Per call (RFC 8166 §3.5, architecture "Flow of a GET"):
//! 1. the call message is described as
//!    [`Item`](rpcrdma_proto::stream::Item)s — DDP-eligible arguments
//!    (the `Ddp` pieces of the arguments that the Upper-Layer Binding
//!    declares eligible) and XDR runs — and the expected reply as a
//!    [`ReplyShape`]: one Write chunk per caller result buffer (capped by
//!    the binding's maximum), a Reply chunk when the binding's estimate may
//!    not fit inline;
//! 2. [`plan_call`] picks Short, Chunked or Long;
//! 3. every chunk segment is fast-registered (`post_fast_reg`) on a fresh
//!    memory region, so each registration has an STag no recent one had (a
//!    handle on the wire names one segment of one call): argument data where
//!    it is (`Bytes`, read-only), result buffers where the caller gave them
//!    (remote-write);
//! 4. one Send carries the header and the inline part;
//! 5. on the reply the chunks are validated ([`check_reply`]), every
//!    registration still valid is invalidated locally (one not needed when
//!    the reply came by Send with Invalidate) before the caller sees the
//!    results; DDP-eligible results are `Ddp` pieces that are slices of the
//!    caller's own buffers.
//!
//! Credits follow [`RequesterCredits`]; calls beyond the window wait in a
//! queue. A lost connection is re-established with backoff and every call
//! outstanding on it is retransmitted (same XID, fresh registrations) on the
//! new connection — never on the old one.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use oncrpc::{Channel, Payload, PayloadBuilder, Piece, Request, RpcError};
use rdma_verbs::idhash::IdMap;
use rdma_verbs::{
    ConnParam, Device, MemoryRegion, QpState, QueuePair, RemoteAddr, SendOp, SendWr, VerbsError,
    WorkCompletion,
};
use rpcrdma_proto::binding::ArgsView;
use rpcrdma_proto::classify::{route, Route, Side};
use rpcrdma_proto::counters::Counters;
use rpcrdma_proto::credits::RequesterCredits;
use rpcrdma_proto::marshal::{plan_call_within, OfferedChunks, ReplyBounds, Thresholds};
use rpcrdma_proto::private_data::{Negotiated, PrivateData};
use rpcrdma_proto::stream::{gather_with, spans_len, Span};
use rpcrdma_proto::validate::{check_reply, DiscardReason, ReplyVerdict};
use rpcrdma_proto::wire::{Body, ErrorBody};
use tokio::sync::oneshot;

use crate::config::{RdmaConfig, FIRST_REPLY_NUDGES};
use crate::endpoint::{lock, Endpoint, RECV_MARGIN};
use crate::error::TransportError;
use crate::report::CallReport;
use crate::ulb::Bindings;

mod regions;
mod reply;
use regions::{join, release_regions, restore, Reg};
use reply::Outcome;

type CallResult = Result<(Payload, CallReport), RpcError>;

/// Requester statistics (relaxed atomics; read them any time).
#[derive(Debug, Default)]
pub struct ClientStats {
    /// Protocol counters (calls by kind, chunks, errors), RFC 8166 terms.
    pub counters: Counters,
    /// Replies that arrived by Send with Invalidate on one of the call's
    /// registrations.
    pub remote_invalidations: AtomicU64,
    /// Registrations invalidated locally (LocalInvalidate work requests).
    pub local_invalidations: AtomicU64,
    /// Calls retransmitted on a new connection.
    pub retransmits: AtomicU64,
    /// Connections re-established after a loss.
    pub reconnects: AtomicU64,
    /// Calls that timed out.
    pub timeouts: AtomicU64,
    /// Connections given up as silent: a call and then a NULL probe timed
    /// out with nothing received on the connection.
    pub silent_disconnects: AtomicU64,
    /// Calls completed (successfully or with an RPC-level error).
    pub completed: AtomicU64,
    /// Zero-length RDMA Writes posted on new connections that had received
    /// nothing a while after a call was sent
    /// ([`RdmaConfig::first_reply_nudge`]).
    pub first_reply_nudges: AtomicU64,
    /// XDR pad segments offered after Write chunks
    /// ([`RdmaConfig::write_pad`]), counted per call sent (a retransmission
    /// offers them again).
    pub write_pads: AtomicU64,
}

/// One connection of the client.
struct Conn<D: Device> {
    ep: Endpoint<D>,
    gen: u64,
    neg: Negotiated,
    /// The R bit this side advertised in its RFC 8797 private data.
    local_remote_invalidation: bool,
    /// Messages received on this connection: a connection that never
    /// carried one counts as a failed reconnect attempt, and a call that
    /// times out with none received since it was sent finds the connection
    /// silent.
    recvs: AtomicU64,
    /// A NULL probe of this connection is in flight (see `Shared::probe`).
    probing: AtomicBool,
    /// The wait before the first zero-length RDMA Write while nothing has
    /// arrived (`None`: off, see [`RdmaConfig::first_reply_nudge`]).
    nudge: Option<Duration>,
    /// The nudging task has been started.
    nudging: AtomicBool,
    /// When the connection was made.
    since: Instant,
}

struct Sent<D: Device> {
    gen: u64,
    offered: OfferedChunks,
    regions: Vec<Reg<D>>,
    report: CallReport,
    /// When it was sent, and [`Conn::recvs`] then.
    at: Instant,
    recvs: u64,
}

struct Slot<D: Device> {
    req: Request,
    bufs: Vec<BytesMut>,
    /// `None` once the caller gave up (timeout): the slot then only waits
    /// for the reply to return its credit.
    tx: Option<oneshot::Sender<CallResult>>,
    sent: Option<Sent<D>>,
    /// Taken from the queue and being prepared outside the lock.
    in_transit: bool,
    retransmits: u32,
}

struct State<D: Device> {
    conn: Option<Arc<Conn<D>>>,
    gen: u64,
    connecting: bool,
    closed: bool,
    credits: RequesterCredits,
    queue: VecDeque<u32>,
    /// By xid (ours: a peer's reply only looks one up).
    calls: IdMap<u32, Slot<D>>,
    /// Connections in a row that ended without carrying a message, plus
    /// failed connection attempts since: where the reconnect backoff goes
    /// on from, so that a peer that accepts and closes at once does not get
    /// a reconnect, and a retransmission, every 10 ms.
    barren: u32,
}

struct Shared<D: Device> {
    dev: D,
    addr: SocketAddr,
    config: RdmaConfig,
    bindings: Bindings,
    state: Mutex<State<D>>,
    next_xid: AtomicU32,
    stats: ClientStats,
}

/// Abandons a call whose caller went away before its result came.
struct ForgetOnDrop<'a, D: Device> {
    shared: &'a Arc<Shared<D>>,
    xid: Option<u32>,
}

impl<D: Device> Drop for ForgetOnDrop<'_, D> {
    fn drop(&mut self) {
        if let Some(x) = self.xid.take() {
            self.shared.abandon(x);
        }
    }
}

struct CloseGuard<D: Device>(Arc<Shared<D>>);

impl<D: Device> Drop for CloseGuard<D> {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// An RPC-over-RDMA client connection (the Requester). Cheap to clone;
/// the connection closes when the last clone is dropped (or on
/// [`close`](Self::close)).
///
/// ```no_run
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// use rpcrdma::{Bindings, RdmaClient, RdmaConfig};
/// let dev = rpcrdma::memfabric::Fabric::new();
/// let client = RdmaClient::connect(dev, "127.0.0.1:20049".parse()?, RdmaConfig::default(), Bindings::rdmatest()).await?;
/// let rdmatest = rdmatest::RdmatestClient::new(client.clone());
/// let data = rdmatest.get(1 << 20, 7).await?;
/// # Ok(()) }
/// ```
pub struct RdmaClient<D: Device> {
    shared: Arc<Shared<D>>,
    _guard: Arc<CloseGuard<D>>,
}

impl<D: Device> Clone for RdmaClient<D> {
    fn clone(&self) -> Self {
        RdmaClient {
            shared: self.shared.clone(),
            _guard: self._guard.clone(),
        }
    }
}

impl<D: Device> std::fmt::Debug for RdmaClient<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaClient")
            .field("addr", &self.shared.addr)
            .finish_non_exhaustive()
    }
}

impl<D: Device> RdmaClient<D> {
    /// Connects to a responder at `addr` (RFC 8797 private data both ways).
    pub async fn connect(
        dev: D,
        addr: SocketAddr,
        config: RdmaConfig,
        bindings: Bindings,
    ) -> Result<Self, TransportError> {
        let shared = Arc::new(Shared {
            dev,
            addr,
            state: Mutex::new(State {
                conn: None,
                gen: 0,
                connecting: true,
                closed: false,
                credits: RequesterCredits::new(config.effective_credits()),
                queue: VecDeque::new(),
                calls: IdMap::default(),
                barren: 0,
            }),
            config,
            bindings,
            next_xid: AtomicU32::new(rand_xid()),
            stats: ClientStats::default(),
        });
        let gen = shared.reserve_gen();
        let conn = Conn::establish(&shared.dev, addr, &shared.config, gen).await?;
        shared.install(conn);
        Ok(RdmaClient {
            _guard: Arc::new(CloseGuard(shared.clone())),
            shared,
        })
    }

    /// Makes a call and reports what went on the wire.
    ///
    /// A Reply chunk is offered only when the reply may exceed the reply
    /// inline threshold (RFC 8166 §3.5.3). The reply's largest size is the
    /// Upper-Layer Binding's estimate for the procedure (raised to
    /// `req.max_reply_len` when that is larger); without an estimate it is
    /// the reply header alone for NULL (procedure 0, a void result),
    /// otherwise `req.max_reply_len`, or, when the caller gave none,
    /// [`RdmaConfig::default_max_reply`]. The header's share is
    /// [`RdmaConfig::reply_overhead`].
    ///
    /// DDP-eligible arguments are the `Ddp` pieces of `req.args` (moved in
    /// Read chunks when the call does not fit inline); DDP-eligible results
    /// are placed into `req.result_bufs` (one Write chunk each, capacity =
    /// largest accepted) and come back as `Ddp` pieces that are slices of
    /// those buffers. No result buffers: the results come inline (an empty
    /// Write list) or in the Reply chunk.
    pub async fn call_with_report(&self, req: Request) -> CallResult {
        self.shared.call(req).await
    }

    /// Requester statistics.
    pub fn stats(&self) -> &ClientStats {
        &self.shared.stats
    }

    /// The current connection's inline thresholds (`None` while
    /// disconnected).
    pub fn thresholds(&self) -> Option<Thresholds> {
        lock(&self.shared.state)
            .conn
            .as_ref()
            .map(|c| c.neg.thresholds)
    }

    /// Whether both sides set the Remote Invalidation bit (R) in their RFC
    /// 8797 private data on the current connection (`None` while
    /// disconnected). RFC 8797 §6 lets a responder use Send with Invalidate
    /// only then.
    ///
    /// This does not say whether replies arrive by Send with Invalidate:
    /// this requester accepts one whenever it set its own bit (see
    /// [`accepts_remote_invalidation`](Self::accepts_remote_invalidation)),
    /// and Linux's server (svcrdma) sets R = 0 yet invalidates the call's
    /// STag whenever the requester set R and the call used one STag, so
    /// against Linux this reports `Some(false)` while replies do come by
    /// Send with Invalidate. [`ClientStats::remote_invalidations`] counts
    /// the replies that did.
    pub fn remote_invalidation(&self) -> Option<bool> {
        lock(&self.shared.state)
            .conn
            .as_ref()
            .map(|c| c.neg.remote_invalidation)
    }

    /// Whether this requester advertised the Remote Invalidation bit (R) on
    /// the current connection, so that the responder may invalidate the
    /// call's STag by Send with Invalidate (`None` while disconnected).
    /// This side's bit alone decides whether such a reply is taken: it is
    /// [`RdmaConfig::remote_invalidation`].
    pub fn accepts_remote_invalidation(&self) -> Option<bool> {
        lock(&self.shared.state)
            .conn
            .as_ref()
            .map(|c| c.local_remote_invalidation)
    }

    /// True while a connection is established.
    pub fn is_connected(&self) -> bool {
        lock(&self.shared.state).conn.is_some()
    }

    /// Calls not yet completed: queued, on the wire, or sent and abandoned
    /// by their caller (timed out) but still holding a credit until their
    /// reply comes or the connection is replaced.
    pub fn outstanding(&self) -> usize {
        lock(&self.shared.state).calls.len()
    }

    /// The responder's address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.shared.addr
    }

    /// Closes the connection; outstanding calls fail with
    /// [`TransportError::Closed`].
    pub fn close(&self) {
        self.shared.close();
    }

    /// Breaks the current connection as if the network failed (tests of
    /// reconnection): outstanding calls are retransmitted on a new one.
    pub fn disconnect_for_test(&self) {
        if let Some(c) = lock(&self.shared.state).conn.clone() {
            c.ep.qp.disconnect();
        }
    }
}

#[allow(clippy::manual_async_fn)]
impl<D: Device> Channel for RdmaClient<D> {
    fn call(
        &self,
        req: Request,
    ) -> impl std::future::Future<Output = Result<Payload, RpcError>> + Send {
        async move { self.call_with_report(req).await.map(|(p, _)| p) }
    }
}

/// The provider name of [`memfabric`](crate::memfabric).
const MEMFABRIC: &str = "memfabric";

/// Whether the provider takes a zero-length RDMA Write to STag 0 as a
/// no-op, as the RTR message of RFC 6581 §3 is taken (Linux's siw and this
/// workspace's iWARP provider place nothing and check no STag). The
/// in-memory fabric checks the STag of every RDMA Write, and refuses it.
fn accepts_zero_length_write<D: Device>(dev: &D) -> bool {
    dev.name() != MEMFABRIC
}

fn rand_xid() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() ^ (d.as_secs() as u32).rotate_left(16))
        .unwrap_or(1);
    t.wrapping_mul(0x9E37_79B9)
}

impl<D: Device> Conn<D> {
    async fn establish(
        dev: &D,
        addr: SocketAddr,
        config: &RdmaConfig,
        gen: u64,
    ) -> Result<Arc<Conn<D>>, TransportError> {
        let ep = Endpoint::new(dev, config, config.effective_credits() + RECV_MARGIN)?;
        let local = config.private_data();
        let encoded = local.encode();
        let param = ConnParam::new(Bytes::copy_from_slice(&encoded), config.ord, config.ird);
        let info = tokio::time::timeout(config.connect_timeout, dev.connect(&ep.qp, addr, param))
            .await
            .map_err(|_| VerbsError::Timeout("connect"))??;
        let peer = PrivateData::from_received(&info.private_data);
        let local = PrivateData::find(&encoded).unwrap_or_default();
        let neg = Negotiated::client(&local, &peer);
        tracing::debug!(%addr, ?neg, "rpcrdma client connected");
        Ok(Arc::new(Conn {
            ep,
            gen,
            neg,
            local_remote_invalidation: local.remote_invalidation,
            recvs: AtomicU64::new(0),
            probing: AtomicBool::new(false),
            nudge: config
                .first_reply_nudge
                .filter(|_| accepts_zero_length_write(dev)),
            nudging: AtomicBool::new(false),
            since: Instant::now(),
        }))
    }
}

impl<D: Device> Shared<D> {
    /// [`RdmaClient::call_with_report`].
    async fn call(self: &Arc<Self>, req: Request) -> CallResult {
        let (prog, vers) = (req.prog, req.vers);
        let timeout = req.timeout.unwrap_or(self.config.call_timeout);
        let (r, silent) = self.call_judged(req).await;
        if let Some(conn) = silent {
            self.probe(conn, prog, vers, timeout);
        }
        r
    }

    /// Makes a call; on a timeout, also the connection it was sent on if
    /// that connection looks silent (see [`Shared::silent_since_sent`]).
    async fn call_judged(self: &Arc<Self>, mut req: Request) -> (CallResult, Option<Arc<Conn<D>>>) {
        let sh = self;
        let timeout = req.timeout.unwrap_or(sh.config.call_timeout);
        let bufs = std::mem::take(&mut req.result_bufs);
        let (tx, rx) = oneshot::channel();
        let xid = {
            let mut st = lock(&sh.state);
            if st.closed {
                return (Err(TransportError::Closed.into_rpc()), None);
            }
            let xid = loop {
                let x = sh.next_xid.fetch_add(1, Relaxed);
                if !st.calls.contains_key(&x) {
                    break x;
                }
            };
            st.calls.insert(
                xid,
                Slot {
                    req,
                    bufs,
                    tx: Some(tx),
                    sent: None,
                    in_transit: false,
                    retransmits: 0,
                },
            );
            st.queue.push_back(xid);
            if st.conn.is_none() {
                sh.start_reconnect(&mut st);
            }
            xid
        };
        // A caller that drops this future (select!, task abort) gives the
        // call up like a timeout does.
        let mut forget = ForgetOnDrop {
            shared: sh,
            xid: Some(xid),
        };
        sh.pump();
        tokio::pin!(rx);
        match tokio::time::timeout(timeout, &mut rx).await {
            Ok(Ok(r)) => {
                forget.xid = None;
                (r, None)
            }
            Ok(Err(_)) => {
                forget.xid = None;
                (Err(TransportError::ConnectionLost.into_rpc()), None)
            }
            Err(_) => {
                forget.xid = None;
                let silent = sh.silent_since_sent(xid, timeout);
                sh.abandon(xid);
                match rx.try_recv() {
                    Ok(r) => (r, None),
                    Err(_) => {
                        sh.stats.timeouts.fetch_add(1, Relaxed);
                        (Err(RpcError::Timeout), silent)
                    }
                }
            }
        }
    }

    /// Nothing at all came on `conn` while a call waited out its timeout:
    /// the peer may just be slow with that call, or the connection may be
    /// silent (the peer or the path gone without a FIN or RST). A NULL call
    /// (procedure 0 of the same program and version) tells them apart: if
    /// it too times out with nothing received, the connection is treated
    /// as lost, as xprtrdma treats a major timeout: reconnect and
    /// retransmit the live calls. One probe at a time per connection.
    fn probe(self: &Arc<Self>, conn: Arc<Conn<D>>, prog: u32, vers: u32, timeout: Duration) {
        if conn.probing.swap(true, Relaxed) {
            return;
        }
        let sh = self.clone();
        tokio::spawn(async move {
            // At least a whole call timeout, judged like any call:
            // only if the probe itself was sent (not left waiting for a
            // credit) at least half of it ago, with nothing received
            // since.
            let timeout = timeout.max(sh.config.call_timeout);
            let null = Request::new(prog, vers, 0, oncrpc::Payload::new()).with_timeout(timeout);
            let (_, silent) = sh.call_judged(null).await;
            if silent.is_some_and(|c| Arc::ptr_eq(&c, &conn)) {
                tracing::info!(
                    addr = %sh.addr,
                    "nothing received for two call timeouts, a NULL probe included: reconnecting"
                );
                sh.stats.silent_disconnects.fetch_add(1, Relaxed);
                conn.ep.qp.disconnect();
            }
            conn.probing.store(false, Relaxed);
        });
    }

    fn reserve_gen(&self) -> u64 {
        let mut st = lock(&self.state);
        st.gen += 1;
        st.gen
    }

    fn install(self: &Arc<Self>, conn: Arc<Conn<D>>) {
        let mut st = lock(&self.state);
        st.connecting = false;
        if st.closed || st.gen != conn.gen {
            conn.ep.qp.disconnect();
            return;
        }
        st.conn = Some(conn.clone());
        st.credits.reset();
        let sh = self.clone();
        let c2 = conn.clone();
        tokio::spawn(async move {
            let s3 = sh.clone();
            let c3 = c2.clone();
            c2.ep
                .run(move |wc| s3.on_recv(&c3, wc), std::future::pending())
                .await;
            sh.conn_lost(c2);
        });
        drop(st);
        self.pump();
    }

    fn close(&self) {
        let (conn, slots) = {
            let mut st = lock(&self.state);
            if st.closed {
                return;
            }
            st.closed = true;
            st.queue.clear();
            let slots: Vec<Slot<D>> = st.calls.drain().map(|(_, s)| s).collect();
            (st.conn.take(), slots)
        };
        for s in slots {
            if let Some(sent) = s.sent {
                for r in sent.regions {
                    drop(r.mr.deregister());
                }
            }
            if let Some(tx) = s.tx {
                let _ = tx.send(Err(TransportError::Closed.into_rpc()));
            }
        }
        if let Some(c) = conn {
            c.ep.qp.disconnect();
        }
    }

    /// A call was queued again after its connection was lost: if
    /// `conn_lost` has already run (and its reconnect, if any, has given
    /// up), nothing would ever send or fail it; start a reconnect, which
    /// sends it or fails it. With reconnecting off too, a call caught in
    /// the middle of being sent fails at once instead of waiting for its
    /// timeout.
    fn reconnect_if_orphaned(self: &Arc<Self>, st: &mut State<D>) {
        if st.conn.is_none() && !st.queue.is_empty() {
            self.start_reconnect(st);
        }
    }

    fn start_reconnect(self: &Arc<Self>, st: &mut State<D>) {
        if st.connecting || st.closed {
            return;
        }
        st.connecting = true;
        let sh = self.clone();
        tokio::spawn(async move { sh.reconnect_loop().await });
    }

    async fn reconnect_loop(self: Arc<Self>) {
        let policy = self.config.reconnect;
        let mut last = String::from(if policy.max_attempts == 0 {
            "reconnecting is off"
        } else {
            "no attempt"
        });
        // Connections that closed before carrying a message count as failed
        // attempts: the backoff goes on growing, and gives up.
        let first = lock(&self.state).barren.min(policy.max_attempts);
        if first > 0 {
            last = format!("{first} connection(s) in a row closed before any reply");
        }
        for attempt in first..policy.max_attempts {
            tokio::time::sleep(policy.delay(attempt)).await;
            if lock(&self.state).closed {
                return;
            }
            let gen = self.reserve_gen();
            match Conn::establish(&self.dev, self.addr, &self.config, gen).await {
                Ok(conn) => {
                    self.stats.reconnects.fetch_add(1, Relaxed);
                    tracing::info!(addr = %self.addr, attempt, "rpcrdma client reconnected");
                    lock(&self.state).barren = attempt;
                    self.install(conn);
                    return;
                }
                Err(e) => {
                    tracing::debug!(addr = %self.addr, attempt, error = %e, "reconnect failed");
                    last = e.to_string();
                }
            }
        }
        let failed: Vec<Slot<D>> = {
            let mut st = lock(&self.state);
            st.connecting = false;
            // The next call starts over.
            st.barren = 0;
            let xids: Vec<u32> = st.queue.drain(..).collect();
            xids.into_iter()
                .filter_map(|x| st.calls.remove(&x))
                .collect()
        };
        for s in failed {
            if let Some(tx) = s.tx {
                let _ = tx.send(Err(TransportError::ReconnectFailed {
                    attempts: policy.max_attempts,
                    last: last.clone(),
                }
                .into_rpc()));
            }
        }
    }

    /// The connection `conn` ended: requeue its calls for retransmission
    /// on a new connection.
    fn conn_lost(self: &Arc<Self>, conn: Arc<Conn<D>>) {
        conn.ep.fail_all();
        let mut st = lock(&self.state);
        if st.conn.as_ref().is_some_and(|c| Arc::ptr_eq(c, &conn)) {
            st.conn = None;
            st.credits.reset();
            // Barren: one more failed attempt after those that led to it.
            // Only a connection that ended soon after it was made: one that
            // carried data for a while (RDMA Writes of a long reply, which
            // this side does not see) is not a failed attempt.
            let soon = conn.since.elapsed() < self.config.reconnect.max.max(Duration::from_secs(1));
            st.barren = if conn.recvs.load(Relaxed) == 0 && soon {
                st.barren.saturating_add(1)
            } else {
                0
            };
        }
        let mut requeue = Vec::new();
        let mut dead = Vec::new();
        for (&xid, slot) in st.calls.iter_mut() {
            if slot.sent.as_ref().is_some_and(|s| s.gen == conn.gen) {
                let sent = slot.sent.take().expect("checked");
                // The result buffers go back whole: a buffer registered
                // segment by segment comes back in pieces, joined again,
                // so that the retransmission offers the whole Write chunk.
                let mut back = Vec::new();
                release_regions(sent.regions, &mut back);
                restore(&mut slot.bufs, back);
                if slot.tx.is_none() {
                    dead.push(xid);
                } else {
                    slot.retransmits += 1;
                    requeue.push(xid);
                }
            }
        }
        for x in dead {
            st.calls.remove(&x);
        }
        requeue.sort_unstable();
        self.stats
            .retransmits
            .fetch_add(requeue.len() as u64, Relaxed);
        for x in requeue.into_iter().rev() {
            st.queue.push_front(x);
        }
        drop(conn);
        if st.conn.is_none() {
            // Reconnect at once (unless closed): the requeued calls go out
            // on the new connection, and with none outstanding the next
            // call finds a connection.
            self.start_reconnect(&mut st);
        }
    }

    /// The connection `xid` was sent on, if it is still the current one,
    /// has received nothing since, no call with chunks is outstanding on
    /// it, and the call was sent at least half of its `timeout` ago (a call
    /// queued for a credit most of its time may have just been sent on a
    /// busy but live connection).
    fn silent_since_sent(&self, xid: u32, timeout: Duration) -> Option<Arc<Conn<D>>> {
        let st = lock(&self.state);
        let sent = st.calls.get(&xid)?.sent.as_ref()?;
        let conn = st.conn.as_ref().filter(|c| c.gen == sent.gen)?;
        if conn.recvs.load(Relaxed) != sent.recvs || sent.at.elapsed() < timeout / 2 {
            return None;
        }
        // A call with chunks on this connection may be moving data (RDMA
        // Writes of its result, Reads of its arguments), which this side
        // does not see: a small call behind it on the same stream waits
        // too. Such a connection is not judged silent.
        let moving = st.calls.values().any(|s| {
            s.sent
                .as_ref()
                .is_some_and(|x| x.gen == conn.gen && !x.regions.is_empty())
        });
        (!moving).then(|| conn.clone())
    }

    /// The caller gave up on `xid`.
    fn abandon(&self, xid: u32) {
        let mut st = lock(&self.state);
        let Some(slot) = st.calls.get_mut(&xid) else {
            return;
        };
        let gen = match &mut slot.sent {
            None if slot.in_transit => {
                slot.tx = None;
                return;
            }
            None => {
                st.calls.remove(&xid);
                st.queue.retain(|&x| x != xid);
                return;
            }
            Some(sent) => {
                slot.tx = None;
                // The registrations stay until the reply comes (`finish`),
                // the connection ends (`conn_lost`) or the client closes.
                // The responder may still be moving this call's data, and
                // the regions own their buffers, so a late RDMA Write lands
                // in memory nobody reads and a late Read finds what the
                // caller handed over. Deregistered here, each of those
                // would be a protection error that breaks the connection
                // for every other call.
                sent.gen
            }
        };
        if st.conn.as_ref().is_some_and(|c| c.gen == gen) {
            self.break_if_stuck(st);
        }
    }

    /// Applies a reply's credit grant; true if it lowered the limit.
    fn on_grant(st: &mut State<D>, credit: u32) -> bool {
        let before = st.credits.limit();
        st.credits.on_reply(credit);
        st.credits.limit() < before
    }

    /// The abandoned call keeps its credit until its reply comes. When
    /// abandoned calls hold every credit the connection can carry (a single
    /// one on a fresh connection, and the responder may lower its grant
    /// later, RFC 8166 §3.3.1) no reply can ever free one; when they hold
    /// more than [`RdmaConfig::max_abandoned_bytes`] of buffers, memory
    /// grows on the responder's say-so. Either way: treat it as a major
    /// timeout and break the connection, so that `conn_lost` drops them
    /// and the live calls are retransmitted on a new connection.
    fn break_if_stuck(&self, st: MutexGuard<'_, State<D>>) {
        let Some(conn) = st.conn.clone() else {
            return;
        };
        let (mut stuck, mut bytes) = (0u64, 0u64);
        for s in st.calls.values() {
            if let (None, Some(sent)) = (&s.tx, s.sent.as_ref().filter(|x| x.gen == conn.gen)) {
                stuck += 1;
                bytes += sent.regions.iter().map(|r| r.mr.len() as u64).sum::<u64>();
            }
        }
        let limit = u64::from(st.credits.limit());
        drop(st);
        if stuck >= limit || bytes > self.config.max_abandoned_bytes as u64 {
            tracing::info!(
                addr = %self.addr,
                stuck,
                limit,
                bytes,
                "abandoned calls hold every credit or too much memory: reconnecting"
            );
            conn.ep.qp.disconnect();
        }
    }

    /// Sends queued calls while credits allow. The expensive part (plan,
    /// registrations, the Send buffer) runs outside the state lock.
    fn pump(self: &Arc<Self>) {
        while let Some(q) = self.next_queued() {
            let prepared = self.prepare(&q.conn, q.xid, &q.req, q.bufs, q.credit, q.retransmits);
            if self.settle_prepared(&q.conn, q.xid, prepared).is_break() {
                return;
            }
        }
    }

    /// Takes the next queued call that is still wanted, with a credit, when
    /// there is a connection and the credit window has room; the call is
    /// then in transit until [`settle_prepared`](Self::settle_prepared).
    fn next_queued(&self) -> Option<Queued<D>> {
        let mut st = lock(&self.state);
        loop {
            let conn = st.conn.clone()?;
            if !st.credits.can_send() {
                return None;
            }
            let xid = st.queue.pop_front()?;
            let credit = st.credits.requested();
            let Some(slot) = st.calls.get_mut(&xid) else {
                continue;
            };
            if slot.tx.is_none() {
                st.calls.remove(&xid);
                continue;
            }
            slot.in_transit = true;
            let req = shallow_clone(&slot.req);
            let bufs = std::mem::take(&mut slot.bufs);
            let retransmits = slot.retransmits;
            st.credits.try_send();
            return Some(Queued {
                conn,
                xid,
                req,
                bufs,
                retransmits,
                credit,
            });
        }
    }

    /// A call taken by [`next_queued`](Self::next_queued) was prepared (or
    /// failed to be): post it if its connection is still the current one
    /// and its caller still waits, otherwise give the credit and the
    /// buffers back and queue it again or drop it. `Break`: stop sending
    /// on `conn`.
    fn settle_prepared(
        self: &Arc<Self>,
        conn: &Arc<Conn<D>>,
        xid: u32,
        prepared: Result<Prepared<D>, (TransportError, Vec<BytesMut>)>,
    ) -> ControlFlow<()> {
        let mut st = lock(&self.state);
        let alive = st.conn.as_ref().is_some_and(|c| Arc::ptr_eq(c, conn)) && !conn.ep.is_dead();
        let State {
            credits,
            queue,
            calls,
            ..
        } = &mut *st;
        let slot = calls.get_mut(&xid);
        match (slot, prepared) {
            (Some(slot), Ok(p)) if alive && slot.tx.is_some() => {
                slot.in_transit = false;
                slot.sent = Some(Sent {
                    gen: conn.gen,
                    offered: p.offered,
                    regions: p.regions,
                    report: p.report,
                    at: Instant::now(),
                    recvs: conn.recvs.load(Relaxed),
                });
                drop(st);
                self.post_call(conn, xid, p.send)
            }
            (slot, Ok(p)) => {
                // Connection changed or caller gave up meanwhile.
                if alive {
                    credits.release();
                }
                let mut bufs = Vec::new();
                release_regions(p.regions, &mut bufs);
                match slot {
                    Some(slot) if slot.tx.is_some() => {
                        slot.in_transit = false;
                        restore(&mut slot.bufs, bufs);
                        queue.push_front(xid);
                    }
                    Some(_) => {
                        calls.remove(&xid);
                    }
                    None => {}
                }
                if alive {
                    return ControlFlow::Continue(());
                }
                self.after_lost(&mut st, conn)
            }
            (slot, Err((e, bufs))) => {
                if alive {
                    credits.release();
                }
                let dying = conn.ep.qp.state() != QpState::Connected || !alive;
                match slot {
                    Some(slot) if slot.tx.is_some() && dying => {
                        slot.in_transit = false;
                        slot.bufs = bufs;
                        queue.push_front(xid);
                        return self.after_lost(&mut st, conn);
                    }
                    Some(_) => {
                        if let Some(s) = calls.remove(&xid) {
                            if let Some(tx) = s.tx {
                                let _ = tx.send(Err(e.into_rpc()));
                            }
                        }
                    }
                    None => {}
                }
                ControlFlow::Continue(())
            }
        }
    }

    /// A call was queued again because `conn` is gone: go on sending if a
    /// newer connection is installed (its own pump may have run before the
    /// call was queued again), otherwise make sure a reconnect will send or
    /// fail it, and stop.
    fn after_lost(self: &Arc<Self>, st: &mut State<D>, conn: &Arc<Conn<D>>) -> ControlFlow<()> {
        if newer(st, conn) {
            return ControlFlow::Continue(());
        }
        self.reconnect_if_orphaned(st);
        ControlFlow::Break(())
    }

    /// Posts the Send of call `xid`, recorded as sent on `conn`. `Break`:
    /// the QP is down and `conn_lost` has not run yet, so every further
    /// post would fail the same way; looping would be a busy loop that
    /// starves the completion task, and `conn_lost` retransmits the queue
    /// on a new connection. (If a new connection is already installed, its
    /// pump may have run before this call was queued again: go on sending
    /// there.)
    fn post_call(self: &Arc<Self>, conn: &Arc<Conn<D>>, xid: u32, send: Bytes) -> ControlFlow<()> {
        let op = SendOp::Send { solicited: false };
        match conn.ep.post_send_msg(op, send, Vec::new()) {
            Ok(()) => {
                self.nudge_if_silent(conn);
                ControlFlow::Continue(())
            }
            Err(e) => {
                if self.send_failed(conn, xid, e) && !self.replaced(conn) {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            }
        }
    }

    /// Starts, once per connection, the task that posts zero-length RDMA
    /// Writes while nothing has arrived on `conn` since a call was sent on
    /// it (see [`RdmaConfig::first_reply_nudge`]).
    fn nudge_if_silent(self: &Arc<Self>, conn: &Arc<Conn<D>>) {
        let Some(first) = conn.nudge else {
            return;
        };
        if conn.recvs.load(Relaxed) > 0 || conn.nudging.swap(true, Relaxed) {
            return;
        }
        let weak = Arc::downgrade(conn);
        let shared = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut wait = first;
            for _ in 0..FIRST_REPLY_NUDGES {
                tokio::time::sleep(wait).await;
                let (Some(conn), Some(sh)) = (weak.upgrade(), shared.upgrade()) else {
                    return;
                };
                if conn.recvs.load(Relaxed) > 0
                    || conn.ep.is_dead()
                    || conn.ep.qp.state() != QpState::Connected
                {
                    return;
                }
                let wr = SendWr::new(
                    0,
                    SendOp::RdmaWrite {
                        remote: RemoteAddr { rkey: 0, offset: 0 },
                    },
                    Vec::new(),
                );
                if conn.ep.post(wr, Vec::new(), None).is_err() {
                    return;
                }
                sh.stats.first_reply_nudges.fetch_add(1, Relaxed);
                tracing::debug!(addr = %sh.addr, ?wait, "nothing received yet: zero-length RDMA Write");
                wait = wait.saturating_mul(2);
            }
        });
    }

    /// A connection other than `conn` is installed now.
    fn replaced(&self, conn: &Arc<Conn<D>>) -> bool {
        newer(&lock(&self.state), conn)
    }

    /// Posting the Send of `xid` failed. True if the QP is no longer
    /// connected (the call, if still wanted, is queued again): the caller
    /// must stop sending on `conn`.
    fn send_failed(self: &Arc<Self>, conn: &Arc<Conn<D>>, xid: u32, e: VerbsError) -> bool {
        let down = conn.ep.qp.state() != QpState::Connected;
        let mut st = lock(&self.state);
        let Some(slot) = st.calls.get_mut(&xid) else {
            return down;
        };
        if slot.sent.as_ref().is_none_or(|s| s.gen != conn.gen) {
            return down;
        }
        let sent = slot.sent.take().expect("checked");
        let mut bufs = Vec::new();
        release_regions(sent.regions, &mut bufs);
        restore(&mut slot.bufs, bufs);
        let same = st.conn.as_ref().is_some_and(|c| Arc::ptr_eq(c, conn));
        if same {
            st.credits.release();
        }
        if down {
            // conn_lost will not see this call any more: requeue it here.
            st.queue.push_front(xid);
            self.reconnect_if_orphaned(&mut st);
        } else if let Some(s) = st.calls.remove(&xid) {
            if let Some(tx) = s.tx {
                let _ = tx.send(Err(TransportError::from(e).into_rpc()));
            }
        }
        down
    }

    /// Plans and registers one call and builds its Send (no lock held).
    #[allow(clippy::type_complexity)]
    fn prepare(
        &self,
        conn: &Arc<Conn<D>>,
        xid: u32,
        req: &Request,
        mut bufs: Vec<BytesMut>,
        credit: u32,
        retransmits: u32,
    ) -> Result<Prepared<D>, (TransportError, Vec<BytesMut>)> {
        match self.prepare_inner(conn, xid, req, &mut bufs, credit, retransmits) {
            Ok(p) => Ok(p),
            Err(e) => Err((e, bufs)),
        }
    }

    fn prepare_inner(
        &self,
        conn: &Arc<Conn<D>>,
        xid: u32,
        req: &Request,
        bufs: &mut Vec<BytesMut>,
        credit: u32,
        retransmits: u32,
    ) -> Result<Prepared<D>, TransportError> {
        let cfg = &self.config;
        let binding = self.bindings.binding(req.prog, req.vers);
        let pb = binding.and_then(|b| b.procedure(req.procedure));
        let mut args = req.args.clone();
        let ddp_lens = args.pieces().iter().filter_map(|p| match p {
            Piece::Ddp(b) => Some(b.len() as u64),
            Piece::Xdr(_) => None,
        });
        if !pb.is_some_and(|pb| pb.allows_ddp_args(ddp_lens)) {
            args = args.into_inline();
        }
        let head: Bytes = match args.pieces().first() {
            Some(Piece::Xdr(b)) => b.clone(),
            _ => Bytes::new(),
        };
        let args_len = args.xdr_len() as u64;
        let mut b = PayloadBuilder::new();
        b.item(&req.call_header(xid));
        b.payload(args);
        let msg = b.finish();
        // Item `i` of the plan is `pieces[i]` (borrowed, not cloned).
        let items = crate::ulb::stream_items(&msg);
        let pieces = msg.pieces();
        // The reply: Write chunks for the caller's result buffers, a Reply
        // chunk if the estimate may exceed the reply inline threshold.
        let est = binding.and_then(|b| {
            b.reply_estimate(
                req.procedure,
                ArgsView {
                    head: &head,
                    len: args_len,
                },
            )
        });
        let caps: Vec<usize> = bufs.iter().map(BytesMut::capacity).collect();
        let shape = ReplyBounds {
            estimate: est.as_ref(),
            layout: self.bindings.layout(req.prog, req.vers).is_some(),
            result_buffers: &caps,
            procedure: req.procedure,
            max_reply_len: req.max_reply_len.map(|m| m as u64),
            rpc_reply_header: cfg.reply_overhead as u64,
            default_max_reply: cfg.default_max_reply as u64,
            write_pad: cfg.write_pad,
        }
        .shape();
        // The call goes out under this side's send limit; a Reply chunk is
        // offered when the reply may exceed its receive limit.
        let mut plan = plan_call_within(
            xid,
            credit,
            &items,
            &shape,
            conn.neg.inline(Side::Client),
            &cfg.chunk_limits(),
        )
        .map_err(|e| TransportError::Plan(e.to_string()))?;
        // Register every region by fast registration.
        let mut regs: Vec<Reg<D>> = Vec::with_capacity(plan.regions.len());
        let mut failed = Vec::new();
        if let Err(e) = self.register_regions(conn, &mut plan, pieces, bufs, &mut regs, &mut failed)
        {
            // Registered pieces first, then the unregistered tail, so the
            // result buffers are put back together in order.
            let mut back = Vec::new();
            release_regions(regs, &mut back);
            back.append(&mut failed);
            restore(bufs, back);
            return Err(e);
        }
        // The Send: header plus inline payload.
        let hlen = plan.header.buffer_len();
        let inline = plan.inline();
        let total = hlen + spans_len(inline) as usize;
        let mut sbuf = BytesMut::with_capacity(total);
        sbuf.resize(hlen, 0);
        if let Err(e) = plan.header.emit(&mut sbuf) {
            let mut back = Vec::new();
            release_regions(regs, &mut back);
            restore(bufs, back);
            return Err(TransportError::Plan(e.to_string()));
        }
        gather_into(&mut sbuf, inline, pieces);
        let report = CallReport::sent(xid, &plan, total as u64, conn.neg.thresholds, retransmits);
        self.stats.counters.add_call(plan.kind);
        self.stats
            .write_pads
            .fetch_add(report.write_pad_segments as u64, Relaxed);
        if let Some(c) = plan.header.chunks() {
            self.stats.counters.add_chunks(c);
        }
        Ok(Prepared {
            offered: plan.offered(),
            regions: regs,
            report,
            send: sbuf.freeze(),
        })
    }

    /// A receive completed on `conn`.
    fn on_recv(self: &Arc<Self>, conn: &Arc<Conn<D>>, wc: WorkCompletion) {
        let Some(msg) = conn.ep.complete_recv(&wc) else {
            return;
        };
        conn.recvs.fetch_add(1, Relaxed);
        let c = &self.stats.counters;
        if route(&msg, Side::Client) == Route::Responder {
            // A reverse-direction Call (RFC 8167 §5.1), told apart before
            // any XID lookup: its XID belongs to the server's XID space, not
            // to this client's calls. This client has no Responder half for
            // it (RFC 8167 §6).
            c.discarded.fetch_add(1, Relaxed);
            tracing::debug!(reason = ?DiscardReason::WrongDirection, "reverse-direction call discarded");
            return;
        }
        let limits = self.config.decode_limits();
        let gen = conn.gen;
        let mut st = lock(&self.state);
        let mut lowered = false;
        let verdict = {
            let calls = &st.calls;
            check_reply(&msg, &limits, |xid| {
                calls
                    .get(&xid)
                    .and_then(|s| s.sent.as_ref())
                    .filter(|s| s.gen == gen)
                    .map(|s| &s.offered)
            })
        };
        let (xid, outcome) = match verdict {
            ReplyVerdict::Discard(reason) => {
                c.discarded.fetch_add(1, Relaxed);
                tracing::debug!(?reason, "reply discarded");
                return;
            }
            ReplyVerdict::Error { xid, err, credit } => {
                lowered |= Self::on_grant(&mut st, credit);
                match err {
                    ErrorBody::Vers { .. } => c.err_vers.fetch_add(1, Relaxed),
                    ErrorBody::Chunk => c.err_chunk.fetch_add(1, Relaxed),
                };
                (xid, Outcome::Error(err))
            }
            ReplyVerdict::Deliver(h) => {
                lowered |= Self::on_grant(&mut st, h.credit);
                let nomsg = matches!(h.body, Body::NoMsg { .. });
                c.add_received_chunks(&h);
                let returned = h.chunks().map(|c| c.to_repr()).unwrap_or_default();
                (
                    h.xid,
                    Outcome::Reply {
                        header_len: h.header_len,
                        nomsg,
                        returned,
                        msg: msg.clone(),
                    },
                )
            }
        };
        let slot = st.calls.remove(&xid);
        if lowered {
            // Abandoned calls may now hold every credit.
            self.break_if_stuck(st);
        } else {
            drop(st);
        }
        if let Some(slot) = slot {
            self.finish(slot, outcome, wc.invalidated_rkey, msg.len() as u64);
        }
        self.pump();
    }
}

/// A queued call taken to be sent, with its credit.
struct Queued<D: Device> {
    conn: Arc<Conn<D>>,
    xid: u32,
    req: Request,
    bufs: Vec<BytesMut>,
    retransmits: u32,
    credit: u32,
}

/// A call ready to be posted.
struct Prepared<D: Device> {
    offered: OfferedChunks,
    regions: Vec<Reg<D>>,
    report: CallReport,
    /// The Send's bytes: transport header and inline part.
    send: Bytes,
}

/// A connection other than `conn` is installed in `st`.
fn newer<D: Device>(st: &State<D>, conn: &Arc<Conn<D>>) -> bool {
    st.conn.as_ref().is_some_and(|c| !Arc::ptr_eq(c, conn))
}

/// A copy of a request sharing its argument bytes (no result buffers).
fn shallow_clone(r: &Request) -> Request {
    Request {
        prog: r.prog,
        vers: r.vers,
        procedure: r.procedure,
        cred: r.cred.clone(),
        args: r.args.clone(),
        result_bufs: Vec::new(),
        max_reply_len: r.max_reply_len,
        timeout: r.timeout,
    }
}

/// Appends the bytes of `spans` (items from `pieces`) to `out`.
fn gather_into(out: &mut BytesMut, spans: &[Span], pieces: &[Piece]) {
    gather_with(
        spans,
        |i| &pieces[i].bytes()[..],
        |b| out.extend_from_slice(b),
    );
}

#[cfg(test)]
mod tests {
    use rdma_verbs::Device;

    #[test]
    fn memfabric_is_named_as_the_nudge_check_expects() {
        assert_eq!(crate::memfabric::Fabric::new().name(), super::MEMFABRIC);
        assert!(!super::accepts_zero_length_write(
            &crate::memfabric::Fabric::new()
        ));
    }
}
