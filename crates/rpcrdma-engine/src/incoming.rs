//! The Responder half of a [`Connection`]: admission of received calls,
//! the pulls of their Read chunks, and their answers.

use bytes::Bytes;
use rpcrdma_proto::reply::plan_reply;
use rpcrdma_proto::stream::Item;
use rpcrdma_proto::validate::{check_call, CallVerdict};
use rpcrdma_proto::wire::{BodyRepr, ChunkListsRepr, HeaderRepr, Segment, RPCRDMA_VERSION};

use crate::connection::{Connection, Phase, TokenUse};
use crate::responder::Incoming;
use crate::types::{
    CallId, ChunkRef, Direction, EngineError, Event, IncomingCall, LostReason, MessageRef, Token,
    Transmit,
};

/// RPC GARBAGE_ARGS reply header with an AUTH_NONE verifier (RFC 5531 §9):
/// xid, REPLY, MSG_ACCEPTED, verifier flavor and length, GARBAGE_ARGS.
pub(crate) fn garbage_args_reply(xid: u32) -> [u8; 24] {
    let mut b = [0u8; 24];
    for (i, w) in [xid, 1, 0, 0, 0, 4].into_iter().enumerate() {
        b[i * 4..i * 4 + 4].copy_from_slice(&w.to_be_bytes());
    }
    b
}

impl Connection {
    /// Answers received call `id` with the reply stream `items` (the
    /// driver holds the bytes). Plans the reply against what the call
    /// offered (RFC 8166 §3.4.6, §4.3): RDMA Writes then the Send, or
    /// RDMA_ERROR/ERR_CHUNK when it cannot be conveyed (§4.5.3). The
    /// call's credit returns before the Send is queued, and the reply
    /// carries this side's grant. Reverse-direction calls offer no chunks,
    /// so their replies are Short or ERR_CHUNK (RFC 8167 §5.2, §5.3).
    pub fn reply(&mut self, id: CallId, items: &[Item]) -> Result<(), EngineError> {
        let ready = self
            .responder
            .calls
            .get(&id)
            .is_some_and(|c| c.pending_reads == 0 && c.ready.is_none());
        if !ready || self.phase != Phase::Connected {
            return Err(EngineError::UnknownCall);
        }
        let Some(inc) = self.responder.calls.remove(&id) else {
            return Err(EngineError::UnknownCall);
        };
        let grant = self.responder.grant();
        self.responder.release();
        self.stats.replies_sent += 1;
        match plan_reply(inc.xid, grant, items, &inc.offered, self.thresholds.send) {
            Ok(plan) => {
                if !plan.writes.is_empty() {
                    let token = self.token(TokenUse::Write);
                    self.transmits.push_back(Transmit::Write {
                        token,
                        id,
                        writes: plan.writes,
                    });
                }
                let token = self.token(TokenUse::Send);
                self.transmits.push_back(Transmit::Send {
                    token,
                    message: MessageRef::Reply(id),
                    head: Bytes::from(plan.header.to_vec()),
                    inline: plan.inline,
                });
            }
            Err(e) => {
                tracing::debug!(xid = inc.xid, error = %e, "reply cannot be conveyed: ERR_CHUNK");
                self.send_engine(e.error_header(inc.xid, grant).to_vec());
            }
        }
        Ok(())
    }

    /// The upper layer drops received call `id` without answering: its
    /// credit returns.
    pub fn drop_call(&mut self, id: CallId) -> Result<(), EngineError> {
        if self.responder.calls.remove(&id).is_none() {
            return Err(EngineError::UnknownCall);
        }
        self.responder.release();
        self.stats.calls_discarded += 1;
        Ok(())
    }

    fn send_engine(&mut self, head: Vec<u8>) {
        let token = self.token(TokenUse::Send);
        self.transmits.push_back(Transmit::Send {
            token,
            message: MessageRef::Engine,
            head: Bytes::from(head),
            inline: Vec::new(),
        });
    }

    pub(crate) fn on_call(&mut self, msg: Bytes) {
        let direction = self.responder.direction;
        if self.responder.admit().is_err() {
            // RFC 8166 §3.3.1: a Requester MUST NOT exceed the grant; the
            // connection is closed.
            self.stats.credit_overruns += 1;
            tracing::warn!(?direction, "requester exceeded its credit grant; closing");
            self.lose(LostReason::CreditOverrun);
            return;
        }
        self.stats.max_in_process = self
            .stats
            .max_in_process
            .max(self.responder.in_process as u64);
        let grant = self.responder.grant();
        let limits = self.config.decode_limits;
        let bindings = self.config.bindings.clone();
        let call = match check_call(&msg, &limits, &*bindings, grant) {
            CallVerdict::Deliver(call) => call,
            v => return self.answer_verdict(v, grant),
        };
        let has_reads = call
            .header
            .chunks()
            .is_some_and(|c| !c.read_list.is_empty());
        if has_reads && !self.reads_allowed {
            let e = HeaderRepr::error(
                call.header.xid,
                RPCRDMA_VERSION,
                grant,
                rpcrdma_proto::wire::ErrorBody::Chunk,
            );
            return self.answer_verdict(CallVerdict::ReplyError(e), grant);
        }
        self.stats.calls_received += 1;
        if direction == Direction::Reverse {
            self.stats.reverse_calls_received += 1;
        }
        let id = self.call_id();
        let xid = call.header.xid;
        let mut first: Vec<(ChunkRef, Vec<Segment>)> = Vec::new();
        let mut data: Vec<(ChunkRef, Vec<Segment>)> = Vec::new();
        if let Some(c) = call.header.chunks() {
            let list = c.read_list;
            let segs = |r: &std::ops::Range<usize>| -> Vec<Segment> {
                r.clone()
                    .filter_map(|i| list.get(i).map(|s| s.segment))
                    .collect()
            };
            if let Some(p0) = &call.reassembly.position_zero {
                first.push((ChunkRef::PositionZero, segs(&p0.segments)));
            }
            for (i, ch) in call.reassembly.chunks.iter().enumerate() {
                data.push((ChunkRef::Data(i), segs(&ch.segments)));
            }
        }
        // A Long Call's data chunks are pulled only once its Position-Zero
        // chunk has been checked (`rpcrdma_proto::validate::CallVerdict`):
        // only then are their lengths known to match the binding.
        if first.is_empty() {
            first = std::mem::take(&mut data);
        }
        let ready = IncomingCall {
            id,
            xid,
            direction,
            header_len: call.header.header_len,
            reassembly: call.reassembly.clone(),
            msg: msg.clone(),
        };
        self.responder.calls.insert(
            id,
            Incoming {
                xid,
                offered: call.offered.clone(),
                pending_reads: first.len(),
                ready: Some(ready),
                later_reads: data,
            },
        );
        if first.is_empty() {
            self.dispatch(id);
        }
        self.push_reads(id, first);
    }

    fn push_reads(&mut self, id: CallId, reads: Vec<(ChunkRef, Vec<Segment>)>) {
        for (chunk, segments) in reads {
            let token = self.token(TokenUse::Read(id, chunk));
            self.transmits.push_back(Transmit::Read {
                token,
                id,
                chunk,
                segments,
            });
        }
    }

    /// Answers a call that is not delivered (RFC 8166 §4.5): its credit
    /// returns first.
    fn answer_verdict(&mut self, v: CallVerdict<'_>, grant: u32) {
        self.responder.release();
        match v {
            CallVerdict::ReplyError(h) => {
                self.stats.replies_sent += 1;
                self.send_engine(h.to_vec());
            }
            CallVerdict::GarbageArgs { xid, chunks } => {
                self.stats.replies_sent += 1;
                self.send_garbage_args(xid, grant, chunks);
            }
            CallVerdict::Discard(reason) => {
                self.stats.calls_discarded += 1;
                tracing::debug!(?reason, "call discarded");
            }
            CallVerdict::Deliver(_) => {}
        }
    }

    /// RFC 8166 §4.5.2: GARBAGE_ARGS via RDMA_MSG, echoing the call's
    /// chunks unused; when that does not fit this side's send threshold,
    /// ERR_CHUNK instead (§4.5.3).
    fn send_garbage_args(&mut self, xid: u32, grant: u32, chunks: ChunkListsRepr) {
        let h = HeaderRepr {
            xid,
            vers: RPCRDMA_VERSION,
            credit: grant,
            body: BodyRepr::Msg(chunks),
        };
        let rpc = garbage_args_reply(xid);
        if h.buffer_len() + rpc.len() > self.thresholds.send as usize {
            let e = HeaderRepr::error(
                xid,
                RPCRDMA_VERSION,
                grant,
                rpcrdma_proto::wire::ErrorBody::Chunk,
            );
            self.send_engine(e.to_vec());
            return;
        }
        let mut head = h.to_vec();
        head.extend_from_slice(&rpc);
        self.send_engine(head);
    }

    fn dispatch(&mut self, id: CallId) {
        if let Some(ev) = self
            .responder
            .calls
            .get_mut(&id)
            .and_then(|c| c.ready.take())
        {
            self.events.push_back(Event::IncomingCall(ev));
        }
    }

    /// The RDMA Reads of one chunk completed: `Some(bytes)` pulled, `None`
    /// on error (the connection is lost). The Position-Zero chunk of a
    /// Long Call is the reduced call: it is checked as RFC 8166 §4.2.1,
    /// §4.5 and §6.1 require (XID, direction, DDP-eligibility and length
    /// of each data chunk against the binding) before its data chunks are
    /// pulled; a failing call is answered ERR_CHUNK or GARBAGE_ARGS. When
    /// every chunk is in, the call goes up ([`Event::IncomingCall`]).
    pub fn handle_read(&mut self, token: Token, data: Option<&[u8]>) {
        let Some(TokenUse::Read(id, chunk)) = self.tokens.remove(&token) else {
            return;
        };
        let Some(data) = data else {
            self.lose(LostReason::WorkRequestFailed);
            return;
        };
        if chunk == ChunkRef::PositionZero && !self.check_position_zero(id, data) {
            return;
        }
        let done = match self.responder.calls.get_mut(&id) {
            Some(c) => {
                c.pending_reads = c.pending_reads.saturating_sub(1);
                c.pending_reads == 0
            }
            None => false,
        };
        if done {
            self.dispatch(id);
        }
    }

    /// Checks a Long Call's reduced stream; on success queues the Reads of
    /// its data chunks. `false` when the call was answered or dropped.
    fn check_position_zero(&mut self, id: CallId, reduced: &[u8]) -> bool {
        let Some(msg) = self
            .responder
            .calls
            .get(&id)
            .and_then(|c| c.ready.as_ref())
            .map(|r| r.msg.clone())
        else {
            return false;
        };
        let grant = self.responder.grant();
        let limits = self.config.decode_limits;
        let bindings = self.config.bindings.clone();
        let checked = match check_call(&msg, &limits, &*bindings, grant) {
            CallVerdict::Deliver(mut call) => call
                .check_payload(reduced, &*bindings, grant)
                .map(|()| call.reassembly.clone()),
            // The header passed when the call arrived.
            _ => Err(CallVerdict::Discard(
                rpcrdma_proto::validate::DiscardReason::NoPayload,
            )),
        };
        match checked {
            Ok(reassembly) => {
                let Some(c) = self.responder.calls.get_mut(&id) else {
                    return false;
                };
                if let Some(r) = c.ready.as_mut() {
                    r.reassembly = reassembly;
                }
                let later = std::mem::take(&mut c.later_reads);
                c.pending_reads += later.len();
                self.push_reads(id, later);
                true
            }
            Err(v) => {
                self.responder.calls.remove(&id);
                self.answer_verdict(v, grant);
                false
            }
        }
    }
}
