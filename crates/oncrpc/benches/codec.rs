//! Codec micro-benchmarks, each beside a baseline measured in the same run.
//!
//! * `opaque_1mib/ddp_zero_copy` reads a 1 MiB DDP-eligible opaque from a
//!   payload; baseline `copy` is the memcpy a copying decoder would do.
//! * `null_call/full_path` runs ClientCore::start_call → Dispatcher →
//!   ClientCore::handle_reply for a NULL call; baseline `headers_only`
//!   encodes and decodes the two headers without dispatch or tables.

use std::future::Future;
use std::hint::black_box;
use std::ops::RangeInclusive;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use oncrpc::*;
use xdr::{Decoder, XdrRead};

struct Null;
impl Service for Null {
    fn program(&self) -> u32 {
        0x2000_5244
    }
    fn versions(&self) -> RangeInclusive<u32> {
        1..=1
    }
    async fn handle(&self, call: Call) -> Result<Payload, ProcError> {
        call.args.decoder().finish()?;
        Ok(Payload::new())
    }
}

fn poll_ready<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("service did not complete at once"),
    }
}

fn opaque(c: &mut Criterion) {
    let data = Bytes::from(vec![0x5Au8; 1 << 20]);
    let mut b = Payload::builder();
    b.u32(1).ddp_opaque(data.clone()).u32(2);
    let p = b.finish();
    let mut g = c.benchmark_group("opaque_1mib");
    g.throughput(Throughput::Bytes(data.len() as u64));
    g.bench_function("ddp_zero_copy", |bch| {
        bch.iter(|| {
            let mut d = black_box(&p).decoder();
            d.u32().unwrap();
            let o = d.opaque(2 << 20).unwrap();
            d.u32().unwrap();
            black_box(o)
        })
    });
    g.bench_function("copy", |bch| {
        bch.iter(|| black_box(Bytes::copy_from_slice(black_box(&data))))
    });
    g.finish();
}

fn null_call(c: &mut Criterion) {
    let disp = Dispatcher::builder().service(Null).build();
    let mut core: ClientCore<()> = ClientCore::with_first_xid(1);
    let req = Request::new(0x2000_5244, 1, 0, Payload::new());
    let mut g = c.benchmark_group("null_call");
    g.bench_function("full_path", |bch| {
        bch.iter(|| {
            let (_, msg) = core.start_call(&req, Instant::now(), ());
            let DispatchOutcome::Reply(r) = poll_ready(disp.dispatch(msg)) else {
                panic!()
            };
            match core.handle_reply(&r) {
                ReplyOutcome::Completed { result, .. } => black_box(result.unwrap()),
                _ => panic!(),
            }
        })
    });
    g.bench_function("headers_only", |bch| {
        bch.iter(|| {
            let call = xdr::encode_to_bytes(&req.call_header(7)).unwrap();
            let h = CallHeader::decode(&mut Decoder::new(black_box(&call))).unwrap();
            let reply =
                xdr::encode_to_bytes(&ReplyHeader::accepted(h.xid, AcceptStat::Success)).unwrap();
            black_box(ReplyHeader::decode(&mut Decoder::new(&reply)).unwrap())
        })
    });
    g.finish();
}

criterion_group!(benches, opaque, null_call);
criterion_main!(benches);
