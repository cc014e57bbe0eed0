//! An in-process RDMA provider ("memory fabric") implementing
//! [`rdma_verbs`], for deterministic transport tests without TCP.
//!
//! Every work request executes synchronously inside `post_send`: bytes are
//! copied between the registered buffers of the two queue pairs, and
//! completions are queued on the completion queues. The provider is as
//! strict as hardware where the transport could go wrong:
//!
//! - a Send with no posted receive, or larger than the receive, kills the
//!   connection (both QPs go to the error state, posted work is flushed);
//! - an rkey that is unknown, invalid, in another protection domain, out of
//!   bounds or lacking the right access kills the connection;
//! - keys change on every fast registration, so a stale key never works.
//!
//! Addresses are plain [`SocketAddr`]s in a per-[`Fabric`] namespace; no
//! socket is opened. Connections are only possible between clones of the
//! same [`Fabric`].
#![allow(clippy::manual_async_fn)]

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use bytes::Bytes;
use rdma_verbs::{
    Access, CmEvent, ConnError, ConnInfo, ConnParam, FastRegWr, MrBuffer, QpInit, QpState, RecvWr,
    RegisterError, SendOp, SendWr, Sge, VerbsError, WcOpcode, WcStatus, WorkCompletion,
};
use tokio::sync::{mpsc, oneshot, watch, Notify};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The in-memory device (cheap to clone; clones share the fabric).
#[derive(Clone, Default)]
pub struct Fabric {
    inner: Arc<FabricInner>,
}

impl std::fmt::Debug for Fabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fabric").finish_non_exhaustive()
    }
}

#[derive(Default)]
struct FabricInner {
    listeners: Mutex<HashMap<SocketAddr, mpsc::UnboundedSender<ConnRequest>>>,
    mrs: Mutex<HashMap<u32, Arc<MrInner>>>,
    qps: Mutex<Vec<Weak<QpInner>>>,
    next_key: AtomicU32,
    next_id: AtomicU32,
    next_port: AtomicU16,
    /// Fault injection: 0 = off; otherwise the RDMA Write post that brings
    /// it down to 0 is refused (see [`Fabric::refuse_rdma_write_after`]).
    refuse_write_in: AtomicU32,
    /// The same for Sends (see [`Fabric::refuse_send_after`]).
    refuse_send_in: AtomicU32,
    /// The same for RDMA Reads (see [`Fabric::refuse_rdma_read_after`]).
    refuse_read_in: AtomicU32,
    /// Posts refused by the countdowns above, in all.
    refused: AtomicU64,
    /// RDMA Reads are held instead of executed (see [`Fabric::hold_rdma_reads`]).
    hold_reads: AtomicBool,
    /// The RDMA Reads held, in post order.
    held_reads: Mutex<Vec<(Weak<QpInner>, SendWr)>>,
    /// Registrations made with `ProtectionDomain::register`.
    registrations: AtomicU64,
    /// `MemoryRegion::read_at`/`write_at` refused, as by a provider without
    /// them (see [`Fabric::refuse_in_place_access`]).
    no_in_place: AtomicBool,
}

impl FabricInner {
    fn fresh_key(&self) -> u32 {
        // Unpredictable enough for tests, never 0, never reused soon.
        let n = self
            .next_key
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_add(1);
        n.wrapping_mul(0x9E37_79B1) | 1
    }

    fn lookup(&self, key: u32) -> Option<Arc<MrInner>> {
        lock(&self.mrs).get(&key).cloned()
    }
}

impl Fabric {
    /// A new, empty fabric.
    pub fn new() -> Self {
        Self::default()
    }

    /// Fault injection for tests: after `n` more RDMA Write posts succeed
    /// (on any queue pair of the fabric), the next one is refused with
    /// [`VerbsError::QueueFull`], as a full send queue would refuse it; the
    /// queue pair itself stays usable. Refuses one post, then none.
    pub fn refuse_rdma_write_after(&self, n: u32) {
        self.inner
            .refuse_write_in
            .store(n.saturating_add(1), Ordering::Relaxed);
    }

    /// Fault injection for tests, as
    /// [`refuse_rdma_write_after`](Self::refuse_rdma_write_after) for Sends (and Sends with
    /// Invalidate): after `n` more Send posts succeed, the next one is
    /// refused with [`VerbsError::QueueFull`]. Refuses one post, then none.
    pub fn refuse_send_after(&self, n: u32) {
        self.inner
            .refuse_send_in
            .store(n.saturating_add(1), Ordering::Relaxed);
    }

    /// Fault injection for tests, as
    /// [`refuse_rdma_write_after`](Self::refuse_rdma_write_after) for RDMA
    /// Reads: after `n` more RDMA Read posts succeed (or are held, see
    /// [`hold_rdma_reads`](Self::hold_rdma_reads)), the next one is refused
    /// with [`VerbsError::QueueFull`]. Refuses one post, then none.
    pub fn refuse_rdma_read_after(&self, n: u32) {
        self.inner
            .refuse_read_in
            .store(n.saturating_add(1), Ordering::Relaxed);
    }

    /// Posts refused so far by the `refuse_*_after` fault injections.
    pub fn refused_posts(&self) -> u64 {
        self.inner.refused.load(Ordering::Relaxed)
    }

    /// Fault injection for tests: RDMA Reads posted from now on are held,
    /// neither executed nor completed, until
    /// [`release_rdma_reads`](Self::release_rdma_reads). Work requests
    /// posted after a held Read still execute, so a Send can complete
    /// before an earlier Read, as iWARP allows (RFC 5040 §5.5: a Send is
    /// not ordered behind the data of an earlier Read's response). A held
    /// Read of a queue pair that fails is flushed.
    pub fn hold_rdma_reads(&self) {
        self.inner.hold_reads.store(true, Ordering::Relaxed);
    }

    /// RDMA Reads held at the moment (see [`hold_rdma_reads`](Self::hold_rdma_reads)).
    pub fn held_rdma_reads(&self) -> usize {
        lock(&self.inner.held_reads).len()
    }

    /// Stops holding RDMA Reads and executes the held ones, in post order
    /// (a Read of a queue pair no longer connected completes as flushed).
    pub fn release_rdma_reads(&self) {
        self.inner.hold_reads.store(false, Ordering::Relaxed);
        let held = std::mem::take(&mut *lock(&self.inner.held_reads));
        for (q, wr) in held {
            if let Some(q) = q.upgrade() {
                let _sq = lock(&q.sq);
                if q.state() == QpState::Connected {
                    q.run(&wr);
                } else {
                    q.send_cq.push(wc(
                        wr.wr_id,
                        WcStatus::WrFlushError,
                        opcode_of(&wr.op),
                        q.num,
                    ));
                }
            }
        }
    }

    /// Makes [`MemoryRegion::read_at`](rdma_verbs::MemoryRegion::read_at)
    /// and [`write_at`](rdma_verbs::MemoryRegion::write_at) fail as the
    /// trait's default implementations do (tests of a consumer's fallback
    /// for providers without them).
    pub fn refuse_in_place_access(&self) {
        self.inner.no_in_place.store(true, Ordering::Relaxed);
    }

    /// Registrations made so far with
    /// [`ProtectionDomain::register`](rdma_verbs::ProtectionDomain::register)
    /// on this fabric (fast registrations not counted): diagnostics, and
    /// tests that a transport does not register memory per message.
    pub fn registrations(&self) -> u64 {
        self.inner.registrations.load(Ordering::Relaxed)
    }

    /// Fails every connected queue pair of the fabric at once (a fault
    /// injection for tests: as if the network died).
    pub fn fail_all(&self) {
        let qps: Vec<_> = lock(&self.inner.qps)
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        for q in qps {
            if q.state() == QpState::Connected {
                q.fail("fabric failure injected", false);
            }
        }
    }
}

/// A protection domain.
pub struct Pd {
    id: u32,
    fabric: Arc<FabricInner>,
}

struct MrState {
    key: u32,
    valid: bool,
    access: Access,
    buf: Option<MrBuffer>,
}

struct MrInner {
    pd: u32,
    max_len: usize,
    st: Mutex<MrState>,
}

/// A memory region.
pub struct Mr {
    inner: Arc<MrInner>,
    fabric: Arc<FabricInner>,
}

impl rdma_verbs::ProtectionDomain for Pd {
    type Mr = Mr;

    fn register(&self, buffer: MrBuffer, access: Access) -> Result<Mr, RegisterError> {
        if let Err(error) = buffer.check_registration(access) {
            return Err(RegisterError { error, buffer });
        }
        self.fabric.registrations.fetch_add(1, Ordering::Relaxed);
        let key = self.fabric.fresh_key();
        let inner = Arc::new(MrInner {
            pd: self.id,
            max_len: buffer.len(),
            st: Mutex::new(MrState {
                key,
                valid: true,
                access,
                buf: Some(buffer),
            }),
        });
        lock(&self.fabric.mrs).insert(key, inner.clone());
        Ok(Mr {
            inner,
            fabric: self.fabric.clone(),
        })
    }

    fn alloc_mr(&self, max_len: usize) -> Result<Mr, VerbsError> {
        Ok(Mr {
            inner: Arc::new(MrInner {
                pd: self.id,
                max_len,
                st: Mutex::new(MrState {
                    key: 0,
                    valid: false,
                    access: Access::NONE,
                    buf: None,
                }),
            }),
            fabric: self.fabric.clone(),
        })
    }
}

impl rdma_verbs::MemoryRegion for Mr {
    fn lkey(&self) -> u32 {
        lock(&self.inner.st).key
    }
    fn rkey(&self) -> u32 {
        lock(&self.inner.st).key
    }
    fn len(&self) -> usize {
        lock(&self.inner.st).buf.as_ref().map_or(0, MrBuffer::len)
    }
    fn access(&self) -> Access {
        lock(&self.inner.st).access
    }
    fn is_valid(&self) -> bool {
        lock(&self.inner.st).valid
    }
    fn take_buffer(&self) -> Result<MrBuffer, VerbsError> {
        let mut st = lock(&self.inner.st);
        if st.valid {
            return Err(VerbsError::RegionBusy("region still valid"));
        }
        let key = st.key;
        let b = st.buf.take().ok_or(VerbsError::RegionBusy("no buffer"))?;
        drop(st);
        lock(&self.fabric.mrs).remove(&key);
        Ok(b)
    }
    fn read_at(&self, offset: usize, dst: &mut [u8]) -> Result<(), VerbsError> {
        if self.fabric.no_in_place.load(Ordering::Relaxed) {
            return Err(VerbsError::InvalidState("in-place access refused"));
        }
        let st = lock(&self.inner.st);
        let buf = st.buf.as_ref().ok_or(VerbsError::RegionBusy("no buffer"))?;
        let r = in_range(offset, dst.len(), buf.len())?;
        dst.copy_from_slice(&buf.as_slice()[r]);
        Ok(())
    }
    fn write_at(&self, offset: usize, src: &[u8]) -> Result<(), VerbsError> {
        if self.fabric.no_in_place.load(Ordering::Relaxed) {
            return Err(VerbsError::InvalidState("in-place access refused"));
        }
        let mut st = lock(&self.inner.st);
        let buf = st.buf.as_mut().ok_or(VerbsError::RegionBusy("no buffer"))?;
        let r = in_range(offset, src.len(), buf.len())?;
        let b = buf
            .as_mut_slice()
            .ok_or(VerbsError::InvalidAccess("immutable buffer"))?;
        b[r].copy_from_slice(src);
        Ok(())
    }
    fn deregister(self) -> Option<MrBuffer> {
        let mut st = lock(&self.inner.st);
        st.valid = false;
        let key = st.key;
        let b = st.buf.take();
        drop(st);
        lock(&self.fabric.mrs).remove(&key);
        b
    }
}

/// `offset..offset + len` if it lies within `buf_len` bytes.
fn in_range(
    offset: usize,
    len: usize,
    buf_len: usize,
) -> Result<std::ops::Range<usize>, VerbsError> {
    match offset.checked_add(len) {
        Some(end) if end <= buf_len => Ok(offset..end),
        _ => Err(VerbsError::InvalidArgument("range outside the region")),
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        let st = lock(&self.inner.st);
        let key = st.key;
        drop(st);
        let mut mrs = lock(&self.fabric.mrs);
        if mrs.get(&key).is_some_and(|m| Arc::ptr_eq(m, &self.inner)) {
            mrs.remove(&key);
        }
    }
}

/// A completion queue.
#[derive(Clone, Default)]
pub struct Cq {
    inner: Arc<CqInner>,
}

#[derive(Default)]
struct CqInner {
    q: Mutex<VecDeque<WorkCompletion>>,
    notify: Notify,
}

impl Cq {
    fn push(&self, wc: WorkCompletion) {
        lock(&self.inner.q).push_back(wc);
        self.inner.notify.notify_one();
    }
}

impl rdma_verbs::CompletionQueue for Cq {
    fn poll(&self, out: &mut Vec<WorkCompletion>, max: usize) -> usize {
        let mut q = lock(&self.inner.q);
        let n = q.len().min(max);
        out.extend(q.drain(..n));
        n
    }
    fn poll_one(&self) -> Option<WorkCompletion> {
        lock(&self.inner.q).pop_front()
    }
    fn wait(&self) -> impl std::future::Future<Output = ()> + Send {
        async move {
            let n = self.inner.notify.notified();
            tokio::pin!(n);
            n.as_mut().enable();
            if !lock(&self.inner.q).is_empty() {
                return;
            }
            n.await;
        }
    }
}

struct QpSt {
    state: QpState,
    recvs: VecDeque<RecvWr>,
    peer: Option<Weak<QpInner>>,
    local: Option<SocketAddr>,
    remote: Option<SocketAddr>,
}

struct QpInner {
    num: u32,
    pd: u32,
    fabric: Arc<FabricInner>,
    send_cq: Cq,
    recv_cq: Cq,
    max_recv: usize,
    st: Mutex<QpSt>,
    events: watch::Sender<Option<CmEvent>>,
    /// Serialises the send queue, so work requests execute in post order.
    sq: Mutex<()>,
}

/// A queue pair.
#[derive(Clone)]
pub struct Qp {
    inner: Arc<QpInner>,
}

fn wc(wr_id: u64, status: WcStatus, opcode: WcOpcode, qp_num: u32) -> WorkCompletion {
    WorkCompletion {
        wr_id,
        status,
        opcode,
        byte_len: 0,
        invalidated_rkey: None,
        solicited: false,
        qp_num,
    }
}

fn opcode_of(op: &SendOp) -> WcOpcode {
    match op {
        SendOp::Send { .. } | SendOp::SendWithInvalidate { .. } => WcOpcode::Send,
        SendOp::RdmaWrite { .. } => WcOpcode::RdmaWrite,
        SendOp::RdmaRead { .. } => WcOpcode::RdmaRead,
        SendOp::LocalInvalidate { .. } => WcOpcode::LocalInvalidate,
    }
}

impl QpInner {
    fn state(&self) -> QpState {
        lock(&self.st).state
    }

    fn peer(&self) -> Option<Arc<QpInner>> {
        lock(&self.st).peer.as_ref()?.upgrade()
    }

    /// Completes this queue pair's held RDMA Reads as flushed.
    fn flush_held_reads(&self) {
        let mine: Vec<SendWr> = {
            let mut held = lock(&self.fabric.held_reads);
            let (mine, rest) = std::mem::take(&mut *held)
                .into_iter()
                .partition(|(q, _)| std::ptr::eq(q.as_ptr(), self));
            *held = rest;
            mine.into_iter().map(|(_, wr)| wr).collect()
        };
        for wr in mine {
            self.send_cq.push(wc(
                wr.wr_id,
                WcStatus::WrFlushError,
                opcode_of(&wr.op),
                self.num,
            ));
        }
    }

    /// Executes a work request that was accepted, and completes it.
    fn run(&self, wr: &SendWr) {
        match self.execute(wr) {
            Ok(()) => {
                if wr.signaled {
                    let mut c = wc(wr.wr_id, WcStatus::Success, opcode_of(&wr.op), self.num);
                    if let SendOp::RdmaRead { .. } = wr.op {
                        c.byte_len = wr.sgl_len() as u32;
                    }
                    self.send_cq.push(c);
                }
            }
            Err((status, fatal)) => {
                self.send_cq
                    .push(wc(wr.wr_id, status, opcode_of(&wr.op), self.num));
                if fatal {
                    self.fail(&format!("work request failed: {status:?}"), false);
                }
            }
        }
    }

    /// Moves to the error state, flushes receives, and fails the peer too.
    fn fail(&self, why: &str, remote: bool) {
        let event = CmEvent::ConnectionError(ConnError {
            remote,
            code: None,
            description: why.to_string(),
        });
        if let Some(p) = self.stop(QpState::Error, event) {
            p.fail(why, true);
        }
    }

    fn close(&self) {
        if let Some(p) = self.stop(QpState::Disconnected, CmEvent::Disconnected) {
            p.close();
        }
    }

    /// Moves to `state` (once: a QP already in error or disconnected stays
    /// as it is), flushes the held reads and the posted receives, reports
    /// `event`, and returns the peer still to be told.
    fn stop(&self, state: QpState, event: CmEvent) -> Option<Arc<Self>> {
        let (recvs, peer) = {
            let mut st = lock(&self.st);
            if matches!(st.state, QpState::Error | QpState::Disconnected) {
                return None;
            }
            st.state = state;
            (std::mem::take(&mut st.recvs), st.peer.take())
        };
        self.flush_held_reads();
        for r in recvs {
            self.recv_cq.push(wc(
                r.wr_id,
                WcStatus::WrFlushError,
                WcOpcode::Recv,
                self.num,
            ));
        }
        self.events.send_replace(Some(event));
        peer.and_then(|p| p.upgrade())
    }

    /// Looks a key up for an access by a QP of protection domain `pd`.
    fn region(&self, key: u32, need: Access) -> Result<Arc<MrInner>, WcStatus> {
        let mr = self
            .fabric
            .lookup(key)
            .ok_or(WcStatus::LocalProtectionError)?;
        let st = lock(&mr.st);
        if !st.valid || st.key != key || mr.pd != self.pd || !st.access.contains(need) {
            return Err(WcStatus::LocalProtectionError);
        }
        drop(st);
        Ok(mr)
    }

    /// Reads `len` bytes at `off` of region `key` (checked for `need`).
    fn read_region(
        &self,
        key: u32,
        off: u64,
        len: u32,
        need: Access,
        out: &mut Vec<u8>,
    ) -> Result<(), WcStatus> {
        let mr = self.region(key, need)?;
        let st = lock(&mr.st);
        let b = st
            .buf
            .as_ref()
            .ok_or(WcStatus::LocalProtectionError)?
            .as_slice();
        let s = usize::try_from(off).map_err(|_| WcStatus::LocalProtectionError)?;
        let e = s
            .checked_add(len as usize)
            .ok_or(WcStatus::LocalProtectionError)?;
        out.extend_from_slice(b.get(s..e).ok_or(WcStatus::LocalProtectionError)?);
        Ok(())
    }

    fn write_region(&self, key: u32, off: u64, data: &[u8], need: Access) -> Result<(), WcStatus> {
        let mr = self.region(key, need)?;
        let mut st = lock(&mr.st);
        let b = st
            .buf
            .as_mut()
            .and_then(MrBuffer::as_mut_slice)
            .ok_or(WcStatus::LocalProtectionError)?;
        let s = usize::try_from(off).map_err(|_| WcStatus::LocalProtectionError)?;
        let e = s
            .checked_add(data.len())
            .ok_or(WcStatus::LocalProtectionError)?;
        b.get_mut(s..e)
            .ok_or(WcStatus::LocalProtectionError)?
            .copy_from_slice(data);
        Ok(())
    }

    fn gather(&self, sgl: &[Sge]) -> Result<Vec<u8>, WcStatus> {
        let mut v = Vec::with_capacity(sgl.iter().map(|s| s.length as usize).sum());
        for s in sgl {
            self.read_region(s.lkey, s.offset, s.length, Access::NONE, &mut v)?;
        }
        Ok(v)
    }

    fn scatter(&self, sgl: &[Sge], mut data: &[u8]) -> Result<(), WcStatus> {
        for s in sgl {
            if data.is_empty() {
                break;
            }
            let n = data.len().min(s.length as usize);
            self.write_region(s.lkey, s.offset, &data[..n], Access::LOCAL_WRITE)?;
            data = &data[n..];
        }
        if data.is_empty() {
            Ok(())
        } else {
            Err(WcStatus::LocalLengthError)
        }
    }

    fn invalidate(&self, key: u32) -> Result<(), WcStatus> {
        let mr = self
            .fabric
            .lookup(key)
            .ok_or(WcStatus::LocalProtectionError)?;
        let mut st = lock(&mr.st);
        if mr.pd != self.pd || st.key != key {
            return Err(WcStatus::LocalProtectionError);
        }
        st.valid = false;
        Ok(())
    }

    /// Executes one send-queue work request.
    fn execute(&self, wr: &SendWr) -> Result<(), (WcStatus, bool)> {
        // (status, fatal to the connection)
        match &wr.op {
            SendOp::LocalInvalidate { rkey } => self.invalidate(*rkey).map_err(|s| (s, true)),
            SendOp::Send { .. } | SendOp::SendWithInvalidate { .. } => {
                let data = self.gather(&wr.sgl).map_err(|s| (s, true))?;
                let peer = self.peer().ok_or((WcStatus::WrFlushError, true))?;
                let inv = match wr.op {
                    SendOp::SendWithInvalidate {
                        invalidate_rkey, ..
                    } => Some(invalidate_rkey),
                    _ => None,
                };
                let recv = lock(&peer.st).recvs.pop_front();
                let Some(recv) = recv else {
                    return Err((WcStatus::RemoteOperationError, true));
                };
                if let Some(k) = inv {
                    peer.invalidate(k)
                        .map_err(|_| (WcStatus::RemoteInvalidRequest, true))?;
                }
                if let Err(s) = peer.scatter(&recv.sgl, &data) {
                    peer.recv_cq
                        .push(wc(recv.wr_id, s, WcOpcode::Recv, peer.num));
                    return Err((WcStatus::RemoteOperationError, true));
                }
                peer.recv_cq.push(WorkCompletion {
                    byte_len: data.len() as u32,
                    invalidated_rkey: inv,
                    ..wc(recv.wr_id, WcStatus::Success, WcOpcode::Recv, peer.num)
                });
                Ok(())
            }
            SendOp::RdmaWrite { remote } => {
                let data = self.gather(&wr.sgl).map_err(|s| (s, true))?;
                let peer = self.peer().ok_or((WcStatus::WrFlushError, true))?;
                peer.write_region(remote.rkey, remote.offset, &data, Access::REMOTE_WRITE)
                    .map_err(|_| (WcStatus::RemoteAccessError, true))
            }
            SendOp::RdmaRead { remote } => {
                let peer = self.peer().ok_or((WcStatus::WrFlushError, true))?;
                let len = wr.sgl_len();
                let len = u32::try_from(len).map_err(|_| (WcStatus::LocalLengthError, true))?;
                let mut data = Vec::with_capacity(len as usize);
                peer.read_region(
                    remote.rkey,
                    remote.offset,
                    len,
                    Access::REMOTE_READ,
                    &mut data,
                )
                .map_err(|_| (WcStatus::RemoteAccessError, true))?;
                self.scatter(&wr.sgl, &data).map_err(|s| (s, true))
            }
        }
    }
}

impl rdma_verbs::QueuePair for Qp {
    type Mr = Mr;

    fn qp_num(&self) -> u32 {
        self.inner.num
    }
    fn state(&self) -> QpState {
        self.inner.state()
    }
    fn post_send(&self, wr: SendWr) -> Result<(), VerbsError> {
        let q = &self.inner;
        let _sq = lock(&q.sq);
        match q.state() {
            QpState::Connected => {}
            QpState::Error | QpState::Disconnected => {
                q.send_cq.push(wc(
                    wr.wr_id,
                    WcStatus::WrFlushError,
                    opcode_of(&wr.op),
                    q.num,
                ));
                return Ok(());
            }
            _ => return Err(VerbsError::InvalidState("not connected")),
        }
        let countdown = match wr.op {
            SendOp::RdmaWrite { .. } => Some(&q.fabric.refuse_write_in),
            SendOp::Send { .. } | SendOp::SendWithInvalidate { .. } => {
                Some(&q.fabric.refuse_send_in)
            }
            SendOp::RdmaRead { .. } => Some(&q.fabric.refuse_read_in),
            _ => None,
        };
        if countdown.is_some_and(refuse_now) {
            q.fabric.refused.fetch_add(1, Ordering::Relaxed);
            return Err(VerbsError::QueueFull("send queue (injected)"));
        }
        if matches!(wr.op, SendOp::RdmaRead { .. }) && q.fabric.hold_reads.load(Ordering::Relaxed) {
            #[cfg(test)]
            if TEST_WIDEN_HOLD.load(Ordering::SeqCst) {
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
            // The state is checked again under the held list's lock:
            // `fail`/`close` set it before they flush the list, so a Read
            // pushed here is either seen by their flush or flushed now.
            let mut held = lock(&q.fabric.held_reads);
            if q.state() == QpState::Connected {
                held.push((Arc::downgrade(q), wr));
            } else {
                drop(held);
                q.send_cq.push(wc(
                    wr.wr_id,
                    WcStatus::WrFlushError,
                    opcode_of(&wr.op),
                    q.num,
                ));
            }
            return Ok(());
        }
        q.run(&wr);
        Ok(())
    }
    fn post_fast_reg(&self, mr: &Mr, wr: FastRegWr) -> Result<u32, RegisterError> {
        let FastRegWr {
            wr_id,
            buffer,
            access,
            signaled,
        } = wr;
        if let Err(error) = buffer.check_registration(access) {
            return Err(RegisterError { error, buffer });
        }
        if mr.inner.pd != self.inner.pd {
            return Err(RegisterError {
                error: VerbsError::InvalidArgument("region of another protection domain"),
                buffer,
            });
        }
        if buffer.len() > mr.inner.max_len {
            return Err(RegisterError {
                error: VerbsError::InvalidArgument("buffer longer than the region"),
                buffer,
            });
        }
        let mut st = lock(&mr.inner.st);
        if st.buf.is_some() {
            drop(st);
            return Err(RegisterError {
                error: VerbsError::RegionBusy("region holds a buffer"),
                buffer,
            });
        }
        let key = self.inner.fabric.fresh_key();
        st.key = key;
        st.valid = true;
        st.access = access;
        st.buf = Some(buffer);
        drop(st);
        lock(&self.inner.fabric.mrs).insert(key, mr.inner.clone());
        if signaled {
            self.inner.send_cq.push(wc(
                wr_id,
                WcStatus::Success,
                WcOpcode::FastReg,
                self.inner.num,
            ));
        }
        Ok(key)
    }
    fn post_recv(&self, wr: RecvWr) -> Result<(), VerbsError> {
        let mut st = lock(&self.inner.st);
        match st.state {
            QpState::Error | QpState::Disconnected => {
                drop(st);
                self.inner.recv_cq.push(wc(
                    wr.wr_id,
                    WcStatus::WrFlushError,
                    WcOpcode::Recv,
                    self.inner.num,
                ));
                Ok(())
            }
            _ if st.recvs.len() >= self.inner.max_recv => {
                Err(VerbsError::QueueFull("receive queue"))
            }
            _ => {
                st.recvs.push_back(wr);
                Ok(())
            }
        }
    }
    fn peer_addr(&self) -> Option<SocketAddr> {
        lock(&self.inner.st).remote
    }
    fn local_addr(&self) -> Option<SocketAddr> {
        lock(&self.inner.st).local
    }
    fn disconnect(&self) {
        self.inner.close();
    }
    fn next_event(&self) -> impl std::future::Future<Output = CmEvent> + Send {
        let mut rx = self.inner.events.subscribe();
        async move {
            loop {
                if let Some(e) = rx.borrow_and_update().clone() {
                    return e;
                }
                if rx.changed().await.is_err() {
                    return CmEvent::Disconnected;
                }
            }
        }
    }
}

struct ConnRequest {
    peer: SocketAddr,
    private_data: Bytes,
    ord: u16,
    ird: u16,
    qp: Arc<QpInner>,
    reply: oneshot::Sender<Result<(Bytes, u16, u16), VerbsError>>,
}

/// A listener.
pub struct Listener {
    addr: SocketAddr,
    rx: tokio::sync::Mutex<mpsc::UnboundedReceiver<ConnRequest>>,
    fabric: Arc<FabricInner>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        lock(&self.fabric.listeners).remove(&self.addr);
    }
}

/// A connection request.
pub struct Request {
    req: ConnRequest,
    local: SocketAddr,
}

impl rdma_verbs::Listener for Listener {
    type Qp = Qp;
    type Request = Request;
    fn local_addr(&self) -> SocketAddr {
        self.addr
    }
    fn next_request(
        &self,
    ) -> impl std::future::Future<Output = Result<Request, VerbsError>> + Send {
        async move {
            let req = self
                .rx
                .lock()
                .await
                .recv()
                .await
                .ok_or(VerbsError::NotConnected)?;
            Ok(Request {
                req,
                local: self.addr,
            })
        }
    }
}

impl rdma_verbs::ConnectRequest for Request {
    type Qp = Qp;
    fn peer_addr(&self) -> SocketAddr {
        self.req.peer
    }
    fn private_data(&self) -> &[u8] {
        &self.req.private_data
    }
    fn initiator_depth(&self) -> u16 {
        self.req.ord
    }
    fn responder_resources(&self) -> u16 {
        self.req.ird
    }
    fn accept(
        self,
        qp: &Qp,
        param: ConnParam,
    ) -> impl std::future::Future<Output = Result<ConnInfo, VerbsError>> + Send {
        let qp = qp.clone();
        async move {
            let Request { req, local } = self;
            let ours = &qp.inner;
            let theirs = req.qp.clone();
            // Our ORD is limited by their IRD and vice versa.
            let ord = param.initiator_depth.min(req.ird);
            let ird = param.responder_resources.min(req.ord);
            {
                let mut a = lock(&ours.st);
                let mut b = lock(&theirs.st);
                a.state = QpState::Connected;
                a.peer = Some(Arc::downgrade(&theirs));
                a.local = Some(local);
                a.remote = Some(req.peer);
                b.state = QpState::Connected;
                b.peer = Some(Arc::downgrade(ours));
                b.local = Some(req.peer);
                b.remote = Some(local);
            }
            req.reply
                .send(Ok((param.private_data.clone(), ird, ord)))
                .map_err(|_| VerbsError::NotConnected)?;
            Ok(ConnInfo {
                local_addr: local,
                peer_addr: req.peer,
                private_data: req.private_data,
                initiator_depth: ord,
                responder_resources: ird,
            })
        }
    }
    fn reject(
        self,
        private_data: &[u8],
    ) -> impl std::future::Future<Output = Result<(), VerbsError>> + Send {
        let pd = Bytes::copy_from_slice(private_data);
        async move {
            let _ = self
                .req
                .reply
                .send(Err(VerbsError::Rejected { private_data: pd }));
            Ok(())
        }
    }
}

impl rdma_verbs::Device for Fabric {
    type Pd = Pd;
    type Mr = Mr;
    type Cq = Cq;
    type Qp = Qp;
    type Listener = Listener;

    fn name(&self) -> &str {
        "memfabric"
    }
    fn max_private_data(&self) -> usize {
        rdma_verbs::MAX_PRIVATE_DATA_IWARP
    }
    fn alloc_pd(&self) -> Result<Pd, VerbsError> {
        Ok(Pd {
            id: self.inner.next_id.fetch_add(1, Ordering::Relaxed) + 1,
            fabric: self.inner.clone(),
        })
    }
    fn create_cq(&self, _capacity: usize) -> Result<Cq, VerbsError> {
        Ok(Cq::default())
    }
    fn create_qp(&self, pd: &Pd, init: QpInit<Cq>) -> Result<Qp, VerbsError> {
        let inner = Arc::new(QpInner {
            num: self.inner.next_id.fetch_add(1, Ordering::Relaxed) + 1,
            pd: pd.id,
            fabric: self.inner.clone(),
            send_cq: init.send_cq,
            recv_cq: init.recv_cq,
            max_recv: init.max_recv_wr as usize,
            st: Mutex::new(QpSt {
                state: QpState::Init,
                recvs: VecDeque::new(),
                peer: None,
                local: None,
                remote: None,
            }),
            events: watch::channel(None).0,
            sq: Mutex::new(()),
        });
        let mut qps = lock(&self.inner.qps);
        qps.retain(|w| w.strong_count() > 0);
        qps.push(Arc::downgrade(&inner));
        Ok(Qp { inner })
    }
    fn connect(
        &self,
        qp: &Qp,
        addr: SocketAddr,
        param: ConnParam,
    ) -> impl std::future::Future<Output = Result<ConnInfo, VerbsError>> + Send {
        let qp = qp.clone();
        let fabric = self.inner.clone();
        async move {
            let tx = lock(&fabric.listeners)
                .get(&addr)
                .cloned()
                .ok_or(VerbsError::Io("connection refused".into()))?;
            let port = 40000 + fabric.next_port.fetch_add(1, Ordering::Relaxed) % 20000;
            let me = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port);
            let (rtx, rrx) = oneshot::channel();
            lock(&qp.inner.st).state = QpState::Connecting;
            tx.send(ConnRequest {
                peer: me,
                private_data: param.private_data.clone(),
                ord: param.initiator_depth,
                ird: param.responder_resources,
                qp: qp.inner.clone(),
                reply: rtx,
            })
            .map_err(|_| VerbsError::Io("connection refused".into()))?;
            match rrx.await {
                Ok(Ok((pd, ord, ird))) => Ok(ConnInfo {
                    local_addr: me,
                    peer_addr: addr,
                    private_data: pd,
                    initiator_depth: ord,
                    responder_resources: ird,
                }),
                Ok(Err(e)) => {
                    lock(&qp.inner.st).state = QpState::Error;
                    Err(e)
                }
                Err(_) => {
                    lock(&qp.inner.st).state = QpState::Error;
                    Err(VerbsError::Io("connection refused".into()))
                }
            }
        }
    }
    fn listen(
        &self,
        addr: SocketAddr,
    ) -> impl std::future::Future<Output = Result<Listener, VerbsError>> + Send {
        let fabric = self.inner.clone();
        async move {
            let mut addr = addr;
            if addr.port() == 0 {
                addr.set_port(10000 + fabric.next_port.fetch_add(1, Ordering::Relaxed) % 20000);
            }
            let (tx, rx) = mpsc::unbounded_channel();
            let mut l = lock(&fabric.listeners);
            if l.contains_key(&addr) {
                return Err(VerbsError::Io("address in use".into()));
            }
            l.insert(addr, tx);
            drop(l);
            Ok(Listener {
                addr,
                rx: tokio::sync::Mutex::new(rx),
                fabric,
            })
        }
    }
}

/// Counts an injected refusal down; true for the post it lands on (the
/// counter went from 1 to 0). 0 means no refusal is armed.
fn refuse_now(countdown: &AtomicU32) -> bool {
    countdown.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)) == Ok(1)
}

/// Tests only: a held Read's post sleeps 200 ms before it takes the held
/// list's lock.
#[cfg(test)]
static TEST_WIDEN_HOLD: AtomicBool = AtomicBool::new(false);

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use rdma_verbs::{
        CompletionQueue, ConnectRequest, Device as _, Listener as _, MemoryRegion,
        ProtectionDomain, QueuePair, RemoteAddr,
    };

    struct End {
        pd: Pd,
        cq: Cq,
        qp: Qp,
    }

    fn end(f: &Fabric) -> End {
        let pd = f.alloc_pd().unwrap();
        let cq = f.create_cq(64).unwrap();
        let qp = f.create_qp(&pd, QpInit::with_cq(cq.clone())).unwrap();
        End { pd, cq, qp }
    }

    async fn pair() -> (End, End) {
        pair_on(&Fabric::new()).await
    }

    async fn pair_on(f: &Fabric) -> (End, End) {
        let (a, b) = (end(f), end(f));
        let l = f.listen("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = l.local_addr();
        let bqp = b.qp.clone();
        let h = tokio::spawn(async move {
            let r = l.next_request().await.unwrap();
            r.accept(&bqp, ConnParam::default()).await.unwrap();
        });
        f.connect(&a.qp, addr, ConnParam::default()).await.unwrap();
        h.await.unwrap();
        (a, b)
    }

    #[tokio::test]
    async fn held_reads_complete_on_release_or_flush_and_later_sends_pass_them() {
        let f = Fabric::new();
        let (a, b) = pair_on(&f).await;
        let src =
            b.pd.register(Bytes::from_static(b"remote").into(), Access::REMOTE_READ)
                .unwrap();
        let sink =
            a.pd.register(BytesMut::zeroed(6).into(), Access::LOCAL_WRITE)
                .unwrap();
        let read = |id| {
            SendWr::read(
                id,
                vec![Sge::new(sink.lkey(), 0, 6)],
                RemoteAddr {
                    rkey: src.lkey(),
                    offset: 0,
                },
            )
        };
        f.hold_rdma_reads();
        f.refuse_rdma_read_after(1);
        a.qp.post_send(read(1)).unwrap();
        assert!(matches!(
            a.qp.post_send(read(2)),
            Err(VerbsError::QueueFull(_))
        ));
        assert_eq!((f.held_rdma_reads(), f.refused_posts()), (1, 1));
        // A Send posted after the held Read completes first.
        let recv =
            b.pd.register(BytesMut::zeroed(4).into(), Access::LOCAL_WRITE)
                .unwrap();
        b.qp.post_recv(RecvWr::new(5, vec![Sge::new(recv.lkey(), 0, 4)]))
            .unwrap();
        let msg =
            a.pd.register(Bytes::from_static(b"hi").into(), Access::NONE)
                .unwrap();
        a.qp.post_send(SendWr::send(3, vec![Sge::new(msg.lkey(), 0, 2)]))
            .unwrap();
        assert_eq!(a.cq.poll_one().unwrap().wr_id, 3);
        assert!(a.cq.poll_one().is_none());
        f.release_rdma_reads();
        let wc = a.cq.poll_one().unwrap();
        assert_eq!(
            (wc.wr_id, wc.status, wc.byte_len),
            (1, WcStatus::Success, 6)
        );
        let mut got = [0u8; 6];
        sink.read_at(0, &mut got).unwrap();
        assert_eq!(&got, b"remote");
        // Held again, then the queue pair fails: the Read is flushed.
        f.hold_rdma_reads();
        a.qp.post_send(read(4)).unwrap();
        assert!(a.cq.poll_one().is_none());
        f.fail_all();
        let wc = a.cq.poll_one().unwrap();
        assert_eq!((wc.wr_id, wc.status), (4, WcStatus::WrFlushError));
        assert_eq!(f.held_rdma_reads(), 0);
    }

    #[tokio::test]
    async fn send_without_receive_kills_both_sides() {
        let (a, b) = pair().await;
        let mr =
            a.pd.register(Bytes::from_static(b"hi").into(), Access::NONE)
                .unwrap();
        a.qp.post_send(SendWr::send(1, vec![Sge::new(mr.lkey(), 0, 2)]))
            .unwrap();
        assert_eq!(
            a.cq.poll_one().unwrap().status,
            WcStatus::RemoteOperationError
        );
        assert_eq!(a.qp.state(), QpState::Error);
        assert_eq!(b.qp.state(), QpState::Error);
        assert!(matches!(
            b.qp.next_event().await,
            CmEvent::ConnectionError(_)
        ));
    }

    #[tokio::test]
    async fn write_needs_right_key_access_and_bounds() {
        let (a, b) = pair().await;
        let target =
            b.pd.register(
                BytesMut::zeroed(8).into(),
                Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            )
            .unwrap();
        let src =
            a.pd.register(Bytes::from_static(b"abcd").into(), Access::NONE)
                .unwrap();
        let w = |off| {
            SendWr::write(
                2,
                vec![Sge::new(src.lkey(), 0, 4)],
                RemoteAddr {
                    rkey: target.rkey(),
                    offset: off,
                },
            )
        };
        a.qp.post_send(w(4)).unwrap();
        assert!(a.cq.poll_one().unwrap().is_success());
        // Out of bounds: fatal.
        a.qp.post_send(w(6)).unwrap();
        assert_eq!(a.cq.poll_one().unwrap().status, WcStatus::RemoteAccessError);
        assert_eq!(b.qp.state(), QpState::Error);
        let buf = target.deregister().unwrap();
        assert_eq!(&buf.as_slice()[4..], b"abcd");
        drop(b.cq);
    }

    #[tokio::test]
    async fn fast_registration_gives_fresh_keys_and_invalidates() {
        let (a, _b) = pair().await;
        let mr = a.pd.alloc_mr(16).unwrap();
        let k1 =
            a.qp.post_fast_reg(
                &mr,
                FastRegWr {
                    wr_id: 0,
                    buffer: Bytes::from_static(b"x").into(),
                    access: Access::REMOTE_READ,
                    signaled: false,
                },
            )
            .unwrap();
        assert!(mr.is_valid());
        assert!(mr.take_buffer().is_err(), "busy while valid");
        a.qp.post_send(SendWr::local_invalidate(5, k1)).unwrap();
        assert!(a.cq.poll_one().unwrap().is_success());
        assert_eq!(mr.take_buffer().unwrap().as_slice(), b"x");
        let k2 =
            a.qp.post_fast_reg(
                &mr,
                FastRegWr {
                    wr_id: 0,
                    buffer: Bytes::from_static(b"y").into(),
                    access: Access::REMOTE_READ,
                    signaled: false,
                },
            )
            .unwrap();
        assert_ne!(k1, k2);
    }

    #[tokio::test]
    async fn read_and_write_registered_memory_in_place() {
        let (a, b) = pair().await;
        let recv =
            b.pd.register(BytesMut::zeroed(8).into(), Access::LOCAL_WRITE)
                .unwrap();
        let key = recv.lkey();
        let send =
            a.pd.register(BytesMut::zeroed(4).into(), Access::NONE)
                .unwrap();
        send.write_at(1, b"xyz").unwrap();
        assert!(matches!(
            send.write_at(2, b"xyz"),
            Err(VerbsError::InvalidArgument(_))
        ));
        for round in 0..2u8 {
            b.qp.post_recv(RecvWr::new(9, vec![Sge::new(recv.lkey(), 0, 8)]))
                .unwrap();
            send.write_at(0, &[round]).unwrap();
            a.qp.post_send(SendWr::send(1, vec![Sge::new(send.lkey(), 0, 4)]))
                .unwrap();
            assert!(a.cq.poll_one().unwrap().is_success());
            let wc = b.cq.poll_one().unwrap();
            assert_eq!(wc.byte_len, 4);
            let mut got = [0u8; 4];
            recv.read_at(0, &mut got).unwrap();
            assert_eq!(got, [round, b'x', b'y', b'z']);
            // Same registration, same key: nothing was re-registered.
            assert_eq!(recv.lkey(), key);
        }
        let mut big = [0u8; 9];
        assert!(matches!(
            recv.read_at(0, &mut big),
            Err(VerbsError::InvalidArgument(_))
        ));
        assert!(matches!(
            recv.read_at(usize::MAX, &mut [0u8; 2]),
            Err(VerbsError::InvalidArgument(_))
        ));
        let frozen =
            a.pd.register(Bytes::from_static(b"ro").into(), Access::NONE)
                .unwrap();
        assert!(matches!(
            frozen.write_at(0, b"x"),
            Err(VerbsError::InvalidAccess(_))
        ));
    }

    /// A Read held by a post that races with the queue pair's
    /// failure (fail() does not take the sq lock) is never flushed.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn held_read_posted_while_the_qp_fails_is_flushed() {
        let f = Fabric::new();
        let (a, b) = pair_on(&f).await;
        let src =
            b.pd.register(Bytes::from_static(b"remote").into(), Access::REMOTE_READ)
                .unwrap();
        let sink =
            a.pd.register(BytesMut::zeroed(6).into(), Access::LOCAL_WRITE)
                .unwrap();
        let wr = SendWr::read(
            9,
            vec![Sge::new(sink.lkey(), 0, 6)],
            RemoteAddr {
                rkey: src.lkey(),
                offset: 0,
            },
        );
        f.hold_rdma_reads();
        TEST_WIDEN_HOLD.store(true, Ordering::SeqCst);
        let qp = a.qp.clone();
        let t = std::thread::spawn(move || qp.post_send(wr).unwrap());
        std::thread::sleep(std::time::Duration::from_millis(50));
        f.fail_all();
        t.join().unwrap();
        TEST_WIDEN_HOLD.store(false, Ordering::SeqCst);
        std::thread::sleep(std::time::Duration::from_millis(50));
        let wc = a.cq.poll_one();
        eprintln!("completion: {wc:?}; held: {}", f.held_rdma_reads());
        assert!(
            wc.is_some(),
            "the Read never completes (held: {})",
            f.held_rdma_reads()
        );
    }
}
