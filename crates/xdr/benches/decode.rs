//! Decoding 64 words plus a 4 KiB opaque with the checked decoders, against
//! an unchecked hand-written baseline (plain `from_be_bytes` and slicing)
//! in the same run: the cost of bounds, limits and padding checks.

use std::hint::black_box;

use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use xdr::{BytesDecoder, Decoder, Encoder, XdrRead};

fn input() -> Bytes {
    let mut b = BytesMut::zeroed(64 * 4 + 4 + 4096);
    let mut e = Encoder::new(&mut b);
    for i in 0..64u32 {
        e.u32(i);
    }
    e.opaque(&[7u8; 4096]);
    e.finish().unwrap();
    b.freeze()
}

fn bench(c: &mut Criterion) {
    let buf = input();
    let mut g = c.benchmark_group("words64_opaque4k");
    g.throughput(Throughput::Bytes(buf.len() as u64));
    g.bench_function("baseline_unchecked", |b| {
        b.iter(|| {
            let s = black_box(&buf[..]);
            let mut sum = 0u32;
            for i in 0..64 {
                sum = sum.wrapping_add(u32::from_be_bytes(s[i * 4..i * 4 + 4].try_into().unwrap()));
            }
            let len = u32::from_be_bytes(s[256..260].try_into().unwrap()) as usize;
            black_box((sum, &s[260..260 + len]))
        })
    });
    g.bench_function("decoder", |b| {
        b.iter(|| {
            let mut d = Decoder::new(black_box(&buf[..]));
            let mut sum = 0u32;
            for _ in 0..64 {
                sum = sum.wrapping_add(d.u32().unwrap());
            }
            black_box((sum, d.opaque(8192).unwrap()))
        })
    });
    g.bench_function("bytes_decoder", |b| {
        b.iter(|| {
            let mut d = BytesDecoder::new(black_box(&buf).clone());
            let mut sum = 0u32;
            for _ in 0..64 {
                sum = sum.wrapping_add(d.u32().unwrap());
            }
            black_box((sum, d.opaque(8192).unwrap()))
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
