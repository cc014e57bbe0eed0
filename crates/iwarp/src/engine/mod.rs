//! The sans-IO per-QP engine: bytes in → placements and completions;
//! work requests in → FPDUs out.
//!
//! A queue pair's state ([`QpShared`]) is shared by three parties: the
//! consumer (posting work requests), the receive half ([`rx::Rx`], fed the
//! TCP byte stream) and the transmit half ([`tx::Tx`], producing FPDUs).
//! Neither half does I/O: the receive half is handed a `read` closure that
//! fills the slice it is given (so tagged payload is read from the socket
//! straight into registered memory), and the transmit half returns `Bytes`
//! for a vectored write. The tokio driver ([`crate::device`]) runs one task
//! per half; tests wire two engines back to back in memory.

pub mod rx;
pub mod tx;

use crate::cq::Cq;
use crate::mem::StagTable;
use crate::wire::terminate::TerminateRepr;
use rdma_verbs::{CmEvent, ConnError, QpState, RecvWr, SendWr, WcOpcode, WcStatus, WorkCompletion};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::Notify;

/// Queue sizes of a QP.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// SGEs per send WR.
    pub max_send_sge: u32,
    /// SGEs per receive WR.
    pub max_recv_sge: u32,
}

/// An entry of the send queue not yet started by the transmit half.
#[derive(Debug)]
pub enum SqItem {
    /// A work request.
    Wr(SendWr),
    /// A fast registration (already applied at post time; completes in order).
    FastReg {
        /// Consumer id.
        wr_id: u64,
        /// Signalled.
        signaled: bool,
    },
}

/// An RDMA Read we sent and wait a response for (the ORQ, RFC 5040 §5.3).
#[derive(Debug, Clone)]
pub struct OrqEntry {
    /// The work request (its SGL is the sink).
    pub wr: SendWr,
    /// Sink STag we put in the request.
    pub sink_stag: u32,
    /// Sink TO we put in the request.
    pub sink_to: u64,
    /// Read size.
    pub len: u64,
    /// Internal (RTR) read: no completion.
    pub internal: bool,
}

/// An RDMA Read Request received and not yet answered (the IRQ).
#[derive(Debug, Clone)]
pub struct InboundRead {
    /// The request body.
    pub req: crate::wire::rdmap::ReadRequestRepr,
    /// The offending-header bytes (length + DDP header + body) for a
    /// Terminate with M/D/R, should the access check fail.
    pub raw: [u8; 2 + 18 + 28],
}

/// Mutable control state of a QP (one lock; held only for short,
/// per-message critical sections).
#[derive(Debug)]
pub struct QpInner {
    /// Lifecycle state.
    pub state: QpState,
    /// Posted receives.
    pub rq: VecDeque<RecvWr>,
    /// The receive WR (its `wr_id`) taken from `rq` by the receive half
    /// for a Send still in progress: it completes when the Send's last
    /// segment is delivered, or is flushed with the rest when the QP dies
    /// first (every posted WR completes exactly once).
    pub rq_taken: Option<u64>,
    /// Posted send WRs not yet started.
    pub sq: VecDeque<SqItem>,
    /// The send-queue WR the transmit half is working on (any kind: a
    /// message being produced, a FastReg, a LocalInvalidate):
    /// flushed in order by `fail`/`close`, reported by `fail` when it is
    /// the failing one, else completed by the transmit half when done.
    pub sq_cur: Option<WorkCompletion>,
    /// Send WRs posted and not yet completed (for the depth check).
    pub sq_outstanding: u32,
    /// Outstanding outbound RDMA Reads.
    pub orq: VecDeque<OrqEntry>,
    /// Inbound RDMA Reads waiting for their response.
    pub irq: VecDeque<InboundRead>,
    /// Inbound Reads accepted and not yet fully answered (IRD accounting).
    pub reads_in_service: u32,
    /// Negotiated ORD (outbound Reads we may have outstanding).
    pub ord: u32,
    /// Negotiated IRD (inbound Reads the peer may have outstanding).
    pub ird: u32,
    /// A Terminate to send as the last message, once an error is detected.
    pub terminate: Option<TerminateRepr>,
    /// The first error; once set the QP is dead.
    pub error: Option<ConnError>,
    /// Connection events for the consumer.
    pub events: VecDeque<CmEvent>,
    /// Responder gate (RFC 5044 §7.1.2): the responder sends no FPDU before
    /// it received the initiator's first FPDU.
    pub tx_gate_open: bool,
    /// Addresses once connected.
    pub local_addr: Option<SocketAddr>,
    /// Peer address once connected.
    pub peer_addr: Option<SocketAddr>,
    /// The TCP socket's send buffer (`SO_SNDBUF` as the kernel reports
    /// it) once in RDMA mode.
    pub send_buffer: Option<usize>,
    /// The transmit half finished: Terminate sent, orderly close, or (the
    /// driver) the TCP connection shut after the QP stopped.
    pub tx_closed: bool,
}

/// State shared by the consumer, the receive half and the transmit half.
#[derive(Debug)]
pub struct QpShared {
    /// QP number (unique per device).
    pub qp_num: u32,
    /// Protection domain id.
    pub pd: u32,
    /// The device's STag table.
    pub table: Arc<StagTable>,
    /// Send completions.
    pub send_cq: Cq,
    /// Receive completions.
    pub recv_cq: Cq,
    /// Queue sizes.
    pub limits: Limits,
    inner: Mutex<QpInner>,
    /// Set (never cleared) when the QP leaves the connected states for
    /// good (error or disconnect): the receive half checks it per FPDU
    /// without taking the lock.
    stopped: AtomicBool,
    /// Wakes the transmit half.
    pub tx_wake: Notify,
    /// Wakes event waiters.
    pub event_wake: Notify,
}

impl QpShared {
    /// A new QP in [`QpState::Init`].
    pub fn new(
        qp_num: u32,
        pd: u32,
        table: Arc<StagTable>,
        send_cq: Cq,
        recv_cq: Cq,
        limits: Limits,
    ) -> Self {
        QpShared {
            qp_num,
            pd,
            table,
            send_cq,
            recv_cq,
            limits,
            inner: Mutex::new(QpInner {
                state: QpState::Init,
                rq: VecDeque::new(),
                rq_taken: None,
                sq: VecDeque::new(),
                sq_cur: None,
                sq_outstanding: 0,
                orq: VecDeque::new(),
                irq: VecDeque::new(),
                reads_in_service: 0,
                ord: 0,
                ird: 0,
                terminate: None,
                error: None,
                events: VecDeque::new(),
                tx_gate_open: true,
                local_addr: None,
                peer_addr: None,
                send_buffer: None,
                tx_closed: false,
            }),
            stopped: AtomicBool::new(false),
            tx_wake: Notify::new(),
            event_wake: Notify::new(),
        }
    }

    /// Locks the control state.
    pub fn lock(&self) -> MutexGuard<'_, QpInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Moves to [`QpState::Connected`] with the negotiated ORD/IRD.
    /// `gate_open` is false for an MPA responder until the first FPDU arrives.
    /// Returns false, and changes nothing, when the QP failed or was
    /// disconnected during connection setup (so a QP never comes back as
    /// Connected with its receive half already stopped).
    #[must_use]
    pub fn establish(
        &self,
        ord: u32,
        ird: u32,
        gate_open: bool,
        local: Option<SocketAddr>,
        peer: Option<SocketAddr>,
    ) -> bool {
        let mut g = self.lock();
        if g.error.is_some() || self.stopped() {
            return false;
        }
        g.state = QpState::Connected;
        g.ord = ord;
        g.ird = ird;
        g.tx_gate_open = gate_open;
        g.local_addr = local;
        g.peer_addr = peer;
        drop(g);
        self.tx_wake.notify_one();
        true
    }

    /// A completion for a send-queue WR.
    pub fn wc(
        &self,
        wr_id: u64,
        status: WcStatus,
        opcode: WcOpcode,
        byte_len: u32,
    ) -> WorkCompletion {
        WorkCompletion {
            wr_id,
            status,
            opcode,
            byte_len,
            invalidated_rkey: None,
            solicited: false,
            qp_num: self.qp_num,
        }
    }

    /// Records a fatal error: the QP enters [`QpState::Error`], `terminate`
    /// (if any) is queued as the last message, `first` (the failing WR's
    /// completion) is reported, then every outstanding WR is flushed. Only
    /// the first error counts.
    pub fn fail(
        &self,
        error: ConnError,
        terminate: Option<TerminateRepr>,
        first: Option<WorkCompletion>,
    ) {
        let mut g = self.lock();
        if g.error.is_some() || g.state == QpState::Disconnected {
            // Already stopped (a close is terminal too).
            return;
        }
        tracing::debug!(qp = self.qp_num, %error, "QP error");
        g.state = QpState::Error;
        self.stopped.store(true, Ordering::Release);
        g.terminate = terminate;
        g.error = Some(error.clone());
        g.events.push_back(CmEvent::ConnectionError(error));
        let mut send_wcs = Vec::new();
        let mut recv_wcs = Vec::new();
        if let Some(f) = first {
            if f.opcode == WcOpcode::Recv {
                if g.rq_taken == Some(f.wr_id) {
                    // Reported with its error status, not flushed.
                    g.rq_taken = None;
                }
                recv_wcs.push(f);
            } else {
                // The send WR the transmit half was on (any kind) stays in
                // `sq_cur` until here: it completes with
                // `first`'s status, not flushed too. (Had a close come
                // first, its flush completed it, and this returned above.)
                if g.sq_cur
                    .as_ref()
                    .is_some_and(|c| c.wr_id == f.wr_id && c.opcode == f.opcode)
                {
                    g.sq_cur = None;
                } else if f.opcode == WcOpcode::RdmaRead {
                    // The failed Read is the oldest outstanding one: reported
                    // with its error status, not flushed again (a work
                    // request completes once).
                    if let Some(i) = g
                        .orq
                        .iter()
                        .position(|e| !e.internal && e.wr.wr_id == f.wr_id)
                    {
                        g.orq.remove(i);
                    }
                }
                send_wcs.push(f);
            }
        }
        self.flush_locked(&mut g, &mut send_wcs, &mut recv_wcs);
        drop(g);
        self.send_cq.push_all(send_wcs);
        self.recv_cq.push_all(recv_wcs);
        self.tx_wake.notify_one();
        self.event_wake.notify_waiters();
    }

    /// Orderly close (peer closed or local disconnect): flush everything.
    pub fn close(&self) {
        let mut g = self.lock();
        if g.error.is_some() || matches!(g.state, QpState::Disconnected) {
            return;
        }
        g.state = QpState::Disconnected;
        self.stopped.store(true, Ordering::Release);
        g.events.push_back(CmEvent::Disconnected);
        let mut send_wcs = Vec::new();
        let mut recv_wcs = Vec::new();
        self.flush_locked(&mut g, &mut send_wcs, &mut recv_wcs);
        drop(g);
        self.send_cq.push_all(send_wcs);
        self.recv_cq.push_all(recv_wcs);
        self.tx_wake.notify_one();
        self.event_wake.notify_waiters();
    }

    fn flush_locked(
        &self,
        g: &mut QpInner,
        send_wcs: &mut Vec<WorkCompletion>,
        recv_wcs: &mut Vec<WorkCompletion>,
    ) {
        for e in g.orq.drain(..) {
            if !e.internal {
                send_wcs.push(self.wc(e.wr.wr_id, WcStatus::WrFlushError, WcOpcode::RdmaRead, 0));
            }
        }
        if let Some(wc) = g.sq_cur.take() {
            send_wcs.push(WorkCompletion {
                status: WcStatus::WrFlushError,
                ..wc
            });
        }
        for item in g.sq.drain(..) {
            let (id, op) = match item {
                SqItem::Wr(wr) => (wr.wr_id, tx::wc_opcode(&wr.op)),
                SqItem::FastReg { wr_id, .. } => (wr_id, WcOpcode::FastReg),
            };
            send_wcs.push(self.wc(id, WcStatus::WrFlushError, op, 0));
        }
        g.sq_outstanding = 0;
        if let Some(id) = g.rq_taken.take() {
            recv_wcs.push(self.wc(id, WcStatus::WrFlushError, WcOpcode::Recv, 0));
        }
        for r in g.rq.drain(..) {
            recv_wcs.push(self.wc(r.wr_id, WcStatus::WrFlushError, WcOpcode::Recv, 0));
        }
        g.irq.clear();
    }

    /// True once the QP failed or was disconnected: nothing more is placed
    /// or delivered.
    pub fn stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    /// Current state.
    pub fn state(&self) -> QpState {
        self.lock().state
    }
}

/// Builds a [`ConnError`] for a Terminate we send or receive.
pub fn terminate_error(t: &TerminateRepr, remote: bool, what: &str) -> ConnError {
    let code =
        (u32::from(t.layer) << 28) | (u32::from(t.etype & 0xF) << 24) | (u32::from(t.code) << 16);
    let cause = t
        .cause()
        .map(|c| format!("{c:?}"))
        .unwrap_or_else(|| "undefined cause".into());
    ConnError {
        remote,
        code: Some(code),
        description: format!(
            "{what}: Terminate {cause} (layer {}, etype {}, code {:#04x})",
            t.layer, t.etype, t.code
        ),
    }
}

#[cfg(test)]
mod read_ahead_tests;
#[cfg(test)]
mod tests;
