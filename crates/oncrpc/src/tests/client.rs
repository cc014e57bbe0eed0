use std::time::{Duration, Instant};

use bytes::Bytes;
use proptest::prelude::*;
use xdr::encode_to_bytes;

use crate::*;

fn reply(xid: u32, stat: AcceptStat, results: &[u8]) -> Payload {
    let mut b = Payload::builder();
    b.item(&ReplyHeader::accepted(xid, stat));
    b.fixed_opaque(results);
    b.finish()
}

#[test]
fn replies_match_out_of_order() {
    let mut core: ClientCore<&str> = ClientCore::with_first_xid(10);
    let now = Instant::now();
    let req = Request::new(1, 1, 1, Payload::new());
    let (a, ma) = core.start_call(&req, now, "a");
    let (b, _) = core.start_call(&req, now, "b");
    let (c, _) = core.start_call(&req, now, "c");
    assert_eq!((a, b, c), (10, 11, 12));
    assert_eq!(ma.xdr_len(), 40);
    assert_eq!(core.outstanding(), 3);
    for (x, name) in [(c, "c"), (a, "a"), (b, "b")] {
        match core.handle_reply(&reply(x, AcceptStat::Success, &[1, 2, 3, 4])) {
            ReplyOutcome::Completed { xid, data, result } => {
                assert_eq!((xid, data), (x, name));
                assert_eq!(&result.unwrap().flatten()[..], &[1, 2, 3, 4]);
            }
            o => panic!("{o:?}"),
        }
    }
    assert_eq!(core.outstanding(), 0);
    // A duplicate is unknown now.
    assert!(matches!(
        core.handle_reply(&reply(a, AcceptStat::Success, &[])),
        ReplyOutcome::UnknownXid(10)
    ));
}

#[test]
fn every_error_status_is_typed() {
    let mut core: ClientCore = ClientCore::with_first_xid(0);
    type Check = fn(&RpcError) -> bool;
    let cases: Vec<(ReplyHeader, Check)> = vec![
        (ReplyHeader::accepted(1, AcceptStat::ProgUnavail), |e| {
            matches!(e, RpcError::ProgUnavail)
        }),
        (
            ReplyHeader::accepted(1, AcceptStat::ProgMismatch { low: 3, high: 4 }),
            |e| matches!(e, RpcError::ProgMismatch { low: 3, high: 4 }),
        ),
        (ReplyHeader::accepted(1, AcceptStat::ProcUnavail), |e| {
            matches!(e, RpcError::ProcUnavail)
        }),
        (ReplyHeader::accepted(1, AcceptStat::GarbageArgs), |e| {
            matches!(e, RpcError::GarbageArgs)
        }),
        (ReplyHeader::accepted(1, AcceptStat::SystemErr), |e| {
            matches!(e, RpcError::SystemErr)
        }),
        (
            ReplyHeader::denied(1, RejectStat::RpcMismatch { low: 2, high: 2 }),
            |e| matches!(e, RpcError::RpcMismatch { low: 2, high: 2 }),
        ),
        (
            ReplyHeader::denied(1, RejectStat::AuthError(AuthStat::RejectedCred)),
            |e| matches!(e, RpcError::AuthError(AuthStat::RejectedCred)),
        ),
    ];
    for (h, ok) in cases {
        core.register(1, None, ());
        match core.handle_reply(&Payload::from_xdr(encode_to_bytes(&h).unwrap())) {
            ReplyOutcome::Completed { result: Err(e), .. } => assert!(ok(&e), "{e:?}"),
            o => panic!("{o:?}"),
        }
    }
}

/// A timeout too long for an `Instant` to represent
/// ([`Duration::MAX`], which `tokio::time::timeout` accepts as "never")
/// means no deadline; `start_call` must not panic on `Instant + Duration`.
#[test]
fn unrepresentable_timeout_means_no_deadline() {
    let mut core: ClientCore<u8> = ClientCore::with_first_xid(0);
    let t0 = Instant::now();
    let r = Request::new(1, 1, 1, Payload::new()).with_timeout(Duration::MAX);
    let (x, _) = core.start_call(&r, t0, 1);
    core.set_default_timeout(Some(Duration::MAX));
    let (y, _) = core.start_call(&Request::new(1, 1, 1, Payload::new()), t0, 2);
    assert_eq!(core.next_deadline(), None);
    assert_eq!(core.outstanding(), 2);
    assert!(matches!(
        core.handle_reply(&reply(x, AcceptStat::Success, &[])),
        ReplyOutcome::Completed { data: 1, .. }
    ));
    assert!(matches!(
        core.handle_reply(&reply(y, AcceptStat::Success, &[])),
        ReplyOutcome::Completed { data: 2, .. }
    ));
}

#[test]
fn deadlines() {
    let mut core: ClientCore<u8> = ClientCore::with_first_xid(0);
    core.set_default_timeout(Some(Duration::from_secs(5)));
    let t0 = Instant::now();
    let r1 = Request::new(1, 1, 1, Payload::new()).with_timeout(Duration::from_secs(1));
    let r2 = Request::new(1, 1, 1, Payload::new());
    let r3 = Request::new(1, 1, 1, Payload::new()).with_timeout(Duration::from_secs(3));
    let (x1, _) = core.start_call(&r1, t0, 1);
    let (x2, _) = core.start_call(&r2, t0, 2);
    let (x3, _) = core.start_call(&r3, t0, 3);
    assert_eq!(core.next_deadline(), Some(t0 + Duration::from_secs(1)));
    assert!(core.poll_timeouts(t0).is_empty());
    assert_eq!(
        core.poll_timeouts(t0 + Duration::from_secs(1)),
        vec![(x1, 1)]
    );
    // x3 is answered in time; its deadline disappears.
    assert!(matches!(
        core.handle_reply(&reply(x3, AcceptStat::Success, &[])),
        ReplyOutcome::Completed { data: 3, .. }
    ));
    assert_eq!(core.next_deadline(), Some(t0 + Duration::from_secs(5)));
    assert_eq!(
        core.poll_timeouts(t0 + Duration::from_secs(60)),
        vec![(x2, 2)]
    );
    assert_eq!(core.next_deadline(), None);
    // A late reply is unknown.
    assert!(matches!(
        core.handle_reply(&reply(x1, AcceptStat::Success, &[])),
        ReplyOutcome::UnknownXid(_)
    ));
}

#[test]
fn xids_wrap_and_skip_outstanding() {
    let mut core: ClientCore = ClientCore::with_first_xid(u32::MAX);
    let req = Request::new(1, 1, 1, Payload::new());
    let now = Instant::now();
    let (a, _) = core.start_call(&req, now, ());
    let (b, _) = core.start_call(&req, now, ());
    assert_eq!((a, b), (u32::MAX, 0));
    // Force the counter back onto an outstanding xid.
    let mut core2: ClientCore = ClientCore::with_first_xid(5);
    core2.register(5, None, ());
    core2.register(6, None, ());
    assert_eq!(core2.alloc_xid(), 7);
    // Random starts differ (with overwhelming probability).
    let starts: std::collections::HashSet<u32> = (0..8)
        .map(|_| ClientCore::<()>::new().alloc_xid())
        .collect();
    assert!(starts.len() > 1);
}

#[test]
fn cancel_and_fail_all() {
    let mut core: ClientCore<u8> = ClientCore::with_first_xid(0);
    let req = Request::new(1, 1, 1, Payload::new()).with_timeout(Duration::from_secs(1));
    let now = Instant::now();
    let (a, _) = core.start_call(&req, now, 1);
    core.start_call(&req, now, 2);
    assert_eq!(core.cancel(a), Some(1));
    assert_eq!(core.cancel(a), None);
    let mut all = core.fail_all();
    all.sort();
    assert_eq!(all, vec![(1, 2)]);
    assert_eq!(core.outstanding(), 0);
    assert_eq!(core.next_deadline(), None);
}

#[test]
fn calls_and_garbage_are_not_replies() {
    let mut core: ClientCore = ClientCore::with_first_xid(0);
    core.register(3, None, ());
    let c = Request::new(1, 1, 1, Payload::new()).encode(3);
    assert!(matches!(core.handle_reply(&c), ReplyOutcome::NotAReply(3)));
    // Too short for a header, or a broken REPLY to no outstanding call:
    // dropped.
    let short = Payload::from_xdr(Bytes::from_static(&[0, 0, 0, 3, 0, 0]));
    assert!(matches!(
        core.handle_reply(&short),
        ReplyOutcome::Malformed(_)
    ));
    let trunc_other = Payload::from_xdr(Bytes::from_static(&[0, 0, 0, 4, 0, 0, 0, 1, 0, 0]));
    assert!(matches!(
        core.handle_reply(&trunc_other),
        ReplyOutcome::Malformed(_)
    ));
    assert!(core.is_pending(3));
}

/// A REPLY to an outstanding call that does not decode (cut
/// off, or an accept/reject/auth status outside the registry) completes
/// that call with `BadReply` at once instead of leaving it to its timeout.
#[test]
fn undecodable_reply_to_a_pending_call_fails_it() {
    let mut core: ClientCore = ClientCore::with_first_xid(0);
    let cases: [&[u8]; 4] = [
        // Cut off after reply_stat.
        &[0, 0, 0, 3, 0, 0, 0, 1, 0, 0],
        // MSG_ACCEPTED, AUTH_NONE verifier, accept_stat 9.
        &[
            0, 0, 0, 3, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9,
        ],
        // MSG_DENIED, reject_stat 5.
        &[0, 0, 0, 3, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 5],
        // MSG_DENIED, AUTH_ERROR, auth_stat 99.
        &[0, 0, 0, 3, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 99],
    ];
    for bytes in cases {
        core.register(3, None, ());
        match core.handle_reply(&Payload::from_xdr(Bytes::from_static(bytes))) {
            ReplyOutcome::Completed {
                xid: 3,
                result: Err(RpcError::BadReply(_)),
                ..
            } => {}
            o => panic!("{bytes:?}: {o:?}"),
        }
        assert!(!core.is_pending(3));
    }
}

#[test]
fn call_message_layout_with_auth_sys() {
    let sys = AuthSys::new(7, "client", 1, 2, vec![3]).unwrap();
    let req = Request::new(
        100,
        2,
        3,
        Payload::from_xdr(Bytes::from_static(&[0, 0, 0, 9])),
    )
    .with_cred(Credential::Sys(sys.clone()));
    let msg = req.encode(42).flatten();
    let mut d = xdr::Decoder::new(&msg);
    let h = CallHeader::decode(&mut d).unwrap();
    assert_eq!(
        (h.xid, h.rpcvers, h.prog, h.vers, h.procedure),
        (42, 2, 100, 2, 3)
    );
    assert_eq!(
        Credential::from_opaque_auth(&h.cred),
        Ok(Credential::Sys(sys))
    );
    assert_eq!(d.rest(), &[0, 0, 0, 9]);
}

proptest! {
    #[test]
    fn handle_reply_never_panics(data in proptest::collection::vec(any::<u8>(), 0..80), xid in 0u32..4) {
        let mut core: ClientCore = ClientCore::with_first_xid(0);
        core.register(xid, None, ());
        let _ = core.handle_reply(&Payload::from(data.clone()));
        let _ = decode_reply(&Payload::from(data));
    }
}
