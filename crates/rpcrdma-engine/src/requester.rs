//! The Requester half: the XID table, the state of each call, credit
//! gating (RFC 8166 §3.3.1) and the per-call deadline.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Instant;

use rpcrdma_proto::credits::RequesterCredits;
use rpcrdma_proto::marshal::OfferedChunks;

use crate::types::{CallId, CallSpec, Direction};

/// Where one of this side's calls stands.
///
/// ```text
///  submit ──► Queued ──(credit)──► Preparing ──(call_ready)──► Sent ──(reply)──► done
///               │                     │                          │
///               └──(timeout)──► done  └──(timeout)──► Abandoned ◄┘(timeout)
///                                                        └──(late reply / connection end)──► retired
/// ```
///
/// A lost connection puts Preparing and Sent calls of the active side back
/// in the queue (same XID, retransmitted on the next generation) and
/// retires Abandoned ones; on the passive side it ends them all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallState {
    /// Waiting for a credit (or for a connection).
    Queued,
    /// Holding a credit; the driver is registering its regions.
    Preparing {
        /// The connection generation it will go out on.
        generation: u64,
    },
    /// On the wire: its reply is expected on `generation`.
    Sent {
        /// The Write chunks and Reply chunk it offered (to check the reply
        /// against, RFC 8166 §3.4.6).
        offered: OfferedChunks,
        /// The connection generation it went out on.
        generation: u64,
        /// When it was sent.
        at: Instant,
    },
    /// Timed out after taking a credit: the caller has its answer, but the
    /// credit stays taken until the reply comes (the Responder still
    /// counts the call, RFC 8166 §3.3.1) or the connection ends.
    Abandoned {
        /// What it offered, if it was sent (its late reply is matched
        /// against this and then dropped).
        offered: Option<OfferedChunks>,
        /// The generation it was sent or prepared on.
        generation: u64,
    },
}

/// One call of this side.
#[derive(Clone, Debug)]
pub(crate) struct Call {
    pub xid: u32,
    pub spec: CallSpec,
    pub state: CallState,
    pub deadline: Instant,
    pub waited: bool,
}

/// The Requester half of a connection: forward on the active side, reverse
/// on the passive side.
#[derive(Debug)]
pub(crate) struct Requester {
    pub direction: Direction,
    pub credits: RequesterCredits,
    pub calls: BTreeMap<CallId, Call>,
    pub by_xid: HashMap<u32, CallId>,
    pub queue: VecDeque<CallId>,
    next_xid: u32,
}

impl Requester {
    pub fn new(direction: Direction, requested: u32, first_xid: u32) -> Requester {
        Requester {
            direction,
            credits: RequesterCredits::new(requested),
            calls: BTreeMap::new(),
            by_xid: HashMap::new(),
            queue: VecDeque::new(),
            next_xid: first_xid,
        }
    }

    /// A fresh XID, not used by any call in the table.
    pub fn alloc_xid(&mut self) -> u32 {
        loop {
            let x = self.next_xid;
            self.next_xid = self.next_xid.wrapping_add(1);
            if !self.by_xid.contains_key(&x) {
                return x;
            }
        }
    }

    pub fn insert(&mut self, id: CallId, call: Call) {
        self.by_xid.insert(call.xid, id);
        self.queue.push_back(id);
        self.calls.insert(id, call);
    }

    pub fn remove(&mut self, id: CallId) -> Option<Call> {
        let call = self.calls.remove(&id)?;
        self.by_xid.remove(&call.xid);
        self.queue.retain(|&q| q != id);
        Some(call)
    }

    /// What the call with `xid` offered, if a reply on `generation` may
    /// answer it: sent (or sent and abandoned) on that generation. A reply
    /// for any other XID is discarded: the XID of a finished transaction
    /// is retired (RFC 8166 §2.2.2), and a Requester silently discards a
    /// reply it cannot take (§4.5).
    pub fn offered_for(&self, xid: u32, generation: u64) -> Option<&OfferedChunks> {
        let call = self.calls.get(self.by_xid.get(&xid)?)?;
        match &call.state {
            CallState::Sent {
                offered,
                generation: g,
                ..
            }
            | CallState::Abandoned {
                offered: Some(offered),
                generation: g,
            } if *g == generation => Some(offered),
            _ => None,
        }
    }

    /// Calls abandoned on `generation` (each holds a credit).
    pub fn abandoned_on(&self, generation: u64) -> u32 {
        self.calls
            .values()
            .filter(|c| matches!(c.state, CallState::Abandoned { generation: g, .. } if g == generation))
            .count() as u32
    }

    /// Calls holding a credit on `generation`.
    pub fn holding_credit(&self, generation: u64) -> u32 {
        self.calls
            .values()
            .filter(|c| match c.state {
                CallState::Preparing { generation: g }
                | CallState::Sent { generation: g, .. }
                | CallState::Abandoned { generation: g, .. } => g == generation,
                CallState::Queued => false,
            })
            .count() as u32
    }

    /// The earliest deadline of a call whose caller still waits.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.calls
            .values()
            .filter(|c| !matches!(c.state, CallState::Abandoned { .. }))
            .map(|c| c.deadline)
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(xid: u32, at: Instant) -> Call {
        Call {
            xid,
            spec: CallSpec::default(),
            state: CallState::Queued,
            deadline: at,
            waited: false,
        }
    }

    #[test]
    fn xids_skip_those_in_use() {
        let now = Instant::now();
        let mut r = Requester::new(Direction::Forward, 4, u32::MAX);
        let a = r.alloc_xid();
        assert_eq!(a, u32::MAX);
        r.insert(CallId(1), call(0, now));
        assert_eq!(r.alloc_xid(), 1, "0 is taken, the counter wraps past it");
    }

    #[test]
    fn only_sent_calls_of_the_generation_match_a_reply() {
        let now = Instant::now();
        let mut r = Requester::new(Direction::Forward, 4, 1);
        r.insert(CallId(1), call(10, now));
        assert!(r.offered_for(10, 1).is_none(), "queued");
        r.calls.get_mut(&CallId(1)).unwrap().state = CallState::Sent {
            offered: OfferedChunks::default(),
            generation: 1,
            at: now,
        };
        assert!(r.offered_for(10, 1).is_some());
        assert!(r.offered_for(10, 2).is_none(), "other generation");
        assert!(r.offered_for(11, 1).is_none(), "unknown XID");
        r.calls.get_mut(&CallId(1)).unwrap().state = CallState::Abandoned {
            offered: Some(OfferedChunks::default()),
            generation: 1,
        };
        assert!(r.offered_for(10, 1).is_some(), "a late reply still matches");
        assert_eq!(r.abandoned_on(1), 1);
        assert_eq!(r.holding_credit(1), 1);
        assert_eq!(r.next_deadline(), None);
    }
}
