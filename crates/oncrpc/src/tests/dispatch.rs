//! Every status produced by the Dispatcher, parsed back by the ClientCore.

use std::ops::RangeInclusive;

use bytes::Bytes;
use proptest::prelude::*;
use xdr::{encode_to_bytes, XdrRead};

use super::block_on;
use crate::*;

const PROG: u32 = 0x3000_0000;
const STRICT: u32 = 0x3000_0001;

struct Calc {
    vers: RangeInclusive<u32>,
}

impl Service for Calc {
    fn program(&self) -> u32 {
        PROG
    }
    fn versions(&self) -> RangeInclusive<u32> {
        self.vers.clone()
    }
    async fn handle(&self, call: Call) -> Result<Payload, ProcError> {
        let mut d = call.args.decoder();
        let mut out = Payload::builder();
        match call.procedure {
            0 => d.finish()?,
            1 => {
                let (a, b) = (d.u32()?, d.u32()?);
                d.finish()?;
                out.u32(a.wrapping_add(b)).u32(call.vers);
            }
            2 => return Err(ProcError::SystemErr),
            6 => panic!("Calc: deliberate panic in procedure 6"),
            5 => return Err(ProcError::AuthError(AuthStat::RejectedCred)),
            3 => {
                // Echo a DDP-eligible argument as a DDP-eligible result.
                let data = d.opaque(1 << 20)?;
                d.finish()?;
                out.ddp_opaque(data);
            }
            4 => {
                // Report the credential seen.
                let uid = match &call.cred {
                    Credential::Sys(s) => s.uid(),
                    _ => u32::MAX,
                };
                out.u32(uid);
            }
            _ => return Err(ProcError::ProcUnavail),
        }
        Ok(out.finish())
    }
}

/// A program that requires AUTH_SYS.
struct Strict;
impl Service for Strict {
    fn program(&self) -> u32 {
        STRICT
    }
    fn versions(&self) -> RangeInclusive<u32> {
        1..=1
    }
    fn check_credential(&self, cred: &Credential) -> Result<(), AuthStat> {
        match cred {
            Credential::Sys(_) => Ok(()),
            _ => Err(AuthStat::TooWeak),
        }
    }
    async fn handle(&self, _call: Call) -> Result<Payload, ProcError> {
        Ok(Payload::new())
    }
}

fn dispatcher() -> Dispatcher {
    Dispatcher::builder()
        .service(Calc { vers: 2..=3 })
        .service(Calc { vers: 5..=5 })
        .service(Strict)
        .build()
}

/// Dispatch `msg` (whose xid is `xid`) and parse the reply with a ClientCore.
fn exchange(msg: Payload, xid: u32) -> Result<Payload, RpcError> {
    exchange_with(&dispatcher(), msg, xid)
}

/// [`exchange`] through the dispatcher `d`.
fn exchange_with(d: &Dispatcher, msg: Payload, xid: u32) -> Result<Payload, RpcError> {
    let mut core: ClientCore<()> = ClientCore::with_first_xid(0);
    core.register(xid, None, ());
    let reply = match block_on(d.dispatch(msg)) {
        DispatchOutcome::Reply(r) => r,
        DispatchOutcome::Drop(r) => panic!("dropped: {r:?}"),
    };
    match core.handle_reply(&reply) {
        ReplyOutcome::Completed { xid: x, result, .. } => {
            assert_eq!(x, xid);
            result
        }
        other => panic!("unexpected {other:?}"),
    }
}

fn call(req: Request) -> Result<Payload, RpcError> {
    exchange(req.encode(77), 77)
}

fn args(words: &[u32]) -> Payload {
    let mut b = Payload::builder();
    for w in words {
        b.u32(*w);
    }
    b.finish()
}

#[test]
fn success() {
    let r = call(Request::new(PROG, 3, 1, args(&[40, 2]))).unwrap();
    let mut d = r.decoder();
    assert_eq!((d.u32().unwrap(), d.u32().unwrap()), (42, 3));
    d.finish().unwrap();
    // Version 5 is served by the second registration.
    let r = call(Request::new(PROG, 5, 1, args(&[1, 1]))).unwrap();
    assert_eq!(r.flatten()[..], [0, 0, 0, 2, 0, 0, 0, 5]);
    call(Request::new(PROG, 2, 0, Payload::new())).unwrap();
}

#[test]
fn prog_unavail() {
    assert!(matches!(
        call(Request::new(0x4444, 1, 0, Payload::new())),
        Err(RpcError::ProgUnavail)
    ));
}

#[test]
fn prog_mismatch_reports_registered_range() {
    for v in [0, 1, 4, 6, u32::MAX] {
        assert!(matches!(
            call(Request::new(PROG, v, 0, Payload::new())),
            Err(RpcError::ProgMismatch { low: 2, high: 5 })
        ));
    }
}

#[test]
fn proc_unavail_garbage_system_err() {
    assert!(matches!(
        call(Request::new(PROG, 2, 99, Payload::new())),
        Err(RpcError::ProcUnavail)
    ));
    // Missing argument, extra argument.
    assert!(matches!(
        call(Request::new(PROG, 2, 1, args(&[1]))),
        Err(RpcError::GarbageArgs)
    ));
    assert!(matches!(
        call(Request::new(PROG, 2, 1, args(&[1, 2, 3]))),
        Err(RpcError::GarbageArgs)
    ));
    assert!(matches!(
        call(Request::new(PROG, 2, 0, args(&[1]))),
        Err(RpcError::GarbageArgs)
    ));
    assert!(matches!(
        call(Request::new(PROG, 2, 2, Payload::new())),
        Err(RpcError::SystemErr)
    ));
    assert!(matches!(
        call(Request::new(PROG, 2, 5, Payload::new())),
        Err(RpcError::AuthError(AuthStat::RejectedCred))
    ));
}

#[test]
fn rpc_mismatch() {
    let mut h = Request::new(PROG, 2, 0, Payload::new()).call_header(5);
    h.rpcvers = 3;
    let msg = Payload::from_xdr(encode_to_bytes(&h).unwrap());
    assert!(matches!(
        exchange(msg, 5),
        Err(RpcError::RpcMismatch { low: 2, high: 2 })
    ));
}

fn raw_call(cred_flavor: u32, cred: &[u8], verf_flavor: u32, verf: &[u8]) -> Payload {
    let mut b = Payload::builder();
    b.u32(5).u32(0).u32(2).u32(PROG).u32(2).u32(0);
    b.u32(cred_flavor)
        .opaque(cred)
        .u32(verf_flavor)
        .opaque(verf);
    b.finish()
}

#[test]
fn auth_errors() {
    let auth = |p| match exchange(p, 5) {
        Err(RpcError::AuthError(s)) => s,
        other => panic!("{other:?}"),
    };
    // Credential body over 400 bytes.
    assert_eq!(auth(raw_call(1, &[0; 404], 0, &[])), AuthStat::BadCred);
    // Verifier body over 400 bytes.
    assert_eq!(auth(raw_call(0, &[], 0, &[0; 401])), AuthStat::BadVerf);
    // AUTH_NONE with a body.
    assert_eq!(auth(raw_call(0, &[0; 4], 0, &[])), AuthStat::BadCred);
    // Malformed AUTH_SYS.
    assert_eq!(auth(raw_call(1, &[0; 6], 0, &[])), AuthStat::BadCred);
    // Unsupported flavors.
    assert_eq!(auth(raw_call(3, &[0; 8], 0, &[])), AuthStat::BadCred);
    assert_eq!(auth(raw_call(6, &[], 0, &[])), AuthStat::BadCred);
    // Verifier that is not AUTH_NONE, or has a body.
    assert_eq!(auth(raw_call(0, &[], 1, &[])), AuthStat::BadVerf);
    assert_eq!(auth(raw_call(0, &[], 0, &[1, 2, 3, 4])), AuthStat::BadVerf);
    // A service that requires AUTH_SYS.
    assert!(matches!(
        call(Request::new(STRICT, 1, 0, Payload::new())),
        Err(RpcError::AuthError(AuthStat::TooWeak))
    ));
    let sys = Credential::Sys(AuthSys::new(1, "host", 1000, 100, vec![1, 2]).unwrap());
    call(Request::new(STRICT, 1, 0, Payload::new()).with_cred(sys.clone())).unwrap();
    // And the credential reaches the service.
    let r = call(Request::new(PROG, 2, 4, Payload::new()).with_cred(sys)).unwrap();
    assert_eq!(r.decoder().u32().unwrap(), 1000);
}

/// A call header up to the credential (xid 5, PROG version 2, procedure 0),
/// then `rest` as raw bytes (no XDR padding added).
fn call_with_raw_auth(rest: &[u8]) -> Payload {
    let mut b = Payload::builder();
    b.u32(5).u32(0).u32(2).u32(PROG).u32(2).u32(0);
    let mut v = b.finish().flatten().to_vec();
    v.extend_from_slice(rest);
    Payload::from(v)
}

/// A complete call header whose credential body has
/// non-zero XDR padding (RFC 4506 §4.10 requires zeros) is a malformed
/// credential: MSG_DENIED AUTH_ERROR AUTH_BADCRED (RFC 5531 §9; libtirpc
/// answers the same), not dropped like a truncated header, which would
/// leave the caller to its own timeout.
#[test]
fn credential_with_nonzero_padding_is_answered_badcred() {
    // AUTH_SYS, 1-byte body, padding FF FF FF; AUTH_NONE verifier.
    let msg = call_with_raw_auth(&[
        0, 0, 0, 1, 0, 0, 0, 1, 0, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0,
    ]);
    assert!(
        matches!(
            exchange(msg, 5),
            Err(RpcError::AuthError(AuthStat::BadCred))
        ),
        "malformed credential not answered AUTH_BADCRED"
    );
}

/// The same for the verifier: AUTH_BADVERF.
#[test]
fn verifier_with_nonzero_padding_is_answered_badverf() {
    // AUTH_NONE credential; AUTH_NONE verifier, 2-byte body, padding FF FF.
    let msg = call_with_raw_auth(&[
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0xff, 0xff,
    ]);
    assert!(
        matches!(
            exchange(msg, 5),
            Err(RpcError::AuthError(AuthStat::BadVerf))
        ),
        "malformed verifier not answered AUTH_BADVERF"
    );
}

/// A credential or verifier cut short (body or padding
/// missing) is still a truncated header, dropped, whatever bytes are there.
#[test]
fn truncated_credential_or_verifier_is_still_dropped() {
    let d = dispatcher();
    for rest in [
        &[0, 0, 0, 1, 0, 0, 0, 1, 0, 0xff][..],
        &[0, 0, 0, 1, 0, 0, 0, 5, 1, 2, 3, 4, 5, 0],
        &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0xff],
    ] {
        assert_eq!(
            block_on(d.dispatch(call_with_raw_auth(rest))),
            DispatchOutcome::Drop(DropReason::Truncated),
            "{rest:?}"
        );
    }
}

#[test]
fn undecodable_messages_are_dropped() {
    let d = dispatcher();
    let full = Request::new(PROG, 2, 0, Payload::new()).encode(5).flatten();
    // Every truncation of the header is dropped, none panics.
    for n in 0..full.len() {
        let out = block_on(d.dispatch_bytes(full.slice(..n)));
        assert_eq!(out, DispatchOutcome::Drop(DropReason::Truncated), "len {n}");
    }
    // A reply is not a call.
    let reply = encode_to_bytes(&ReplyHeader::accepted(5, AcceptStat::Success)).unwrap();
    assert_eq!(
        block_on(d.dispatch_bytes(reply)),
        DispatchOutcome::Drop(DropReason::NotACall)
    );
    let weird = Bytes::from_static(&[0, 0, 0, 5, 0, 0, 0, 7]);
    assert_eq!(
        block_on(d.dispatch_bytes(weird)),
        DispatchOutcome::Drop(DropReason::NotACall)
    );
}

#[test]
fn ddp_arguments_and_results_keep_their_pieces() {
    let data = Bytes::from(vec![0xA5u8; 1001]);
    let mut a = Payload::builder();
    a.ddp_opaque(data.clone());
    let msg = Request::new(PROG, 2, 3, a.finish()).encode(9);
    assert!(msg.pieces().last().unwrap().is_ddp());
    let reply = match block_on(dispatcher().dispatch(msg)) {
        DispatchOutcome::Reply(r) => r,
        other => panic!("{other:?}"),
    };
    // Header Xdr piece (incl. the length word), then the very same Ddp bytes.
    assert_eq!(reply.pieces().len(), 2);
    match &reply.pieces()[1] {
        Piece::Ddp(b) => assert_eq!(b.as_ptr(), data.as_ptr()),
        p => panic!("{p:?}"),
    }
    // The same call flattened (as TCP delivers it) still works.
    let flat = Request::new(PROG, 2, 3, {
        let mut a = Payload::builder();
        a.ddp_opaque(data.clone());
        a.finish()
    })
    .encode(9)
    .flatten();
    let r = exchange(Payload::from_xdr(flat), 9).unwrap();
    assert_eq!(r.decoder().opaque(2000).unwrap(), data);
}

#[test]
fn local_channel_modes() {
    use crate::testing::{LocalChannel, LocalMode};
    for mode in [LocalMode::Pieces, LocalMode::Flatten] {
        let ch = LocalChannel::with_mode(dispatcher(), mode);
        let r = block_on(ch.call(Request::new(PROG, 2, 1, args(&[2, 3])))).unwrap();
        assert_eq!(r.decoder().u32().unwrap(), 5);
        let e = block_on(ch.call(Request::new(PROG, 9, 1, Payload::new())));
        assert!(matches!(e, Err(RpcError::ProgMismatch { low: 2, high: 5 })));
    }
    // Pieces mode places DDP results into the caller's buffer.
    let ch = LocalChannel::new(dispatcher());
    let buf = bytes::BytesMut::with_capacity(64);
    let ptr = buf.as_ptr();
    let mut a = Payload::builder();
    a.ddp_opaque(Bytes::from_static(b"placed"));
    let r = block_on(ch.call(Request::new(PROG, 2, 3, a.finish()).with_result_buf(buf))).unwrap();
    let got = r.decoder().opaque(64).unwrap();
    assert_eq!(&got[..], b"placed");
    assert_eq!(got.as_ptr(), ptr);
}

#[test]
fn dyn_channel_is_a_channel() {
    use crate::testing::LocalChannel;
    use std::sync::Arc;
    let ch: Arc<dyn DynChannel> = Arc::new(LocalChannel::new(dispatcher()));
    let r = block_on(ch.call(Request::new(PROG, 2, 1, args(&[4, 5])))).unwrap();
    assert_eq!(r.decoder().u32().unwrap(), 9);
    let r = block_on(ch.call_dyn(Request::new(0x9999, 1, 0, Payload::new())));
    assert!(matches!(r, Err(RpcError::ProgUnavail)));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]
    /// Arbitrary bytes (and arbitrary tails after a valid header prefix)
    /// never make the dispatcher panic; any reply it sends is a decodable
    /// reply to the same xid.
    #[test]
    fn dispatch_never_panics(prefix_len in 0usize..48, tail in proptest::collection::vec(any::<u8>(), 0..64)) {
        let d = dispatcher();
        let full = Request::new(PROG, 2, 1, Payload::new()).encode(0xABCD).flatten();
        let mut msg = full[..prefix_len.min(full.len())].to_vec();
        msg.extend_from_slice(&tail);
        if let DispatchOutcome::Reply(r) = block_on(d.dispatch(Payload::from(msg.clone()))) {
            let (xid, _) = decode_reply(&r).unwrap();
            prop_assert_eq!(Some(xid), msg.get(..4).map(|b| u32::from_be_bytes(b.try_into().unwrap())));
        }
        block_on(d.dispatch(Payload::from(tail)));
    }
}

/// `bytes` cut at `cuts` into separate pieces, as a record's fragments are.
fn split(bytes: &[u8], cuts: &[prop::sample::Index]) -> Payload {
    let mut pts: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
    pts.sort_unstable();
    let mut p = Payload::new();
    let mut prev = 0;
    for c in pts {
        p.push_xdr(Bytes::copy_from_slice(&bytes[prev..c]));
        prev = c;
    }
    p.push_xdr(Bytes::copy_from_slice(&bytes[prev..]));
    p
}

fn outcome_bytes(o: DispatchOutcome) -> Option<Vec<u8>> {
    match o {
        DispatchOutcome::Reply(r) => Some(r.flatten().to_vec()),
        DispatchOutcome::Drop(_) => None,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]
    /// A record's fragments reach the dispatcher as separate
    /// pieces; the outcome of a (possibly corrupted) call must not depend
    /// on where it was cut.
    #[test]
    fn dispatch_independent_of_fragmentation(
        data in proptest::collection::vec(any::<u8>(), 0..40),
        proc_ in 0u32..5,
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..3),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..8),
        sys in any::<bool>(),
    ) {
        let mut args = Payload::builder();
        args.opaque(&data);
        let mut req = Request::new(PROG, 2, proc_, args.finish());
        if sys {
            req = req.with_cred(Credential::Sys(AuthSys::new(7, "h", 1, 2, vec![3, 4]).unwrap()));
        }
        let mut msg = req.encode(0x1234).flatten().to_vec();
        for (i, v) in &flips {
            let k = i.index(msg.len());
            msg[k] = *v;
        }
        let d = dispatcher();
        let whole = outcome_bytes(block_on(d.dispatch(Payload::from(msg.clone()))));
        let pieces = outcome_bytes(block_on(d.dispatch(split(&msg, &cuts))));
        prop_assert_eq!(whole, pieces);
    }

    /// The same for the client's reply decoding.
    #[test]
    fn reply_decode_independent_of_fragmentation(
        msg in proptest::collection::vec(any::<u8>(), 0..64),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..8),
    ) {
        let show = |p: &Payload| {
            format!("{:?}", decode_reply(p).map(|(x, r)| (x, r.map(|p| p.flatten()))))
        };
        prop_assert_eq!(show(&Payload::from(msg.clone())), show(&split(&msg, &cuts)));
    }
}

/// Panics when asked for its future (before any poll).
struct PanicsEarly;

impl Service for PanicsEarly {
    fn program(&self) -> u32 {
        STRICT + 1
    }
    fn versions(&self) -> RangeInclusive<u32> {
        1..=1
    }
    fn handle(
        &self,
        _call: Call,
    ) -> impl std::future::Future<Output = Result<Payload, ProcError>> + Send {
        panic!("PanicsEarly: deliberate panic");
        #[allow(unreachable_code)]
        async {
            Ok(Payload::new())
        }
    }
}

/// A procedure that panics, in a poll of its future or when
/// making it, is answered SYSTEM_ERR; the dispatcher goes on serving.
#[test]
fn panicking_procedures_are_answered_system_err() {
    assert!(matches!(
        call(Request::new(PROG, 3, 6, Payload::new())),
        Err(RpcError::SystemErr)
    ));
    let d = Dispatcher::builder()
        .service(PanicsEarly)
        .service(Calc { vers: 2..=3 })
        .build();
    let early = Request::new(STRICT + 1, 1, 1, Payload::new());
    assert!(matches!(
        exchange_with(&d, early.encode(5), 5),
        Err(RpcError::SystemErr)
    ));
    let after = exchange_with(&d, Request::new(PROG, 2, 1, args(&[2, 3])).encode(6), 6);
    assert_eq!(&after.unwrap().flatten()[..], &[0, 0, 0, 5, 0, 0, 0, 2]);
}

/// A future that panics when polled, and again when dropped.
struct PanicTwiceFut;

impl std::future::Future for PanicTwiceFut {
    type Output = Result<Payload, ProcError>;
    fn poll(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        panic!("PanicTwiceFut: poll");
    }
}

impl Drop for PanicTwiceFut {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            panic!("PanicTwiceFut: drop");
        }
    }
}

struct PanicTwice;

impl Service for PanicTwice {
    fn program(&self) -> u32 {
        STRICT + 2
    }
    fn versions(&self) -> RangeInclusive<u32> {
        1..=1
    }
    fn handle(
        &self,
        _call: Call,
    ) -> impl std::future::Future<Output = Result<Payload, ProcError>> + Send {
        PanicTwiceFut
    }
}

/// A procedure's future that panics in a poll and again
/// when dropped still gets SYSTEM_ERR; nothing escapes the dispatcher.
#[test]
fn a_future_that_panics_again_when_dropped_is_contained() {
    let d = Dispatcher::builder().service(PanicTwice).build();
    let msg = Request::new(STRICT + 2, 1, 1, Payload::new()).encode(9);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| exchange_with(&d, msg, 9)))
        .expect("the dispatcher panicked (the panicked future's Drop)");
    assert!(matches!(r, Err(RpcError::SystemErr)), "{r:?}");
}
