//! The TCP server: accepts connections, reads call records, runs each call
//! as its own task (bounded per connection) and writes replies in the order
//! they complete.
//!
//! The server is generic over a [`RecordService`], which maps one call record
//! to the reply message; [`oncrpc::Dispatcher`] implements it, so
//! `TcpServer::bind(addr, Arc::new(dispatcher), config)` serves any set of
//! [`oncrpc::Service`]s.

use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use oncrpc::{DispatchOutcome, Payload, Piece};
use tokio::io::AsyncWrite;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpStream, ToSocketAddrs};
use tokio::sync::{mpsc, watch, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::{JoinHandle, JoinSet};
use tracing::{debug, debug_span, info, info_span, warn, Instrument};

use crate::io::{write_chain, ReadError, RecordReader};
use crate::record::{
    Record, RecordEncoder, RecordLimits, DEFAULT_MAX_FRAGMENT_SIZE, DEFAULT_MAX_RECORD_SIZE,
};

/// Default of [`ServerConfig::max_bytes_per_connection`]: 64 MiB, the
/// default [`RecordLimits::max_record_size`], so that a maximal record is
/// served without waiting for the rest of the connection's work to drain.
pub const DEFAULT_MAX_BYTES_PER_CONNECTION: usize = DEFAULT_MAX_RECORD_SIZE;

/// Maps one received record (an RPC call) to the reply message, if any.
///
/// The reply is returned as the pieces of the RPC message; the server adds
/// the record marking. `None` means no reply is sent (e.g. the record was not
/// a call).
pub trait RecordService: Send + Sync + 'static {
    /// Handles one call record received on the connection from `peer`.
    fn handle(
        &self,
        record: Record,
        peer: SocketAddr,
    ) -> impl Future<Output = Option<Vec<Bytes>>> + Send;
}

impl RecordService for oncrpc::Dispatcher {
    /// Dispatches the call; the record's fragments become the `Xdr` pieces of
    /// the message (no copy), and the reply's pieces (with the zero pads of
    /// its DDP-eligible items) go out as they are.
    async fn handle(&self, record: Record, peer: SocketAddr) -> Option<Vec<Bytes>> {
        let msg = Payload::from_pieces(record.into_pieces().into_iter().map(Piece::Xdr));
        match self.dispatch(msg).await {
            DispatchOutcome::Reply(reply) => Some(reply.xdr_chunks().collect()),
            DispatchOutcome::Drop(reason) => {
                debug!(%peer, ?reason, "no reply to a message that is not a decodable call");
                None
            }
        }
    }
}

/// Tunables of a [`TcpServer`].
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Limits on every received record.
    pub limits: RecordLimits,
    /// Largest fragment of a reply record.
    pub max_fragment_size: usize,
    /// Calls of one connection running at once; reading pauses at the limit.
    pub max_calls_per_connection: usize,
    /// Bytes one connection may hold in calls and unwritten replies;
    /// reading pauses at the limit, which pushes back on
    /// the peer through TCP flow control. Default
    /// [`DEFAULT_MAX_BYTES_PER_CONNECTION`] (64 MiB).
    ///
    /// A call counts from the moment its record has been read until its
    /// reply has been written (or, without a reply, until its handler
    /// ends): first the record's length, raised to the framed reply's
    /// length when the reply is queued if that is larger. (An echo's reply
    /// shares the call's bytes, so the larger of the two is what is held.)
    /// A received record waits (and the socket is not read meanwhile)
    /// until its length fits; one larger than this whole budget (possible when
    /// [`RecordLimits::max_record_size`] is larger) is admitted once the
    /// connection holds nothing else, so it is served alone rather than
    /// refused or deadlocked. A reply cannot be refused: one larger than
    /// its call is counted without waiting and may take the count over the
    /// budget, which then keeps reading paused until it is written. So a
    /// connection holds at most this budget (or one larger record), plus
    /// one record being read, plus the growth of replies of calls already
    /// running.
    pub max_bytes_per_connection: usize,
    /// Connections served at once; accepting pauses at the limit.
    pub max_connections: usize,
    /// On shutdown, how long calls in progress may take to finish
    /// ([`Duration::MAX`]: no limit).
    pub shutdown_grace: Duration,
    /// A connection with no call in progress that completes no record and
    /// takes no reply bytes for this long is closed (also bounds how long a
    /// peer may hold a half-sent record). A peer that reads a long reply
    /// slowly keeps its connection while bytes move. `None` (or a duration
    /// too long to represent as a deadline, such as [`Duration::MAX`]):
    /// never.
    pub idle_timeout: Option<Duration>,
    /// Send buffer asked for each accepted socket (see
    /// [`crate::io::set_send_buffer`]; default
    /// [`crate::io::DEFAULT_SEND_BUFFER`]); `None`: the kernel's autotuning.
    pub send_buffer: Option<usize>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            limits: RecordLimits::default(),
            max_fragment_size: DEFAULT_MAX_FRAGMENT_SIZE,
            max_calls_per_connection: 128,
            max_bytes_per_connection: DEFAULT_MAX_BYTES_PER_CONNECTION,
            max_connections: 1024,
            shutdown_grace: Duration::from_secs(5),
            idle_timeout: Some(Duration::from_secs(300)),
            send_buffer: Some(crate::io::DEFAULT_SEND_BUFFER),
        }
    }
}

/// Stops a running [`TcpServer`] gracefully. Cloneable; any clone may stop it.
#[derive(Debug, Clone)]
pub struct ShutdownHandle {
    tx: Arc<watch::Sender<bool>>,
}

impl ShutdownHandle {
    /// Asks the server to stop: no new connections or calls are accepted,
    /// calls in progress finish and their replies are sent (within
    /// [`ServerConfig::shutdown_grace`]), then [`TcpServer::run`] returns.
    pub fn shutdown(&self) {
        self.tx.send_replace(true);
    }
}

/// An ONC RPC server over TCP (RFC 5531 §11 record marking).
#[derive(Debug)]
pub struct TcpServer<S> {
    listener: TcpListener,
    service: Arc<S>,
    config: ServerConfig,
    shutdown: Arc<watch::Sender<bool>>,
}

impl<S: RecordService> TcpServer<S> {
    /// Binds a listening socket on `addr`.
    pub async fn bind(
        addr: impl ToSocketAddrs,
        service: Arc<S>,
        config: ServerConfig,
    ) -> io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        Ok(Self::from_listener(listener, service, config))
    }

    /// Serves on an already bound listener.
    pub fn from_listener(listener: TcpListener, service: Arc<S>, config: ServerConfig) -> Self {
        TcpServer {
            listener,
            service,
            config,
            shutdown: Arc::new(watch::Sender::new(false)),
        }
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// A handle that stops the server.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        ShutdownHandle {
            tx: self.shutdown.clone(),
        }
    }

    /// Accepts and serves connections until [`ShutdownHandle::shutdown`].
    pub async fn run(self) -> io::Result<()> {
        let local = self.listener.local_addr()?;
        let span = info_span!("tcp_server", %local);
        self.run_inner().instrument(span).await
    }

    async fn run_inner(self) -> io::Result<()> {
        let TcpServer {
            listener,
            service,
            config,
            shutdown,
        } = self;
        let config = Arc::new(config);
        let mut stop = shutdown.subscribe();
        let slots = Arc::new(Semaphore::new(config.max_connections.max(1)));
        let mut connections = JoinSet::new();
        loop {
            if *stop.borrow_and_update() {
                break;
            }
            let permit = tokio::select! {
                permit = slots.clone().acquire_owned() => match permit {
                    Ok(p) => p,
                    Err(_) => break,
                },
                _ = stop.changed() => continue,
            };
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, peer)) => {
                        let service = service.clone();
                        let config = config.clone();
                        let stop = shutdown.subscribe();
                        connections.spawn(
                            async move {
                                serve_connection(stream, peer, service, config, stop).await;
                                drop(permit);
                            }
                            .instrument(info_span!("conn", %peer)),
                        );
                    }
                    Err(e) => {
                        // Typically EMFILE/ENFILE: back off rather than spin.
                        warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
                _ = stop.changed() => {}
            }
        }
        drop(listener);
        info!(
            connections = connections.len(),
            "shutting down: draining connections"
        );
        // Connections notice the stop themselves; give them the grace period
        // (plus a little for the final writes), then cut them off.
        // Saturating: a huge grace period (Duration::MAX) must not panic;
        // tokio::time::timeout treats an unrepresentable one as "never".
        let deadline = config
            .shutdown_grace
            .saturating_add(Duration::from_millis(500));
        let drained = tokio::time::timeout(deadline, async {
            while connections.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            warn!("shutdown grace period over; closing remaining connections");
            connections.shutdown().await;
        }
        Ok(())
    }
}

/// Serves one connection until the peer closes it, it misbehaves, or the
/// server stops.
async fn serve_connection<S: RecordService>(
    stream: TcpStream,
    peer: SocketAddr,
    service: Arc<S>,
    config: Arc<ServerConfig>,
    mut stop: watch::Receiver<bool>,
) {
    if let Err(e) = stream.set_nodelay(true) {
        debug!(error = %e, "set_nodelay failed");
    }
    crate::io::set_send_buffer(&stream, config.send_buffer);
    debug!("connection accepted");
    let (read_half, write_half) = stream.into_split();
    let mut reader = RecordReader::new(read_half, config.limits);
    // Each queued reply carries its call's permit and bytes, released only
    // once the reply is written: a peer that sends calls but does not read
    // replies stops being read after `max_calls_per_connection` of them or
    // `max_bytes_per_connection` of their bytes, instead of making replies
    // pile up in memory.
    let (reply_tx, reply_rx) = mpsc::unbounded_channel::<QueuedReply>();
    let written = Arc::new(AtomicU64::new(0));
    let write_half = Counting {
        inner: write_half,
        written: written.clone(),
    };
    let mut writer = tokio::spawn(write_replies(write_half, reply_rx).in_current_span());
    let calls_allowed = Arc::new(Semaphore::new(config.max_calls_per_connection.max(1)));
    // Each call also holds its bytes in this budget until its reply is
    // written: calls bound the count of records in flight,
    // the budget their size.
    let budget = ByteBudget::new(config.max_bytes_per_connection);
    let mut calls = JoinSet::new();
    let encoder = RecordEncoder::new(config.max_fragment_size);

    let mut idle = Idle::new(config.idle_timeout, written);
    let outcome: Result<(), ConnectionEnd> = loop {
        // Every call slot may be held by a reply the peer does not take:
        // waiting for one with no call running is idle too.
        let permit = match wait_while_serving(
            calls_allowed.clone().acquire_owned(),
            &mut calls,
            &mut writer,
            &mut stop,
            &mut idle,
        )
        .await
        {
            Ok(Ok(permit)) => permit,
            Ok(Err(_closed)) => break Ok(()),
            Err(end) => break end.outcome("waiting for a call slot"),
        };
        let record = tokio::select! {
            r = reader.next_record() => r,
            _ = stop.wait_for(|s| *s) => break Ok(()),
            _ = tokio::time::sleep_until(idle.deadline()), if idle.armed() && calls.is_empty() => {
                if idle.expired() {
                    debug!("idle timeout");
                    break Ok(());
                }
                continue;
            }
            _ = &mut writer => break Err(ConnectionEnd::WriteFailed),
            Some(done) = calls.join_next(), if !calls.is_empty() => {
                log_call_end(done);
                idle.touch();
                continue;
            }
        };
        idle.touch();
        match record {
            Ok(Some(record)) => {
                // Room for the record's bytes; reading stays paused until
                // there is. Waiting for replies the peer does not take,
                // with no call running, is idle as well.
                let bytes = match wait_while_serving(
                    budget.acquire(record.len()),
                    &mut calls,
                    &mut writer,
                    &mut stop,
                    &mut idle,
                )
                .await
                {
                    Ok(bytes) => bytes,
                    Err(end) => break end.outcome("waiting for room in the byte budget"),
                };
                let service = service.clone();
                let reply_tx = reply_tx.clone();
                // A span per call, named by the xid when the record starts
                // with one.
                let xid = record
                    .pieces()
                    .first()
                    .and_then(|p| oncrpc::msg::peek_xid_and_type(p))
                    .map(|(xid, _)| xid);
                let span = debug_span!("call", xid, len = record.len());
                calls.spawn(
                    async move {
                        let mut bytes = bytes;
                        if let Some(reply) = service.handle(record, peer).await {
                            let mut framed = Vec::with_capacity(reply.len() + 2);
                            encoder.encode(&reply, &mut framed);
                            bytes.raise_to(framed.iter().map(Bytes::len).sum());
                            // A closed writer means the connection is gone.
                            let _ = reply_tx.send(QueuedReply {
                                chain: framed,
                                _permit: permit,
                                _bytes: bytes,
                            });
                        }
                    }
                    .instrument(span),
                );
                // Reap finished call tasks without waiting.
                while let Some(done) = calls.try_join_next() {
                    log_call_end(done);
                }
            }
            Ok(None) => break Ok(()),
            Err(e) => break Err(ConnectionEnd::BadInput(e)),
        }
    };

    match outcome {
        Ok(()) => {
            // Peer closed its side or the server is stopping: finish calls in
            // progress and flush their replies.
            let grace = config.shutdown_grace;
            if tokio::time::timeout(grace, async {
                while let Some(done) = calls.join_next().await {
                    log_call_end(done);
                }
            })
            .await
            .is_err()
            {
                warn!("calls still running after the grace period; abandoning them");
                calls.shutdown().await;
            }
            drop(reply_tx);
            // The replies get the grace period too: a peer that does not
            // read them must not keep the connection (and its slot) open
            // for good.
            if !writer.is_finished() && tokio::time::timeout(grace, &mut writer).await.is_err() {
                warn!("replies not taken by the peer within the grace period; closing");
                writer.abort();
            }
            debug!("connection closed");
        }
        Err(ConnectionEnd::WriteFailed) => {
            // Replies can no longer be delivered: stop the calls at once.
            debug!("connection lost while writing");
            calls.shutdown().await;
        }
        Err(ConnectionEnd::BadInput(e)) => {
            // A misbehaving peer (or a failed socket): close this connection
            // alone, at once.
            match e {
                ReadError::Record(e) => {
                    warn!(error = %e, "peer broke record marking; closing connection")
                }
                ReadError::Io(e) => debug!(error = %e, "read failed; closing connection"),
            }
            calls.shutdown().await;
            writer.abort();
        }
    }
}

/// Why a connection ended early.
enum ConnectionEnd {
    /// The peer broke record marking or a limit, or reading failed.
    BadInput(ReadError),
    /// Writing a reply failed (the writer task has ended).
    WriteFailed,
}

/// How a wait of the connection loop ended without what it waited for.
enum WaitEnd {
    /// The server is stopping.
    Stop,
    /// The writer task ended: the socket failed.
    WriteFailed,
    /// No call ran and no record completed for the idle timeout.
    Idle,
}

impl WaitEnd {
    /// What the connection loop does next; `what` names the wait, for the log.
    fn outcome(self, what: &'static str) -> Result<(), ConnectionEnd> {
        match self {
            WaitEnd::Stop => Ok(()),
            WaitEnd::WriteFailed => Err(ConnectionEnd::WriteFailed),
            WaitEnd::Idle => {
                debug!(wait = what, "idle timeout with replies not taken");
                Ok(())
            }
        }
    }
}

/// Waits for `what` (a call slot, or room in the byte budget) while the
/// connection stays served: it gives up when the server stops, when the
/// writer ends, or when the idle timeout passes with no call running and no
/// reply bytes taken (the slot or the bytes are then held by replies the
/// peer does not take). Calls that end meanwhile are reaped and restart the
/// idle timer, as while reading.
async fn wait_while_serving<T>(
    what: impl Future<Output = T>,
    calls: &mut JoinSet<()>,
    writer: &mut JoinHandle<()>,
    stop: &mut watch::Receiver<bool>,
    idle: &mut Idle,
) -> Result<T, WaitEnd> {
    let what = std::pin::pin!(what);
    let mut what = what;
    loop {
        tokio::select! {
            // What is waited for first: mostly it is ready at once, and
            // then no idle timer is armed (one per call otherwise).
            biased;
            got = what.as_mut() => return Ok(got),
            _ = stop.wait_for(|s| *s) => return Err(WaitEnd::Stop),
            _ = &mut *writer => return Err(WaitEnd::WriteFailed),
            _ = tokio::time::sleep_until(idle.deadline()), if idle.armed() && calls.is_empty() => {
                if idle.expired() {
                    return Err(WaitEnd::Idle);
                }
            }
            Some(done) = calls.join_next(), if !calls.is_empty() => {
                log_call_end(done);
                idle.touch();
            }
        }
    }
}

/// When a connection last showed life ([`ServerConfig::idle_timeout`]): a
/// record arrived, a call ended, or the peer took reply bytes (a long reply
/// read slowly is not idleness).
struct Idle {
    since: tokio::time::Instant,
    timeout: Option<Duration>,
    /// Reply bytes written so far (by the connection's writer task).
    written: Arc<AtomicU64>,
    /// `written` at the last [`Idle::touch`].
    seen: u64,
}

impl Idle {
    fn new(timeout: Option<Duration>, written: Arc<AtomicU64>) -> Self {
        Idle {
            since: tokio::time::Instant::now(),
            timeout,
            written,
            seen: 0,
        }
    }

    /// When the connection counts as idle if nothing happens before; `None`
    /// without an idle timeout, or with one too long for an `Instant` to
    /// represent (e.g. [`Duration::MAX`]): that one never expires.
    fn limit(&self) -> Option<tokio::time::Instant> {
        self.timeout.and_then(|t| self.since.checked_add(t))
    }

    /// Whether there is an idle deadline at all.
    fn armed(&self) -> bool {
        self.limit().is_some()
    }

    /// [`Idle::limit`], or any instant when there is none: `select!`
    /// evaluates the timer's expression even when its branch is disabled
    /// by [`Idle::armed`], so this must not panic on overflow either.
    fn deadline(&self) -> tokio::time::Instant {
        self.limit().unwrap_or(self.since)
    }

    /// Something happened now.
    fn touch(&mut self) {
        self.since = tokio::time::Instant::now();
        self.seen = self.written.load(Ordering::Relaxed);
    }

    /// At the deadline: true if no reply bytes were written since the last
    /// touch either; otherwise the writing counts as life, and the timer
    /// starts again.
    fn expired(&mut self) -> bool {
        if self.written.load(Ordering::Relaxed) == self.seen {
            return true;
        }
        self.touch();
        false
    }
}

/// The connection's write half, counting the bytes the socket took.
struct Counting {
    inner: OwnedWriteHalf,
    written: Arc<AtomicU64>,
}

impl Counting {
    fn count(&self, r: Poll<io::Result<usize>>) -> Poll<io::Result<usize>> {
        if let Poll::Ready(Ok(n)) = r {
            self.written.fetch_add(n as u64, Ordering::Relaxed);
        }
        r
    }
}

impl AsyncWrite for Counting {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.count(r)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.count(r)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// One connection's budget of bytes in calls and unwritten replies
/// ([`ServerConfig::max_bytes_per_connection`]).
///
/// Only the connection's reading loop waits on it; calls add their
/// replies' growth without waiting, and bytes come back when a
/// [`BudgetGuard`] is dropped.
#[derive(Debug)]
struct ByteBudget {
    limit: usize,
    held: AtomicUsize,
    released: Notify,
}

impl ByteBudget {
    fn new(limit: usize) -> Arc<Self> {
        Arc::new(ByteBudget {
            limit,
            held: AtomicUsize::new(0),
            released: Notify::new(),
        })
    }

    /// Takes `n` bytes once they fit in the budget, or once nothing is held
    /// at all (so that a record larger than the budget is served alone
    /// rather than never).
    async fn acquire(self: &Arc<Self>, n: usize) -> BudgetGuard {
        let mut logged = false;
        loop {
            let released = self.released.notified();
            let mut released = std::pin::pin!(released);
            // Registered before the check: a release after it wakes us.
            released.as_mut().enable();
            let held = self.held.load(Ordering::Acquire);
            if held == 0 || held.saturating_add(n) <= self.limit {
                if self
                    .held
                    .compare_exchange(held, held + n, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    return BudgetGuard {
                        budget: self.clone(),
                        n,
                    };
                }
                continue;
            }
            if !logged {
                debug!(
                    held,
                    len = n,
                    limit = self.limit,
                    "byte budget exhausted; reading paused until replies are written"
                );
                logged = true;
            }
            released.await;
        }
    }
}

/// Bytes of a [`ByteBudget`] held by one call and then its reply; given
/// back when dropped.
#[derive(Debug)]
struct BudgetGuard {
    budget: Arc<ByteBudget>,
    n: usize,
}

impl BudgetGuard {
    /// Raises the bytes held to `n` if that is more, without waiting (a
    /// reply cannot be refused; reading stays paused while over budget).
    fn raise_to(&mut self, n: usize) {
        if n > self.n {
            self.budget.held.fetch_add(n - self.n, Ordering::AcqRel);
            self.n = n;
        }
    }
}

impl Drop for BudgetGuard {
    fn drop(&mut self) {
        self.budget.held.fetch_sub(self.n, Ordering::AcqRel);
        self.budget.released.notify_waiters();
    }
}

/// Reports a call task that panicked (its caller gets no reply).
fn log_call_end(done: Result<(), tokio::task::JoinError>) {
    if let Err(e) = done {
        if e.is_panic() {
            warn!("a call handler panicked; its call gets no reply");
        }
    }
}

/// A framed reply waiting for the writer, holding its call's slot and bytes.
struct QueuedReply {
    chain: Vec<Bytes>,
    _permit: OwnedSemaphorePermit,
    _bytes: BudgetGuard,
}

/// Writes reply records as they complete, batching those that are ready.
async fn write_replies(mut w: Counting, mut rx: mpsc::UnboundedReceiver<QueuedReply>) {
    use tokio::io::AsyncWriteExt;
    let mut chain = VecDeque::new();
    let mut batch = Vec::new();
    while let Some(first) = rx.recv().await {
        batch.push(first);
        // Batch whatever else is ready, up to a bound on queued pieces.
        while batch.len() < 64 {
            match rx.try_recv() {
                Ok(more) => batch.push(more),
                Err(_) => break,
            }
        }
        for reply in &mut batch {
            chain.extend(std::mem::take(&mut reply.chain));
        }
        if let Err(e) = write_chain(&mut w, &mut chain).await {
            debug!(error = %e, "write failed");
            return;
        }
        // Written: release the calls' slots.
        batch.clear();
    }
    let _ = w.shutdown().await;
}
