//! The Responder half: admission of received calls under the credits this
//! side granted (RFC 8166 §3.3.1) and the calls in process.

use std::collections::BTreeMap;

use rpcrdma_proto::credits::{CreditOverrun, ResponderCredits};
use rpcrdma_proto::marshal::OfferedChunks;

use rpcrdma_proto::wire::Segment;

use crate::types::{CallId, ChunkRef, Direction, IncomingCall};

/// One received call, from admission to its reply.
#[derive(Clone, Debug)]
pub(crate) struct Incoming {
    pub xid: u32,
    pub offered: OfferedChunks,
    /// Read chunks still being pulled.
    pub pending_reads: usize,
    /// Handed to the upper layer once the reads are done.
    pub ready: Option<IncomingCall>,
    /// Data chunk Reads of a Long Call, posted once its Position-Zero
    /// chunk passed the checks.
    pub later_reads: Vec<(ChunkRef, Vec<Segment>)>,
}

/// The Responder half: forward on the passive side, reverse on the active
/// side.
#[derive(Debug)]
pub(crate) struct Responder {
    pub direction: Direction,
    max: u32,
    pub credits: ResponderCredits,
    /// Admitted calls whose credit is not yet returned. (The proto
    /// `ResponderCredits` counts them too but does not expose the count.)
    pub in_process: u32,
    pub calls: BTreeMap<CallId, Incoming>,
}

impl Responder {
    pub fn new(direction: Direction, max: u32) -> Responder {
        let max = max.max(1);
        Responder {
            direction,
            max,
            credits: ResponderCredits::new(max, max),
            in_process: 0,
            calls: BTreeMap::new(),
        }
    }

    /// The grant this side puts in every reply (RFC 8166 §3.3.1).
    pub fn grant(&self) -> u32 {
        self.credits.grant()
    }

    /// The most this side ever grants.
    pub fn max(&self) -> u32 {
        self.max
    }

    /// A call arrived: admitted if within the grant.
    pub fn admit(&mut self) -> Result<(), CreditOverrun> {
        self.credits.on_call()?;
        self.in_process += 1;
        Ok(())
    }

    /// A call's credit returns: just before its reply is posted (so that a
    /// Requester reusing the credit the moment the reply lands is never an
    /// overrun), or when it ends without a reply.
    pub fn release(&mut self) {
        if self.in_process > 0 {
            self.in_process -= 1;
            self.credits.on_reply_sent();
        }
    }

    /// The connection ended: every call in process is gone.
    pub fn reset(&mut self) {
        self.calls.clear();
        self.in_process = 0;
        self.credits = ResponderCredits::new(self.max, self.max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc8166_s3_3_1_admits_within_the_grant_only() {
        let mut r = Responder::new(Direction::Forward, 2);
        assert_eq!(r.grant(), 2);
        r.admit().unwrap();
        r.admit().unwrap();
        assert!(r.admit().is_err(), "a third call exceeds a grant of 2");
        assert_eq!(r.in_process, 2);
        r.release();
        r.admit().unwrap();
        r.release();
        r.release();
        r.release(); // nothing more to release
        assert_eq!(r.in_process, 0);
        assert_eq!(r.grant(), 2);
    }

    #[test]
    fn reset_forgets_calls_in_process() {
        let mut r = Responder::new(Direction::Reverse, 1);
        r.admit().unwrap();
        r.reset();
        assert_eq!(r.in_process, 0);
        r.admit().unwrap();
    }
}
