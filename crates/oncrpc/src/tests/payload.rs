use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use xdr::{Decoder, XdrRead};

use crate::payload::{Payload, PayloadBuilder, Piece};

/// An item appended to a builder in one of several ways.
#[derive(Debug, Clone)]
enum Op {
    U32(u32),
    U64(u64),
    Opaque(Vec<u8>),
    OpaqueBytes(Vec<u8>),
    Ddp(Vec<u8>),
    Str(String),
}

fn op() -> impl Strategy<Value = Op> {
    let data = proptest::collection::vec(any::<u8>(), 0..40);
    prop_oneof![
        any::<u32>().prop_map(Op::U32),
        any::<u64>().prop_map(Op::U64),
        data.clone().prop_map(Op::Opaque),
        data.clone().prop_map(Op::OpaqueBytes),
        data.prop_map(Op::Ddp),
        "[a-z]{0,9}".prop_map(Op::Str),
    ]
}

fn build(ops: &[Op]) -> Payload {
    let mut b = PayloadBuilder::new();
    for o in ops {
        match o {
            Op::U32(v) => {
                b.u32(*v);
            }
            Op::U64(v) => {
                b.u64(*v);
            }
            Op::Opaque(v) => {
                b.opaque(v);
            }
            Op::OpaqueBytes(v) => {
                b.opaque_bytes(Bytes::from(v.clone()));
            }
            Op::Ddp(v) => {
                b.ddp_opaque(Bytes::from(v.clone()));
            }
            Op::Str(s) => {
                b.string(s);
            }
        }
    }
    b.finish()
}

fn check<R: XdrRead>(r: &mut R, ops: &[Op]) -> Result<(), TestCaseError> {
    for o in ops {
        match o {
            Op::U32(v) => prop_assert_eq!(r.u32().unwrap(), *v),
            Op::U64(v) => prop_assert_eq!(r.u64().unwrap(), *v),
            Op::Opaque(v) | Op::OpaqueBytes(v) | Op::Ddp(v) => {
                prop_assert_eq!(&r.opaque_bytes(64).unwrap()[..], &v[..])
            }
            Op::Str(s) => prop_assert_eq!(&r.string_owned(64).unwrap(), s),
        }
    }
    prop_assert_eq!(r.remaining(), 0);
    Ok(())
}

/// Split `flat` into `Xdr` pieces at the given cut points.
fn split(flat: &Bytes, cuts: &[usize]) -> Payload {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (flat.len() + 1)).collect();
    cuts.sort();
    let mut p = Payload::new();
    let mut at = 0;
    for c in cuts {
        p.push_xdr(flat.slice(at..c));
        at = c;
    }
    p.push_xdr(flat.slice(at..));
    p
}

proptest! {
    /// Building with any mix of pieces and decoding, flat or in pieces,
    /// gives the items back; lengths agree.
    #[test]
    fn build_decode_round_trip(ops in proptest::collection::vec(op(), 0..16)) {
        let p = build(&ops);
        let flat = p.flatten();
        prop_assert_eq!(flat.len(), p.xdr_len());
        prop_assert_eq!(flat.len() % 4, 0);
        prop_assert_eq!(p.inline_len() + p.ddp_len() + p.pieces().iter()
            .filter(|x| x.is_ddp()).map(|x| xdr::pad_len(x.bytes().len())).sum::<usize>(), p.xdr_len());
        check(&mut p.decoder(), &ops)?;
        check(&mut Decoder::new(&flat), &ops)?;
        let inl = p.clone().into_inline();
        prop_assert!(!inl.has_ddp());
        prop_assert_eq!(inl.flatten(), flat.clone());
        let mut via_chunks = BytesMut::new();
        for c in p.xdr_chunks() { via_chunks.extend_from_slice(&c); }
        prop_assert_eq!(via_chunks.freeze(), flat);
    }

    /// A stream cut into arbitrary `Xdr` pieces decodes like the flat one.
    #[test]
    fn arbitrary_split_decodes_same(ops in proptest::collection::vec(op(), 0..12),
                                    cuts in proptest::collection::vec(any::<usize>(), 0..8)) {
        let flat = build(&ops).flatten();
        let p = split(&flat, &cuts);
        prop_assert_eq!(p.flatten(), flat);
        check(&mut p.decoder(), &ops)?;
    }

    /// `rest()` at any item boundary yields the remaining stream.
    #[test]
    fn rest_is_remaining_stream(ops in proptest::collection::vec(op(), 1..10), k in any::<usize>()) {
        let p = build(&ops);
        let k = k % (ops.len() + 1);
        let mut d = p.decoder();
        check_prefix(&mut d, &ops[..k])?;
        let pos = d.position();
        let rest = d.rest();
        prop_assert_eq!(d.remaining(), 0);
        prop_assert_eq!(rest.flatten(), p.flatten().slice(pos..));
        check(&mut rest.decoder(), &ops[k..])?;
    }

    /// Arbitrary bytes in arbitrary pieces never make the decoder panic.
    #[test]
    fn decoder_never_panics(pieces in proptest::collection::vec(
            (any::<bool>(), proptest::collection::vec(any::<u8>(), 0..20)), 0..6),
            reads in proptest::collection::vec(0u8..6, 0..20)) {
        let p = Payload::from_pieces(pieces.into_iter().map(|(ddp, v)| {
            if ddp { Piece::Ddp(Bytes::from(v)) } else { Piece::Xdr(Bytes::from(v)) }
        }));
        let mut d = p.decoder();
        for r in reads {
            let _ = match r {
                0 => d.u32().map(|_| ()),
                1 => d.opaque(u32::MAX).map(|_| ()),
                2 => d.opaque(8).map(|_| ()),
                3 => d.skip(3),
                4 => { let mut b = [0u8; 5]; d.fixed_opaque_into(&mut b) }
                _ => { let r = d.clone().rest(); prop_assert_eq!(r.xdr_len(), d.remaining()); Ok(()) }
            };
            prop_assert!(d.position() <= p.xdr_len());
            prop_assert_eq!(d.position() + d.remaining(), p.xdr_len());
        }
    }
}

fn check_prefix<R: XdrRead>(r: &mut R, ops: &[Op]) -> Result<(), TestCaseError> {
    for o in ops {
        match o {
            Op::U32(_) => {
                r.u32().unwrap();
            }
            Op::U64(_) => {
                r.u64().unwrap();
            }
            Op::Opaque(_) | Op::OpaqueBytes(_) | Op::Ddp(_) | Op::Str(_) => {
                r.opaque_bytes(64).unwrap();
            }
        }
    }
    Ok(())
}

#[test]
fn ddp_piece_is_returned_zero_copy_and_pad_implied() {
    let data = Bytes::from(vec![9u8; 5]);
    let mut b = Payload::builder();
    b.u32(1).ddp_opaque(data.clone()).u32(2);
    let p = b.finish();
    assert_eq!(p.pieces().len(), 3);
    assert_eq!(p.xdr_len(), 4 + 4 + 8 + 4);
    assert_eq!(p.inline_len(), 12);
    assert_eq!(p.ddp_len(), 5);
    let mut d = p.decoder();
    assert_eq!(d.u32().unwrap(), 1);
    assert!(!d.at_ddp());
    let got = d.opaque(5).unwrap();
    assert_eq!(got.as_ptr(), data.as_ptr());
    assert_eq!(got.len(), 5);
    assert_eq!(d.u32().unwrap(), 2);
    d.finish().unwrap();
}

#[test]
fn straddling_opaque_is_copied_correctly() {
    let p = Payload::from_pieces([
        Piece::Xdr(Bytes::from_static(&[0, 0, 0, 6, 1, 2])),
        Piece::Xdr(Bytes::from_static(&[3, 4])),
        Piece::Xdr(Bytes::from_static(&[5, 6, 0, 0])),
    ]);
    let mut d = p.decoder();
    assert_eq!(&d.opaque(6).unwrap()[..], &[1, 2, 3, 4, 5, 6]);
    d.finish().unwrap();
}

#[test]
fn xdr_piece_opaque_is_zero_copy() {
    let flat = Bytes::from(vec![0, 0, 0, 3, 7, 8, 9, 0]);
    let p = Payload::from_xdr(flat.clone());
    let got = p.decoder().opaque(3).unwrap();
    assert_eq!(got.as_ptr(), flat[4..].as_ptr());
    assert_eq!(p.flatten().as_ptr(), flat.as_ptr());
}

#[test]
fn rest_keeps_ddp_pieces() {
    let mut b = Payload::builder();
    b.u32(7).ddp_opaque(Bytes::from_static(b"abcdef")).u32(8);
    let p = b.finish();
    let mut d = p.decoder();
    d.u32().unwrap();
    let rest = d.rest();
    assert_eq!(rest.pieces().len(), 3);
    assert!(rest.pieces()[1].is_ddp());
    // Resuming in the middle of a Ddp piece turns the remainder into Xdr
    // pieces with an explicit pad.
    let mut d = p.decoder();
    d.skip(4 + 4 + 2).unwrap();
    let rest = d.rest();
    assert!(!rest.has_ddp());
    assert_eq!(&rest.flatten()[..], b"cdef\0\0\0\0\0\x08");
}

#[test]
fn truncated_ddp_reports_error() {
    // Length word claims 8 but the Ddp piece and stream hold only 5 (+3 pad).
    let p = Payload::from_pieces([
        Piece::Xdr(Bytes::from_static(&[0, 0, 0, 9])),
        Piece::Ddp(Bytes::from_static(b"hello")),
    ]);
    assert!(matches!(
        p.decoder().opaque(100),
        Err(xdr::Error::Truncated { .. })
    ));
}

#[test]
fn ddp_length_word_must_match_piece() {
    // Length word 6 (pad 2) but the Ddp piece holds 5 bytes (pad 3): the
    // stream lengths agree, yet the item is malformed.
    let p = Payload::from_pieces([
        Piece::Xdr(Bytes::from_static(&[0, 0, 0, 6])),
        Piece::Ddp(Bytes::from_static(b"hello")),
    ]);
    assert_eq!(
        p.decoder().opaque(100),
        Err(xdr::Error::SeparateLengthMismatch {
            declared: 6,
            actual: 5
        })
    );
}

#[test]
fn empty_pieces() {
    let p = Payload::from_pieces([Piece::Xdr(Bytes::new()), Piece::Ddp(Bytes::new())]);
    assert_eq!(p.pieces().len(), 1);
    assert_eq!(p.xdr_len(), 0);
    assert!(p.is_empty());
    let mut b = Payload::builder();
    b.ddp_opaque(Bytes::new());
    let p = b.finish();
    assert_eq!(p.xdr_len(), 4);
    assert_eq!(p.decoder().opaque(0).unwrap().len(), 0);
}

#[test]
fn large_straddling_opaque_and_pads() {
    // A 1 MiB opaque split across three Xdr pieces (as TCP record fragments
    // may deliver it), followed by a word.
    let data: Vec<u8> = (0..1usize << 20).map(|i| (i * 7) as u8).collect();
    let mut b = Payload::builder();
    b.opaque(&data).u32(0xDEAD_BEEF);
    let flat = b.finish().flatten();
    let p = Payload::from_pieces([
        Piece::Xdr(flat.slice(..1000)),
        Piece::Xdr(flat.slice(1000..700_001)),
        Piece::Xdr(flat.slice(700_001..)),
    ]);
    let mut d = p.decoder();
    assert_eq!(&d.opaque(2 << 20).unwrap()[..], &data[..]);
    assert_eq!(d.u32().unwrap(), 0xDEAD_BEEF);
    d.finish().unwrap();
    // Words read across a Ddp piece's implied pad.
    let p = Payload::from_pieces([
        Piece::Xdr(Bytes::from_static(&[0, 0, 0, 1])),
        Piece::Ddp(Bytes::from_static(&[0xAB])),
        Piece::Xdr(Bytes::from_static(&[0, 0, 0, 5])),
    ]);
    let mut d = p.decoder();
    d.skip(4).unwrap();
    assert_eq!(d.u32().unwrap(), 0xAB00_0000);
    assert_eq!(d.u32().unwrap(), 5);
}
