//! The TCP client: [`TcpChannel`], one connection carrying many outstanding
//! calls, implementing [`oncrpc::Channel`].
//!
//! XIDs, the table of outstanding calls and reply matching (in any order)
//! come from [`oncrpc::ClientCore`]. A reader task completes calls as their
//! replies arrive; a writer task sends call records with vectored writes.
//! When the connection is lost, every outstanding call (and every later one)
//! fails with [`RpcError::ConnectionLost`].

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use oncrpc::{Channel, ClientCore, Payload, Piece, ReplyOutcome, Request, RpcError};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpStream, ToSocketAddrs};
use tokio::sync::{mpsc, oneshot, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::AbortHandle;
use tracing::{debug, info_span, warn, Instrument};

use crate::io::{write_chain, RecordReader};
use crate::record::{RecordEncoder, RecordLimits, DEFAULT_MAX_FRAGMENT_SIZE};

/// Tunables of a [`TcpChannel`].
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Limits on every received reply record.
    pub limits: RecordLimits,
    /// Largest fragment of a call record.
    pub max_fragment_size: usize,
    /// Timeout of calls whose [`Request::timeout`] is `None`
    /// (`None`: wait for ever, or until the connection is lost).
    pub default_timeout: Option<Duration>,
    /// How long [`TcpChannel::connect_with`] may take.
    pub connect_timeout: Duration,
    /// Send buffer asked for the socket (see [`crate::io::set_send_buffer`];
    /// default [`crate::io::DEFAULT_SEND_BUFFER`]); `None`: the kernel's
    /// autotuning. Paths with a bandwidth-delay product above ~1 MiB want
    /// more.
    pub send_buffer: Option<usize>,
    /// Bytes of call records queued and not yet written to the socket. A
    /// call waits for room, within its own timeout, so that a
    /// server that stops reading cannot make the client's memory grow
    /// without bound. A call larger than this waits until it is the only
    /// one queued. Calls whose caller gave up (timeout, or a dropped future)
    /// before their record was written are not sent at all. At most 4 GiB
    /// is used. Default [`DEFAULT_MAX_QUEUED_BYTES`].
    pub max_queued_bytes: usize,
}

/// Default of [`ClientConfig::max_queued_bytes`]: 64 MiB, the default
/// record limit.
pub const DEFAULT_MAX_QUEUED_BYTES: usize = 64 << 20;

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            limits: RecordLimits::default(),
            max_fragment_size: DEFAULT_MAX_FRAGMENT_SIZE,
            default_timeout: Some(Duration::from_secs(30)),
            connect_timeout: Duration::from_secs(10),
            send_buffer: Some(crate::io::DEFAULT_SEND_BUFFER),
            max_queued_bytes: DEFAULT_MAX_QUEUED_BYTES,
        }
    }
}

type Completion = oneshot::Sender<Result<Payload, RpcError>>;

/// Client state shared by the callers and the connection tasks.
#[derive(Debug)]
struct State {
    core: ClientCore<Completion>,
    /// Set once the connection is lost; no call can start afterwards.
    closed: bool,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    /// Wakes the writer when the reader has ended, so that it closes the
    /// socket rather than keep a half-dead connection open.
    reader_done: Notify,
    /// Room for queued call records, in bytes
    /// ([`ClientConfig::max_queued_bytes`]); closed when the connection is
    /// lost.
    room: Arc<Semaphore>,
    /// [`ClientConfig::max_queued_bytes`], as permits.
    room_max: u32,
}

/// A call record waiting for the writer, holding its room in the queue.
#[derive(Debug)]
struct Queued {
    xid: u32,
    framed: Vec<Bytes>,
    room: OwnedSemaphorePermit,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave `State` inconsistent
        // in a way that matters more than losing the connection would.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Marks the connection lost and fails every outstanding call.
    fn fail_all(&self, why: &str) {
        let failed = {
            let mut st = self.lock();
            st.closed = true;
            st.core.fail_all()
        };
        // Calls waiting for room in the queue give up too.
        self.room.close();
        if !failed.is_empty() {
            debug!(calls = failed.len(), why, "failing outstanding calls");
        }
        for (_, tx) in failed {
            let _ = tx.send(Err(RpcError::ConnectionLost));
        }
    }
}

/// An ONC RPC client connection over TCP.
///
/// Cheap to share (`Arc<TcpChannel>` also implements [`Channel`]); calls may
/// be made concurrently from many tasks. Dropping the channel closes the
/// connection.
#[derive(Debug)]
pub struct TcpChannel {
    shared: Arc<Shared>,
    writes: mpsc::UnboundedSender<Queued>,
    encoder: RecordEncoder,
    default_timeout: Option<Duration>,
    local: SocketAddr,
    peer: SocketAddr,
    tasks: [AbortHandle; 2],
}

impl Drop for TcpChannel {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl TcpChannel {
    /// Connects to `addr` with the default [`ClientConfig`].
    pub async fn connect(addr: impl ToSocketAddrs) -> io::Result<Self> {
        Self::connect_with(addr, ClientConfig::default()).await
    }

    /// Connects to `addr`.
    pub async fn connect_with(addr: impl ToSocketAddrs, config: ClientConfig) -> io::Result<Self> {
        let stream = tokio::time::timeout(config.connect_timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
        Self::from_stream(stream, config)
    }

    /// Runs the client over an established connection.
    ///
    /// Must be called within a tokio runtime.
    pub fn from_stream(stream: TcpStream, config: ClientConfig) -> io::Result<Self> {
        stream.set_nodelay(true)?;
        crate::io::set_send_buffer(&stream, config.send_buffer);
        let local = stream.local_addr()?;
        let peer = stream.peer_addr()?;
        let room_max = u32::try_from(config.max_queued_bytes.max(1)).unwrap_or(u32::MAX);
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                core: ClientCore::new(),
                closed: false,
            }),
            reader_done: Notify::new(),
            room: Arc::new(Semaphore::new(room_max as usize)),
            room_max,
        });
        let (read_half, write_half) = stream.into_split();
        let (writes, write_rx) = mpsc::unbounded_channel();
        let span = info_span!("tcp_client", %local, %peer);
        let reader = tokio::spawn(
            read_replies(read_half, config.limits, shared.clone()).instrument(span.clone()),
        );
        let writer =
            tokio::spawn(write_calls(write_half, write_rx, shared.clone()).instrument(span));
        Ok(TcpChannel {
            shared,
            writes,
            encoder: RecordEncoder::new(config.max_fragment_size),
            default_timeout: config.default_timeout,
            local,
            peer,
            tasks: [reader.abort_handle(), writer.abort_handle()],
        })
    }

    /// The local address of the connection.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The server's address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    /// Whether the connection has been lost (every call now fails).
    pub fn is_closed(&self) -> bool {
        self.shared.lock().closed
    }

    /// Bytes of call records queued and not yet written to the socket (at
    /// most [`ClientConfig::max_queued_bytes`]).
    pub fn queued_bytes(&self) -> usize {
        (self.shared.room_max as usize).saturating_sub(self.shared.room.available_permits())
    }

    /// Number of calls awaiting their reply.
    pub fn outstanding(&self) -> usize {
        self.shared.lock().core.outstanding()
    }

    async fn call_inner(&self, req: Request) -> Result<Payload, RpcError> {
        let (tx, rx) = oneshot::channel();
        let timeout = req.timeout.or(self.default_timeout);
        let (xid, msg) = {
            let mut st = self.shared.lock();
            if st.closed {
                return Err(RpcError::ConnectionLost);
            }
            st.core.start_call(&req, Instant::now(), tx)
        };
        // From here on, leaving early (timeout, or the caller dropping this
        // future) must forget the xid.
        let guard = ForgetOnDrop {
            shared: &self.shared,
            xid,
        };
        let chunks: Vec<Bytes> = msg.xdr_chunks().collect();
        let mut framed = Vec::with_capacity(chunks.len() + 2);
        self.encoder.encode(&chunks, &mut framed);
        let len: usize = framed.iter().map(Bytes::len).sum();
        // Room in the queue, then the reply: both within the call's timeout.
        let exchange = async {
            let want = u32::try_from(len)
                .unwrap_or(u32::MAX)
                .min(self.shared.room_max);
            let Ok(room) = self.shared.room.clone().acquire_many_owned(want).await else {
                return Err(RpcError::ConnectionLost);
            };
            let queued = Queued { xid, framed, room };
            if self.writes.send(queued).is_err() {
                return Err(RpcError::ConnectionLost);
            }
            // A dropped sender means the call was removed without an answer.
            rx.await.unwrap_or(Err(RpcError::ConnectionLost))
        };
        let completion = match timeout {
            Some(t) => match tokio::time::timeout(t, exchange).await {
                Ok(c) => c,
                Err(_) => {
                    debug!(xid, ?t, "call timed out");
                    return Err(RpcError::Timeout);
                }
            },
            None => exchange.await,
        };
        if matches!(completion, Err(RpcError::ConnectionLost)) {
            // Possibly never queued: make sure the xid is forgotten.
            drop(guard);
        } else {
            // Completed: the reply (or the connection's end) took the xid.
            std::mem::forget(guard);
        }
        completion
    }
}

impl Channel for TcpChannel {
    fn call(
        &self,
        req: Request,
    ) -> impl std::future::Future<Output = Result<Payload, RpcError>> + Send {
        self.call_inner(req)
    }
}

/// Removes an abandoned call from the table of outstanding calls.
struct ForgetOnDrop<'a> {
    shared: &'a Shared,
    xid: u32,
}

impl Drop for ForgetOnDrop<'_> {
    fn drop(&mut self) {
        self.shared.lock().core.cancel(self.xid);
    }
}

/// Completes calls as their replies arrive; fails them all when the
/// connection ends.
async fn read_replies(read_half: OwnedReadHalf, limits: RecordLimits, shared: Arc<Shared>) {
    let mut reader = RecordReader::new(read_half, limits);
    let why = loop {
        let record = match reader.next_record().await {
            Ok(Some(r)) => r,
            Ok(None) => break "server closed the connection".to_string(),
            Err(e) => {
                warn!(error = %e, "closing connection");
                break e.to_string();
            }
        };
        let msg = Payload::from_pieces(record.into_pieces().into_iter().map(Piece::Xdr));
        let outcome = shared.lock().core.handle_reply(&msg);
        match outcome {
            ReplyOutcome::Completed { data, result, .. } => {
                // The caller may have given up just now; that is fine.
                let _ = data.send(result);
            }
            ReplyOutcome::UnknownXid(xid) => debug!(xid, "reply to no outstanding call"),
            ReplyOutcome::NotAReply(xid) => debug!(xid, "ignoring a CALL from the server"),
            ReplyOutcome::Malformed(e) => debug!(error = %e, "ignoring malformed reply"),
        }
    };
    shared.fail_all(&why);
    shared.reader_done.notify_one();
}

/// Sends call records, batching those queued together. A record whose
/// caller gave up before it was written (its xid no longer outstanding) is
/// dropped unsent: a server that was slow to read must not run calls their
/// callers abandoned long ago.
async fn write_calls(
    mut w: OwnedWriteHalf,
    mut rx: mpsc::UnboundedReceiver<Queued>,
    shared: Arc<Shared>,
) {
    use tokio::io::AsyncWriteExt;
    let mut chain = VecDeque::new();
    // The room of the records in `chain`, given back once they are written.
    let mut rooms = Vec::new();
    let take = |q: Queued, chain: &mut VecDeque<Bytes>, rooms: &mut Vec<_>| {
        if shared.lock().core.is_pending(q.xid) {
            chain.extend(q.framed);
            rooms.push(q.room);
        } else {
            debug!(
                xid = q.xid,
                "call given up before it was sent; not sending it"
            );
        }
    };
    loop {
        let first = tokio::select! {
            next = rx.recv() => match next {
                Some(first) => first,
                None => return, // the channel was dropped
            },
            _ = shared.reader_done.notified() => {
                // The connection is dead or broken: close our side too.
                let _ = w.shutdown().await;
                return;
            }
        };
        take(first, &mut chain, &mut rooms);
        while chain.len() < 1024 {
            match rx.try_recv() {
                Ok(more) => take(more, &mut chain, &mut rooms),
                Err(_) => break,
            }
        }
        if chain.is_empty() {
            continue;
        }
        let written = tokio::select! {
            r = write_chain(&mut w, &mut chain) => r,
            // A peer that stopped reading must not keep us here.
            _ = shared.reader_done.notified() => return,
        };
        rooms.clear();
        if let Err(e) = written {
            warn!(error = %e, "write failed; closing connection");
            shared.fail_all("write failed");
            // Closing our side makes the server drop the connection.
            return;
        }
    }
}
