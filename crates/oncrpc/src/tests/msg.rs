use bytes::Bytes;
use proptest::prelude::*;
use xdr::{encode_to_bytes, Decoder, XdrEncode};

use crate::auth::*;
use crate::msg::*;

fn call(cred: OpaqueAuth) -> CallHeader {
    CallHeader {
        xid: 0x1234_5678,
        rpcvers: 2,
        prog: 100_003,
        vers: 3,
        procedure: 6,
        cred,
        verf: OpaqueAuth::none(),
    }
}

#[test]
fn minimal_call_is_40_bytes_with_spec_layout() {
    let b = encode_to_bytes(&call(OpaqueAuth::none())).unwrap();
    assert_eq!(b.len(), 40);
    let words: Vec<u32> = b
        .chunks(4)
        .map(|c| u32::from_be_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(words, [0x1234_5678, 0, 2, 100_003, 3, 6, 0, 0, 0, 0]);
    assert_eq!(peek_xid_and_type(&b), Some((0x1234_5678, 0)));
    assert_eq!(
        CallHeader::decode(&mut Decoder::new(&b)).unwrap(),
        call(OpaqueAuth::none())
    );
}

#[test]
fn minimal_success_reply_is_24_bytes() {
    let h = ReplyHeader::accepted(9, AcceptStat::Success);
    let b = encode_to_bytes(&h).unwrap();
    assert_eq!(
        &b[..],
        &[0, 0, 0, 9, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    );
    let d = ReplyHeader::denied(9, RejectStat::RpcMismatch { low: 2, high: 2 });
    let b = encode_to_bytes(&d).unwrap();
    assert_eq!(
        &b[..],
        &[0, 0, 0, 9, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 2]
    );
    let a = ReplyHeader::denied(9, RejectStat::AuthError(AuthStat::TooWeak));
    let b = encode_to_bytes(&a).unwrap();
    assert_eq!(
        &b[..],
        &[0, 0, 0, 9, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 5]
    );
}

#[test]
fn auth_sys_limits() {
    let name_255 = Bytes::from(vec![b'h'; 255]);
    let max = AuthSys::new(1, name_255.clone(), 2, 3, (0..16).collect()).unwrap();
    let body = encode_to_bytes(&max).unwrap();
    assert_eq!(body.len(), 340, "maximum AUTH_SYS body (RFC 5531 App. A)");
    assert_eq!(AuthSys::decode_body(&body).unwrap(), max);
    assert_eq!(
        AuthSys::new(1, vec![b'h'; 256], 2, 3, vec![]),
        Err(AuthSysError::MachineNameTooLong(256))
    );
    assert_eq!(
        AuthSys::new(1, "h", 2, 3, (0..17).collect()),
        Err(AuthSysError::TooManyGids(17))
    );
    // Decoding enforces the same limits.
    let mut raw = body.to_vec();
    raw[4..8].copy_from_slice(&256u32.to_be_bytes());
    assert!(AuthSys::decode_body(&raw).is_err());
    let mut raw = body.to_vec();
    let ngids_at = 4 + 4 + 256 + 4 + 4;
    raw[ngids_at..ngids_at + 4].copy_from_slice(&17u32.to_be_bytes());
    assert!(matches!(
        AuthSys::decode_body(&raw),
        Err(xdr::Error::TooLong { len: 17, max: 16 })
    ));
    // Trailing bytes inside the body are malformed.
    let mut raw = body.to_vec();
    raw.extend_from_slice(&[0, 0, 0, 0]);
    assert!(AuthSys::decode_body(&raw).is_err());
    // Credential interpretation.
    let cred = Credential::Sys(max.clone());
    let oa = cred.to_opaque_auth();
    assert_eq!(oa.flavor(), AuthFlavor::SYS);
    assert_eq!(Credential::from_opaque_auth(&oa), Ok(cred));
    let bad = OpaqueAuth::new(AuthFlavor::SYS, Bytes::from_static(&[0, 0])).unwrap();
    assert_eq!(Credential::from_opaque_auth(&bad), Err(AuthStat::BadCred));
    let none_with_body =
        OpaqueAuth::new(AuthFlavor::NONE, Bytes::from_static(&[0, 0, 0, 0])).unwrap();
    assert_eq!(
        Credential::from_opaque_auth(&none_with_body),
        Err(AuthStat::BadCred)
    );
}

#[test]
fn opaque_auth_limit() {
    assert!(OpaqueAuth::new(AuthFlavor(9), Bytes::from(vec![0; 400])).is_ok());
    assert_eq!(
        OpaqueAuth::new(AuthFlavor(9), Bytes::from(vec![0; 401])),
        Err(AuthBodyTooLong(401))
    );
    let mut c = encode_to_bytes(&call(OpaqueAuth::none())).unwrap().to_vec();
    c[28..32].copy_from_slice(&401u32.to_be_bytes());
    c.extend_from_slice(&[0; 404]);
    assert!(matches!(
        CallHeader::decode(&mut Decoder::new(&c)),
        Err(xdr::Error::TooLong { .. })
    ));
}

fn reply_body() -> impl Strategy<Value = ReplyBody> {
    let accept = prop_oneof![
        Just(AcceptStat::Success),
        Just(AcceptStat::ProgUnavail),
        (any::<u32>(), any::<u32>()).prop_map(|(low, high)| AcceptStat::ProgMismatch { low, high }),
        Just(AcceptStat::ProcUnavail),
        Just(AcceptStat::GarbageArgs),
        Just(AcceptStat::SystemErr),
    ];
    prop_oneof![
        (accept, proptest::collection::vec(any::<u8>(), 0..32)).prop_map(|(stat, v)| {
            ReplyBody::Accepted {
                verf: OpaqueAuth::new(AuthFlavor(7), Bytes::from(v)).unwrap(),
                stat,
            }
        }),
        (any::<u32>(), any::<u32>())
            .prop_map(|(low, high)| ReplyBody::Denied(RejectStat::RpcMismatch { low, high })),
        (0u32..15)
            .prop_map(|s| ReplyBody::Denied(RejectStat::AuthError(AuthStat::from_u32(s).unwrap()))),
    ]
}

proptest! {
    #[test]
    fn reply_round_trip(xid in any::<u32>(), body in reply_body()) {
        let h = ReplyHeader { xid, body };
        let b = encode_to_bytes(&h).unwrap();
        prop_assert_eq!(b.len(), h.encoded_len());
        let mut d = Decoder::new(&b);
        prop_assert_eq!(MessageHeader::decode(&mut d).unwrap(), MessageHeader::Reply(h));
        xdr::XdrRead::finish(&d).unwrap();
    }

    #[test]
    fn call_round_trip(xid in any::<u32>(), prog in any::<u32>(), vers in any::<u32>(), p in any::<u32>(),
                       flavor in any::<u32>(), body in proptest::collection::vec(any::<u8>(), 0..400)) {
        let h = CallHeader { xid, rpcvers: 2, prog, vers, procedure: p,
            cred: OpaqueAuth::new(AuthFlavor(flavor), Bytes::from(body)).unwrap(), verf: OpaqueAuth::none() };
        let b = encode_to_bytes(&h).unwrap();
        let mut d = Decoder::new(&b);
        prop_assert_eq!(MessageHeader::decode(&mut d).unwrap(), MessageHeader::Call(h));
    }

    #[test]
    fn header_decode_never_panics(data in proptest::collection::vec(any::<u8>(), 0..96)) {
        let _ = MessageHeader::decode(&mut Decoder::new(&data));
        let _ = CallHeader::decode(&mut Decoder::new(&data));
        let _ = ReplyHeader::decode(&mut Decoder::new(&data));
        let _ = AuthSys::decode_body(&data);
    }
}
