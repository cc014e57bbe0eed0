//! The connection engine: one `&mut` state machine per RDMA connection.

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use bytes::Bytes;
use rpcrdma_proto::classify::{route, Route};

use crate::config::{Config, Side, Thresholds};
use crate::requester::{CallState, Requester};
use crate::responder::Responder;
use crate::stats::Stats;
use crate::types::{
    CallError, CallId, ChunkRef, Direction, EngineError, Event, LostReason, Token, Transmit,
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
pub(crate) enum TokenUse {
    Send,
    Write,
    Read(CallId, ChunkRef),
}

/// One RPC-over-RDMA connection's protocol state: a Requester half and a
/// Responder half sharing the connection's receives, generation and
/// counters. See the [crate documentation](crate) for the flow.
#[derive(Debug)]
pub struct Connection {
    pub(crate) config: Config,
    pub(crate) phase: Phase,
    pub(crate) generation: u64,
    pub(crate) thresholds: Thresholds,
    pub(crate) reverse: bool,
    pub(crate) reads_allowed: bool,
    pub(crate) requester: Requester,
    pub(crate) responder: Responder,
    pub(crate) transmits: VecDeque<Transmit>,
    pub(crate) events: VecDeque<Event>,
    pub(crate) tokens: HashMap<Token, TokenUse>,
    pub(crate) next_token: u64,
    pub(crate) next_id: u64,
    pub(crate) stats: Stats,
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
    /// for the reverse calls or replies it may receive, RFC 8167 §4.3),
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

    pub(crate) fn token(&mut self, u: TokenUse) -> Token {
        let t = Token(self.next_token);
        self.next_token += 1;
        self.tokens.insert(t, u);
        t
    }

    pub(crate) fn call_id(&mut self) -> CallId {
        let id = CallId(self.next_id);
        self.next_id += 1;
        id
    }

    /// A Receive completed on the queue pair of `generation` with `msg`
    /// (and the STag a Send with Invalidate invalidated, if any). The
    /// message is classified as CALL or REPLY before any XID lookup
    /// ([`rpcrdma_proto::classify::route`], RFC 8167 §2.4): a
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

    /// The driver saw the connection end (a flush, a disconnect event).
    pub fn handle_connection_lost(&mut self, now: Instant) {
        let _ = now;
        self.lose(LostReason::Driver);
    }

    pub(crate) fn lose(&mut self, reason: LostReason) {
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
        self.next_call(now)
    }

    /// The next event, in order.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::incoming::garbage_args_reply;
    use crate::types::{CallSpec, MessageRef};
    use rpcrdma_proto::stream::Item;
    use rpcrdma_proto::wire::Body;
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
