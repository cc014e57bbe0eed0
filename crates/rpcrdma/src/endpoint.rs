//! One connection's verbs objects and completion routing, shared by the
//! requester and the responder.
//!
//! - Receives: each posted receive owns a registered buffer of the
//!   advertised size. Where the provider can read registered memory in
//!   place ([`MemoryRegion::read_at`]) the buffers stay registered for the
//!   connection's life: a completed message is copied out and the same
//!   buffer is posted again, as xprtrdma keeps its receive buffers (no
//!   registration per message). Otherwise the buffer is deregistered, the
//!   message copied out and the buffer registered again.
//! - Sends: a message that fits is copied into a send buffer registered
//!   once and reused ([`MemoryRegion::write_at`]), not registered per
//!   message; larger ones (or with a provider that cannot write registered
//!   memory in place) are registered on their own.
//! - Send-queue work: a work request may carry registrations to release and
//!   a continuation to run when it completes (success, error or flush).
//!   Unsignaled work requests carry neither; the send queue completes in
//!   order, so a later signaled request covers them.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use bytes::{Bytes, BytesMut};
use rdma_verbs::idhash::IdMap;
use rdma_verbs::{
    Access, CompletionQueue, Device, MemoryRegion, MrBuffer, ProtectionDomain, QpInit, QueuePair,
    RecvWr, SendOp, SendWr, Sge, VerbsError, WcOpcode, WcStatus, WorkCompletion,
};

use crate::config::RdmaConfig;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

const RECV_BIT: u64 = 1 << 63;

/// Runs when a send-queue work request completes.
pub(crate) type Continuation = Box<dyn FnOnce(WorkCompletion) + Send>;

struct Op<M> {
    then: Option<Continuation>,
    mrs: Vec<M>,
    /// Pooled send buffers, back to the pool on completion.
    pooled: Vec<M>,
}

/// Registrations of unsignaled work requests, released (pooled send
/// buffers: returned to the pool) when a later signaled one completes.
struct Deferred<M> {
    mrs: Vec<M>,
    pooled: Vec<M>,
    /// Unsignaled work requests since the last signaled one.
    count: u32,
}

/// A connection's PD, CQ and QP with completion routing.
pub(crate) struct Endpoint<D: Device> {
    pub qp: D::Qp,
    pub pd: D::Pd,
    pub cq: D::Cq,
    recv_len: usize,
    next_wr: AtomicU64,
    ops: Mutex<IdMap<u64, Op<D::Mr>>>,
    recvs: Mutex<IdMap<u64, D::Mr>>,
    /// Receive buffers whose message was copied out, ready to be posted
    /// again (no allocation or zeroing per receive).
    spare: Mutex<Vec<BytesMut>>,
    /// Registrations of unsignaled Sends, released by the next signaled
    /// one (the send queue completes in order).
    deferred: Mutex<Deferred<D::Mr>>,
    dead: AtomicBool,
    sq_depth: u32,
    /// Receive buffers stay registered and are read in place (cleared for
    /// good the first time the provider refuses [`MemoryRegion::read_at`]).
    recv_in_place: AtomicBool,
    /// Send buffers are registered once and written in place (cleared for
    /// good the first time the provider refuses [`MemoryRegion::write_at`]).
    send_in_place: AtomicBool,
    /// Registered send buffers of [`Self::send_len`] bytes, free for reuse.
    send_pool: Mutex<Vec<D::Mr>>,
    /// Size of a pooled send buffer.
    send_len: usize,
    /// Most send buffers kept in the pool.
    send_pool_max: usize,
    /// Sends collected by [`Self::batch_sends`].
    batch: Mutex<Vec<ReadySend<D::Mr>>>,
}

/// Release-only Sends are signaled once in this many (selective
/// signaling, as Linux xprtrdma does), saving a completion per message.
const SIGNAL_EVERY: u32 = 16;
/// Only small registrations (a Send buffer, small gather sources) wait for
/// a later completion; larger ones are released with their own.
const DEFER_MAX_BYTES: usize = 16 << 10;

/// Receive buffers kept for reuse beyond those posted.
const SPARE_RECV_BUFFERS: usize = 64;

/// Most pooled send buffers per connection.
const MAX_SEND_POOL: usize = 512;

/// Receives kept posted beyond the credits.
pub(crate) const RECV_MARGIN: u32 = 4;

impl<D: Device> Endpoint<D> {
    /// Allocates PD, CQ and QP and posts `recvs` receives.
    pub fn new(dev: &D, config: &RdmaConfig, recvs: u32) -> Result<Self, VerbsError> {
        let pd = dev.alloc_pd()?;
        let depth = (recvs as usize) * 40 + 256;
        let cq = dev.create_cq(depth)?;
        let mut init = QpInit::with_cq(cq.clone());
        init.max_recv_wr = recvs + RECV_MARGIN;
        let sq_depth = (depth as u32).max(1024);
        init.max_send_wr = sq_depth;
        init.max_send_sge = (config.max_segments + 4).max(16);
        let qp = dev.create_qp(&pd, init)?;
        let ep = Endpoint {
            qp,
            pd,
            cq,
            recv_len: config.recv_buffer_len(),
            next_wr: AtomicU64::new(1),
            ops: Mutex::new(IdMap::default()),
            recvs: Mutex::new(IdMap::default()),
            spare: Mutex::new(Vec::new()),
            deferred: Mutex::new(Deferred {
                mrs: Vec::new(),
                pooled: Vec::new(),
                count: 0,
            }),
            dead: AtomicBool::new(false),
            sq_depth,
            recv_in_place: AtomicBool::new(true),
            send_in_place: AtomicBool::new(true),
            send_pool: Mutex::new(Vec::new()),
            send_len: config.send_buffer_len(),
            send_pool_max: (recvs as usize + 2 * SIGNAL_EVERY as usize).min(MAX_SEND_POOL),
            batch: Mutex::new(Vec::new()),
        };
        for _ in 0..recvs {
            ep.post_recv()?;
        }
        Ok(ep)
    }

    /// Signaled send-queue work requests not completed yet: a reply whose
    /// RDMA Writes or Send are still going out (large registrations are
    /// always signaled), or RDMA Reads in flight.
    pub fn sends_pending(&self) -> bool {
        !lock(&self.ops).is_empty()
    }

    /// Posts one receive with a buffer of the advertised size (a recycled
    /// one when there is one: its stale bytes are local memory and only
    /// the bytes the next message writes are ever read).
    pub fn post_recv(&self) -> Result<(), VerbsError> {
        let buf = match lock(&self.spare).pop() {
            Some(b) => b,
            None => BytesMut::zeroed(self.recv_len),
        };
        let mr = self
            .pd
            .register(MrBuffer::Mutable(buf), Access::LOCAL_WRITE)
            .map_err(|e| e.error)?;
        let id = RECV_BIT | self.next_wr.fetch_add(1, Ordering::Relaxed);
        let sge = Sge::new(mr.lkey(), 0, self.recv_len as u32);
        lock(&self.recvs).insert(id, mr);
        if let Err(e) = self.qp.post_recv(RecvWr::new(id, vec![sge])) {
            lock(&self.recvs).remove(&id);
            return Err(e);
        }
        Ok(())
    }

    /// A receive completed: its message (`None` for a failed or unknown
    /// receive), with the receive buffer posted again unless the
    /// connection is dead.
    ///
    /// With a provider that reads registered memory in place the message
    /// (at most the inline threshold, usually a few hundred bytes) is
    /// copied out and the same registered buffer is posted again under the
    /// same work request id: no registration per message. Reading after
    /// the completion and reposting after the read means neither the peer
    /// nor the provider writes the buffer while it is read.
    pub fn complete_recv(&self, wc: &WorkCompletion) -> Option<Bytes> {
        if wc.is_success() && self.recv_in_place.load(Ordering::Relaxed) && !self.is_dead() {
            let recvs = lock(&self.recvs);
            if let Some(mr) = recvs.get(&wc.wr_id) {
                let n = (wc.byte_len as usize).min(self.recv_len);
                // Not `BytesMut::zeroed`: calloc's path costs more than a
                // malloc and a memset of the few hundred bytes of a message.
                let mut msg = BytesMut::with_capacity(n);
                msg.resize(n, 0);
                match mr.read_at(0, &mut msg) {
                    Ok(()) => {
                        let sge = Sge::new(mr.lkey(), 0, self.recv_len as u32);
                        drop(recvs);
                        if let Err(e) = self.qp.post_recv(RecvWr::new(wc.wr_id, vec![sge])) {
                            tracing::debug!(error = %e, "re-posting a receive failed");
                            let mr = lock(&self.recvs).remove(&wc.wr_id);
                            drop(mr);
                        }
                        return Some(msg.freeze());
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "provider cannot read receive buffers in place");
                        self.recv_in_place.store(false, Ordering::Relaxed);
                    }
                }
            }
        }
        let msg = self.take_recv(wc)?;
        if !self.is_dead() {
            if let Err(e) = self.post_recv() {
                tracing::debug!(error = %e, "re-posting a receive failed");
            }
        }
        Some(msg)
    }

    /// True if `wc` is a receive completion.
    pub fn is_recv(wc: &WorkCompletion) -> bool {
        wc.wr_id & RECV_BIT != 0 || wc.opcode == WcOpcode::Recv
    }

    /// The bytes of a completed receive (`None` for a failed or unknown one).
    ///
    /// The message is copied out of the receive buffer (at most the inline
    /// threshold, usually a few hundred bytes) and the buffer is kept for
    /// the next receive, as xprtrdma keeps its receive buffers: cheaper than
    /// allocating and zeroing a fresh buffer per message.
    fn take_recv(&self, wc: &WorkCompletion) -> Option<Bytes> {
        let mr = lock(&self.recvs).remove(&wc.wr_id)?;
        let buf = mr.deregister()?.try_into_bytes_mut().ok()?;
        let msg = wc
            .is_success()
            .then(|| Bytes::copy_from_slice(&buf[..(wc.byte_len as usize).min(buf.len())]));
        if buf.len() == self.recv_len {
            let mut spare = lock(&self.spare);
            if spare.len() < SPARE_RECV_BUFFERS {
                spare.push(buf);
            }
        }
        msg
    }

    /// A fresh work request id.
    pub fn wr_id(&self) -> u64 {
        self.next_wr.fetch_add(1, Ordering::Relaxed) & !RECV_BIT
    }

    /// Posts `wr`; `mrs` are released and `then` runs when it completes
    /// (the request is made signaled if either is given).
    pub fn post(
        &self,
        wr: SendWr,
        mrs: Vec<D::Mr>,
        then: Option<Continuation>,
    ) -> Result<(), VerbsError> {
        self.post_with(wr, mrs, Vec::new(), then)
    }

    fn post_with(
        &self,
        wr: SendWr,
        mrs: Vec<D::Mr>,
        pooled: Vec<D::Mr>,
        then: Option<Continuation>,
    ) -> Result<(), VerbsError> {
        if then.is_none() && (!mrs.is_empty() || !pooled.is_empty()) {
            return self.post_release_only(wr, mrs, pooled);
        }
        self.post_tracked(wr, mrs, pooled, then)
    }

    /// Posts a Send (`op`: Send or Send with Invalidate) of `msg`;
    /// `mrs` (sources of RDMA Writes posted before it) are released when it
    /// completes. A message that fits a pooled send buffer is copied into
    /// one (registered once, reused once the Send has completed); a larger
    /// one is registered on its own.
    ///
    /// Inside [`batch_sends`](Self::batch_sends) on this thread the Send is
    /// only queued, and posted with the others of the batch when it ends.
    pub fn post_send_msg(&self, op: SendOp, msg: Bytes, mrs: Vec<D::Mr>) -> Result<(), VerbsError> {
        let ready = self.ready_send(op, msg, mrs)?;
        if BATCH_OWNER.with(Cell::get) == self.batch_key() {
            let full = {
                let mut b = lock(&self.batch);
                b.push(ready);
                b.len() >= SEND_BATCH_MAX
            };
            if full {
                self.flush_batch();
            }
            return Ok(());
        }
        self.post_with(ready.wr, ready.mrs, ready.pooled, None)
    }

    /// The Send work request for `msg`, its bytes in a pooled send buffer
    /// or a registration of their own.
    fn ready_send(
        &self,
        op: SendOp,
        msg: Bytes,
        mut mrs: Vec<D::Mr>,
    ) -> Result<ReadySend<D::Mr>, VerbsError> {
        let len = msg.len() as u32;
        if msg.len() <= self.send_len && self.send_in_place.load(Ordering::Relaxed) {
            if let Some(buf) = self.pooled_send_buffer(&msg) {
                let wr = SendWr::new(0, op, vec![Sge::new(buf.lkey(), 0, len)]);
                return Ok(ReadySend {
                    wr,
                    mrs,
                    pooled: vec![buf],
                });
            }
        }
        let smr = match self.register_source(msg) {
            Ok(m) => m,
            Err(e) => {
                // Earlier RDMA Writes may gather from `mrs`.
                self.hold(mrs);
                return Err(e);
            }
        };
        let sge = Sge::new(smr.lkey(), 0, len);
        mrs.push(smr);
        Ok(ReadySend {
            wr: SendWr::new(0, op, vec![sge]),
            mrs,
            pooled: Vec::new(),
        })
    }

    /// This endpoint's identity for [`BATCH_OWNER`].
    fn batch_key(&self) -> usize {
        self as *const Self as usize
    }

    /// Runs `f` (synchronous, on this thread) with the Sends it posts
    /// through [`post_send_msg`](Self::post_send_msg) collected and posted
    /// [`SEND_BATCH_MAX`] at a time, the rest when `f` returns, each group
    /// with one [`QueuePair::post_send_batch`] (one doorbell: the provider
    /// may transmit them together), in the order they were posted. Work requests of other kinds (RDMA Writes before a Send) are
    /// posted at once, so each Send still follows them in the send queue.
    /// A batch that cannot be posted closes the connection (the callers
    /// were already told the Sends were posted).
    pub fn batch_sends<R>(&self, f: impl FnOnce() -> R) -> R {
        struct Restore(usize);
        impl Drop for Restore {
            fn drop(&mut self) {
                BATCH_OWNER.with(|b| b.set(self.0));
            }
        }
        let r = {
            let _restore = Restore(BATCH_OWNER.with(|b| b.replace(self.batch_key())));
            f()
        };
        self.flush_batch();
        r
    }

    /// Posts the Sends collected by [`batch_sends`](Self::batch_sends),
    /// with the same selective signaling as [`post`](Self::post).
    fn flush_batch(&self) {
        let items = std::mem::take(&mut *lock(&self.batch));
        if items.len() <= 1 {
            for r in items {
                if let Err(e) = self.post_with(r.wr, r.mrs, r.pooled, None) {
                    tracing::debug!(error = %e, "cannot post a Send; closing");
                    self.qp.disconnect();
                }
            }
            return;
        }
        // The deferred lock spans the post, as in `post_release_only`.
        let mut d = lock(&self.deferred);
        let mut wrs = Vec::with_capacity(items.len());
        for ReadySend {
            mut wr,
            mut mrs,
            mut pooled,
        } in items
        {
            let small = mrs.iter().map(|m| m.len()).sum::<usize>() <= DEFER_MAX_BYTES;
            if small && d.count + 1 < SIGNAL_EVERY && !self.is_dead() {
                wr.wr_id = 0;
                wr.signaled = false;
                d.mrs.extend(mrs);
                d.pooled.extend(pooled);
                d.count += 1;
            } else {
                mrs.append(&mut d.mrs);
                pooled.append(&mut d.pooled);
                d.count = 0;
                wr.signaled = true;
                wr.wr_id = self.wr_id();
                lock(&self.ops).insert(
                    wr.wr_id,
                    Op {
                        then: None,
                        mrs,
                        pooled,
                    },
                );
            }
            wrs.push(wr);
        }
        let ids: Vec<u64> = wrs.iter().map(|w| w.wr_id).collect();
        if let Err(e) = self.qp.post_send_batch(wrs) {
            // Those not posted will never complete: their registrations
            // (and the deferred ones a signaled one took over) are kept
            // until the connection ends.
            let mut ops = lock(&self.ops);
            for id in ids.iter().skip(e.posted).filter(|&&id| id != 0) {
                if let Some(op) = ops.remove(id) {
                    d.mrs.extend(op.mrs);
                    d.pooled.extend(op.pooled);
                }
            }
            drop(ops);
            drop(d);
            tracing::debug!(error = %e, "cannot post a batch of Sends; closing");
            self.qp.disconnect();
        }
    }

    /// A registered send buffer holding `msg` (from the pool, or newly
    /// registered); `None` if the provider cannot write registered memory
    /// in place.
    fn pooled_send_buffer(&self, msg: &[u8]) -> Option<D::Mr> {
        let pooled = lock(&self.send_pool).pop();
        let buf = match pooled {
            Some(b) => b,
            None => self
                .pd
                .register(
                    MrBuffer::Mutable(BytesMut::zeroed(self.send_len)),
                    Access::NONE,
                )
                .ok()?,
        };
        match buf.write_at(0, msg) {
            Ok(()) => Some(buf),
            Err(e) => {
                tracing::debug!(error = %e, "provider cannot write send buffers in place");
                self.send_in_place.store(false, Ordering::Relaxed);
                None
            }
        }
    }

    /// Send buffers whose work requests have completed: back to the pool.
    fn recycle_send_buffers(&self, bufs: Vec<D::Mr>) {
        if bufs.is_empty() || self.is_dead() {
            return;
        }
        let mut pool = lock(&self.send_pool);
        for b in bufs {
            if pool.len() >= self.send_pool_max {
                break;
            }
            pool.push(b);
        }
    }

    /// A work request whose completion only releases registrations: most
    /// are posted unsignaled, their registrations kept until a later
    /// signaled one completes. The lock spans the post so that deferred
    /// registrations always belong to earlier work requests.
    fn post_release_only(
        &self,
        mut wr: SendWr,
        mut mrs: Vec<D::Mr>,
        mut pooled: Vec<D::Mr>,
    ) -> Result<(), VerbsError> {
        let mut d = lock(&self.deferred);
        let small = mrs.iter().map(|m| m.len()).sum::<usize>() <= DEFER_MAX_BYTES;
        if small && d.count + 1 < SIGNAL_EVERY && !self.is_dead() {
            wr.wr_id = 0;
            wr.signaled = false;
            let r = self.qp.post_send(wr);
            // Kept even when the post failed: earlier work requests of the
            // same message (RDMA Writes) may still gather from them.
            d.mrs.extend(mrs);
            if r.is_ok() {
                d.pooled.extend(pooled);
                d.count += 1;
            } else {
                // A pooled send buffer holds only this Send's own bytes and
                // no posted work request refers to it: back to the pool
                // rather than kept with the deferred registrations (a failed
                // post per call would otherwise keep one each).
                drop(d);
                self.recycle_send_buffers(pooled);
            }
            return r;
        }
        mrs.append(&mut d.mrs);
        pooled.append(&mut d.pooled);
        d.count = 0;
        match self.post_tracked_inner(wr, mrs, pooled, None) {
            Ok(()) => Ok(()),
            Err((e, mrs, pooled)) => {
                // The deferred registrations belong to unsignaled work
                // requests already posted: never drop them here.
                d.mrs = mrs;
                d.pooled = pooled;
                Err(e)
            }
        }
    }

    /// Keeps registrations alive until a work request posted after this
    /// call completes (the send queue completes in order) or the connection
    /// ends. For sources of RDMA Writes already posted when the rest of
    /// their message could not be.
    pub fn hold(&self, mrs: impl IntoIterator<Item = D::Mr>) {
        lock(&self.deferred).mrs.extend(mrs);
    }

    /// Send-queue depth (`max_send_wr`) of this endpoint's QP.
    pub fn sq_depth(&self) -> u32 {
        self.sq_depth
    }

    fn post_tracked(
        &self,
        wr: SendWr,
        mrs: Vec<D::Mr>,
        pooled: Vec<D::Mr>,
        then: Option<Continuation>,
    ) -> Result<(), VerbsError> {
        self.post_tracked_inner(wr, mrs, pooled, then)
            .map_err(|(e, mrs, pooled)| {
                // Kept until a later completion: earlier work requests of
                // the same message may refer to them.
                let mut d = lock(&self.deferred);
                d.mrs.extend(mrs);
                d.pooled.extend(pooled);
                e
            })
    }

    /// Posts; on failure gives the registrations back.
    #[allow(clippy::type_complexity)]
    fn post_tracked_inner(
        &self,
        mut wr: SendWr,
        mrs: Vec<D::Mr>,
        pooled: Vec<D::Mr>,
        then: Option<Continuation>,
    ) -> Result<(), (VerbsError, Vec<D::Mr>, Vec<D::Mr>)> {
        let track = then.is_some() || !mrs.is_empty() || !pooled.is_empty();
        if track {
            wr.signaled = true;
            if wr.wr_id == 0 {
                wr.wr_id = self.wr_id();
            }
            lock(&self.ops).insert(wr.wr_id, Op { then, mrs, pooled });
        } else {
            wr.wr_id = 0;
            wr.signaled = false;
        }
        let id = wr.wr_id;
        if let Err(e) = self.qp.post_send(wr) {
            // The caller learns of the failure from the error; the
            // continuation is dropped unrun.
            let (mrs, pooled) = if track {
                lock(&self.ops)
                    .remove(&id)
                    .map(|op| (op.mrs, op.pooled))
                    .unwrap_or_default()
            } else {
                (Vec::new(), Vec::new())
            };
            return Err((e, mrs, pooled));
        }
        Ok(())
    }

    /// Registers immutable bytes as a gather source (no remote access).
    pub fn register_source(&self, b: Bytes) -> Result<D::Mr, VerbsError> {
        self.pd
            .register(MrBuffer::Frozen(b), Access::NONE)
            .map_err(|e| e.error)
    }

    /// Handles a send-queue completion: releases and continues.
    pub fn on_send_wc(&self, wc: WorkCompletion) {
        let op = lock(&self.ops).remove(&wc.wr_id);
        if let Some(op) = op {
            drop(op.mrs);
            self.recycle_send_buffers(op.pooled);
            if let Some(f) = op.then {
                f(wc);
            }
        }
    }

    /// The connection is gone: completes every tracked work request with a
    /// flush error and releases every posted receive.
    pub fn fail_all(&self) {
        self.dead.store(true, Ordering::Relaxed);
        let ops: Vec<(u64, Op<D::Mr>)> = lock(&self.ops).drain().collect();
        for (id, op) in ops {
            drop(op.mrs);
            if let Some(f) = op.then {
                f(WorkCompletion {
                    wr_id: id,
                    status: WcStatus::WrFlushError,
                    opcode: WcOpcode::Send,
                    byte_len: 0,
                    invalidated_rkey: None,
                    solicited: false,
                    qp_num: self.qp.qp_num(),
                });
            }
        }
        let recvs: Vec<D::Mr> = lock(&self.recvs).drain().map(|(_, m)| m).collect();
        drop(recvs);
        let deferred = {
            let mut d = lock(&self.deferred);
            (std::mem::take(&mut d.mrs), std::mem::take(&mut d.pooled))
        };
        drop(deferred);
        let pool = std::mem::take(&mut *lock(&self.send_pool));
        drop(pool);
    }

    /// True once [`fail_all`](Self::fail_all) ran.
    pub fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Relaxed)
    }

    /// Polls the CQ until the connection ends, routing send-queue
    /// completions and handing receive completions to `sink`. Returns
    /// when the QP reports a disconnect or error, or `stop` resolves.
    pub async fn run<S>(&self, mut sink: S, stop: impl std::future::Future<Output = ()>)
    where
        S: RecvSink,
    {
        tokio::pin!(stop);
        let event = self.qp.next_event();
        tokio::pin!(event);
        let mut wcs = Vec::with_capacity(64);
        let mut ended = false;
        loop {
            wcs.clear();
            let n = self.cq.poll(&mut wcs, 64);
            for wc in wcs.drain(..) {
                if Self::is_recv(&wc) {
                    sink.on_recv(wc);
                } else {
                    self.on_send_wc(wc);
                }
            }
            sink.end_of_batch();
            if n > 0 {
                continue;
            }
            if ended {
                return;
            }
            tokio::select! {
                _ = self.cq.wait() => {}
                _ = &mut event => {
                    // Drain what the flush produced, then stop.
                    ended = true;
                }
                _ = &mut stop => { ended = true; }
            }
        }
    }
}

/// Where the completion loop ([`Endpoint::run`]) hands receive
/// completions.
pub(crate) trait RecvSink {
    /// A receive completed (successfully or not).
    fn on_recv(&mut self, wc: WorkCompletion);
    /// Every completion of one poll of the CQ has been handed on.
    fn end_of_batch(&mut self) {}
}

impl<F: FnMut(WorkCompletion)> RecvSink for F {
    fn on_recv(&mut self, wc: WorkCompletion) {
        self(wc)
    }
}

/// Most Sends posted as one batch by [`Endpoint::batch_sends`]. Measured
/// (NULL depth 32 on iwarp, whose batch post is one inline write, loaded
/// 2-core host, 3-6 runs each): 4 and 8 per batch cost more CPU per call
/// than they gain by letting the peer start on the first replies early;
/// 32 (a whole burst of 32 calls) was best, 64 no better.
const SEND_BATCH_MAX: usize = 32;

/// A Send ready to post, with what its completion releases.
struct ReadySend<M> {
    wr: SendWr,
    mrs: Vec<M>,
    pooled: Vec<M>,
}

thread_local! {
    /// The endpoint (its address) whose [`Endpoint::batch_sends`] is
    /// running on this thread; 0 for none.
    static BATCH_OWNER: Cell<usize> = const { Cell::new(0) };
}

/// Error for a failed work completion.
pub(crate) fn wc_error(wc: &WorkCompletion) -> VerbsError {
    VerbsError::Io(format!("work request failed: {:?}", wc.status))
}
