//! Unit and property tests of the codec.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;

use crate::*;

#[test]
fn primitives_layout() {
    let mut buf = [0u8; 32];
    let mut e = Encoder::new(&mut buf);
    e.u32(0x0102_0304);
    e.i32(-2);
    e.u64(0x0102_0304_0506_0708);
    e.i64(-1);
    e.bool(true);
    e.bool(false);
    assert_eq!(e.finish().unwrap(), 32);
    assert_eq!(&buf[..8], &[1, 2, 3, 4, 0xFF, 0xFF, 0xFF, 0xFE]);
    let mut d = Decoder::new(&buf);
    assert_eq!(d.u32().unwrap(), 0x0102_0304);
    assert_eq!(d.i32().unwrap(), -2);
    assert_eq!(d.u64().unwrap(), 0x0102_0304_0506_0708);
    assert_eq!(d.i64().unwrap(), -1);
    assert!(d.bool().unwrap());
    assert!(!d.bool().unwrap());
    d.finish().unwrap();
}

#[test]
fn opaque_padding_and_limits() {
    for len in 0..9usize {
        let data: Vec<u8> = (1..=len as u8).collect();
        let enc = encode_to_bytes(&Opaque(&data)).unwrap();
        assert_eq!(enc.len(), opaque_encoded_len(len));
        assert_eq!(enc.len() % 4, 0);
        assert_eq!(Decoder::new(&enc).opaque(len as u32).unwrap(), &data[..]);
        if len > 0 {
            assert_eq!(
                Decoder::new(&enc).opaque(len as u32 - 1),
                Err(Error::TooLong {
                    len: len as u32,
                    max: len as u32 - 1
                })
            );
        }
    }
}

#[test]
fn nonzero_padding_rejected() {
    let buf = [0, 0, 0, 1, 0xAA, 0, 1, 0];
    assert_eq!(Decoder::new(&buf).opaque(10), Err(Error::NonZeroPadding));
    assert_eq!(
        BytesDecoder::new(Bytes::copy_from_slice(&buf)).opaque(10),
        Err(Error::NonZeroPadding)
    );
}

#[test]
fn truncation_and_huge_lengths() {
    // A length word claiming 4 GiB in a 12-byte input: TooLong against the
    // limit, Truncated when the limit allows it; never an allocation.
    let buf = [0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0, 0, 0, 0, 0];
    assert!(matches!(
        Decoder::new(&buf).opaque(1024),
        Err(Error::TooLong { .. })
    ));
    assert!(matches!(
        Decoder::new(&buf).opaque(u32::MAX),
        Err(Error::Truncated { .. })
    ));
    let mut d = BytesDecoder::new(Bytes::copy_from_slice(&buf));
    assert!(matches!(
        d.opaque_bytes(u32::MAX),
        Err(Error::Truncated { .. })
    ));
    assert!(matches!(
        Decoder::new(&buf).array_len(u32::MAX, 4),
        Err(Error::Truncated { .. })
    ));
    assert!(matches!(
        Decoder::new(&[0, 0, 1]).u32(),
        Err(Error::Truncated {
            needed: 4,
            remaining: 3
        })
    ));
}

#[test]
fn failed_opaque_leaves_position() {
    let buf = [0, 0, 0, 9, 1, 2];
    let mut d = Decoder::new(&buf);
    assert!(d.opaque(100).is_err());
    assert_eq!(d.position(), 0);
}

#[test]
fn optional_data() {
    let some: Option<u64> = Some(7);
    let b = encode_to_bytes(&some).unwrap();
    assert_eq!(&b[..], &[0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 7]);
    assert_eq!(Decoder::new(&b).decode::<Option<u64>>().unwrap(), some);
    let none: Option<u64> = None;
    let b = encode_to_bytes(&none).unwrap();
    assert_eq!(&b[..], &[0, 0, 0, 0]);
    assert_eq!(Decoder::new(&b).decode::<Option<u64>>().unwrap(), None);
    assert_eq!(
        Decoder::new(&[0, 0, 0, 2]).decode::<Option<u32>>(),
        Err(Error::InvalidBool(2))
    );
}

#[test]
fn bool_and_utf8() {
    assert_eq!(
        Decoder::new(&[0, 0, 0, 2]).bool(),
        Err(Error::InvalidBool(2))
    );
    let bad = [0, 0, 0, 2, 0xC3, 0x28, 0, 0];
    assert_eq!(Decoder::new(&bad).string(10), Err(Error::InvalidUtf8));
    assert_eq!(Decoder::new(&bad).string_bytes(10).unwrap(), &[0xC3, 0x28]);
    assert_eq!(
        BytesDecoder::new(Bytes::copy_from_slice(&bad)).string(10),
        Err(Error::InvalidUtf8)
    );
}

#[test]
fn bytes_decoder_is_zero_copy() {
    let buf = Bytes::from(vec![0, 0, 0, 5, 1, 2, 3, 4, 5, 0, 0, 0]);
    let mut d = BytesDecoder::new(buf.clone());
    let o = d.opaque(5).unwrap();
    assert_eq!(&o[..], &[1, 2, 3, 4, 5]);
    assert_eq!(o.as_ptr(), buf[4..].as_ptr());
    d.finish().unwrap();
}

#[test]
fn encoder_reports_small_buffer() {
    let mut buf = [0u8; 6];
    let mut e = Encoder::new(&mut buf);
    e.u32(1);
    e.u32(2);
    e.u32(3);
    assert_eq!(
        e.finish(),
        Err(EncodeError::BufferTooSmall {
            needed: 12,
            available: 6
        })
    );
}

#[test]
fn encode_append_checks_declared_length() {
    struct Liar;
    impl XdrEncode for Liar {
        fn encoded_len(&self) -> usize {
            8
        }
        fn encode(&self, e: &mut Encoder<'_>) {
            e.u32(1);
        }
    }
    let mut b = BytesMut::new();
    assert_eq!(
        encode_append(&Liar, &mut b),
        Err(EncodeError::LengthMismatch {
            declared: 8,
            written: 4
        })
    );
    assert!(b.is_empty());
}

/// One XDR item for property tests.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Item {
    U32(u32),
    I64(i64),
    Bool(bool),
    Opaque(Vec<u8>),
    Fixed(Vec<u8>),
    Str(String),
    Array(Vec<u32>),
}

impl XdrEncode for Item {
    fn encoded_len(&self) -> usize {
        match self {
            Item::U32(_) | Item::Bool(_) => 4,
            Item::I64(_) => 8,
            Item::Opaque(v) => opaque_encoded_len(v.len()),
            Item::Fixed(v) => padded_len(v.len()),
            Item::Str(s) => opaque_encoded_len(s.len()),
            Item::Array(a) => 4 + 4 * a.len(),
        }
    }
    fn encode(&self, e: &mut Encoder<'_>) {
        match self {
            Item::U32(v) => e.u32(*v),
            Item::I64(v) => e.i64(*v),
            Item::Bool(v) => e.bool(*v),
            Item::Opaque(v) => e.opaque(v),
            Item::Fixed(v) => e.fixed_opaque(v),
            Item::Str(s) => e.string(s),
            Item::Array(a) => {
                e.length(a.len());
                for x in a {
                    e.u32(*x);
                }
            }
        }
    }
}

/// Decode an item shaped like `like` from any reader.
pub(crate) fn decode_like<R: XdrRead + ?Sized>(r: &mut R, like: &Item) -> Result<Item> {
    Ok(match like {
        Item::U32(_) => Item::U32(r.u32()?),
        Item::I64(_) => Item::I64(r.i64()?),
        Item::Bool(_) => Item::Bool(r.bool()?),
        Item::Opaque(_) => Item::Opaque(r.opaque_bytes(64)?.to_vec()),
        Item::Fixed(v) => {
            let mut out = vec![0; v.len()];
            r.fixed_opaque_into(&mut out)?;
            Item::Fixed(out)
        }
        Item::Str(_) => Item::Str(r.string_owned(64)?),
        Item::Array(_) => {
            let n = r.array_len(8, 4)?;
            Item::Array((0..n).map(|_| r.u32()).collect::<Result<_>>()?)
        }
    })
}

pub(crate) fn item() -> impl Strategy<Value = Item> {
    prop_oneof![
        any::<u32>().prop_map(Item::U32),
        any::<i64>().prop_map(Item::I64),
        any::<bool>().prop_map(Item::Bool),
        proptest::collection::vec(any::<u8>(), 0..64).prop_map(Item::Opaque),
        proptest::collection::vec(any::<u8>(), 0..16).prop_map(Item::Fixed),
        "[a-zé]{0,20}".prop_map(Item::Str),
        proptest::collection::vec(any::<u32>(), 0..8).prop_map(Item::Array),
    ]
}

struct Seq(Vec<Item>);
impl XdrEncode for Seq {
    fn encoded_len(&self) -> usize {
        self.0.iter().map(XdrEncode::encoded_len).sum()
    }
    fn encode(&self, e: &mut Encoder<'_>) {
        for i in &self.0 {
            e.item(i);
        }
    }
}

proptest! {
    #[test]
    fn round_trip(items in proptest::collection::vec(item(), 0..20)) {
        let seq = Seq(items.clone());
        let enc = encode_to_bytes(&seq).unwrap();
        prop_assert_eq!(enc.len(), seq.encoded_len());
        prop_assert_eq!(enc.len() % 4, 0);
        let mut d = Decoder::new(&enc);
        let mut bd = BytesDecoder::new(enc.clone());
        for it in &items {
            prop_assert_eq!(&decode_like(&mut d, it).unwrap(), it);
            prop_assert_eq!(&decode_like(&mut bd, it).unwrap(), it);
        }
        d.finish().unwrap();
        bd.finish().unwrap();
    }

    #[test]
    fn arbitrary_bytes_never_panic(
        data in proptest::collection::vec(any::<u8>(), 0..128),
        shapes in proptest::collection::vec(item(), 0..12),
    ) {
        let mut d = Decoder::new(&data);
        let mut bd = BytesDecoder::new(Bytes::from(data.clone()));
        for s in &shapes {
            let _ = decode_like(&mut d, s);
            let _ = decode_like(&mut bd, s);
            let _ = d.string(u32::MAX);
            let _ = bd.opaque(u32::MAX);
            prop_assert!(d.position() <= data.len());
            prop_assert!(bd.position() <= data.len());
        }
    }
}
