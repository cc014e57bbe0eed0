//! The direction of a received message, decided before any XID lookup
//! (RFC 8167 §2, §5).
//!
//! An RPC-over-RDMA Version One header does not say whether the RPC message
//! it carries is a Call or a Reply, yet the meaning of `rdma_xid`,
//! `rdma_credit` and the chunk lists depends on it, and the XID spaces of
//! the two directions are independent (RFC 8167 §2.4.1: a forward-direction
//! and a reverse-direction Requester MAY use the same XID at the same time
//! on one connection). A receiver therefore looks at the RPC message's
//! `msg_type` (RFC 5531 §9: CALL = 0, REPLY = 1) before it looks the XID up
//! among its own calls, or a reverse-direction Call whose XID matches a
//! forward Call would be checked against that Call's chunks.
//!
//! Only a message that a reverse-direction peer may send is classified:
//! RDMA_MSG of version 1 with an empty Read list, Write list and Reply
//! chunk, whose RPC XID equals `rdma_xid` (RFC 8167 §5.1, §5.2, §5.3: an
//! endpoint that does not use chunks in the reverse direction sends every
//! reverse-direction message Short). Everything else (RDMA_NOMSG,
//! RDMA_ERROR, a message with chunks, a header too short or of another
//! version) is [`Direction::Undetermined`] and belongs to the receiver's
//! forward-direction role: a Requester's reply checks
//! ([`check_reply`](crate::validate::check_reply)) or a Responder's call
//! checks ([`check_call`](crate::validate::check_call)), which answer or
//! discard it as RFC 8166 §4.5 says.

use crate::wire::{Proc, MIN_HEADER_LEN, RPCRDMA_VERSION};

/// RPC `msg_type` of a Call (RFC 5531 §9).
pub const MSG_TYPE_CALL: u32 = 0;
/// RPC `msg_type` of a Reply (RFC 5531 §9).
pub const MSG_TYPE_REPLY: u32 = 1;

/// Bytes a classified message has at least: the 28-byte header of an
/// RDMA_MSG with three empty chunk lists, then the RPC XID and `msg_type`.
pub const MIN_CLASSIFIED_LEN: usize = MIN_HEADER_LEN + 8;

/// What a received message is, as far as its first words tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// A Short RPC Call (`msg_type` CALL) with the given XID.
    Call {
        /// `rdma_xid`, equal to the RPC XID.
        xid: u32,
    },
    /// A Short RPC Reply (`msg_type` REPLY) with the given XID.
    Reply {
        /// `rdma_xid`, equal to the RPC XID.
        xid: u32,
    },
    /// Not a chunk-less RDMA_MSG of version 1 with a matching RPC XID and a
    /// known `msg_type`: the receiver's forward-direction role decides.
    Undetermined,
}

/// Which end of the connection receives: the RPC client (which established
/// the connection and is the forward-direction Requester) or the RPC server
/// (the forward-direction Responder). RFC 8167 §2.2: the client establishes
/// connections even for reverse-direction operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    /// The RPC client: forward Requester, reverse-direction Responder.
    Client,
    /// The RPC server: forward Responder, reverse-direction Requester.
    Server,
}

/// Which half of an endpoint a received message goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Route {
    /// The Requester half: a Reply (or RDMA_ERROR) to a Call this side sent.
    Requester,
    /// The Responder half: a Call this side must answer.
    Responder,
}

fn word(msg: &[u8], i: usize) -> Option<u32> {
    let b = msg.get(i * 4..i * 4 + 4)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// Classifies a received message by its transport header and the first two
/// words of its RPC message (RFC 8167 §5). Never panics; reads at most the
/// first [`MIN_CLASSIFIED_LEN`] bytes.
pub fn classify(msg: &[u8]) -> Direction {
    if msg.len() < MIN_CLASSIFIED_LEN {
        return Direction::Undetermined;
    }
    // Fixed fields: xid, vers, credit, proc (RFC 8166 §4.2); then the Read
    // list, Write list and Reply chunk discriminators, all zero (absent).
    let w = |i| word(msg, i).unwrap_or(u32::MAX);
    let xid = w(0);
    if w(1) != RPCRDMA_VERSION
        || w(3) != Proc::Msg.as_u32()
        || w(4) != 0
        || w(5) != 0
        || w(6) != 0
        || w(7) != xid
    {
        return Direction::Undetermined;
    }
    match w(8) {
        MSG_TYPE_CALL => Direction::Call { xid },
        MSG_TYPE_REPLY => Direction::Reply { xid },
        _ => Direction::Undetermined,
    }
}

/// Where a message received by `side` goes (RFC 8167 §2.3, §5):
/// - on the client, a chunk-less RDMA_MSG carrying a Call is a
///   reverse-direction Call for its Responder half; everything else goes
///   to its Requester half (forward Replies, RDMA_ERROR, and what the
///   reply checks discard);
/// - on the server, a chunk-less RDMA_MSG carrying a Reply answers a
///   reverse-direction Call of its Requester half; everything else goes to
///   its Responder half (forward Calls, and what the call checks answer or
///   discard).
///
/// A side without reverse-direction operation enabled discards what is
/// routed to the half it does not have (RFC 8167 §6), before looking up
/// any XID.
pub fn route(msg: &[u8], side: Side) -> Route {
    match (side, classify(msg)) {
        (Side::Client, Direction::Call { .. }) => Route::Responder,
        (Side::Client, _) => Route::Requester,
        (Side::Server, Direction::Reply { .. }) => Route::Requester,
        (Side::Server, _) => Route::Responder,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header (xid, vers, credit, proc, three list words) then RPC words.
    fn msg(hdr: [u32; 7], rpc: &[u32]) -> Vec<u8> {
        hdr.iter()
            .chain(rpc)
            .flat_map(|w| w.to_be_bytes())
            .collect()
    }

    const X: u32 = 0x1234_5678;

    fn short(xid: u32, rpc: &[u32]) -> Vec<u8> {
        msg([xid, 1, 32, 0, 0, 0, 0], rpc)
    }

    #[test]
    fn rfc8167_s5_1_short_call_is_a_call() {
        // xid, CALL, rpcvers 2, prog, vers, proc, AUTH_NONE x2.
        let m = short(X, &[X, 0, 2, 100_003, 4, 1, 0, 0, 0, 0]);
        assert_eq!(classify(&m), Direction::Call { xid: X });
        assert_eq!(route(&m, Side::Client), Route::Responder);
        assert_eq!(route(&m, Side::Server), Route::Responder);
    }

    #[test]
    fn rfc8167_s5_2_short_reply_is_a_reply() {
        let m = short(X, &[X, 1, 0, 0, 0, 0]);
        assert_eq!(classify(&m), Direction::Reply { xid: X });
        assert_eq!(route(&m, Side::Client), Route::Requester);
        assert_eq!(route(&m, Side::Server), Route::Requester);
    }

    #[test]
    fn just_long_enough() {
        let m = short(X, &[X, 0]);
        assert_eq!(m.len(), MIN_CLASSIFIED_LEN);
        assert_eq!(classify(&m), Direction::Call { xid: X });
        assert_eq!(classify(&m[..m.len() - 1]), Direction::Undetermined);
        assert_eq!(classify(&[]), Direction::Undetermined);
    }

    #[test]
    fn rfc8167_s2_4_1_same_xid_both_directions() {
        // A reverse Call and a forward Reply with one XID are told apart by
        // msg_type alone.
        let call = short(7, &[7, 0, 2, 1, 1, 0]);
        let reply = short(7, &[7, 1, 0]);
        assert_eq!(route(&call, Side::Client), Route::Responder);
        assert_eq!(route(&reply, Side::Client), Route::Requester);
    }

    #[test]
    fn rfc8167_s5_3_chunks_leave_it_to_the_forward_role() {
        // A Write list present (a forward reply may carry one).
        let m = msg([X, 1, 32, 0, 0, 1, 0], &[X, 0, 0, 0, 0, 0]);
        assert_eq!(classify(&m), Direction::Undetermined);
        assert_eq!(route(&m, Side::Client), Route::Requester);
        // A Read list present (a forward call).
        let m = msg([X, 1, 32, 0, 1, 0, 0], &[X, 1, 0, 0, 0, 0]);
        assert_eq!(route(&m, Side::Server), Route::Responder);
        // A Reply chunk present.
        let m = msg([X, 1, 32, 0, 0, 0, 1], &[X, 1, 0, 0]);
        assert_eq!(classify(&m), Direction::Undetermined);
    }

    #[test]
    fn rfc8166_s4_2_other_procs_versions_and_xids() {
        // RDMA_NOMSG, RDMA_ERROR: the forward role's checks decide.
        for p in [1, 2, 3, 4] {
            let m = msg([X, 1, 32, p, 0, 0, 0], &[X, 0, 0, 0]);
            assert_eq!(classify(&m), Direction::Undetermined, "proc {p}");
        }
        // Version 2 headers are not Version One messages.
        let m = msg([X, 2, 32, 0, 0, 0, 0], &[X, 0, 0, 0]);
        assert_eq!(classify(&m), Direction::Undetermined);
        // RPC XID differs from rdma_xid (RFC 8166 §4.2.1).
        let m = short(X, &[X + 1, 0, 2, 1, 1, 0]);
        assert_eq!(classify(&m), Direction::Undetermined);
        // msg_type neither CALL nor REPLY.
        let m = short(X, &[X, 2, 0, 0]);
        assert_eq!(classify(&m), Direction::Undetermined);
        assert_eq!(route(&m, Side::Client), Route::Requester);
        assert_eq!(route(&m, Side::Server), Route::Responder);
    }

    proptest::proptest! {
        #[test]
        fn classify_never_panics(b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..96)) {
            let d = classify(&b);
            if d != Direction::Undetermined {
                proptest::prop_assert!(b.len() >= MIN_CLASSIFIED_LEN);
            }
            let _ = route(&b, Side::Client);
            let _ = route(&b, Side::Server);
        }

        #[test]
        fn classify_reads_only_the_first_words(
            call in proptest::prelude::any::<bool>(),
            xid in proptest::prelude::any::<u32>(),
            tail in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
        ) {
            let mut m = short(xid, &[xid, u32::from(!call)]);
            m.extend_from_slice(&tail);
            let want = if call { Direction::Call { xid } } else { Direction::Reply { xid } };
            proptest::prop_assert_eq!(classify(&m), want);
        }
    }
}
