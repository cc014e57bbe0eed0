//! Scripted reads over hostile bytes: the borrowing and the Bytes decoder
//! never panic and always agree.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use xdr::{BytesDecoder, Decoder, XdrRead};

fuzz_target!(|data: &[u8]| {
    let Some((&nops, rest)) = data.split_first() else {
        return;
    };
    let nops = (nops % 24) as usize;
    if rest.len() < nops {
        return;
    }
    let (ops, input) = rest.split_at(nops);
    let mut d = Decoder::new(input);
    let mut b = BytesDecoder::new(Bytes::copy_from_slice(input));
    for &op in ops {
        let max = u32::from(op >> 3) * 4;
        let (x, y): (Result<Vec<u8>, _>, Result<Vec<u8>, _>) = match op & 7 {
            0 => (
                d.u32().map(|v| v.to_be_bytes().to_vec()),
                b.u32().map(|v| v.to_be_bytes().to_vec()),
            ),
            1 => (
                d.u64().map(|v| v.to_be_bytes().to_vec()),
                b.u64().map(|v| v.to_be_bytes().to_vec()),
            ),
            2 => (
                d.bool().map(|v| vec![v as u8]),
                b.bool().map(|v| vec![v as u8]),
            ),
            3 => (
                d.opaque(max).map(<[u8]>::to_vec),
                b.opaque(max).map(|v| v.to_vec()),
            ),
            4 => (
                d.string(max).map(|s| s.as_bytes().to_vec()),
                b.string(max).map(|v| v.to_vec()),
            ),
            5 => (
                d.fixed_opaque(max as usize / 4).map(<[u8]>::to_vec),
                b.fixed_opaque(max as usize / 4).map(|v| v.to_vec()),
            ),
            6 => (
                d.array_len(max, 4).map(|n| n.to_be_bytes().to_vec()),
                b.array_len(max, 4).map(|n| n.to_be_bytes().to_vec()),
            ),
            _ => (
                d.skip(max as usize).map(|_| vec![]),
                b.skip(max as usize).map(|_| vec![]),
            ),
        };
        assert_eq!(x, y);
        assert!(d.position() <= input.len());
        if x.is_err() {
            // Positions after an error are unspecified by the trait.
            break;
        }
        assert_eq!(d.position(), b.position());
    }
});
