//! The Requester half of a [`Connection`]: calls this side sends, their
//! credits, deadlines and replies.

use std::time::Instant;

use bytes::Bytes;
use rpcrdma_proto::marshal::{plan_call, CallPlan, OfferedChunks};
use rpcrdma_proto::stream::{Item, Span};
use rpcrdma_proto::validate::{check_reply, ReplyVerdict};
use rpcrdma_proto::wire::{
    Body, BodyRepr, ChunkListsRepr, HeaderRepr, MIN_HEADER_LEN, RPCRDMA_VERSION,
};

use crate::config::Side;
use crate::connection::{Connection, Phase, TokenUse};
use crate::requester::{Call, CallState};
use crate::types::{
    CallError, CallId, CallSpec, Direction, Event, LostReason, MessageRef, Reply, SubmitError,
    Transmit,
};

impl Connection {
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
                self.retire_unsent(id, g);
                false
            }
            _ => false,
        }
    }

    /// The driver could not prepare a call (a registration failed): the
    /// call ends with [`CallError::Prepare`] and its credit returns.
    pub fn call_failed(&mut self, id: CallId, reason: impl Into<String>) {
        let Some(call) = self.requester.calls.get(&id) else {
            return;
        };
        let (xid, state) = (call.xid, call.state.clone());
        match state {
            CallState::Preparing { generation: g } => {
                self.forget_unsent(id, g);
                self.events.push_back(Event::CallDone {
                    id,
                    xid,
                    result: Err(CallError::Prepare(reason.into())),
                });
            }
            CallState::Abandoned {
                offered: None,
                generation: g,
            } => self.retire_unsent(id, g),
            _ => {}
        }
    }

    pub(crate) fn on_reply(&mut self, msg: Bytes, invalidated_rkey: Option<u32>) {
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
    /// Forgets a call that never went on the wire; the credit it took on
    /// connection generation `g` returns if that generation is current
    /// (credits of an older generation were reset with it).
    fn forget_unsent(&mut self, id: CallId, g: u64) {
        self.requester.remove(id);
        if g == self.generation {
            self.requester.credits.release();
        }
    }

    /// An abandoned call that never went on the wire: forgotten, and its
    /// registrations released by the driver ([`Event::Retired`]).
    fn retire_unsent(&mut self, id: CallId, g: u64) {
        self.forget_unsent(id, g);
        self.events.push_back(Event::Retired { id });
    }

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

    /// The next of this side's queued calls, if a credit is free: a
    /// forward call to prepare, or a reverse call's Send.
    pub(crate) fn next_call(&mut self, now: Instant) -> Option<Transmit> {
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
}
