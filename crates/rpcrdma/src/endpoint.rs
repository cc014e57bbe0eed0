//! One connection's verbs objects and completion routing, shared by the
//! requester and the responder.
//!
//! - Receives: each posted receive owns a fresh registered buffer of the
//!   advertised size; a completion turns it into `Bytes` without copying.
//! - Send-queue work: a work request may carry registrations to release and
//!   a continuation to run when it completes (success, error or flush).
//!   Unsignaled work requests carry neither; the send queue completes in
//!   order, so a later signaled request covers them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use bytes::{Bytes, BytesMut};
use rdma_verbs::{
    Access, CompletionQueue, Device, MemoryRegion, MrBuffer, ProtectionDomain, QpInit, QueuePair,
    RecvWr, SendWr, Sge, VerbsError, WcOpcode, WcStatus, WorkCompletion,
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
}

/// A connection's PD, CQ and QP with completion routing.
pub(crate) struct Endpoint<D: Device> {
    pub qp: D::Qp,
    pub pd: D::Pd,
    pub cq: D::Cq,
    recv_len: usize,
    next_wr: AtomicU64,
    ops: Mutex<HashMap<u64, Op<D::Mr>>>,
    recvs: Mutex<HashMap<u64, D::Mr>>,
    /// Receive buffers whose message was copied out, ready to be posted
    /// again (no allocation or zeroing per receive).
    spare: Mutex<Vec<BytesMut>>,
    /// Registrations of unsignaled Sends, released by the next signaled
    /// one (the send queue completes in order); the count since the last
    /// signaled Send.
    deferred: Mutex<(Vec<D::Mr>, u32)>,
    dead: AtomicBool,
    sq_depth: u32,
}

/// Release-only Sends are signaled once in this many (selective
/// signaling, as Linux xprtrdma does), saving a completion per message.
const SIGNAL_EVERY: u32 = 16;
/// Only small registrations (a Send buffer, small gather sources) wait for
/// a later completion; larger ones are released with their own.
const DEFER_MAX_BYTES: usize = 16 << 10;

/// Receive buffers kept for reuse beyond those posted.
const SPARE_RECV_BUFFERS: usize = 64;

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
            ops: Mutex::new(HashMap::new()),
            recvs: Mutex::new(HashMap::new()),
            spare: Mutex::new(Vec::new()),
            deferred: Mutex::new((Vec::new(), 0)),
            dead: AtomicBool::new(false),
            sq_depth,
        };
        for _ in 0..recvs {
            ep.post_recv()?;
        }
        Ok(ep)
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
    pub fn take_recv(&self, wc: &WorkCompletion) -> Option<Bytes> {
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
        if then.is_none() && !mrs.is_empty() {
            return self.post_release_only(wr, mrs);
        }
        self.post_tracked(wr, mrs, then)
    }

    /// A work request whose completion only releases registrations: most
    /// are posted unsignaled, their registrations kept until a later
    /// signaled one completes. The lock spans the post so that deferred
    /// registrations always belong to earlier work requests.
    fn post_release_only(&self, mut wr: SendWr, mut mrs: Vec<D::Mr>) -> Result<(), VerbsError> {
        let mut d = lock(&self.deferred);
        let small = mrs.iter().map(|m| m.len()).sum::<usize>() <= DEFER_MAX_BYTES;
        if small && d.1 + 1 < SIGNAL_EVERY && !self.is_dead() {
            wr.wr_id = 0;
            wr.signaled = false;
            let r = self.qp.post_send(wr);
            // Kept even when the post failed: earlier work requests of the
            // same message (RDMA Writes) may still gather from them.
            d.0.extend(mrs);
            if r.is_ok() {
                d.1 += 1;
            }
            return r;
        }
        mrs.append(&mut d.0);
        d.1 = 0;
        match self.post_tracked_inner(wr, mrs, None) {
            Ok(()) => Ok(()),
            Err((e, mrs)) => {
                // The deferred registrations belong to unsignaled work
                // requests already posted: never drop them here.
                d.0 = mrs;
                Err(e)
            }
        }
    }

    /// Keeps registrations alive until a work request posted after this
    /// call completes (the send queue completes in order) or the connection
    /// ends. For sources of RDMA Writes already posted when the rest of
    /// their message could not be (review F5).
    pub fn hold(&self, mrs: impl IntoIterator<Item = D::Mr>) {
        lock(&self.deferred).0.extend(mrs);
    }

    /// Send-queue depth (`max_send_wr`) of this endpoint's QP.
    pub fn sq_depth(&self) -> u32 {
        self.sq_depth
    }

    fn post_tracked(
        &self,
        wr: SendWr,
        mrs: Vec<D::Mr>,
        then: Option<Continuation>,
    ) -> Result<(), VerbsError> {
        self.post_tracked_inner(wr, mrs, then).map_err(|(e, mrs)| {
            // Kept until a later completion: earlier work requests of the
            // same message may refer to them.
            self.hold(mrs);
            e
        })
    }

    /// Posts; on failure gives the registrations back.
    #[allow(clippy::type_complexity)]
    fn post_tracked_inner(
        &self,
        mut wr: SendWr,
        mrs: Vec<D::Mr>,
        then: Option<Continuation>,
    ) -> Result<(), (VerbsError, Vec<D::Mr>)> {
        let track = then.is_some() || !mrs.is_empty();
        if track {
            wr.signaled = true;
            if wr.wr_id == 0 {
                wr.wr_id = self.wr_id();
            }
            lock(&self.ops).insert(wr.wr_id, Op { then, mrs });
        } else {
            wr.wr_id = 0;
            wr.signaled = false;
        }
        let id = wr.wr_id;
        if let Err(e) = self.qp.post_send(wr) {
            // The caller learns of the failure from the error; the
            // continuation is dropped unrun.
            let mrs = if track {
                lock(&self.ops)
                    .remove(&id)
                    .map(|op| op.mrs)
                    .unwrap_or_default()
            } else {
                Vec::new()
            };
            return Err((e, mrs));
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
        let deferred = std::mem::take(&mut lock(&self.deferred).0);
        drop(deferred);
    }

    /// True once [`fail_all`](Self::fail_all) ran.
    pub fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Relaxed)
    }

    /// Polls the CQ until the connection ends, routing send-queue
    /// completions and handing receive completions to `on_recv`. Returns
    /// when the QP reports a disconnect or error, or `stop` resolves.
    pub async fn run<F>(&self, mut on_recv: F, stop: impl std::future::Future<Output = ()>)
    where
        F: FnMut(WorkCompletion),
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
                    on_recv(wc);
                } else {
                    self.on_send_wc(wc);
                }
            }
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

/// Error for a failed work completion.
pub(crate) fn wc_error(wc: &WorkCompletion) -> VerbsError {
    VerbsError::Io(format!("work request failed: {:?}", wc.status))
}
