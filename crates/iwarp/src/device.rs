//! The software iWARP device: the `rdma-verbs` implementation and the tokio
//! driver (MPA handshake, one reader and one writer task per connection).

use crate::capture::{Capture, ConnCapture};
use crate::cq::Cq;
use crate::engine::rx::{Rx, RxStatus};
use crate::engine::tx::Tx;
use crate::engine::{Limits, QpInner, QpShared, SqItem};
use crate::handshake::{self, HandshakeError, MpaConfig, Negotiated, Request};
use crate::mem::{next_key, Region, StagTable};
use crate::wire::fpdu::mulpdu;
use crate::wire::terminate::{TerminateCause, TerminateRepr};
use bytes::Bytes;
use rdma_verbs::{
    Access, CmEvent, ConnError, ConnInfo, ConnParam, FastRegWr, MrBuffer, PostBatchError, QpInit,
    QpState, RecvWr, RegisterError, SendOp, SendWr, VerbsError,
};
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// Device configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// MPA preferences (CRC, revision, peer-to-peer).
    pub mpa: MpaConfig,
    /// Time allowed for the MPA Request/Reply exchange.
    pub handshake_timeout: Duration,
    /// Upper bound for IRD/ORD.
    pub max_rd_atomic: u16,
    /// Override the MULPDU (default: from the connection's MSS).
    pub mulpdu: Option<usize>,
    /// Adaptive placement (the default): the stream is read in large blocks
    /// into a fixed staging buffer and payload found there is copied once
    /// into registered memory; the part of a payload that has not arrived
    /// yet is read straight from the socket into registered memory. `false`
    /// never reads into registered memory directly (always staged + one
    /// copy).
    pub direct_placement: bool,
    /// Read RDMA Read Responses ahead, several segments per `recvmsg`
    /// straight into the Read's sink (with direct placement only). On by
    /// default: ~7 instead of ~18 `recvmsg` per MiB; with the send buffer
    /// default ([`DEFAULT_SEND_BUFFER`]) it was faster or equal on the
    /// loopback test machine (see `engine::rx::Rx::set_read_ahead`).
    pub read_ahead: bool,
    /// Write this device's own traffic (MPA exchange and FPDUs, both
    /// directions, with synthesized Ethernet/IP/TCP headers) to a pcap file.
    pub capture: Option<Capture>,
    /// Send buffer asked for each connection's TCP socket (`SO_SNDBUF`,
    /// set when the connection enters RDMA mode; Linux doubles the value,
    /// caps it at `net.core.wmem_max`, and stops autotuning it). `None`
    /// leaves the kernel's autotuning. Default
    /// [`DEFAULT_SEND_BUFFER`]: see there.
    pub send_buffer: Option<usize>,
    /// Once a QP has stopped (an error, a Terminate received or to send,
    /// or [`disconnect`](rdma_verbs::QueuePair::disconnect)), how long the
    /// transmit half waits for the peer to take any of the bytes still
    /// queued (the rest of a partly written FPDU, our Terminate) before it
    /// shuts the TCP connection anyway; a peer that keeps taking bytes gets
    /// at most ten times this in all. A peer that stops reading cannot
    /// hold a stopped connection open. Default 2 s.
    pub close_grace: Duration,
    /// TCP keepalive on each connection's socket: the idle time before the
    /// first probe (then a probe every 10 s, 6 in all), so that a peer host
    /// that vanished without a FIN or RST (a crash, a lost NAT mapping) is
    /// detected and the QP fails, also while its consumer waits on data it
    /// cannot see (e.g. a requester whose chunks are being moved). `None`:
    /// off. Default 60 s.
    pub keepalive: Option<Duration>,
}

/// The default [`Config::send_buffer`]: 512 KiB asked, 1 MiB in effect on
/// Linux. Autotuning on loopback grows a busy socket's buffer to 4 MiB,
/// and the bytes then wait in kernel memory long enough to leave the
/// cache before the receiver copies them; with 1 MiB they do not.
/// Measured on the 2-core test VM (`rpcrdma bench … --size 1MiB --depth
/// 4`, three alternating rounds): PUT 2.2–2.6 → 3.2–3.8 GB/s and client CPU
/// 0.25–0.29 → 0.18–0.21 s/GB; the iwarp perf bench's RDMA Read 3.5–3.9 →
/// 5.7–6.4 GB/s. The same buffer helps a plain TCP socket as much, so our
/// RPC over TCP (`oncrpc-tcp`) uses it too. A path whose bandwidth-delay
/// product exceeds ~1 MiB (long-haul links) wants a larger value or `None`.
pub const DEFAULT_SEND_BUFFER: usize = 512 * 1024;

impl Default for Config {
    fn default() -> Self {
        Config {
            mpa: MpaConfig::default(),
            handshake_timeout: Duration::from_secs(10),
            max_rd_atomic: 64,
            mulpdu: None,
            direct_placement: true,
            read_ahead: true,
            capture: None,
            send_buffer: Some(DEFAULT_SEND_BUFFER),
            close_grace: Duration::from_secs(2),
            keepalive: Some(Duration::from_secs(60)),
        }
    }
}

#[derive(Debug)]
struct DevInner {
    cfg: Config,
    table: Arc<StagTable>,
    next_pd: AtomicU32,
    next_qp: AtomicU32,
}

/// A software iWARP RNIC (cheap to clone).
#[derive(Debug, Clone)]
pub struct Device {
    inner: Arc<DevInner>,
}

impl Device {
    /// A device with `cfg`.
    pub fn new(cfg: Config) -> Self {
        if cfg.mpa.crc {
            // Choose the CRC backend now (a ~0.2 ms measurement, once per
            // process) rather than in the first connection's data path.
            let _ = crate::crc::backend();
        }
        Device {
            inner: Arc::new(DevInner {
                cfg,
                table: Arc::new(StagTable::default()),
                next_pd: AtomicU32::new(1),
                next_qp: AtomicU32::new(1),
            }),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.inner.cfg
    }

    /// Flushes the capture file, if capturing.
    pub fn flush_capture(&self) -> io::Result<()> {
        match &self.inner.cfg.capture {
            Some(c) => c.flush(),
            None => Ok(()),
        }
    }

    fn conn_capture(
        &self,
        local: SocketAddr,
        peer: SocketAddr,
        initiator: bool,
    ) -> Option<ConnCapture> {
        let c = self.inner.cfg.capture.as_ref()?;
        c.connection(local, peer, initiator, true)
            .map_err(|e| tracing::warn!(error = %e, "capture failed"))
            .ok()
    }

    /// Registered regions (diagnostics).
    pub fn regions(&self) -> usize {
        self.inner.table.len()
    }
}

impl Default for Device {
    fn default() -> Self {
        Device::new(Config::default())
    }
}

/// A protection domain.
#[derive(Debug, Clone)]
pub struct Pd {
    id: u32,
    dev: Device,
}

/// A memory region; owns its buffer while registered. Dropping it
/// deregisters (the buffer is dropped too).
#[derive(Debug)]
pub struct Mr {
    region: Arc<Region>,
    table: Arc<StagTable>,
}

impl rdma_verbs::ProtectionDomain for Pd {
    type Mr = Mr;

    fn register(&self, buffer: MrBuffer, access: Access) -> Result<Mr, RegisterError> {
        if let Err(error) = buffer.check_registration(access) {
            return Err(RegisterError { error, buffer });
        }
        let len = buffer.len();
        let region = self
            .dev
            .inner
            .table
            .insert(self.id, len, access, Some(buffer));
        Ok(Mr {
            region,
            table: self.dev.inner.table.clone(),
        })
    }

    fn alloc_mr(&self, max_len: usize) -> Result<Mr, VerbsError> {
        let region = self
            .dev
            .inner
            .table
            .insert(self.id, max_len, Access::NONE, None);
        Ok(Mr {
            region,
            table: self.dev.inner.table.clone(),
        })
    }
}

impl rdma_verbs::MemoryRegion for Mr {
    fn lkey(&self) -> u32 {
        // Lock-free: a placement into this region holds its lock across a
        // socket read.
        self.region.stag()
    }
    fn rkey(&self) -> u32 {
        self.lkey()
    }
    fn len(&self) -> usize {
        self.region.lock().buffer.as_ref().map_or(0, |b| b.len())
    }
    fn access(&self) -> Access {
        self.region.lock().access
    }
    fn is_valid(&self) -> bool {
        self.region.lock().valid
    }
    fn take_buffer(&self) -> Result<MrBuffer, VerbsError> {
        let mut st = self.region.lock();
        if st.valid {
            return Err(VerbsError::RegionBusy(
                "region is still valid; invalidate it first",
            ));
        }
        st.buffer
            .take()
            .ok_or(VerbsError::RegionBusy("region holds no buffer"))
    }
    fn deregister(self) -> Option<MrBuffer> {
        let mut st = self.region.lock();
        st.valid = false;
        st.buffer.take()
        // Drop removes the table entry.
    }
    /// Copies out under the region's lock, so never while a segment is
    /// being placed into it; no reference to the registered bytes escapes.
    fn read_at(&self, offset: usize, dst: &mut [u8]) -> Result<(), VerbsError> {
        let st = self.region.lock();
        let buf = st
            .buffer
            .as_ref()
            .ok_or(VerbsError::RegionBusy("region holds no buffer"))?;
        let end = in_region(offset, dst.len(), buf.len())?;
        dst.copy_from_slice(&buf.as_slice()[offset..end]);
        Ok(())
    }
    /// Copies in under the region's lock, as `read_at` copies out.
    fn write_at(&self, offset: usize, src: &[u8]) -> Result<(), VerbsError> {
        let mut st = self.region.lock();
        let buf = st
            .buffer
            .as_mut()
            .ok_or(VerbsError::RegionBusy("region holds no buffer"))?;
        let end = in_region(offset, src.len(), buf.len())?;
        let bytes = buf
            .as_mut_slice()
            .ok_or(VerbsError::InvalidAccess("immutable buffer"))?;
        bytes[offset..end].copy_from_slice(src);
        Ok(())
    }
}

/// The end of `offset..offset + len` if it lies within a buffer of `size`.
fn in_region(offset: usize, len: usize, size: usize) -> Result<usize, VerbsError> {
    offset
        .checked_add(len)
        .filter(|&end| end <= size)
        .ok_or(VerbsError::InvalidArgument("range outside the region"))
}

impl Drop for Mr {
    fn drop(&mut self) {
        {
            let mut st = self.region.lock();
            st.valid = false;
        }
        self.table.remove(self.region.index);
    }
}

#[derive(Debug)]
struct QpOwner {
    sh: Arc<QpShared>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    tx: std::sync::OnceLock<Arc<TxPath>>,
}

impl Drop for QpOwner {
    fn drop(&mut self) {
        self.sh.close();
        for t in self
            .tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            t.abort();
        }
    }
}

/// A queue pair (cheap to clone; the connection's tasks stop when the last
/// handle is dropped).
#[derive(Debug, Clone)]
pub struct Qp {
    owner: Arc<QpOwner>,
}

impl Qp {
    fn sh(&self) -> &Arc<QpShared> {
        &self.owner.sh
    }

    /// After a post; a `batch` is transmitted at once (it is the burst).
    fn kick(&self, batch: bool) {
        match self.owner.tx.get() {
            Some(p) => p.kick(batch),
            None => self.owner.sh.tx_wake.notify_one(),
        }
    }

    /// The shared engine state (tests and diagnostics).
    pub fn shared(&self) -> &Arc<QpShared> {
        &self.owner.sh
    }

    /// The send buffer of this QP's TCP socket as the kernel reports it
    /// (`SO_SNDBUF`, see [`Config::send_buffer`]); `None` before the
    /// connection is in RDMA mode.
    pub fn send_buffer_size(&self) -> Option<usize> {
        self.sh().lock().send_buffer
    }
}

/// The checks of `ibv_post_send` for one WR (QP state, send queue room,
/// SGL length, ORD for a Read).
fn check_send(sh: &QpShared, g: &QpInner, wr: &SendWr) -> Result<(), VerbsError> {
    if wr.op.uses_sgl() && wr.sgl.len() > sh.limits.max_send_sge as usize {
        return Err(VerbsError::InvalidArgument("too many SGEs"));
    }
    if g.state != QpState::Connected {
        return Err(VerbsError::InvalidState("QP is not connected"));
    }
    if g.sq_outstanding >= sh.limits.max_send_wr {
        return Err(VerbsError::QueueFull("send queue"));
    }
    if matches!(wr.op, SendOp::RdmaRead { .. }) && g.ord == 0 {
        return Err(VerbsError::InvalidArgument("RDMA Read with ORD 0"));
    }
    Ok(())
}

/// The checks of `ibv_post_recv` for one WR (QP state, receive queue room,
/// SGL length).
fn check_recv(sh: &QpShared, g: &QpInner, wr: &RecvWr) -> Result<(), VerbsError> {
    if wr.sgl.len() > sh.limits.max_recv_sge as usize {
        return Err(VerbsError::InvalidArgument("too many SGEs"));
    }
    if matches!(g.state, QpState::Error | QpState::Disconnected) {
        return Err(VerbsError::InvalidState("QP is not usable"));
    }
    if g.rq.len() >= sh.limits.max_recv_wr as usize {
        return Err(VerbsError::QueueFull("receive queue"));
    }
    Ok(())
}

impl rdma_verbs::QueuePair for Qp {
    type Mr = Mr;

    fn qp_num(&self) -> u32 {
        self.sh().qp_num
    }

    fn state(&self) -> QpState {
        self.sh().state()
    }

    fn post_send(&self, wr: SendWr) -> Result<(), VerbsError> {
        let sh = self.sh();
        let mut g = sh.lock();
        check_send(sh, &g, &wr)?;
        g.sq_outstanding += 1;
        g.sq.push_back(SqItem::Wr(wr));
        drop(g);
        self.kick(false);
        Ok(())
    }

    /// One lock for all, and one transmit for all: a batch of Sends goes
    /// out in one vectored write (as one doorbell on a hardware RNIC).
    fn post_send_batch(&self, wrs: Vec<SendWr>) -> Result<(), PostBatchError> {
        let sh = self.sh();
        let mut g = sh.lock();
        let mut posted = 0;
        let mut failed = None;
        for wr in wrs {
            if let Err(error) = check_send(sh, &g, &wr) {
                failed = Some(error);
                break;
            }
            g.sq_outstanding += 1;
            g.sq.push_back(SqItem::Wr(wr));
            posted += 1;
        }
        drop(g);
        if posted > 0 {
            self.kick(true);
        }
        match failed {
            Some(error) => Err(PostBatchError { posted, error }),
            None => Ok(()),
        }
    }

    fn post_fast_reg(&self, mr: &Mr, wr: FastRegWr) -> Result<u32, RegisterError> {
        let sh = self.sh();
        let FastRegWr {
            wr_id,
            buffer,
            access,
            signaled,
        } = wr;
        let fail = |error, buffer| Err(RegisterError { error, buffer });
        if let Err(e) = buffer.check_registration(access) {
            return fail(e, buffer);
        }
        if mr.region.pd != sh.pd {
            return fail(
                VerbsError::InvalidArgument("region of another protection domain"),
                buffer,
            );
        }
        if buffer.len() > mr.region.max_len {
            return fail(
                VerbsError::InvalidArgument("buffer longer than the region's max_len"),
                buffer,
            );
        }
        let mut g = sh.lock();
        if g.state != QpState::Connected {
            drop(g);
            return fail(VerbsError::InvalidState("QP is not connected"), buffer);
        }
        if g.sq_outstanding >= sh.limits.max_send_wr {
            drop(g);
            return fail(VerbsError::QueueFull("send queue"), buffer);
        }
        let mut st = mr.region.lock();
        if st.buffer.is_some() {
            drop(st);
            drop(g);
            return fail(
                VerbsError::RegionBusy("region still holds a buffer"),
                buffer,
            );
        }
        let key = next_key(st.key);
        mr.region.set_key(&mut st, key);
        st.buffer = Some(buffer);
        st.access = access;
        st.valid = true;
        let stag = mr.region.stag_for(st.key);
        drop(st);
        g.sq_outstanding += 1;
        g.sq.push_back(SqItem::FastReg { wr_id, signaled });
        drop(g);
        // The region is valid already; the queue entry only orders the
        // completion. An unsignaled one has none, so the transmit half
        // retires it with the next work request (usually the Send that
        // follows at once) instead of being woken for it alone.
        if signaled {
            sh.tx_wake.notify_one();
        }
        Ok(stag)
    }

    fn post_recv(&self, wr: RecvWr) -> Result<(), VerbsError> {
        let sh = self.sh();
        let mut g = sh.lock();
        check_recv(sh, &g, &wr)?;
        g.rq.push_back(wr);
        Ok(())
    }

    /// One lock for all.
    fn post_recv_batch(&self, wrs: Vec<RecvWr>) -> Result<(), PostBatchError> {
        let sh = self.sh();
        let mut g = sh.lock();
        for (posted, wr) in wrs.into_iter().enumerate() {
            check_recv(sh, &g, &wr).map_err(|error| PostBatchError { posted, error })?;
            g.rq.push_back(wr);
        }
        Ok(())
    }

    fn peer_addr(&self) -> Option<SocketAddr> {
        self.sh().lock().peer_addr
    }

    fn local_addr(&self) -> Option<SocketAddr> {
        self.sh().lock().local_addr
    }

    fn disconnect(&self) {
        self.sh().close();
    }

    fn next_event(&self) -> impl std::future::Future<Output = CmEvent> + Send {
        let sh = self.sh().clone();
        async move {
            loop {
                let n = sh.event_wake.notified();
                tokio::pin!(n);
                n.as_mut().enable();
                if let Some(ev) = sh.lock().events.pop_front() {
                    return ev;
                }
                n.await;
            }
        }
    }
}

/// A listening endpoint.
#[derive(Debug)]
pub struct Listener {
    requests: tokio::sync::Mutex<tokio::sync::mpsc::Receiver<ConnRequest>>,
    acceptor: JoinHandle<()>,
    local: SocketAddr,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.acceptor.abort();
    }
}

/// Bounds concurrently running MPA Request reads per listener: when a new
/// connection arrives and all are busy, the oldest pending read is dropped
/// (its connection closed), so idle sockets can delay a real handshake only
/// by being newer than it.
const MAX_PENDING_HANDSHAKES: usize = 64;

/// Time a new connection has to deliver the 20-byte MPA Request header
/// (capped by `handshake_timeout`): a silent socket holds a pending slot
/// only this long.
const MPA_HEADER_TIMEOUT: Duration = Duration::from_secs(2);

/// Pending MPA Request reads, oldest first (by accept sequence number).
type Pending = Arc<Mutex<std::collections::BTreeMap<u64, tokio::task::AbortHandle>>>;

/// Accepts TCP connections unconditionally and runs each MPA Request read
/// in its own task, so a slow or silent peer never delays other
/// connections; at most [`MAX_PENDING_HANDSHAKES`] reads are pending, the
/// oldest is dropped to make room.
async fn acceptor(listener: TcpListener, dev: Device, out: tokio::sync::mpsc::Sender<ConnRequest>) {
    let pending: Pending = Arc::default();
    let mut seq: u64 = 0;
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                tracing::debug!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        seq += 1;
        let id = seq;
        let dev = dev.clone();
        let out = out.clone();
        let mut p = pending.lock().unwrap_or_else(|e| e.into_inner());
        while p.len() >= MAX_PENDING_HANDSHAKES {
            if let Some((_, oldest)) = p.pop_first() {
                tracing::debug!("too many pending MPA handshakes; dropping the oldest");
                oldest.abort();
            }
        }
        let done = pending.clone();
        let task = tokio::spawn(async move {
            if let Some(r) = read_request(stream, peer, dev).await {
                // Still pending while the application has 64 requests
                // queued and takes none.
                let _ = out.send(r).await;
            }
            // Cannot run before the insert below: that holds the lock.
            done.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
        });
        p.insert(id, task.abort_handle());
        drop(p);
    }
}

/// Reads and checks one MPA Request; `None` (connection closed) if it is
/// invalid, late, or asks for markers (which are rejected).
async fn read_request(mut stream: TcpStream, peer: SocketAddr, dev: Device) -> Option<ConnRequest> {
    let _ = stream.set_nodelay(true);
    let timeout = dev.inner.cfg.handshake_timeout;
    let header_timeout = timeout.min(MPA_HEADER_TIMEOUT);
    let frame =
        match tokio::time::timeout(timeout, read_frame_within(&mut stream, header_timeout)).await {
            Ok(Ok(f)) => f,
            Ok(Err(e)) => {
                tracing::debug!(%peer, error = %e, "bad MPA Request; closing");
                return None;
            }
            Err(_) => {
                tracing::debug!(%peer, "MPA Request timed out; closing");
                return None;
            }
        };
    let req = match handshake::parse_request(&frame) {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!(%peer, error = %e, "invalid MPA Request; closing");
            return None;
        }
    };
    let cap = match stream.local_addr() {
        Ok(local) => dev.conn_capture(local, peer, false),
        Err(_) => None,
    };
    if let Some(c) = &cap {
        let _ = c.received(&frame);
    }
    if req.markers {
        let rej = handshake::reject(&req, b"markers not supported");
        if let Some(c) = &cap {
            let _ = c.sent(&rej);
            let _ = c.local_closed();
        }
        let _ = stream.write_all(&rej).await;
        return None;
    }
    Some(ConnRequest {
        stream,
        req,
        peer,
        dev,
        cap,
    })
}

/// An incoming connection request (MPA Request received).
#[derive(Debug)]
pub struct ConnRequest {
    stream: TcpStream,
    req: Request,
    peer: SocketAddr,
    dev: Device,
    cap: Option<ConnCapture>,
}

impl rdma_verbs::Listener for Listener {
    type Qp = Qp;
    type Request = ConnRequest;

    fn local_addr(&self) -> SocketAddr {
        self.local
    }

    async fn next_request(&self) -> Result<ConnRequest, VerbsError> {
        self.requests
            .lock()
            .await
            .recv()
            .await
            .ok_or(VerbsError::NotConnected)
    }
}

impl rdma_verbs::ConnectRequest for ConnRequest {
    type Qp = Qp;

    fn peer_addr(&self) -> SocketAddr {
        self.peer
    }
    fn private_data(&self) -> &[u8] {
        &self.req.private_data
    }
    fn initiator_depth(&self) -> u16 {
        self.req.ord()
    }
    fn responder_resources(&self) -> u16 {
        self.req.ird()
    }

    fn accept(
        self,
        qp: &Qp,
        param: ConnParam,
    ) -> impl std::future::Future<Output = Result<ConnInfo, VerbsError>> + Send {
        let qp = qp.clone();
        async move {
            let ConnRequest {
                mut stream,
                req,
                peer,
                dev,
                cap,
            } = self;
            let cfg = &dev.inner.cfg;
            start_connecting(&qp)?;
            let max = cfg.max_rd_atomic;
            let (reply, neg) = match handshake::accept(
                &cfg.mpa,
                &req,
                param.responder_resources.min(max),
                param.initiator_depth.min(max),
                &param.private_data,
            ) {
                Ok(x) => x,
                Err((frame, e)) => {
                    if let Some(f) = frame {
                        if let Some(c) = &cap {
                            let _ = c.sent(&f);
                        }
                        let _ = stream.write_all(&f).await;
                    }
                    return Err(fail_connect(&qp, handshake_err(e)));
                }
            };
            let local = stream.local_addr()?;
            if !qp.sh().establish(
                u32::from(neg.ord),
                u32::from(neg.ird),
                false,
                Some(local),
                Some(peer),
            ) {
                return Err(VerbsError::InvalidState(SETUP_STOPPED));
            }
            if let Some(c) = &cap {
                let _ = c.sent(&reply);
            }
            if let Err(e) = stream.write_all(&reply).await {
                return Err(fail_connect(&qp, e.into()));
            }
            Ok(start_driver(&qp, stream, &neg, cfg, cap, local, peer))
        }
    }

    fn reject(
        self,
        private_data: &[u8],
    ) -> impl std::future::Future<Output = Result<(), VerbsError>> + Send {
        let frame = handshake::reject(&self.req, private_data);
        let mut stream = self.stream;
        if let Some(c) = &self.cap {
            let _ = c.sent(&frame);
            let _ = c.local_closed();
        }
        async move {
            stream.write_all(&frame).await?;
            let _ = stream.shutdown().await;
            Ok(())
        }
    }
}

fn handshake_err(e: HandshakeError) -> VerbsError {
    match e {
        HandshakeError::Rejected(pd) => VerbsError::Rejected {
            private_data: Bytes::from(pd),
        },
        HandshakeError::PrivateDataTooLong(_) => {
            VerbsError::InvalidArgument("private data too long")
        }
        other => VerbsError::Protocol(other.to_string()),
    }
}

fn start_connecting(qp: &Qp) -> Result<(), VerbsError> {
    let mut g = qp.sh().lock();
    if g.state != QpState::Init {
        return Err(VerbsError::InvalidState("QP already used for a connection"));
    }
    g.state = QpState::Connecting;
    Ok(())
}

fn fail_connect(qp: &Qp, e: VerbsError) -> VerbsError {
    qp.sh().fail(
        ConnError {
            remote: false,
            code: None,
            description: format!("connection establishment failed: {e}"),
        },
        None,
        None,
    );
    e
}

/// Reads exactly one MPA Request/Reply frame (never more bytes than the frame).
async fn read_frame(stream: &mut TcpStream) -> Result<Vec<u8>, VerbsError> {
    read_frame_within(stream, Duration::MAX).await
}

/// [`read_frame`], failing if the 20-byte header is not in within
/// `header_timeout`.
async fn read_frame_within(
    stream: &mut TcpStream,
    header_timeout: Duration,
) -> Result<Vec<u8>, VerbsError> {
    use tokio::io::AsyncReadExt;
    let header_deadline = tokio::time::Instant::now().checked_add(header_timeout);
    let mut buf = vec![0u8; handshake::MAX_FRAME];
    let mut have = 0;
    let mut need = 20;
    loop {
        let read = stream.read(&mut buf[have..need]);
        let n = match header_deadline.filter(|_| have < 20) {
            Some(d) => tokio::time::timeout_at(d, read)
                .await
                .map_err(|_| VerbsError::Timeout("MPA Request header"))??,
            None => read.await?,
        };
        if n == 0 {
            return Err(VerbsError::Protocol(
                "connection closed during the MPA exchange".into(),
            ));
        }
        have += n;
        match handshake::frame_complete(&buf[..have]) {
            Ok(Some(len)) => {
                buf.truncate(len);
                return Ok(buf);
            }
            Ok(None) => {
                if have >= 20 {
                    need = crate::wire::mpa::frame_len_hint(&buf[..have])
                        .ok()
                        .flatten()
                        .unwrap_or(handshake::MAX_FRAME);
                }
            }
            Err(e) => return Err(handshake_err(e)),
        }
    }
}

impl rdma_verbs::Device for Device {
    type Pd = Pd;
    type Mr = Mr;
    type Cq = Cq;
    type Qp = Qp;
    type Listener = Listener;

    fn name(&self) -> &str {
        "iwarp-soft"
    }

    fn max_private_data(&self) -> usize {
        if self.inner.cfg.mpa.revision == 2 {
            crate::wire::mpa::MAX_ULP_PRIVATE_DATA_ENHANCED
        } else {
            crate::wire::mpa::MAX_PRIVATE_DATA
        }
    }

    fn alloc_pd(&self) -> Result<Pd, VerbsError> {
        Ok(Pd {
            id: self.inner.next_pd.fetch_add(1, Ordering::Relaxed),
            dev: self.clone(),
        })
    }

    fn create_cq(&self, capacity: usize) -> Result<Cq, VerbsError> {
        if capacity == 0 {
            return Err(VerbsError::InvalidArgument("CQ capacity 0"));
        }
        Ok(Cq::new(capacity))
    }

    fn create_qp(&self, pd: &Pd, init: QpInit<Cq>) -> Result<Qp, VerbsError> {
        if !std::ptr::eq(pd.dev.inner.table.as_ref(), self.inner.table.as_ref()) {
            return Err(VerbsError::InvalidArgument("PD of another device"));
        }
        let sh = QpShared::new(
            self.inner.next_qp.fetch_add(1, Ordering::Relaxed),
            pd.id,
            self.inner.table.clone(),
            init.send_cq,
            init.recv_cq,
            Limits {
                max_send_wr: init.max_send_wr.max(1),
                max_recv_wr: init.max_recv_wr.max(1),
                max_send_sge: init.max_send_sge.max(1),
                max_recv_sge: init.max_recv_sge.max(1),
            },
        );
        Ok(Qp {
            owner: Arc::new(QpOwner {
                sh: Arc::new(sh),
                tasks: Mutex::new(Vec::new()),
                tx: std::sync::OnceLock::new(),
            }),
        })
    }

    fn connect(
        &self,
        qp: &Qp,
        addr: SocketAddr,
        param: ConnParam,
    ) -> impl std::future::Future<Output = Result<ConnInfo, VerbsError>> + Send {
        let qp = qp.clone();
        let dev = self.clone();
        async move {
            let cfg = &dev.inner.cfg;
            start_connecting(&qp)?;
            let max = cfg.max_rd_atomic;
            let ird = param.responder_resources.min(max);
            let ord = param.initiator_depth.min(max);
            let req = match handshake::request(&cfg.mpa, ird, ord, &param.private_data) {
                Ok(r) => r,
                Err(e) => return Err(fail_connect(&qp, handshake_err(e))),
            };
            let exchange = async {
                let mut stream = TcpStream::connect(addr).await?;
                stream.set_nodelay(true)?;
                let cap = dev.conn_capture(stream.local_addr()?, stream.peer_addr()?, true);
                if let Some(c) = &cap {
                    let _ = c.sent(&req);
                }
                stream.write_all(&req).await?;
                let frame = read_frame(&mut stream).await?;
                if let Some(c) = &cap {
                    let _ = c.received(&frame);
                }
                let neg = match handshake::process_reply(&cfg.mpa, ird, ord, &frame) {
                    Ok(n) => n,
                    Err(e) => {
                        // RFC 6581 §3: report an IRD/ORD or RTR mismatch
                        // with a Terminate before closing.
                        let cause = match e {
                            HandshakeError::InsufficientIrd => {
                                Some(TerminateCause::MpaInsufficientIrd)
                            }
                            HandshakeError::NoMatchingRtr => Some(TerminateCause::MpaNoMatchingRtr),
                            _ => None,
                        };
                        if let Some(cause) = cause {
                            let peer_crc = crate::wire::mpa::MpaRepr::parse_bytes(&frame)
                                .map(|r| r.crc)
                                .unwrap_or(true);
                            let t = TerminateRepr::for_cause(cause, &[]);
                            let f = crate::engine::tx::terminate_fpdu(&t, cfg.mpa.crc || peer_crc);
                            if let Some(c) = &cap {
                                let _ = c.sent(&f);
                            }
                            let _ = stream.write_all(&f).await;
                        }
                        return Err(handshake_err(e));
                    }
                };
                Ok::<_, VerbsError>((stream, neg, cap))
            };
            let (stream, neg, cap) =
                match tokio::time::timeout(cfg.handshake_timeout, exchange).await {
                    Ok(Ok(x)) => x,
                    Ok(Err(e)) => return Err(fail_connect(&qp, e)),
                    Err(_) => return Err(fail_connect(&qp, VerbsError::Timeout("MPA Reply"))),
                };
            let local = stream.local_addr()?;
            let peer = stream.peer_addr()?;
            if !qp.sh().establish(
                u32::from(neg.ord),
                u32::from(neg.ird),
                true,
                Some(local),
                Some(peer),
            ) {
                return Err(VerbsError::InvalidState(SETUP_STOPPED));
            }
            Ok(start_driver(&qp, stream, &neg, cfg, cap, local, peer))
        }
    }

    fn listen(
        &self,
        addr: SocketAddr,
    ) -> impl std::future::Future<Output = Result<Listener, VerbsError>> + Send {
        let dev = self.clone();
        async move {
            let listener = TcpListener::bind(addr).await?;
            let local = listener.local_addr()?;
            let (tx, rx) = tokio::sync::mpsc::channel(MAX_PENDING_HANDSHAKES);
            let acceptor = tokio::spawn(acceptor(listener, dev, tx));
            Ok(Listener {
                requests: tokio::sync::Mutex::new(rx),
                acceptor,
                local,
            })
        }
    }
}

/// Starts the connection's driver and describes the connection to the
/// consumer (both sides, once MPA is through).
fn start_driver(
    qp: &Qp,
    stream: TcpStream,
    neg: &Negotiated,
    cfg: &Config,
    cap: Option<ConnCapture>,
    local: SocketAddr,
    peer: SocketAddr,
) -> ConnInfo {
    let info = ConnInfo {
        local_addr: local,
        peer_addr: peer,
        private_data: Bytes::from(neg.private_data.clone()),
        initiator_depth: neg.ord,
        responder_resources: neg.ird,
    };
    spawn_driver(qp, stream, neg, cfg, cap);
    info
}

fn spawn_driver(
    qp: &Qp,
    stream: TcpStream,
    neg: &Negotiated,
    cfg: &Config,
    cap: Option<ConnCapture>,
) {
    let sock = socket2::SockRef::from(&stream);
    if let Some(n) = cfg.send_buffer {
        if let Err(e) = sock.set_send_buffer_size(n) {
            tracing::debug!(error = %e, bytes = n, "setting the send buffer failed");
        }
    }
    set_keepalive(&stream, cfg.keepalive);
    qp.sh().lock().send_buffer = sock.send_buffer_size().ok();
    let m = cfg.mulpdu.unwrap_or_else(|| mulpdu(emss(&stream), false));
    let stream = Arc::new(stream);
    let sh = qp.sh().clone();
    let mut rx = Rx::with_placement(sh.clone(), neg.crc, cfg.direct_placement);
    rx.set_read_ahead(cfg.read_ahead);
    let path = Arc::new(TxPath {
        stream: stream.clone(),
        sh: sh.clone(),
        rx_batch: AtomicBool::new(false),
        cap: cap.clone(),
        state: Mutex::new(TxState {
            tx: Tx::new(sh.clone(), neg.crc, m, neg.rtr),
            backlog: Vec::new(),
            scratch: Vec::new(),
            writer_active: false,
            last_post: None,
            coalescing: false,
        }),
    });
    let _ = qp.owner.tx.set(path.clone());
    let r = tokio::spawn(reader(stream.clone(), rx, path.clone(), cap.clone()));
    let w = tokio::spawn(writer(path, cfg.capture.clone(), cfg.close_grace));
    qp.owner
        .tasks
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .extend([r, w]);
}

/// Why `connect`/`accept` fail when the QP was stopped (a local
/// `disconnect`, or a failure) while the connection was being set up.
const SETUP_STOPPED: &str = "the QP was disconnected or failed during connection setup";

/// Turns TCP keepalive on (`Some(idle)`: probes every 10 s after `idle`,
/// 6 in all) or leaves it off ([`Config::keepalive`]).
fn set_keepalive(stream: &TcpStream, idle: Option<Duration>) {
    let Some(idle) = idle else {
        return;
    };
    let ka = socket2::TcpKeepalive::new()
        .with_time(idle)
        .with_interval(Duration::from_secs(10))
        .with_retries(6);
    if let Err(e) = socket2::SockRef::from(stream).set_tcp_keepalive(&ka) {
        tracing::debug!(error = %e, "setting TCP keepalive failed");
    }
}

/// Linux's MSS on loopback once a connection's window has opened (IPv4:
/// `lo` MTU 65536 - 40 bytes of headers - 12 bytes of timestamps; measured
/// with TCP_MAXSEG after some traffic).
const LOOPBACK_EMSS_V4: usize = 65483;

/// The EMSS the MULPDU is derived from (RFC 5044 §8). Right after the
/// handshake Linux reports TCP_MAXSEG bounded by half the peer's initial
/// window (32741 on loopback), well below what the path carries moments
/// later; on loopback the MTU-derived EMSS is used instead, so FPDUs are
/// as large as the 16-bit ULPDU_Length allows (Linux siw likewise sizes
/// FPDUs from the socket's MSS times its GSO segments).
fn emss(stream: &TcpStream) -> usize {
    let mss = socket2::SockRef::from(stream).mss().unwrap_or(1460) as usize;
    match stream.peer_addr() {
        Ok(SocketAddr::V4(a)) if a.ip().is_loopback() => mss.max(LOOPBACK_EMSS_V4),
        // IPv6 headers are 20 bytes longer.
        Ok(SocketAddr::V6(a)) if a.ip().is_loopback() => mss.max(LOOPBACK_EMSS_V4 - 20),
        _ => mss,
    }
}

/// The transmit half of a connection, shared by the writer task and by
/// posters: an isolated post is transmitted inline (no task hop) when the
/// writer task is idle and the socket takes everything at once; otherwise
/// the writer task finishes the job. Posts that come in a burst (see
/// [`BURST_GAP`]) only queue: the writer task sends them together with one
/// vectored write. `writer_active` keeps bytes in order: while it is set,
/// only the writer task writes.
#[derive(Debug)]
struct TxPath {
    stream: Arc<TcpStream>,
    sh: Arc<QpShared>,
    /// The reader's last wake delivered several messages: the consumer is
    /// likely to answer them with as many posts, so they are collected.
    rx_batch: AtomicBool,
    cap: Option<ConnCapture>,
    state: Mutex<TxState>,
}

#[derive(Debug)]
struct TxState {
    tx: Tx,
    /// Produced but unwritten FPDU pieces (non-empty only while
    /// `writer_active`).
    backlog: Vec<Bytes>,
    /// An empty list kept for the next inline transmit (its capacity is
    /// reused: no allocation per message).
    scratch: Vec<Bytes>,
    writer_active: bool,
    /// When the last work request was posted (burst detection).
    last_post: Option<Instant>,
    /// A burst is being collected: posters only queue, and the writer task
    /// transmits everything queued in one vectored write once the tasks
    /// that were ready to run have run.
    coalescing: bool,
}

/// Bytes a poster may produce and write inline.
const INLINE_BUDGET: usize = 64 * 1024;

/// Bytes the writer task produces per round of vectored writes.
const WRITER_BUDGET: usize = 1 << 20;

/// Posts closer together than this form a burst: rather than one write
/// (and one loopback wakeup of the peer) per small message, the writer task
/// collects them into one vectored write. Isolated posts (request/response
/// ping-pong: one post per round trip, tens of microseconds apart) are
/// still written inline from the poster's thread, without a task hop.
const BURST_GAP: Duration = Duration::from_micros(8);

impl TxPath {
    fn lock(&self) -> std::sync::MutexGuard<'_, TxState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn record(&self, bufs: &[Bytes]) {
        if let Some(c) = &self.cap {
            let v: Vec<&[u8]> = bufs.iter().map(|b| &b[..]).collect();
            let _ = c.sent_vectored(&v);
        }
    }

    /// Inline transmit from a poster's thread (never blocks), unless the
    /// writer task owns the socket or a burst of posts is being collected.
    /// A `batch` (posted with one call) is written at once: it is a burst
    /// already, and everything queued before it goes out with it, in order.
    fn kick(&self, batch: bool) {
        let now = Instant::now();
        let Ok(mut st) = self.state.try_lock() else {
            self.sh.tx_wake.notify_one();
            return;
        };
        let burst = !batch
            && (st
                .last_post
                .is_some_and(|t| now.saturating_duration_since(t) < BURST_GAP)
                || self.rx_batch.load(Ordering::Relaxed));
        st.last_post = Some(now);
        if burst {
            st.coalescing = true;
        }
        if st.writer_active || (st.coalescing && !batch) {
            drop(st);
            self.sh.tx_wake.notify_one();
            return;
        }
        self.transmit_inline(st, INLINE_BUDGET);
    }

    /// Transmits from the reader's thread what received messages made
    /// ready (Read Responses to Read Requests just received, a Read that
    /// was waiting for an ORD slot): a batch of requests is answered with
    /// one vectored write and no wakeup of the writer task. Falls back to
    /// the writer task when it owns the socket or a burst is collected.
    fn answer(&self) {
        let Ok(st) = self.state.try_lock() else {
            self.sh.tx_wake.notify_one();
            return;
        };
        if st.writer_active || st.coalescing {
            drop(st);
            self.sh.tx_wake.notify_one();
            return;
        }
        self.transmit_inline(st, WRITER_BUDGET);
    }

    /// Produces up to `budget` bytes and writes what the socket takes now;
    /// the rest (and anything beyond the budget) is left to the writer task.
    fn transmit_inline(&self, mut st: std::sync::MutexGuard<'_, TxState>, budget: usize) {
        let mut bufs = std::mem::take(&mut st.scratch);
        let n = st.tx.poll_transmit(&mut bufs, budget);
        if n == 0 {
            st.scratch = bufs;
            return;
        }
        self.record(&bufs);
        let r = try_write_all(&self.stream, &mut bufs);
        // The gap to the next post counts from the end of this write: a
        // poster that writes inline and posts again at once (a burst whose
        // writes are slow, e.g. on a loaded machine) is a burst too.
        st.last_post = Some(Instant::now());
        match r {
            Ok(true) => {
                // Everything is written and `bufs` is empty again. More may
                // be ready beyond the budget: if so, it is the writer
                // task's (woken only when there is more).
                let mut more = bufs;
                if n >= budget && st.tx.poll_transmit(&mut more, budget) > 0 {
                    self.record(&more);
                    st.backlog = more;
                    st.writer_active = true;
                    drop(st);
                    self.sh.tx_wake.notify_one();
                } else {
                    st.scratch = more;
                }
            }
            Ok(false) => {
                st.backlog = bufs;
                st.writer_active = true;
                drop(st);
                self.sh.tx_wake.notify_one();
            }
            Err(e) => {
                drop(st);
                lost(&self.sh, &e);
            }
        }
    }
}

/// Slices a vectored write in [`try_write_all`] takes from the stack (each
/// FPDU takes two or three); longer lists go through a vector, at most 512
/// slices per write (Linux's `UIO_MAXIOV` is 1024).
const SMALL_WRITE: usize = 8;

/// Writes as much as the socket takes now and removes it from `bufs` (a
/// partly written buffer is trimmed). `Ok(true)` once everything is written.
fn try_write_all(stream: &TcpStream, bufs: &mut Vec<Bytes>) -> io::Result<bool> {
    let mut idx = 0;
    let mut off = 0;
    // A few slices (a small message: header, payload, trailer) live on the
    // stack, so a small write allocates nothing; longer lists use a vector.
    let mut small = [IoSlice::new(&[]); SMALL_WRITE];
    let mut large: Vec<IoSlice<'_>> = Vec::new();
    while idx < bufs.len() {
        let rest = &bufs[idx + 1..];
        let first = IoSlice::new(&bufs[idx][off..]);
        let slices: &[IoSlice<'_>] = if rest.len() < SMALL_WRITE {
            small[0] = first;
            for (k, b) in rest.iter().enumerate() {
                small[k + 1] = IoSlice::new(b);
            }
            &small[..rest.len() + 1]
        } else {
            large.clear();
            large.push(first);
            large.extend(rest.iter().take(511).map(|b| IoSlice::new(b)));
            &large
        };
        match stream.try_write_vectored(slices) {
            Ok(mut n) => {
                while n > 0 && idx < bufs.len() {
                    let left = bufs[idx].len() - off;
                    if n >= left {
                        n -= left;
                        idx += 1;
                        off = 0;
                    } else {
                        off += n;
                        n = 0;
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) => return Err(e),
        }
    }
    bufs.drain(..idx);
    if off > 0 {
        bufs[0] = bufs[0].slice(off..);
    }
    Ok(bufs.is_empty())
}

async fn reader(stream: Arc<TcpStream>, mut rx: Rx, path: Arc<TxPath>, cap: Option<ConnCapture>) {
    let sh = path.sh.clone();
    loop {
        // Set after a short read: the socket's receive queue was empty then,
        // and the readiness was cleared (see below), so the next read is
        // answered "would block" without a system call.
        let mut drained = false;
        let r = rx.recv(|bufs| {
            if drained {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let want: usize = bufs.iter().map(|b| b.len()).sum();
            let mut short = 0;
            // A TCP read shorter than asked for took everything queued: tell
            // tokio "would block" so that it clears the readiness now, rather
            // than learning it from one more (empty) read. The readiness
            // snapshot is taken before the read, so bytes that arrive after
            // it raise a new readiness event and are never missed.
            let res = stream.try_io(tokio::io::Interest::READABLE, || {
                let n = io::Read::read_vectored(&mut &*socket2::SockRef::from(&*stream), bufs)?;
                if n > 0 && n < want {
                    short = n;
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                Ok(n)
            });
            let n = match res {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && short > 0 => {
                    drained = true;
                    short
                }
                r => r?,
            };
            if let Some(c) = &cap {
                let mut left = n;
                for b in bufs.iter() {
                    let k = left.min(b.len());
                    if k > 0 {
                        let _ = c.received(&b[..k]);
                    }
                    left -= k;
                }
            }
            Ok(n)
        });
        path.rx_batch
            .store(rx.take_delivered() >= 2, Ordering::Relaxed);
        if rx.take_tx_work() {
            path.answer();
        }
        match r {
            Ok(RxStatus::WouldBlock) => {
                if let Err(e) = stream.readable().await {
                    lost(&sh, &e);
                    return;
                }
                if rx.streaming() {
                    // In the middle of a large segment: let other tasks
                    // (on loopback, the sender) run once so the next read
                    // takes more than one TCP segment's worth.
                    tokio::task::yield_now().await;
                }
            }
            Ok(RxStatus::Budget) => tokio::task::yield_now().await,
            Ok(RxStatus::Eof) => {
                if let Some(c) = &cap {
                    let _ = c.remote_closed();
                }
                sh.close();
                return;
            }
            Ok(RxStatus::Dead) => return,
            Err(e) => {
                lost(&sh, &e);
                return;
            }
        }
    }
}

fn lost(sh: &QpShared, e: &io::Error) {
    sh.fail(
        ConnError {
            remote: false,
            code: None,
            description: format!("TCP connection lost: {e}"),
        },
        None,
        None,
    );
}

async fn writer(path: Arc<TxPath>, file: Option<Capture>, close_grace: Duration) {
    let sh = path.sh.clone();
    // When the QP stopped, and when the socket last took bytes since: from
    // then on the writes have `close_grace` (see `write_until_grace`).
    let mut stopped_at = None;
    loop {
        if path.lock().coalescing {
            // Let the tasks that are ready now (posters of the burst) run
            // first, then send all they queued together.
            tokio::task::yield_now().await;
        }
        let mut bufs = {
            let mut st = path.lock();
            st.coalescing = false;
            let mut bufs = std::mem::take(&mut st.backlog);
            if bufs.is_empty() && st.tx.poll_transmit(&mut bufs, WRITER_BUDGET) > 0 {
                path.record(&bufs);
            }
            if bufs.is_empty() {
                st.writer_active = false;
                if st.tx.finished() {
                    break;
                }
                None
            } else {
                st.writer_active = true;
                Some(bufs)
            }
        };
        match bufs.take() {
            Some(b) => {
                if let Err(e) = write_until_grace(&path, &b, close_grace, &mut stopped_at).await {
                    lost(&sh, &e);
                    break;
                }
            }
            None => sh.tx_wake.notified().await,
        }
    }
    // Both halves: after a local disconnect or an error the receive half
    // must stop too; the reader sees end of stream and a
    // stopped QP.
    let _ = socket2::SockRef::from(&*path.stream).shutdown(std::net::Shutdown::Both);
    sh.lock().tx_closed = true;
    if let Some(c) = &path.cap {
        let _ = c.local_closed();
    }
    if let Some(f) = &file {
        let _ = f.flush();
    }
}

/// Writes all buffers, as [`write_all`], while the QP runs. Once it has
/// stopped, the peer must take bytes at least once every `close_grace`,
/// and all of them within `CLOSE_GRACE_CAP` × `close_grace` of the stop:
/// a peer that does not read cannot keep a stopped connection, its
/// socket and the queued bytes, with our Terminate unsent behind them,
/// until the last handle to the QP is dropped, while a slow but reading
/// peer still gets the rest and the Terminate.
/// `stopped_at` is when the QP stopped (set here), for the cap;
/// `progress_at` is the last time the socket took bytes after the stop.
async fn write_until_grace(
    path: &TxPath,
    bufs: &[Bytes],
    close_grace: Duration,
    stopped_at: &mut Option<(tokio::time::Instant, tokio::time::Instant)>,
) -> io::Result<()> {
    let taken = AtomicUsize::new(0);
    let write = write_all(&path.stream, bufs, &taken);
    tokio::pin!(write);
    loop {
        // `fail` and `close` wake the event waiters (`notify_waiters`,
        // rare: connection events only): registered before the check.
        let woke = path.sh.event_wake.notified();
        tokio::pin!(woke);
        woke.as_mut().enable();
        if stopped_at.is_none() && path.sh.stopped() {
            let now = tokio::time::Instant::now();
            *stopped_at = Some((now, now));
        }
        if let Some((stop, mut progress)) = *stopped_at {
            let cap = stop + close_grace * CLOSE_GRACE_CAP;
            let mut seen = taken.load(Ordering::Relaxed);
            loop {
                let deadline = (progress + close_grace).min(cap);
                match tokio::time::timeout_at(deadline, &mut write).await {
                    Ok(r) => {
                        *stopped_at = Some((stop, tokio::time::Instant::now()));
                        return r;
                    }
                    Err(_) => {
                        let now_taken = taken.load(Ordering::Relaxed);
                        let now = tokio::time::Instant::now();
                        if now_taken == seen || now >= cap {
                            return Err(io::Error::new(
                                io::ErrorKind::TimedOut,
                                "the peer did not take our last bytes in time after the QP stopped",
                            ));
                        }
                        seen = now_taken;
                        progress = now;
                        *stopped_at = Some((stop, progress));
                    }
                }
            }
        }
        tokio::select! {
            r = &mut write => return r,
            () = woke => {}
        }
    }
}

/// After a QP stopped, the peer gets at most this many times
/// [`Config::close_grace`] in all to take the bytes still queued.
const CLOSE_GRACE_CAP: u32 = 10;

/// Writes all buffers with vectored writes, adding the bytes the socket
/// took to `taken`.
async fn write_all(stream: &TcpStream, bufs: &[Bytes], taken: &AtomicUsize) -> io::Result<()> {
    let mut idx = 0;
    let mut off = 0;
    let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(256);
    while idx < bufs.len() {
        slices.clear();
        slices.push(IoSlice::new(&bufs[idx][off..]));
        slices.extend(bufs[idx + 1..].iter().take(511).map(|b| IoSlice::new(b)));
        match stream.try_write_vectored(&slices) {
            Ok(mut n) => {
                taken.fetch_add(n, Ordering::Relaxed);
                while n > 0 && idx < bufs.len() {
                    let left = bufs[idx].len() - off;
                    if n >= left {
                        n -= left;
                        idx += 1;
                        off = 0;
                    } else {
                        off += n;
                        n = 0;
                    }
                }
                while idx < bufs.len() && bufs[idx].len() == off {
                    idx += 1;
                    off = 0;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => stream.writable().await?,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod keepalive_tests {
    use super::*;

    #[tokio::test]
    async fn keepalive_is_set_as_configured() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (b, _) = l.accept().await.unwrap();
        set_keepalive(&a, Config::default().keepalive);
        let s = socket2::SockRef::from(&a);
        assert!(s.keepalive().unwrap());
        assert_eq!(s.keepalive_time().unwrap(), Duration::from_secs(60));
        assert_eq!(s.keepalive_interval().unwrap(), Duration::from_secs(10));
        assert_eq!(s.keepalive_retries().unwrap(), 6);
        // `None` leaves a socket as it was.
        set_keepalive(&b, None);
        assert!(!socket2::SockRef::from(&b).keepalive().unwrap());
    }
}
