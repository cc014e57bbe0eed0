//! RPC-over-RDMA credits (RFC 8166 §3.3.1, §3.3.3).

/// Requester side: how many calls may be outstanding.
///
/// One call may be sent until the first reply arrives; afterwards at most
/// min(requested, granted) may be outstanding. A grant of 0 counts as 1 and
/// a grant above the request is clamped. [`reset`](Self::reset) on every new
/// connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequesterCredits {
    requested: u32,
    granted: Option<u32>,
    outstanding: u32,
}

impl RequesterCredits {
    /// A fresh connection asking for `requested` credits (at least 1).
    pub fn new(requested: u32) -> RequesterCredits {
        RequesterCredits {
            requested: requested.max(1),
            granted: None,
            outstanding: 0,
        }
    }

    /// The value to put in `rdma_credit` of calls.
    pub fn requested(&self) -> u32 {
        self.requested
    }

    /// The current limit on outstanding calls.
    pub fn limit(&self) -> u32 {
        match self.granted {
            None => 1,
            Some(g) => g.clamp(1, self.requested),
        }
    }

    /// Calls sent and not yet answered.
    pub fn outstanding(&self) -> u32 {
        self.outstanding
    }

    /// True when one more call may be sent now.
    pub fn can_send(&self) -> bool {
        self.outstanding < self.limit()
    }

    /// Takes a credit for a call; `false` (and nothing taken) when none is
    /// available.
    pub fn try_send(&mut self) -> bool {
        if self.can_send() {
            self.outstanding += 1;
            true
        } else {
            false
        }
    }

    /// A reply (or RDMA_ERROR) arrived carrying `granted`: the call's credit
    /// is returned and the grant recorded.
    pub fn on_reply(&mut self, granted: u32) {
        self.outstanding = self.outstanding.saturating_sub(1);
        self.granted = Some(granted);
    }

    /// A call completed without a reply arriving (e.g. it was abandoned and
    /// its credit is given back locally).
    pub fn release(&mut self) {
        self.outstanding = self.outstanding.saturating_sub(1);
    }

    /// A new connection: back to one credit, nothing outstanding.
    pub fn reset(&mut self) {
        self.granted = None;
        self.outstanding = 0;
    }
}

/// Responder side: the grant, never 0 and never more than the receives kept
/// posted (RFC 8166 §3.3.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResponderCredits {
    max: u32,
    posted: u32,
    in_process: u32,
}

/// The Requester exceeded its grant: the connection should be closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("requester exceeded its credit grant")]
pub struct CreditOverrun;

impl CreditOverrun {
    /// What to do about it: close the connection (RFC 8166 §3.3.1: "the
    /// RDMA layer may signal an error, possibly terminating the
    /// connection").
    pub fn action(&self) -> crate::validate::Action {
        crate::validate::Action::Close
    }
}

impl ResponderCredits {
    /// A Responder that grants at most `max` credits and keeps `posted`
    /// receives posted.
    pub fn new(max: u32, posted: u32) -> ResponderCredits {
        ResponderCredits {
            max: max.max(1),
            posted,
            in_process: 0,
        }
    }

    /// The receive queue now holds `posted` receives (posted + in-process
    /// receives are what the grant may count on, draft §4.4).
    pub fn set_posted(&mut self, posted: u32) {
        self.posted = posted;
    }

    /// The grant to send in a reply: between 1 and the receives available
    /// (the RFC requires non-zero; a Responder with none posted still
    /// grants 1 and must post one before replying).
    pub fn grant(&self) -> u32 {
        self.max
            .min(self.posted.saturating_add(self.in_process))
            .max(1)
    }

    /// A call arrived; errors when more calls are in process than granted.
    pub fn on_call(&mut self) -> Result<(), CreditOverrun> {
        if self.in_process >= self.grant() {
            return Err(CreditOverrun);
        }
        self.in_process += 1;
        self.posted = self.posted.saturating_sub(1);
        Ok(())
    }

    /// A call was answered; its receive buffer is posted again (a transport
    /// that keeps a call's receive buffer until its reply is sent).
    pub fn on_reply_sent(&mut self) {
        self.on_call_done();
        self.on_recv_posted(1);
    }

    /// `n` receives were posted (again). A transport that copies each
    /// message out of its receive buffer and posts the buffer again at once
    /// reports that here right after [`on_call`](Self::on_call), so that
    /// the receives posted stay what the receive queue holds.
    pub fn on_recv_posted(&mut self, n: u32) {
        self.posted = self.posted.saturating_add(n);
    }

    /// A call ended (answered, or dropped without an answer) and no longer
    /// counts against the grant; its receive was already posted again
    /// ([`on_recv_posted`](Self::on_recv_posted)).
    pub fn on_call_done(&mut self) {
        self.in_process = self.in_process.saturating_sub(1);
    }

    /// Calls received and not yet done.
    pub fn in_process(&self) -> u32 {
        self.in_process
    }

    /// Receives posted now, by this account.
    pub fn posted(&self) -> u32 {
        self.posted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc8166_s3_3_3_one_call_until_first_reply() {
        let mut c = RequesterCredits::new(32);
        assert!(c.try_send());
        assert!(!c.try_send(), "only one call before the first reply");
        c.on_reply(32);
        for _ in 0..32 {
            assert!(c.try_send());
        }
        assert!(!c.try_send());
    }

    #[test]
    fn rfc8166_s3_3_1_min_of_requested_and_granted() {
        let mut c = RequesterCredits::new(8);
        assert!(c.try_send());
        c.on_reply(4);
        assert_eq!(c.limit(), 4);
        c.on_reply(100); // clamped to the request
        assert_eq!(c.limit(), 8);
    }

    #[test]
    fn rfc8166_s3_3_1_zero_grant_counts_as_one() {
        let mut c = RequesterCredits::new(8);
        c.try_send();
        c.on_reply(0);
        assert_eq!(c.limit(), 1);
        assert!(c.try_send());
        assert!(!c.try_send());
    }

    #[test]
    fn rfc8166_s3_3_3_reset_on_new_connection() {
        let mut c = RequesterCredits::new(8);
        c.try_send();
        c.on_reply(8);
        c.try_send();
        c.try_send();
        c.reset();
        assert_eq!(c.outstanding(), 0);
        assert_eq!(c.limit(), 1);
    }

    #[test]
    fn rfc8166_s3_3_1_grant_never_zero_nor_above_posted() {
        let r = ResponderCredits::new(128, 0);
        assert_eq!(r.grant(), 1);
        let r = ResponderCredits::new(128, 16);
        assert_eq!(r.grant(), 16);
        let r = ResponderCredits::new(0, 16);
        assert_eq!(r.grant(), 1);
        let mut r = ResponderCredits::new(4, 4);
        for _ in 0..4 {
            r.on_call().unwrap();
        }
        assert_eq!(r.grant(), 4);
        assert_eq!(r.on_call(), Err(CreditOverrun));
        assert_eq!(CreditOverrun.action(), crate::validate::Action::Close);
        r.on_reply_sent();
        assert!(r.on_call().is_ok());
    }

    #[test]
    fn rfc8166_s3_3_1_receives_posted_again_at_once() {
        // 4 credits over 4 + 4 receives, each posted again as soon as its
        // message is copied out: the posted count stays 8, the grant 4.
        let mut r = ResponderCredits::new(4, 8);
        for n in 1..=4 {
            r.on_call().unwrap();
            r.on_recv_posted(1);
            assert_eq!((r.in_process(), r.posted(), r.grant()), (n, 8, 4));
        }
        assert_eq!(r.on_call(), Err(CreditOverrun));
        assert_eq!(r.posted(), 8, "an overrun consumes nothing");
        r.on_call_done();
        assert_eq!((r.in_process(), r.posted()), (3, 8));
        assert!(r.on_call().is_ok());
    }
}
