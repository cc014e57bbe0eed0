//! The connection engine: one `&mut` state machine per RDMA connection.

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use bytes::Bytes;
use rpcrdma_proto::classify::{route, Route};
use rpcrdma_proto::marshal::plan_call;
use rpcrdma_proto::marshal::{CallPlan, OfferedChunks};
use rpcrdma_proto::reply::plan_reply;
use rpcrdma_proto::stream::{Item, Span};
use rpcrdma_proto::validate::{check_call, check_reply, CallVerdict, ReplyVerdict};
use rpcrdma_proto::wire::{
    Body, BodyRepr, ChunkListsRepr, HeaderRepr, Segment, MIN_HEADER_LEN, RPCRDMA_VERSION,
};

use crate::config::{Config, Side, Thresholds};
use crate::requester::{Call, CallState, Requester};
use crate::responder::{Incoming, Responder};
use crate::stats::Stats;
use crate::types::{
    CallError, CallId, CallSpec, ChunkRef, Direction, EngineError, Event, IncomingCall, LostReason,
    MessageRef, Reply, SubmitError, Token, Transmit,
};

/// Where the connection stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Established: messages flow.
    Connected,
    /// Lost; the active side waits for
    /// [`Connection::handle_reconnected`].
    Disconnected,
    /// Lost for good (the passive side never reconnects).
    Closed,
}

/// Credits in use against a limit, for one half of the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CreditUse {
    /// Calls holding a credit: outstanding (Requester) or in process
    /// (Responder).
    pub in_use: u32,
    /// The limit: the grant in force (Requester) or the grant given
    /// (Responder).
    pub limit: u32,
}

/// What a work request token stands for.
#[derive(Clone, Copy, Debug)]
enum TokenUse {
    Send,
    Write,
    Read(CallId, ChunkRef),
}

/// RPC GARBAGE_ARGS reply header with an AUTH_NONE verifier (RFC 5531 §9):
/// xid, REPLY, MSG_ACCEPTED, verifier flavor and length, GARBAGE_ARGS.
fn garbage_args_reply(xid: u32) -> [u8; 24] {
    let mut b = [0u8; 24];
    for (i, w) in [xid, 1, 0, 0, 0, 4].into_iter().enumerate() {
        b[i * 4..i * 4 + 4].copy_from_slice(&w.to_be_bytes());
    }
    b
}

/// One RPC-over-RDMA connection's protocol state: a Requester half and a
/// Responder half sharing the connection's receives, generation and
/// counters. See the [crate documentation](crate) for the flow.
#[derive(Debug)]
pub struct Connection {
    config: Config,
    phase: Phase,
    generation: u64,
    thresholds: Thresholds,
    reverse: bool,
    reads_allowed: bool,
    requester: Requester,
    responder: Responder,
    transmits: VecDeque<Transmit>,
    events: VecDeque<Event>,
    tokens: HashMap<Token, TokenUse>,
    next_token: u64,
    next_id: u64,
    stats: Stats,
}

impl Connection {
    /// A connection just established (generation 1). The active side's
    /// Requester is forward and its Responder reverse; the passive side's
    /// the other way round.
    pub fn new(config: Config) -> Connection {
        let (req_dir, req_credits, resp_dir, resp_credits) = match config.side {
            Side::Active => (
                Direction::Forward,
                config.credits,
                Direction::Reverse,
                config.backward_credits,
            ),
            Side::Passive => (
                Direction::Reverse,
                config.backward_credits,
                Direction::Forward,
                config.credits,
            ),
        };
        Connection {
            phase: Phase::Connected,
            generation: 1,
            thresholds: config.thresholds,
            reverse: false,
            reads_allowed: true,
            requester: Requester::new(req_dir, req_credits, config.first_xid),
            responder: Responder::new(resp_dir, resp_credits),
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            tokens: HashMap::new(),
            next_token: 1,
            next_id: 1,
            stats: Stats::default(),
            config,
        }
    }

    /// Active or passive.
    pub fn side(&self) -> Side {
        self.config.side
    }

    /// Connected, disconnected or closed.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// The connection generation: 1, plus one per reconnect. Receives are
    /// reported with the generation of the queue pair they arrived on.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The inline thresholds in force.
    pub fn thresholds(&self) -> Thresholds {
        self.thresholds
    }

    /// The counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Turns reverse-direction operation on for this connection (RFC 8167
    /// §6: the upper layer tells the transport once the peer has said it
    /// supports it, e.g. when an NFSv4.1 client binds a backchannel). Off by default: a
    /// connection that never enables it behaves, on the wire, exactly as
    /// a forward-only one. On the passive side it lets
    /// [`submit`](Self::submit) send reverse-direction calls; on the active
    /// side it lets received reverse-direction calls through, and adds the
    /// backward credits to [`recv_target`](Self::recv_target).
    pub fn enable_reverse(&mut self) {
        self.reverse = true;
    }

    /// Whether reverse-direction operation is on.
    pub fn reverse_enabled(&self) -> bool {
        self.reverse
    }

    /// The RDMA Read depth (ORD) negotiated for this connection. With 0
    /// this side cannot pull any Read chunk: a call that carries one is
    /// answered RDMA_ERROR/ERR_CHUNK (RFC 8166 §4.5.3: the Responder cannot
    /// process it) instead of being left without a reply.
    pub fn set_read_depth(&mut self, ord: u32) {
        self.reads_allowed = ord > 0;
    }

    /// Receives the driver keeps posted: the forward credits, plus the
    /// backward credits when reverse operation is on (each side posts
    /// for the reverse calls or replies it may receive, RFC 8167 §4.2),
    /// plus the configured margin.
    pub fn recv_target(&self) -> u32 {
        let forward = match self.config.side {
            Side::Active => self.requester.credits.requested(),
            Side::Passive => self.responder.max(),
        };
        let backward = if self.reverse {
            match self.config.side {
                Side::Active => self.responder.max(),
                Side::Passive => self.requester.credits.requested(),
            }
        } else {
            0
        };
        forward + backward + self.config.recv_margin
    }

    /// This side's Requester credits (forward on the active side, reverse
    /// on the passive side).
    pub fn requester_credits(&self) -> CreditUse {
        CreditUse {
            in_use: self.requester.credits.outstanding(),
            limit: self.requester.credits.limit(),
        }
    }

    /// This side's Responder credits (forward on the passive side, reverse
    /// on the active side).
    pub fn responder_credits(&self) -> CreditUse {
        CreditUse {
            in_use: self.responder.in_process,
            limit: self.responder.grant(),
        }
    }

    /// The XID of one of this side's calls.
    pub fn xid(&self, id: CallId) -> Option<u32> {
        self.requester.calls.get(&id).map(|c| c.xid)
    }

    /// The state of one of this side's calls (`None` once it is done and
    /// retired).
    pub fn call_state(&self, id: CallId) -> Option<&CallState> {
        self.requester.calls.get(&id).map(|c| &c.state)
    }

    /// This side's calls not yet finished with (queued, on the wire, or
    /// abandoned and holding a credit).
    pub fn calls(&self) -> usize {
        self.requester.calls.len()
    }

    /// Received calls admitted and not yet answered or dropped.
    pub fn calls_in_process(&self) -> usize {
        self.responder.calls.len()
    }

    fn token(&mut self, u: TokenUse) -> Token {
        let t = Token(self.next_token);
        self.next_token += 1;
        self.tokens.insert(t, u);
        t
    }

    fn call_id(&mut self) -> CallId {
        let id = CallId(self.next_id);
        self.next_id += 1;
        id
    }

    // ---- Requester inputs -------------------------------------------------

    /// Queues a call: forward on the active side; reverse on the passive
    /// side, which needs [`enable_reverse`](Self::enable_reverse). The call
    /// goes out when a credit allows (RFC 8166 §3.3.1); its deadline is
    /// `now` plus its timeout. On the active side calls may be submitted
    /// while disconnected: they go out after the reconnect.
    pub fn submit(&mut self, now: Instant, spec: CallSpec) -> Result<CallId, SubmitError> {
        if self.phase == Phase::Closed {
            return Err(SubmitError::Closed);
        }
        if self.requester.direction == Direction::Reverse {
            self.check_reverse_call(&spec)?;
        }
        let timeout = spec.timeout.unwrap_or(self.config.call_timeout);
        let xid = self.requester.alloc_xid();
        let id = self.call_id();
        self.requester.insert(
            id,
            Call {
                xid,
                spec,
                state: CallState::Queued,
                deadline: now + timeout,
                waited: false,
            },
        );
        Ok(id)
    }

    /// RFC 8167 §5.3: without reverse-direction chunks, a reverse call is
    /// RDMA_MSG with empty chunk lists, so it and its reply must each fit
    /// inline.
    fn check_reverse_call(&self, spec: &CallSpec) -> Result<(), SubmitError> {
        if !self.reverse {
            return Err(SubmitError::ReverseDisabled);
        }
        if spec.items.iter().any(|i| matches!(i, Item::Ddp(_)))
            || !spec.reply.write_chunks.is_empty()
        {
            return Err(SubmitError::ChunksNotSupported);
        }
        let len = MIN_HEADER_LEN as u64 + spec.items.iter().map(|i| i.unreduced_len()).sum::<u64>();
        if len > self.thresholds.send as u64 {
            return Err(SubmitError::TooLarge {
                len,
                limit: self.thresholds.send,
            });
        }
        let reply = MIN_HEADER_LEN as u64 + spec.reply.max_reduced_len;
        if reply > self.thresholds.recv as u64 {
            return Err(SubmitError::TooLarge {
                len: reply,
                limit: self.thresholds.recv,
            });
        }
        Ok(())
    }

    /// The driver registered a [`Transmit::Prepare`]d call's regions and
    /// filled in their handles: the call goes on the wire (a
    /// [`Transmit::Send`] follows). `false` when it must not be sent after
    /// all (it timed out meanwhile, or the connection changed): the driver
    /// releases the registrations.
    pub fn call_ready(&mut self, now: Instant, id: CallId, plan: &CallPlan) -> bool {
        let generation = self.generation;
        let connected = self.phase == Phase::Connected;
        let Some(call) = self.requester.calls.get_mut(&id) else {
            return false;
        };
        match call.state {
            CallState::Preparing { generation: g } if g == generation && connected => {
                call.state = CallState::Sent {
                    offered: plan.offered(),
                    generation,
                    at: now,
                };
                self.stats.calls_sent += 1;
                let head = Bytes::from(plan.header.to_vec());
                let inline = plan.inline().to_vec();
                let token = self.token(TokenUse::Send);
                self.transmits.push_back(Transmit::Send {
                    token,
                    message: MessageRef::Call(id),
                    head,
                    inline,
                });
                true
            }
            CallState::Abandoned {
                offered: None,
                generation: g,
            } => {
                self.requester.remove(id);
                if g == generation {
                    self.requester.credits.release();
                }
                self.events.push_back(Event::Retired { id });
                false
            }
            _ => false,
        }
    }

    /// The driver could not prepare a call (a registration failed): the
    /// call ends with [`CallError::Prepare`] and its credit returns.
    pub fn call_failed(&mut self, id: CallId, reason: impl Into<String>) {
        let generation = self.generation;
        let Some(call) = self.requester.calls.get(&id) else {
            return;
        };
        let (xid, state) = (call.xid, call.state.clone());
        match state {
            CallState::Preparing { generation: g } => {
                self.requester.remove(id);
                if g == generation {
                    self.requester.credits.release();
                }
                self.events.push_back(Event::CallDone {
                    id,
                    xid,
                    result: Err(CallError::Prepare(reason.into())),
                });
            }
            CallState::Abandoned {
                offered: None,
                generation: g,
            } => {
                self.requester.remove(id);
                if g == generation {
                    self.requester.credits.release();
                }
                self.events.push_back(Event::Retired { id });
            }
            _ => {}
        }
    }

    // ---- Responder inputs -------------------------------------------------

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

    // ---- Receives and completions -----------------------------------------

    /// A Receive completed on the queue pair of `generation` with `msg`
    /// (and the STag a Send with Invalidate invalidated, if any). The
    /// message is classified as CALL or REPLY before any XID lookup
    /// ([`rpcrdma_proto::classify::route`], RFC 8167 §2.3): a
    /// reverse-direction call goes to the active side's Responder, a
    /// reverse-direction reply to the passive side's Requester, everything
    /// else to the forward half.
    pub fn handle_recv(
        &mut self,
        now: Instant,
        generation: u64,
        msg: Bytes,
        invalidated_rkey: Option<u32>,
    ) {
        let _ = now;
        if generation != self.generation || self.phase != Phase::Connected {
            self.stats.stale_receives += 1;
            return;
        }
        let side = match self.config.side {
            Side::Active => rpcrdma_proto::classify::Side::Client,
            Side::Passive => rpcrdma_proto::classify::Side::Server,
        };
        let to = route(&msg, side);
        let reverse = matches!(
            (self.config.side, to),
            (Side::Active, Route::Responder) | (Side::Passive, Route::Requester)
        );
        if reverse && !self.reverse {
            // RFC 8167 §6: a peer MUST NOT send reverse-direction messages
            // before support was indicated; this side drops them without
            // an answer (it has no Requester or Responder for that
            // direction), leaving forward traffic untouched.
            self.stats.reverse_refused += 1;
            tracing::debug!(side = ?self.config.side, "reverse-direction message while reverse operation is off: dropped");
            return;
        }
        match to {
            Route::Responder => self.on_call(msg),
            Route::Requester => self.on_reply(msg, invalidated_rkey),
        }
    }

    fn on_reply(&mut self, msg: Bytes, invalidated_rkey: Option<u32>) {
        let generation = self.generation;
        let limits = self.config.decode_limits;
        let verdict = {
            let req = &self.requester;
            check_reply(&msg, &limits, |xid| req.offered_for(xid, generation))
        };
        match verdict {
            ReplyVerdict::Discard(reason) => {
                self.stats.bad_replies += 1;
                tracing::debug!(?reason, "reply discarded");
            }
            ReplyVerdict::Error { xid, err, credit } => {
                self.complete(xid, credit, Err(CallError::RdmaError(err)))
            }
            ReplyVerdict::Deliver(h) => {
                let (xid, credit) = (h.xid, h.credit);
                let reply = Reply {
                    header_len: h.header_len,
                    nomsg: matches!(h.body, Body::NoMsg { .. }),
                    returned: h.chunks().map(|c| c.to_repr()).unwrap_or_default(),
                    invalidated_rkey,
                    msg: msg.clone(),
                };
                self.complete(xid, credit, Ok(reply))
            }
        }
    }

    /// A reply (or RDMA_ERROR) matched call `xid`: its credit returns, the
    /// grant updates (RFC 8166 §3.3.1), and the call completes, or, when
    /// it was abandoned, retires.
    fn complete(&mut self, xid: u32, credit: u32, result: Result<Reply, CallError>) {
        let before = self.requester.credits.limit();
        self.requester.credits.on_reply(credit);
        let lowered = self.requester.credits.limit() < before;
        let Some(&id) = self.requester.by_xid.get(&xid) else {
            return;
        };
        let Some(call) = self.requester.remove(id) else {
            return;
        };
        match call.state {
            CallState::Abandoned { .. } => {
                self.stats.late_replies += 1;
                self.events.push_back(Event::Retired { id });
            }
            _ => {
                match &result {
                    Ok(_) => self.stats.replies_received += 1,
                    Err(_) => self.stats.rdma_errors_received += 1,
                }
                self.events.push_back(Event::CallDone { id, xid, result });
            }
        }
        if lowered {
            self.break_if_stuck();
        }
    }

    fn on_call(&mut self, msg: Bytes) {
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

    /// A Send or the RDMA Writes of a reply completed (`ok`: successfully).
    /// A failed work request breaks the queue pair: the connection is lost.
    /// The RDMA Reads of a chunk complete through
    /// [`handle_read`](Self::handle_read) (the Position-Zero chunk's bytes
    /// are needed); reported here instead, a data chunk counts as pulled and
    /// a Position-Zero chunk as empty.
    pub fn handle_completion(&mut self, token: Token, ok: bool) {
        if let Some(TokenUse::Read(..)) = self.tokens.get(&token) {
            return self.handle_read(token, ok.then_some(&[][..]));
        }
        if self.tokens.remove(&token).is_none() {
            return;
        }
        if !ok {
            self.lose(LostReason::WorkRequestFailed);
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

    // ---- Time ---------------------------------------------------------------

    /// The next instant [`handle_timeout`](Self::handle_timeout) has work:
    /// the earliest deadline of a call whose caller still waits.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.requester.next_deadline()
    }

    /// Time passed: every call whose deadline is at or before `now` ends
    /// with [`CallError::Timeout`]. One still queued simply leaves; one
    /// holding a credit becomes [`CallState::Abandoned`] and keeps the
    /// credit until its reply or the connection's end.
    pub fn handle_timeout(&mut self, now: Instant) {
        let due: Vec<CallId> = self
            .requester
            .calls
            .iter()
            .filter(|(_, c)| c.deadline <= now && !matches!(c.state, CallState::Abandoned { .. }))
            .map(|(&id, _)| id)
            .collect();
        if due.is_empty() {
            return;
        }
        for id in due {
            self.stats.timeouts += 1;
            self.abandon(id, CallError::Timeout);
        }
        self.break_if_stuck();
    }

    /// The caller gave call `id` up (it went away before the reply): the
    /// call ends with [`CallError::Cancelled`] at once, exactly as at its
    /// deadline. `false` if there is no such unfinished call.
    pub fn cancel(&mut self, id: CallId) -> bool {
        let live = self
            .requester
            .calls
            .get(&id)
            .is_some_and(|c| !matches!(c.state, CallState::Abandoned { .. }));
        if live {
            self.abandon(id, CallError::Cancelled);
            self.break_if_stuck();
        }
        live
    }

    /// Ends a call for its caller: one still queued simply leaves; one
    /// holding a credit becomes Abandoned and keeps it.
    fn abandon(&mut self, id: CallId, why: CallError) {
        let Some(call) = self.requester.calls.get_mut(&id) else {
            return;
        };
        let xid = call.xid;
        match std::mem::replace(&mut call.state, CallState::Queued) {
            CallState::Queued => {
                self.requester.remove(id);
            }
            CallState::Preparing { generation } => {
                call.state = CallState::Abandoned {
                    offered: None,
                    generation,
                };
            }
            CallState::Sent {
                offered,
                generation,
                ..
            } => {
                call.state = CallState::Abandoned {
                    offered: Some(offered),
                    generation,
                };
            }
            s @ CallState::Abandoned { .. } => {
                call.state = s;
                return;
            }
        }
        self.events.push_back(Event::CallDone {
            id,
            xid,
            result: Err(why),
        });
    }

    /// When abandoned calls hold every credit the Responder grants, no
    /// reply can ever free one: like a major timeout, the active side
    /// replaces the connection (live calls are retransmitted, abandoned
    /// ones retire). The passive side, which cannot reconnect, leaves its
    /// reverse calls to their timeouts.
    fn break_if_stuck(&mut self) {
        if self.config.side != Side::Active || self.phase != Phase::Connected {
            return;
        }
        let stuck = self.requester.abandoned_on(self.generation);
        if stuck > 0 && stuck >= self.requester.credits.limit() {
            tracing::info!(stuck, "abandoned calls hold every credit: reconnecting");
            self.lose(LostReason::Stuck);
        }
    }

    // ---- Connection ---------------------------------------------------------

    /// The driver saw the connection end (a flush, a disconnect event).
    pub fn handle_connection_lost(&mut self, now: Instant) {
        let _ = now;
        self.lose(LostReason::Driver);
    }

    fn lose(&mut self, reason: LostReason) {
        if self.phase != Phase::Connected {
            return;
        }
        self.stats.connections_lost += 1;
        self.transmits.clear();
        self.tokens.clear();
        self.responder.reset();
        self.requester.credits.reset();
        let ids: Vec<CallId> = self.requester.calls.keys().copied().collect();
        match self.config.side {
            Side::Active => {
                self.phase = Phase::Disconnected;
                // Calls on the wire go out again, same XID, ahead of the
                // queue and in XID order; abandoned ones are dropped.
                let mut again = Vec::new();
                for id in ids {
                    let Some(call) = self.requester.calls.get_mut(&id) else {
                        continue;
                    };
                    match call.state {
                        CallState::Preparing { .. } | CallState::Sent { .. } => {
                            call.state = CallState::Queued;
                            again.push((call.xid, id));
                        }
                        CallState::Abandoned { .. } => {
                            self.requester.remove(id);
                            self.events.push_back(Event::Retired { id });
                        }
                        CallState::Queued => {}
                    }
                }
                again.sort_unstable();
                self.stats.retransmits += again.len() as u64;
                for &(_, id) in again.iter().rev() {
                    self.requester.queue.push_front(id);
                }
            }
            Side::Passive => {
                // RFC 8167 §5.4: the server cannot reconnect; its reverse
                // calls fail.
                self.phase = Phase::Closed;
                for id in ids {
                    let Some(call) = self.requester.remove(id) else {
                        continue;
                    };
                    if matches!(call.state, CallState::Abandoned { .. }) {
                        self.events.push_back(Event::Retired { id });
                    } else {
                        self.events.push_back(Event::CallDone {
                            id,
                            xid: call.xid,
                            result: Err(CallError::ConnectionLost),
                        });
                    }
                }
            }
        }
        self.events.push_back(Event::ConnectionLost { reason });
    }

    /// The active side connected again, with the thresholds negotiated for
    /// the new connection (RFC 8797 §4: they may change). Credits start
    /// over (RFC 8166 §3.3.3) and the queued calls, retransmissions first,
    /// go out on the new generation. The passive side never reconnects
    /// (RFC 8167 §5.4).
    pub fn handle_reconnected(
        &mut self,
        now: Instant,
        thresholds: Thresholds,
    ) -> Result<(), EngineError> {
        let _ = now;
        match (self.config.side, self.phase) {
            (Side::Passive, _) => Err(EngineError::PassiveCannotReconnect),
            (Side::Active, Phase::Connected) => Err(EngineError::StillConnected),
            (Side::Active, _) => {
                self.generation += 1;
                self.thresholds = thresholds;
                self.phase = Phase::Connected;
                self.requester.credits.reset();
                Ok(())
            }
        }
    }

    // ---- Outputs ------------------------------------------------------------

    /// The next work request to post, in order. Answers and RDMA
    /// operations come first; then this side's queued calls, as long as a
    /// credit is free (RFC 8166 §3.3.1: never more outstanding than the
    /// grant in force, one until the first grant arrives).
    pub fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
        if let Some(t) = self.transmits.pop_front() {
            return Some(t);
        }
        if self.phase != Phase::Connected {
            return None;
        }
        debug_assert_eq!(
            self.requester.credits.outstanding(),
            self.requester.holding_credit(self.generation),
            "every credit taken is held by exactly one call"
        );
        loop {
            let &id = self.requester.queue.front()?;
            if !self.requester.credits.can_send() {
                if let Some(c) = self.requester.calls.get_mut(&id) {
                    if !c.waited {
                        c.waited = true;
                        self.stats.credit_waits += 1;
                    }
                }
                return None;
            }
            self.requester.queue.pop_front();
            let Some(call) = self.requester.calls.get(&id) else {
                continue;
            };
            let xid = call.xid;
            self.requester.credits.try_send();
            self.stats.max_outstanding = self
                .stats
                .max_outstanding
                .max(self.requester.credits.outstanding() as u64);
            match self.requester.direction {
                Direction::Forward => {
                    let planned = plan_call(
                        xid,
                        self.requester.credits.requested(),
                        &call.spec.items,
                        &call.spec.reply,
                        &self.thresholds.as_requester(),
                        &self.config.chunk_limits,
                    );
                    match planned {
                        Ok(plan) => {
                            if let Some(c) = self.requester.calls.get_mut(&id) {
                                c.state = CallState::Preparing {
                                    generation: self.generation,
                                };
                            }
                            return Some(Transmit::Prepare { id, xid, plan });
                        }
                        Err(e) => {
                            self.requester.credits.release();
                            self.requester.remove(id);
                            self.events.push_back(Event::CallDone {
                                id,
                                xid,
                                result: Err(CallError::Plan(e)),
                            });
                        }
                    }
                }
                Direction::Reverse => {
                    return Some(self.send_reverse_call(now, id, xid));
                }
            }
        }
    }

    /// RFC 8167 §5.1, §5.3: RDMA_MSG, no chunks, `rdma_credit` = the
    /// reverse credits requested.
    fn send_reverse_call(&mut self, now: Instant, id: CallId, xid: u32) -> Transmit {
        let header = HeaderRepr {
            xid,
            vers: RPCRDMA_VERSION,
            credit: self.requester.credits.requested(),
            body: BodyRepr::Msg(ChunkListsRepr::default()),
        };
        let mut inline = Vec::new();
        if let Some(c) = self.requester.calls.get_mut(&id) {
            for (i, it) in c.spec.items.iter().enumerate() {
                let len = it.unreduced_len() as u32;
                if len > 0 {
                    inline.push(Span::Item {
                        item: i,
                        offset: 0,
                        len,
                    });
                }
            }
            c.state = CallState::Sent {
                offered: OfferedChunks::default(),
                generation: self.generation,
                at: now,
            };
        }
        self.stats.calls_sent += 1;
        self.stats.reverse_calls_sent += 1;
        let token = self.token(TokenUse::Send);
        Transmit::Send {
            token,
            message: MessageRef::Call(id),
            head: Bytes::from(header.to_vec()),
            inline,
        }
    }

    /// The next event, in order.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rpcrdma_proto::wire::{DecodeLimits, ErrorBody, Header};

    fn words(w: &[u32]) -> Vec<u8> {
        w.iter().flat_map(|x| x.to_be_bytes()).collect()
    }

    fn engine_send(c: &mut Connection, now: Instant) -> Vec<u8> {
        match c.poll_transmit(now) {
            Some(Transmit::Send {
                message: MessageRef::Engine,
                head,
                inline,
                ..
            }) => {
                assert!(inline.is_empty());
                head.to_vec()
            }
            other => panic!("expected an engine-built Send, got {other:?}"),
        }
    }

    #[test]
    fn recv_target_counts_both_directions_once_reverse_is_on() {
        let mut cfg = Config::new(Side::Active);
        cfg.credits = 16;
        cfg.backward_credits = 3;
        cfg.recv_margin = 2;
        let mut a = Connection::new(cfg.clone());
        assert_eq!(a.recv_target(), 18);
        a.enable_reverse();
        assert_eq!(a.recv_target(), 21);
        cfg.side = Side::Passive;
        let mut b = Connection::new(cfg);
        assert_eq!(b.recv_target(), 18);
        b.enable_reverse();
        assert_eq!(b.recv_target(), 21);
    }

    #[test]
    fn rfc8166_s4_5_1_other_version_gets_err_vers_and_credit_returns() {
        let now = Instant::now();
        let mut b = Connection::new(Config::new(Side::Passive));
        let msg = words(&[9, 2, 4, 0, 0, 0, 0, 9, 0]);
        b.handle_recv(now, 1, Bytes::from(msg), None);
        // rdma_xid and rdma_vers echo the request; ERR_VERS with our range.
        let h = engine_send(&mut b, now);
        assert_eq!(h, words(&[9, 2, 32, 4, 1, 1, 1]));
        assert_eq!(b.responder_credits().in_use, 0);
        assert_eq!(b.stats().replies_sent, 1);
    }

    #[test]
    fn rfc8166_s4_5_2_chunk_for_a_procedure_without_ddp_gets_err_chunk() {
        let now = Instant::now();
        let mut b = Connection::new(Config::new(Side::Passive));
        // RDMA_MSG, one Read segment at position 40, then a NULL call of
        // an unknown program (no binding: nothing is DDP-eligible).
        let mut msg = words(&[5, 1, 4, 0, 1, 40, 0x99, 8, 0, 0x1000, 0, 0, 0]);
        msg.extend(words(&[5, 0, 2, 1, 1, 0, 0, 0, 0, 0]));
        b.handle_recv(now, 1, Bytes::from(msg), None);
        let h = engine_send(&mut b, now);
        let h = Header::parse(&h, &DecodeLimits::default()).unwrap();
        assert!(matches!(h.body, Body::Error(ErrorBody::Chunk)));
        assert_eq!(h.credit, 32, "errors carry the grant");
        assert_eq!(b.responder_credits().in_use, 0);
    }

    /// RDMATEST PUT call, RDMA_MSG, whose data (`chunk_len` bytes at
    /// Position 44) is in a Read chunk and whose length word says
    /// `length_word`.
    fn put_with_chunk(xid: u32, length_word: u32, chunk_len: u32) -> Bytes {
        let prog = rpcrdma_proto::binding::rdmatest::PROGRAM;
        let mut m = words(&[xid, 1, 4, 0, 1, 44, 0x99, chunk_len, 0, 0x1000, 0, 0, 0]);
        m.extend(words(&[xid, 0, 2, prog, 1, 2, 0, 0, 0, 0, length_word]));
        Bytes::from(m)
    }

    fn rdmatest_passive() -> Connection {
        let mut cfg = Config::new(Side::Passive);
        cfg.bindings = std::sync::Arc::new(rpcrdma_proto::binding::rdmatest::RdmatestBinding);
        Connection::new(cfg)
    }

    #[test]
    fn rfc8166_s4_5_2_length_word_mismatch_gets_garbage_args() {
        let now = Instant::now();
        let mut b = rdmatest_passive();
        b.handle_recv(now, 1, put_with_chunk(6, 100, 200), None);
        let h = engine_send(&mut b, now);
        let hdr = Header::parse(&h, &DecodeLimits::default()).unwrap();
        assert!(matches!(hdr.body, Body::Msg { .. }));
        assert_eq!(hdr.payload().unwrap(), &words(&[6, 1, 0, 0, 0, 4])[..]);
        assert_eq!(b.responder_credits().in_use, 0);
    }

    #[test]
    fn no_read_depth_answers_err_chunk_for_read_chunks() {
        let now = Instant::now();
        let mut b = rdmatest_passive();
        b.set_read_depth(0);
        b.handle_recv(now, 1, put_with_chunk(6, 200, 200), None);
        let h = engine_send(&mut b, now);
        let h = Header::parse(&h, &DecodeLimits::default()).unwrap();
        assert!(matches!(h.body, Body::Error(ErrorBody::Chunk)));
        assert_eq!(b.responder_credits().in_use, 0);
        // With a read depth the same call is pulled.
        let mut b = rdmatest_passive();
        b.handle_recv(now, 1, put_with_chunk(6, 200, 200), None);
        assert!(matches!(
            b.poll_transmit(now),
            Some(Transmit::Read {
                chunk: ChunkRef::Data(0),
                ..
            })
        ));
    }

    #[test]
    fn a_cancelled_call_ends_once_and_keeps_its_credit_until_retired() {
        let now = Instant::now();
        let mut a = Connection::new(Config::new(Side::Active));
        let spec = || CallSpec {
            items: vec![Item::Xdr(40)],
            ..Default::default()
        };
        let queued = a.submit(now, spec()).unwrap();
        let sent = a.submit(now, spec()).unwrap();
        assert!(a.cancel(queued), "still queued: it just leaves");
        assert!(matches!(
            a.poll_event(),
            Some(Event::CallDone {
                result: Err(CallError::Cancelled),
                ..
            })
        ));
        assert_eq!(a.call_state(queued), None);
        let Some(Transmit::Prepare { id, plan, .. }) = a.poll_transmit(now) else {
            panic!()
        };
        assert_eq!(id, sent);
        assert!(a.call_ready(now, id, &plan));
        // One credit before the first grant, held by `sent`: cancelling it
        // leaves no credit for anything else, so the connection is given up.
        assert!(a.cancel(sent));
        assert!(!a.cancel(sent), "already ended");
        assert!(matches!(
            a.poll_event(),
            Some(Event::CallDone {
                result: Err(CallError::Cancelled),
                ..
            })
        ));
        assert_eq!(a.poll_event(), Some(Event::Retired { id: sent }));
        assert_eq!(
            a.poll_event(),
            Some(Event::ConnectionLost {
                reason: LostReason::Stuck
            })
        );
    }

    #[test]
    fn garbage_args_reply_is_an_accepted_reply() {
        assert_eq!(
            garbage_args_reply(0x0102_0304).to_vec(),
            words(&[0x0102_0304, 1, 0, 0, 0, 4])
        );
    }

    #[test]
    fn rfc8166_s3_3_1_overrun_closes_the_connection() {
        let now = Instant::now();
        let mut cfg = Config::new(Side::Passive);
        cfg.credits = 1;
        let mut b = Connection::new(cfg);
        let call = |xid: u32| {
            let mut m = words(&[xid, 1, 1, 0, 0, 0, 0]);
            m.extend(words(&[xid, 0, 2, 1, 1, 0, 0, 0, 0, 0]));
            Bytes::from(m)
        };
        b.handle_recv(now, 1, call(1), None);
        assert!(matches!(b.poll_event(), Some(Event::IncomingCall(_))));
        b.handle_recv(now, 1, call(2), None);
        assert_eq!(b.stats().credit_overruns, 1);
        assert_eq!(b.phase(), Phase::Closed);
        assert_eq!(
            b.poll_event(),
            Some(Event::ConnectionLost {
                reason: LostReason::CreditOverrun
            })
        );
    }

    #[test]
    fn stale_generation_and_unknown_calls_are_refused() {
        let now = Instant::now();
        let mut a = Connection::new(Config::new(Side::Active));
        a.handle_recv(now, 7, Bytes::from_static(&[0; 40]), None);
        assert_eq!(a.stats().stale_receives, 1);
        assert_eq!(a.reply(CallId(3), &[]), Err(EngineError::UnknownCall));
        assert_eq!(a.drop_call(CallId(3)), Err(EngineError::UnknownCall));
        assert_eq!(
            a.handle_reconnected(now, Thresholds::default()),
            Err(EngineError::StillConnected)
        );
        a.handle_connection_lost(now);
        assert_eq!(a.handle_reconnected(now, Thresholds::default()), Ok(()));
        assert_eq!(a.generation(), 2);
    }

    #[test]
    fn a_call_that_cannot_be_planned_fails_and_returns_its_credit() {
        let now = Instant::now();
        let mut cfg = Config::new(Side::Active);
        cfg.chunk_limits.max_segment_bytes = 0;
        let mut a = Connection::new(cfg);
        let id = a
            .submit(
                now,
                CallSpec {
                    items: vec![Item::Xdr(40), Item::Ddp(4096)],
                    ..Default::default()
                },
            )
            .unwrap();
        assert_eq!(a.poll_transmit(now), None);
        assert!(matches!(
            a.poll_event(),
            Some(Event::CallDone { id: i, result: Err(CallError::Plan(_)), .. }) if i == id
        ));
        assert_eq!(a.requester_credits().in_use, 0);
    }
}
