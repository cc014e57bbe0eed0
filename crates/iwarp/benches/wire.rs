//! Wire-format throughput: CRC32c backends on 1 MiB (and FPDU-sized)
//! buffers, FPDU build (framing + CRC) and FPDU deframing.
//!
//! `cargo bench -p iwarp --bench wire`

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use iwarp::crc;
use iwarp::wire::ddp::{segments, DdpRepr, MessageTemplate};
use iwarp::wire::fpdu::{mulpdu, Deframer, Event, FpduBuilder};
use iwarp::wire::rdmap::Opcode;
use iwarp::wire::sgl::{sgl_range, SglCursor};
use std::hint::black_box;

fn data(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 131 + 7) as u8).collect()
}

fn bench_crc(c: &mut Criterion) {
    let mut g = c.benchmark_group("crc32c");
    for size in [64usize, 1460, 65536, 1 << 20] {
        let buf = data(size);
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_with_input(BenchmarkId::new("crate_crc32c", size), &buf, |b, buf| {
            b.iter(|| crc32c::crc32c(black_box(buf)))
        });
        g.bench_with_input(BenchmarkId::new("crate_crc_fast", size), &buf, |b, buf| {
            b.iter(|| crc_fast::crc32_iscsi(black_box(buf)))
        });
        g.bench_with_input(BenchmarkId::new("iwarp_crc", size), &buf, |b, buf| {
            b.iter(|| crc::crc32c(black_box(buf)))
        });
    }
    g.finish();
}

/// Frame a 1 MiB RDMA Write into FPDUs for a given MSS, and deframe it again.
fn bench_fpdu(c: &mut Criterion) {
    let msg = data(1 << 20);
    let sgl: Vec<&[u8]> = msg.chunks(4096).collect();
    let mut g = c.benchmark_group("fpdu_1MiB_write");
    g.throughput(Throughput::Bytes(msg.len() as u64));
    // Baselines measured in the same run: the unavoidable work of the
    // receive path (one CRC pass + one copy into place).
    {
        let mut sink = vec![0u8; msg.len()];
        g.bench_function("baseline_memcpy", |b| {
            b.iter(|| {
                sink.copy_from_slice(black_box(&msg));
                black_box(sink[0])
            })
        });
        g.bench_function("baseline_crc_then_memcpy", |b| {
            b.iter(|| {
                let c = crc::crc32c(black_box(&msg));
                sink.copy_from_slice(&msg);
                black_box((c, sink[0]))
            })
        });
    }
    for (emss, crc_on) in [(1460usize, true), (65483, true), (65483, false)] {
        let mul = mulpdu(emss, false);
        let tmpl = MessageTemplate::Tagged {
            rsvd_ulp: Opcode::RdmaWrite.control_byte(),
            stag: 0x100,
            to: 0,
        };
        let builder = FpduBuilder::new(crc_on);
        let label = format!("mss{emss}_crc{}", u8::from(crc_on));
        // Build: segmentation + framing + CRC; the payload is not copied
        // (a sender hands prefix, SGL pieces and trailer to write_vectored).
        g.bench_function(BenchmarkId::new("build", &label), |b| {
            b.iter(|| {
                let mut n = 0usize;
                let mut cur = SglCursor::new(&sgl);
                for seg in segments(tmpl, msg.len(), mul).unwrap() {
                    let (h, hl) = seg.header.to_bytes();
                    let pieces = cur.take(seg.range.len());
                    let f = builder.frame(&h[..hl], pieces).unwrap();
                    n += black_box(f.prefix.as_bytes()).len() + f.trailer.as_bytes().len();
                }
                black_box(n)
            })
        });
        // The serialized stream, for the receive side.
        let mut stream = Vec::new();
        for seg in segments(tmpl, msg.len(), mul).unwrap() {
            let (h, hl) = seg.header.to_bytes();
            let pieces = sgl_range(&sgl, seg.range.clone());
            builder
                .frame(&h[..hl], pieces.clone())
                .unwrap()
                .write_to(pieces, &mut stream);
        }
        let mut sink = vec![0u8; msg.len()];
        // Deframe in 64 KiB reads, copying payload into the "registered" sink.
        g.bench_function(BenchmarkId::new("deframe_place", &label), |b| {
            b.iter(|| {
                let mut d = Deframer::new(crc_on, 65535);
                let mut to = 0usize;
                let mut base = 0usize;
                for chunk in stream.chunks(65536) {
                    let mut input = chunk;
                    loop {
                        let (n, ev) = d.feed(input).unwrap();
                        input = &input[n..];
                        match ev {
                            Some(Event::Header(h)) => {
                                if let Ok(DdpRepr::Tagged(t)) = h.ddp() {
                                    base = t.to as usize;
                                }
                            }
                            Some(Event::Payload { offset, data }) => {
                                to = base + offset;
                                sink[to..to + data.len()].copy_from_slice(data);
                            }
                            Some(Event::End) => {}
                            None => break,
                        }
                    }
                }
                black_box(to)
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench_crc, bench_fpdu);
criterion_main!(benches);
