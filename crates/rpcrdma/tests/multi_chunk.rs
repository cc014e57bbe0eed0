//! Several Read chunks in one call (and together with a Position-Zero
//! chunk), using a test program whose procedure has two DDP-eligible
//! arguments.

mod common;

use std::ops::RangeInclusive;

use oncrpc::{Call, Dispatcher, Payload, ProcError, Request, Service};
use rdma_verbs::Device;
use rpcrdma::{Bindings, CallKind, RdmaClient, RdmaConfig, RdmaServer};
use rpcrdma_proto::binding::{
    ArgsView, DdpItem, ProcedureBinding, ReplyEstimate, UpperLayerBinding,
};
use xdr::XdrRead;

const PROG: u32 = 0x2000_5245;
const MAX: u32 = 16 << 20;

/// PUT2(opaque a<> DDP, opaque b<> DDP, opaque c<>) -> (crc a, crc b, crc c).
struct Put2;

impl Service for Put2 {
    fn program(&self) -> u32 {
        PROG
    }
    fn versions(&self) -> RangeInclusive<u32> {
        1..=1
    }
    async fn handle(&self, call: Call) -> Result<Payload, ProcError> {
        if call.procedure != 1 {
            return Err(ProcError::ProcUnavail);
        }
        assert!(call.args.pieces().iter().filter(|p| p.is_ddp()).count() <= 2);
        let mut d = call.args.decoder();
        let (a, b, c) = (d.opaque(MAX)?, d.opaque(MAX)?, d.opaque(MAX)?);
        d.finish()?;
        let mut out = Payload::builder();
        out.u32(crc32c::crc32c(&a))
            .u32(crc32c::crc32c(&b))
            .u32(crc32c::crc32c(&c));
        Ok(out.finish())
    }
}

const ARGS: &[DdpItem] = &[
    DdpItem {
        name: "a",
        max_len: MAX,
    },
    DdpItem {
        name: "b",
        max_len: MAX,
    },
];

struct Put2Binding;

impl UpperLayerBinding for Put2Binding {
    fn program(&self) -> u32 {
        PROG
    }
    fn version(&self) -> u32 {
        1
    }
    fn procedure(&self, p: u32) -> Option<ProcedureBinding> {
        (p == 1).then_some(ProcedureBinding {
            name: "PUT2",
            ddp_args: ARGS,
            ddp_results: &[],
        })
    }
    fn reply_estimate(&self, p: u32, _: ArgsView<'_>) -> Option<ReplyEstimate> {
        (p == 1).then_some(ReplyEstimate {
            max_reduced_results: 12,
            ddp_results: vec![],
        })
    }
}

fn bindings() -> Bindings {
    let mut b = Bindings::rdmatest();
    b.add(Put2Binding);
    b
}

/// Runs the three calls; `item_chunks` is
/// [`RdmaConfig::long_call_item_chunks`] for the client.
async fn run<D: Device>(dev: D, item_chunks: bool) {
    let disp = Dispatcher::builder().service(Put2).build();
    let srv = RdmaServer::bind(
        dev.clone(),
        "127.0.0.1:0".parse().unwrap(),
        disp,
        RdmaConfig::default(),
        bindings(),
    )
    .await
    .unwrap();
    let cfg = RdmaConfig {
        long_call_item_chunks: item_chunks,
        ..RdmaConfig::default()
    };
    let c = RdmaClient::connect(dev, srv.local_addr(), cfg, bindings())
        .await
        .unwrap();
    for (la, lb, lc, kind) in [
        (100_001usize, (2 << 20) + 7, 8usize, CallKind::Chunked),
        (5000, 3, 20_000, CallKind::Long),
        ((3 << 20) + 1, 70_000, 9000, CallKind::Long),
    ] {
        let a = rdmatest::pattern::pattern(1, la);
        let b = rdmatest::pattern::pattern(2, lb);
        let cc = rdmatest::pattern::pattern(3, lc);
        let mut args = Payload::builder();
        args.ddp_opaque(a.clone());
        args.ddp_opaque(b.clone());
        args.opaque_bytes(cc.clone());
        let (res, r) = c
            .call_with_report(Request::new(PROG, 1, 1, args.finish()))
            .await
            .unwrap();
        let mut d = res.decoder();

        assert_eq!(d.u32().unwrap(), crc32c::crc32c(&a));
        assert_eq!(d.u32().unwrap(), crc32c::crc32c(&b));
        assert_eq!(d.u32().unwrap(), crc32c::crc32c(&cc));
        assert_eq!(r.call_kind, kind, "{r}");
        if kind == CallKind::Chunked || item_chunks {
            assert_eq!(r.read_chunks, 2, "{r}");
            assert_eq!(r.read_chunk_bytes, (la + lb) as u64, "{r}");
            assert!(r.read_segments >= 2, "{r}");
            if kind == CallKind::Long {
                // Position Zero carries the reduced stream (draft §3.3).
                let reduced = 40 + 4 + 4 + 4 + lc.div_ceil(4) * 4;
                assert_eq!(r.position_zero_bytes, reduced as u64, "{r}");
            }
        } else {
            // A Long Call carries the whole call, DDP-eligible arguments
            // included, in its Position-Zero chunk alone.
            assert_eq!(r.read_chunks, 0, "{r}");
            let xdr = |n: usize| 4 + n.div_ceil(4) * 4;
            assert_eq!(
                r.position_zero_bytes,
                (40 + xdr(la) + xdr(lb) + xdr(lc)) as u64,
                "{r}"
            );
        }
    }
    c.close();
    srv.shutdown().await;
}

#[tokio::test]
async fn several_read_chunks_memfabric() {
    run(rpcrdma::memfabric::Fabric::new(), false).await;
    run(rpcrdma::memfabric::Fabric::new(), true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_read_chunks_iwarp() {
    run(iwarp::Device::default(), false).await;
    run(iwarp::Device::default(), true).await;
}

fn put2_request(la: usize, lb: usize) -> Request {
    let mut args = Payload::builder();
    args.ddp_opaque(rdmatest::pattern::pattern(1, la));
    args.ddp_opaque(rdmatest::pattern::pattern(2, lb));
    args.opaque_bytes(bytes::Bytes::from_static(b"c"));
    Request::new(PROG, 1, 1, args.finish())
}

/// Reads (of several chunks, or within one chunk) of a call are in flight when
/// a later Read cannot be posted. The server must wait for them (their
/// sinks stay registered) before it answers: iWARP lets the answer's Send
/// complete before an earlier Read, and an answer sent at once lets the
/// requester invalidate the Read's source under it. Either way the Read
/// would fail and take the connection down, and every other call with it.
async fn reads_in_flight_when_a_read_cannot_be_posted(
    max_segment_size: u32,
    (la, lb): (usize, usize),
    posted: u32,
) {
    use rpcrdma::memfabric::Fabric;
    use std::sync::atomic::Ordering::Relaxed;
    use std::time::Duration;

    let dev = Fabric::new();
    let disp = Dispatcher::builder().service(Put2).build();
    let srv = RdmaServer::bind(
        dev.clone(),
        "127.0.0.1:0".parse().unwrap(),
        disp,
        RdmaConfig::default(),
        bindings(),
    )
    .await
    .unwrap();
    let cfg = RdmaConfig {
        reconnect: common::no_reconnect(),
        max_segment_size,
        ..RdmaConfig::default()
    };
    let c = std::sync::Arc::new(
        RdmaClient::connect(dev.clone(), srv.local_addr(), cfg, bindings())
            .await
            .unwrap(),
    );
    // `posted` Reads are held in flight; the next one is refused.
    dev.hold_rdma_reads();
    dev.refuse_rdma_read_after(posted);
    let call = {
        let c = c.clone();
        tokio::spawn(async move { c.call_with_report(put2_request(la, lb)).await })
    };
    tokio::time::timeout(Duration::from_secs(10), async {
        while dev.refused_posts() == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("no Read post was refused");
    assert_eq!(dev.held_rdma_reads(), posted as usize);
    // The answer waits for the Reads in flight.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !call.is_finished(),
        "the call was answered while Reads were in flight"
    );
    dev.release_rdma_reads();
    match tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .expect("no answer after the Reads completed")
        .unwrap()
    {
        Err(e) => assert_eq!(
            rpcrdma::TransportError::from_rpc(&e),
            Some(&rpcrdma::TransportError::ErrChunk),
            "{e:?}"
        ),
        Ok((_, r)) => panic!("call succeeded: {r}"),
    }
    // The connection survived: the same call now goes through on it.
    let (res, r) = c.call_with_report(put2_request(la, lb)).await.unwrap();
    let mut d = res.decoder();
    assert_eq!(
        d.u32().unwrap(),
        crc32c::crc32c(&rdmatest::pattern::pattern(1, la))
    );
    assert_eq!(
        d.u32().unwrap(),
        crc32c::crc32c(&rdmatest::pattern::pattern(2, lb))
    );
    assert!(r.read_segments > posted as usize, "{r}");
    assert_eq!(c.stats().reconnects.load(Relaxed), 0);
    assert_eq!(c.stats().retransmits.load(Relaxed), 0);
    c.close();
    srv.shutdown().await;
}

#[tokio::test]
async fn reads_of_an_earlier_chunk_finish_before_a_failed_call_is_answered() {
    // Chunk a: one segment, held; chunk b's Read refused.
    reads_in_flight_when_a_read_cannot_be_posted(1 << 20, (100_001, 70_000), 1).await;
}

#[tokio::test]
async fn reads_of_the_same_chunk_finish_before_a_failed_call_is_answered() {
    // Chunk a: four 64 KiB segments; two held, the third refused.
    reads_in_flight_when_a_read_cannot_be_posted(64 << 10, (200_000, 1000), 2).await;
}
