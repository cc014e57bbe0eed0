//! Header decode/encode benchmarks: no chunks, one Read chunk, and a Write
//! list of two chunks x 16 segments.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use rpcrdma_proto::wire::{
    BodyRepr, ChunkListsRepr, DecodeLimits, Header, HeaderRepr, ReadSegment, Segment,
    WriteChunkRepr,
};

fn seg(i: u32) -> Segment {
    Segment {
        handle: 0x1000 + i,
        length: 4096,
        offset: 0x7f00_0000_0000 + i as u64 * 4096,
    }
}

fn headers() -> Vec<(&'static str, HeaderRepr)> {
    let msg = |c| HeaderRepr {
        xid: 0x1234_5678,
        vers: 1,
        credit: 128,
        body: BodyRepr::Msg(c),
    };
    vec![
        ("no_chunks", msg(ChunkListsRepr::default())),
        (
            "one_read_chunk",
            msg(ChunkListsRepr {
                read_list: vec![ReadSegment {
                    position: 128,
                    segment: seg(0),
                }],
                ..Default::default()
            }),
        ),
        (
            "write_list_2x16",
            msg(ChunkListsRepr {
                write_list: (0..2)
                    .map(|c| WriteChunkRepr {
                        segments: (0..16).map(|s| seg(c * 16 + s)).collect(),
                    })
                    .collect(),
                ..Default::default()
            }),
        ),
    ]
}

fn bench(c: &mut Criterion) {
    let limits = DecodeLimits::default();
    for (name, h) in headers() {
        let mut bytes = h.to_vec();
        bytes.extend_from_slice(&[0u8; 64]); // an RPC message follows
        c.bench_function(&format!("decode/{name}"), |b| {
            b.iter(|| {
                let h = Header::parse(black_box(&bytes), &limits).unwrap();
                black_box(h.header_len)
            })
        });
        // Decode and walk every segment (what a validator does).
        c.bench_function(&format!("decode_walk/{name}"), |b| {
            b.iter(|| {
                let h = Header::parse(black_box(&bytes), &limits).unwrap();
                let c = h.chunks().unwrap();
                let mut sum = 0u64;
                for r in c.read_list.segments() {
                    sum += r.segment.length as u64;
                }
                for w in c.write_list.chunks() {
                    sum += w.total_len();
                }
                black_box(sum)
            })
        });
        let mut out = vec![0u8; h.buffer_len()];
        c.bench_function(&format!("encode/{name}"), |b| {
            b.iter(|| black_box(&h).emit(black_box(&mut out)).unwrap())
        });
    }
    // Baseline measured in the same run: copying the same number of bytes.
    let src = vec![0u8; 28];
    let mut dst = [0u8; 28];
    c.bench_function("baseline/copy_28_bytes", |b| {
        b.iter(|| dst.copy_from_slice(black_box(&src)))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
