//! Cross-check against an independent RFC 5531 implementation (the
//! `onc-rpc` crate): messages we encode parse there with the same fields,
//! and messages it encodes decode here. `onc-rpc` always frames with a TCP
//! record mark, which we add or strip. `onc-rpc` caps every auth body at
//! 200 bytes (RFC 5531 allows 400), so generated AUTH_SYS bodies stay
//! within 200 (machine names ≤ 100 bytes).

use bytes::Bytes;
use onc_rpc::auth::{AuthFlavor as OFlavor, AuthUnixParams};
use onc_rpc::{
    AcceptedReply, AcceptedStatus, AuthError, CallBody, MessageType, RejectedReply,
    ReplyBody as OReply, RpcMessage,
};
use oncrpc::{
    decode_reply, AcceptStat, AuthStat, AuthSys, Credential, Payload, RejectStat, ReplyHeader,
    Request, RpcError,
};
use proptest::prelude::*;

fn with_record_mark(b: &[u8]) -> Vec<u8> {
    let mut v = ((b.len() as u32) | 0x8000_0000).to_be_bytes().to_vec();
    v.extend_from_slice(b);
    v
}

fn cred() -> impl Strategy<Value = Credential> {
    prop_oneof![
        Just(Credential::None),
        (
            any::<u32>(),
            "[a-z0-9.-]{0,100}",
            any::<u32>(),
            any::<u32>(),
            proptest::collection::vec(any::<u32>(), 0..=16)
        )
            .prop_map(|(st, name, uid, gid, gids)| Credential::Sys(
                AuthSys::new(st, name, uid, gid, gids).unwrap()
            )),
    ]
}

proptest! {
    #[test]
    fn our_calls_parse_in_onc_rpc(xid in any::<u32>(), prog in any::<u32>(), vers in any::<u32>(), p in any::<u32>(),
                                  cred in cred(), words in proptest::collection::vec(any::<u32>(), 0..8)) {
        let mut args = Payload::builder();
        for w in &words { args.u32(*w); }
        let req = Request::new(prog, vers, p, args.finish()).with_cred(cred.clone());
        let wire = with_record_mark(&req.encode(xid).flatten());
        let msg = RpcMessage::try_from(wire.as_slice()).unwrap();
        prop_assert_eq!(msg.xid(), xid);
        let c = msg.call_body().unwrap();
        prop_assert_eq!((c.rpc_version(), c.program(), c.program_version(), c.procedure()), (2, prog, vers, p));
        match (&cred, c.auth_credentials()) {
            (Credential::None, OFlavor::AuthNone(d)) => prop_assert!(d.is_none_or(|d| d.is_empty())),
            (Credential::Sys(s), OFlavor::AuthUnix(u)) => {
                prop_assert_eq!((u.stamp(), u.machine_name(), u.uid(), u.gid()), (s.stamp(), &s.machine_name()[..], s.uid(), s.gid()));
                prop_assert_eq!(u.gids().unwrap_or(&[]), s.gids());
            }
            (a, b) => prop_assert!(false, "credential {:?} parsed as {:?}", a, b),
        }
        let expect: Vec<u8> = words.iter().flat_map(|w| w.to_be_bytes()).collect();
        prop_assert_eq!(*c.payload(), expect.as_slice());
    }

    #[test]
    fn onc_rpc_calls_decode_here(xid in any::<u32>(), prog in any::<u32>(), vers in any::<u32>(), p in any::<u32>(),
                                 name in "[a-z]{0,40}", uid in any::<u32>(), gids in proptest::collection::vec(any::<u32>(), 0..=16),
                                 payload in proptest::collection::vec(any::<u8>(), 0..40)) {
        let params = AuthUnixParams::new(7, name.as_bytes(), uid, 5, gids.clone());
        let m = RpcMessage::<&[u8], &[u8]>::new(xid, MessageType::Call(CallBody::new(
            prog, vers, p, OFlavor::AuthUnix(params), OFlavor::AuthNone(None), payload.as_slice())));
        let wire = m.serialise().unwrap();
        let body = Bytes::copy_from_slice(&wire[4..]);
        let pl = Payload::from_xdr(body);
        let mut d = pl.decoder();
        let h = oncrpc::CallHeader::decode(&mut d).unwrap();
        prop_assert_eq!((h.xid, h.rpcvers, h.prog, h.vers, h.procedure), (xid, 2, prog, vers, p));
        let want = Credential::Sys(AuthSys::new(7, name.into_bytes(), uid, 5, gids).unwrap());
        prop_assert_eq!(Credential::from_opaque_auth(&h.cred), Ok(want));
        prop_assert_eq!(&d.rest().flatten()[..], payload.as_slice());
    }
}

/// A reply header of ours and the same reply in `onc-rpc` terms.
type Pair = (ReplyHeader, OReply<&'static [u8], &'static [u8]>);

fn statuses() -> Vec<Pair> {
    let acc = |s| OReply::Accepted(AcceptedReply::new(OFlavor::AuthNone(None), s));
    vec![
        (
            ReplyHeader::accepted(1, AcceptStat::Success),
            acc(AcceptedStatus::Success(&[][..])),
        ),
        (
            ReplyHeader::accepted(1, AcceptStat::ProgUnavail),
            acc(AcceptedStatus::ProgramUnavailable),
        ),
        (
            ReplyHeader::accepted(1, AcceptStat::ProgMismatch { low: 3, high: 9 }),
            acc(AcceptedStatus::ProgramMismatch { low: 3, high: 9 }),
        ),
        (
            ReplyHeader::accepted(1, AcceptStat::ProcUnavail),
            acc(AcceptedStatus::ProcedureUnavailable),
        ),
        (
            ReplyHeader::accepted(1, AcceptStat::GarbageArgs),
            acc(AcceptedStatus::GarbageArgs),
        ),
        (
            ReplyHeader::accepted(1, AcceptStat::SystemErr),
            acc(AcceptedStatus::SystemError),
        ),
        (
            ReplyHeader::denied(1, RejectStat::RpcMismatch { low: 2, high: 2 }),
            OReply::Denied(RejectedReply::RpcVersionMismatch { low: 2, high: 2 }),
        ),
        (
            ReplyHeader::denied(1, RejectStat::AuthError(AuthStat::BadCred)),
            OReply::Denied(RejectedReply::AuthError(AuthError::BadCredentials)),
        ),
        (
            ReplyHeader::denied(1, RejectStat::AuthError(AuthStat::TooWeak)),
            OReply::Denied(RejectedReply::AuthError(AuthError::TooWeak)),
        ),
    ]
}

#[test]
fn every_reply_status_is_byte_identical_to_onc_rpc() {
    for (ours, theirs) in statuses() {
        let theirs_wire = RpcMessage::new(1, MessageType::Reply(theirs))
            .serialise()
            .unwrap();
        let ours_wire = xdr::encode_to_bytes(&ours).unwrap();
        assert_eq!(&theirs_wire[4..], &ours_wire[..], "{ours:?}");
        // And it decodes here into the matching typed result.
        let (xid, res) = decode_reply(&Payload::from_xdr(ours_wire)).unwrap();
        assert_eq!(xid, 1);
        match (&ours.body, res) {
            (
                oncrpc::ReplyBody::Accepted {
                    stat: AcceptStat::Success,
                    ..
                },
                Ok(p),
            ) => assert!(p.is_empty()),
            (_, Err(e)) => assert!(!matches!(e, RpcError::BadReply(_)), "{e:?}"),
            (b, r) => panic!("{b:?} -> {r:?}"),
        }
    }
}
