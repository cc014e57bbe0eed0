//! The cross-piece XDR decoder on hostile pieces and hostile read
//! sequences: never panics, positions stay consistent, and it reads the same
//! values as a flat decoder over the flattened stream.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use oncrpc::{Payload, Piece};
use xdr::{BytesDecoder, XdrRead};

fuzz_target!(|data: &[u8]| {
    // Layout: [n_pieces] then per piece [kind|len], then the op script, then
    // the stream bytes.
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let n = (n % 6) as usize;
    if rest.len() < n {
        return;
    }
    let (hdrs, rest) = rest.split_at(n);
    let Some((&nops, rest)) = rest.split_first() else {
        return;
    };
    let nops = (nops % 32) as usize;
    if rest.len() < nops {
        return;
    }
    let (ops, stream) = rest.split_at(nops);
    let stream = Bytes::copy_from_slice(stream);
    let mut at = 0;
    let mut pieces = Vec::new();
    for h in hdrs {
        let len = ((h & 0x7F) as usize).min(stream.len() - at);
        let b = stream.slice(at..at + len);
        at += len;
        pieces.push(if h & 0x80 != 0 {
            Piece::Ddp(b)
        } else {
            Piece::Xdr(b)
        });
    }
    pieces.push(Piece::Xdr(stream.slice(at..)));
    let p = Payload::from_pieces(pieces);
    let total = p.xdr_len();
    let flat = p.flatten();
    assert_eq!(flat.len(), total);
    let has_ddp = p.has_ddp();

    let mut d = p.decoder();
    let mut f = BytesDecoder::new(flat);
    for op in ops {
        let (a, b) = match op % 5 {
            0 => (
                d.u32().ok().map(|v| v as u64),
                f.u32().ok().map(|v| v as u64),
            ),
            1 => (d.u64().ok(), f.u64().ok()),
            2 => {
                let max = (*op as u32) << 2;
                (
                    d.opaque(max).ok().map(|b| b.len() as u64),
                    f.opaque(max).ok().map(|b| b.len() as u64),
                )
            }
            3 => (d.skip(3).ok().map(|_| 0), f.skip(3).ok().map(|_| 0)),
            _ => {
                let r = d.clone().rest();
                assert_eq!(r.xdr_len(), d.remaining());
                (None, None)
            }
        };
        // Without Ddp pieces the two decoders must agree exactly; with them
        // the piece decoder may additionally reject a length word that
        // disagrees with its Ddp piece, but never read anything else.
        if !has_ddp || a.is_some() {
            assert_eq!(a, b);
        }
        if a.is_none() || b.is_none() || a != b {
            break;
        }
        assert_eq!(d.position() + d.remaining(), total);
    }
});
