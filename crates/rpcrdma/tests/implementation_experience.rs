//! Conformance to draft-cel-nfsv4-rfc5666-implementation-experience-02
//! §3–§4, RFC 8166 and RFC 8797, checked end to end through a requester and
//! a responder (or a raw verbs peer standing in for one of them).

mod common;

use std::ops::RangeInclusive;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use common::raw::Raw;
use oncrpc::{Call, Dispatcher, Payload, ProcError, Request, Service};
use rdma_verbs::{
    Access, CompletionQueue, ConnParam, ConnectRequest, Device as _, Listener, MemoryRegion,
    MrBuffer, ProtectionDomain, QpInit, QueuePair, RecvWr, Sge, WcOpcode,
};
use rpcrdma::{Bindings, RdmaClient, RdmaConfig, RdmaServer};
use rpcrdma_proto::binding::{
    ArgsView, DdpItem, ProcedureBinding, ReplyEstimate, UpperLayerBinding,
};
use rpcrdma_proto::wire::{Body, DecodeLimits, ErrorBody, Header};
use xdr::XdrRead;

const PROG: u32 = 0x2000_5299;

/// TWO(opaque small<16> DDP, opaque big<1 MiB> DDP) -> (len small, len big).
struct Two;

impl Service for Two {
    fn program(&self) -> u32 {
        PROG
    }
    fn versions(&self) -> RangeInclusive<u32> {
        1..=1
    }
    async fn handle(&self, call: Call) -> Result<Payload, ProcError> {
        let mut d = call.args.decoder();
        let (small, big) = (d.opaque(16)?, d.opaque(1 << 20)?);
        d.finish()?;
        let mut out = Payload::builder();
        out.u32(small.len() as u32).u32(big.len() as u32);
        Ok(out.finish())
    }
}

const ARGS: &[DdpItem] = &[
    DdpItem {
        name: "small",
        max_len: 16,
    },
    DdpItem {
        name: "big",
        max_len: 1 << 20,
    },
];

struct TwoBinding;

impl UpperLayerBinding for TwoBinding {
    fn program(&self) -> u32 {
        PROG
    }
    fn version(&self) -> u32 {
        1
    }
    fn procedure(&self, p: u32) -> Option<ProcedureBinding> {
        (p == 1).then_some(ProcedureBinding {
            name: "TWO",
            ddp_args: ARGS,
            ddp_results: &[],
        })
    }
    fn reply_estimate(&self, p: u32, _: ArgsView<'_>) -> Option<ReplyEstimate> {
        (p == 1).then_some(ReplyEstimate {
            max_reduced_results: 8,
            ddp_results: vec![],
        })
    }
}

fn bindings() -> Bindings {
    let mut b = Bindings::rdmatest();
    b.add(TwoBinding);
    b
}

/// A Read chunk is checked against the binding's DDP-eligible argument at
/// its Position, not the one of the same index among the chunks. The
/// requester keeps an empty DDP argument inline (`plan_call`: `n == 0`), so
/// `small` = empty, `big` = 4096 bytes sends one chunk (for `big`), which
/// must not be checked against `small`'s 16-byte limit (that would answer
/// ERR_CHUNK to a valid call).
#[tokio::test]
async fn empty_first_ddp_argument_then_reduced_second() {
    let dev = rpcrdma::memfabric::Fabric::new();
    let srv = RdmaServer::bind(
        dev.clone(),
        "127.0.0.1:0".parse().unwrap(),
        Dispatcher::builder().service(Two).build(),
        RdmaConfig::default().with_inline(1024),
        bindings(),
    )
    .await
    .unwrap();
    let c = RdmaClient::connect(
        dev,
        srv.local_addr(),
        RdmaConfig::default().with_inline(1024),
        bindings(),
    )
    .await
    .unwrap();
    for (ls, lb) in [(0usize, 4096usize), (8, 4096)] {
        let mut args = Payload::builder();
        args.ddp_opaque(Bytes::from(vec![1u8; ls]));
        args.ddp_opaque(Bytes::from(vec![2u8; lb]));
        let res = c
            .call_with_report(Request::new(PROG, 1, 1, args.finish()))
            .await;
        let (res, r) = res.unwrap_or_else(|e| {
            panic!("TWO(small {ls} bytes, big {lb} bytes) failed: {e} ({e:?})")
        });
        let mut d = res.decoder();
        assert_eq!(d.u32().unwrap(), ls as u32);
        assert_eq!(d.u32().unwrap(), lb as u32, "{r}");
    }
    c.close();
    srv.shutdown().await;
}

fn words(w: &[u32]) -> Vec<u8> {
    w.iter().flat_map(|x| x.to_be_bytes()).collect()
}

/// Draft §3.2: a Position-Zero Read chunk is not limited to one segment;
/// a requester gathering the call from discontiguous buffers (Linux: head,
/// pages, tail) sends several, of unaligned lengths. Our responder must
/// concatenate them in list order. (Passes; no test covered a
/// multi-segment Position-Zero chunk: our requester splits only above
/// 1 MiB.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_segment_position_zero_chunk_with_unaligned_segments() {
    let srv = common::server(iwarp::Device::default(), RdmaConfig::default()).await;
    let pdata = RdmaConfig::default().private_data().encode();
    let mut raw = Raw::connect(srv.local_addr(), &pdata).await;
    let xid = 0x5150;
    let n = 2001usize;
    let data = rdmatest::pattern::pattern(3, n);
    // ECHO call stream: RPC header, opaque length, data, pad (2048 bytes).
    let mut stream = words(&[
        xid,
        0,
        2,
        common::PROG,
        common::VERS,
        1,
        0,
        0,
        0,
        0,
        n as u32,
    ]);
    stream.extend_from_slice(&data);
    stream.resize(stream.len().next_multiple_of(4), 0);
    assert_eq!(stream.len(), 2048);
    let mut keep = Vec::new();
    let mut hdr = vec![xid, 1, 8, 1]; // RDMA_NOMSG
    let mut at = 0usize;
    for len in [41usize, 1003, 1004] {
        let mr = raw
            .pd
            .register(
                MrBuffer::Frozen(Bytes::copy_from_slice(&stream[at..at + len])),
                Access::REMOTE_READ,
            )
            .unwrap();
        hdr.extend([1, 0, mr.rkey(), len as u32, 0, 0]);
        keep.push(mr);
        at += len;
    }
    hdr.extend([0, 0, 0]); // end of Read list, no Write list, no Reply chunk
    let reply = raw.exchange(words(&hdr)).await;
    let h = Header::parse(&reply, &DecodeLimits::default()).unwrap();
    assert_eq!(h.xid, xid);
    let Body::Msg { payload, .. } = h.body else {
        panic!("{:?}", h.body)
    };
    // RPC reply: xid, REPLY, MSG_ACCEPTED, AUTH_NONE verifier, SUCCESS.
    assert_eq!(&payload[..24], &words(&[xid, 1, 0, 0, 0, 0])[..]);
    assert_eq!(&payload[24..28], &(n as u32).to_be_bytes());
    assert_eq!(&payload[28..28 + n], &data[..]);
    drop(keep);
    srv.shutdown().await;
}

/// RFC 8797 §8.1 / RFC 8166 §3.3.3 (draft §4.2): a responder that sends no
/// Private Data is assumed to receive at most 1024 bytes. Our requester
/// must then send a 2000-byte ECHO as a Long Call (RDMA_NOMSG), whatever
/// its own configured threshold (4096). (Passes; only the unit test
/// `rfc8797_s8_1_absent_or_invalid_means_defaults` covered it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requester_assumes_1024_without_private_data() {
    let dev = iwarp::Device::default();
    let listener = dev.listen("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = listener.local_addr();
    let (tx, rx) = tokio::sync::oneshot::channel::<(u32, u32)>();
    tokio::spawn(async move {
        let req = listener.next_request().await.unwrap();
        let dev = iwarp::Device::default();
        let pd = dev.alloc_pd().unwrap();
        let cq = dev.create_cq(64).unwrap();
        let qp = dev.create_qp(&pd, QpInit::with_cq(cq.clone())).unwrap();
        let mr = pd
            .register(
                MrBuffer::Mutable(BytesMut::zeroed(8192)),
                Access::LOCAL_WRITE,
            )
            .unwrap();
        qp.post_recv(RecvWr::new(1, vec![Sge::new(mr.lkey(), 0, 8192)]))
            .unwrap();
        // No Private Data at all.
        req.accept(&qp, ConnParam::new(Bytes::new(), 4, 4))
            .await
            .unwrap();
        loop {
            let wc = cq.next().await;
            if wc.opcode == WcOpcode::Recv {
                let b = mr.deregister().unwrap().try_into_bytes_mut().unwrap();
                let w = |i: usize| u32::from_be_bytes(b[i * 4..i * 4 + 4].try_into().unwrap());
                let _ = tx.send((w(3), wc.byte_len));
                // Keep the QP up until the client gives up.
                tokio::time::sleep(Duration::from_secs(5)).await;
                return;
            }
        }
    });
    let cfg = RdmaConfig {
        call_timeout: Duration::from_millis(500),
        reconnect: common::no_reconnect(),
        ..RdmaConfig::default()
    };
    let c = RdmaClient::connect(iwarp::Device::default(), addr, cfg, Bindings::rdmatest())
        .await
        .unwrap();
    let th = c.thresholds().unwrap();
    assert_eq!((th.call_inline, th.reply_inline), (1024, 1024));
    let t = common::typed(&c);
    let _ = t.echo(Bytes::from(vec![5u8; 2000])).await;
    let (proc_, len) = tokio::time::timeout(Duration::from_secs(5), rx)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        proc_, 1,
        "RDMA_NOMSG (Long Call) expected, got proc {proc_}"
    );
    assert!(len <= 1024, "a {len}-byte Send to a 1024-byte receiver");
}

/// RFC 8166 §3.3.1/§3.3.3: a grant of 0 is illegal ("MUST NOT be zero");
/// a Requester taking it literally would never send again. And a Responder
/// that sends more replies than there are calls (a duplicate of every reply,
/// plus an RDMA_ERROR for an XID never sent) must not give the Requester
/// credits it does not have nor complete a call twice: the extra messages
/// are discarded (unknown XID) before their grant is applied. (Passes; the
/// unit tests in credits.rs covered the zero grant, no transport test did.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_grant_and_duplicate_replies() {
    use common::stand_in;
    let c = stand_in::client_of(RdmaConfig::default(), move |req, dev, _| {
        let mut n = 0u64;
        stand_in::serve(req, dev, move |msg, pd, qp| {
            let xid = u32::from_be_bytes([msg[0], msg[1], msg[2], msg[3]]);
            n += 1;
            let reply = stand_in::words(&[xid, 1, 0, 0, 0, 0, 0, xid, 1, 0, 0, 0, 0]);
            let mut keep = vec![stand_in::send(pd, qp, 3 * n, reply.clone())?];
            keep.push(stand_in::send(pd, qp, 3 * n + 1, reply)?);
            // ERR_CHUNK for an XID never sent, granting 100.
            let bogus = stand_in::words(&[xid ^ 0x8000_0000, 1, 100, 4, 2]);
            keep.push(stand_in::send(pd, qp, 3 * n + 2, bogus)?);
            Some(keep)
        })
    })
    .await;
    let t = common::typed(&c);
    let mut hs = Vec::new();
    for _ in 0..16 {
        let t = t.clone();
        hs.push(tokio::spawn(async move { t.null().await }));
    }
    for h in hs {
        tokio::time::timeout(Duration::from_secs(10), h)
            .await
            .expect("a grant of 0 stalled the client")
            .unwrap()
            .unwrap();
    }
    let snap = c.stats().counters.snapshot();
    assert!(snap.discarded >= 16, "{snap:?}");
    assert_eq!(c.outstanding(), 0);
    c.close();
}

/// RFC 8797 §8.1 (draft §4.2) on the responder: a requester that sends no
/// Private Data receives at most 1024 bytes. A reply of ~2 KB with no Reply
/// chunk offered cannot be sent inline: ERR_CHUNK, not a 2 KB Send that a
/// 1024-byte receive buffer would fail on. (Passes; the existing
/// no-private-data test sends a call whose answer is small either way.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responder_assumes_1024_without_private_data() {
    let srv = common::server(iwarp::Device::default(), RdmaConfig::default()).await;
    let mut raw = Raw::connect(srv.local_addr(), &[]).await;
    let xid = 0x7777;
    let n = 1900u32;
    let mut m = words(&[xid, 1, 1, 0, 0, 0, 0]); // RDMA_MSG, no chunks
    m.extend(words(&[
        xid,
        0,
        2,
        common::PROG,
        common::VERS,
        1,
        0,
        0,
        0,
        0,
        n,
    ]));
    m.extend(std::iter::repeat_n(7u8, n as usize));
    let reply = raw.exchange(m).await;
    assert!(reply.len() <= 1024, "a {}-byte reply Send", reply.len());
    let h = Header::parse(&reply, &DecodeLimits::default()).unwrap();
    assert!(
        matches!(h.body, Body::Error(rpcrdma_proto::wire::ErrorBody::Chunk)),
        "{:?}",
        h.body
    );
    srv.shutdown().await;
}

/// RFC 8166 §4.2.4 / draft §4.1: a Send, header included, must not exceed
/// the receiver's inline threshold. `plan_reply` refuses a reply whose
/// echoed chunk lists exceed the reply threshold (HeaderTooLarge ->
/// ERR_CHUNK), and the GARBAGE_ARGS answer (`answer_verdict` ->
/// `send_plain`) must obey the same bound. A requester that receives 1024
/// bytes and sends 4096 offers 4 Write chunks of 16 segments (1056 bytes of
/// Write list) on a PUT whose Read chunk disagrees with its length word; it
/// must not get a ~1.1 KB Send into its 1024-byte receive buffer (a real
/// RNIC fails the receive and the connection; the raw peer here posts
/// 16 KiB buffers so the size can be seen).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_args_reply_fits_the_reply_threshold() {
    use rpcrdma_proto::private_data::PrivateData;
    let srv = common::server(iwarp::Device::default(), RdmaConfig::default()).await;
    let pd = PrivateData {
        remote_invalidation: false,
        send_size: 4096,
        recv_size: 1024,
    }
    .encode();
    let mut raw = Raw::connect(srv.local_addr(), &pd).await;
    let xid = 0x4242;
    // RDMA_MSG; Read list: PUT data at Position 44, 100 bytes.
    let mut h = vec![xid, 1, 1, 0, 1, 44, 0xdead, 100, 0, 0x1000, 0];
    // Write list: 4 chunks of 16 segments.
    for c in 0..4u32 {
        h.extend([1, 16]);
        for s in 0..16u32 {
            h.extend([0x100 * c + s, 4096, 0, 0x10_0000 * c + 0x1000 * s]);
        }
    }
    h.extend([0, 0]); // end of Write list, no Reply chunk
                      // RPC call PUT; the data's length word says 200, the chunk holds 100.
    h.extend([xid, 0, 2, common::PROG, common::VERS, 2, 0, 0, 0, 0, 200]);
    let reply = raw.exchange(words(&h)).await;
    let hdr = Header::parse(&reply, &DecodeLimits::default()).unwrap();
    assert_eq!(hdr.xid, xid);
    assert!(
        reply.len() <= 1024,
        "a {}-byte reply ({:?}) to a requester that receives 1024 bytes",
        reply.len(),
        hdr.proc_()
    );
    // The GARBAGE_ARGS reply echoing the 1056-byte Write list cannot be
    // conveyed inline: ERR_CHUNK, as for any reply that cannot be.
    assert!(matches!(hdr.body, Body::Error(ErrorBody::Chunk)), "{hdr:?}");
    assert_eq!(srv.stats().counters.snapshot().err_chunk, 1);
    assert_eq!(srv.stats().counters.snapshot().garbage_args, 0);

    // With one Write chunk the same call's GARBAGE_ARGS reply fits. (A
    // handle of its own: each call registers its own regions, and the wire
    // oracle refuses a handle an earlier call offered.)
    let xid = 0x4243;
    let mut h = vec![xid, 1, 1, 0, 1, 44, 0xbeef, 100, 0, 0x1000, 0];
    h.extend([1, 1, 0x77, 4096, 0, 0x10_0000, 0, 0]);
    h.extend([xid, 0, 2, common::PROG, common::VERS, 2, 0, 0, 0, 0, 200]);
    let reply = raw.exchange(words(&h)).await;
    let hdr = Header::parse(&reply, &DecodeLimits::default()).unwrap();
    assert_eq!(hdr.xid, xid);
    // RPC reply: MSG_ACCEPTED, AUTH_NONE verifier, GARBAGE_ARGS.
    assert_eq!(hdr.payload(), Some(&words(&[xid, 1, 0, 0, 0, 4])[..]));
    assert_eq!(srv.stats().counters.snapshot().garbage_args, 1);
    srv.shutdown().await;
}

const PROG_BIG: u32 = 0x2000_529a;

/// BIG(n_data, n_blob) -> (opaque data<> DDP, opaque blob<>).
struct Big;

impl Service for Big {
    fn program(&self) -> u32 {
        PROG_BIG
    }
    fn versions(&self) -> RangeInclusive<u32> {
        1..=1
    }
    async fn handle(&self, call: Call) -> Result<Payload, ProcError> {
        let mut d = call.args.decoder();
        let (nd, nb) = (d.u32()?, d.u32()?);
        d.finish()?;
        let mut out = Payload::builder();
        out.ddp_opaque(rdmatest::pattern::pattern(11, nd as usize));
        out.opaque_bytes(rdmatest::pattern::pattern(12, nb as usize));
        Ok(out.finish())
    }
}

const BIG_RESULTS: &[DdpItem] = &[DdpItem {
    name: "data",
    max_len: 1 << 20,
}];

struct BigBinding;

impl UpperLayerBinding for BigBinding {
    fn program(&self) -> u32 {
        PROG_BIG
    }
    fn version(&self) -> u32 {
        1
    }
    fn procedure(&self, p: u32) -> Option<ProcedureBinding> {
        (p == 1).then_some(ProcedureBinding {
            name: "BIG",
            ddp_args: &[],
            ddp_results: BIG_RESULTS,
        })
    }
    fn reply_estimate(&self, p: u32, a: ArgsView<'_>) -> Option<ReplyEstimate> {
        (p == 1).then_some(ReplyEstimate {
            max_reduced_results: 8 + u64::from(a.word(1)?.next_multiple_of(4)),
            ddp_results: vec![a.word(0)?],
        })
    }
    fn reply_layout(&self) -> Option<&dyn rpcrdma_proto::binding::ReplyLayout> {
        Some(self)
    }
}

impl rpcrdma_proto::binding::ReplyLayout for BigBinding {
    fn locate(
        &self,
        _: u32,
        results: &[u8],
        cursor: &mut rpcrdma_proto::reassemble::WriteChunkCursor,
    ) -> Result<Vec<rpcrdma_proto::binding::DdpPlacement>, rpcrdma_proto::binding::LayoutError>
    {
        let mut out = Vec::new();
        rpcrdma_proto::binding::layout::locate_opaque(results, 0, cursor, &mut out)?;
        Ok(out)
    }
}

/// Draft §3.3, last paragraph: an RDMA_NOMSG reply whose large reduced body
/// goes in the Reply chunk while a DDP-eligible result goes in a Write
/// chunk ("It remains to be seen whether this is enough to enable
/// requesters to re-assemble generic RPC replies correctly"). Our pair must
/// reassemble it. (Passes; no test returned a used Write chunk in a Long
/// Reply.)
#[tokio::test]
async fn long_reply_with_a_used_write_chunk() {
    let mut b = Bindings::rdmatest();
    b.add(BigBinding);
    let dev = rpcrdma::memfabric::Fabric::new();
    let srv = RdmaServer::bind(
        dev.clone(),
        "127.0.0.1:0".parse().unwrap(),
        Dispatcher::builder().service(Big).build(),
        RdmaConfig::default().with_inline(1024),
        b.clone(),
    )
    .await
    .unwrap();
    let c = RdmaClient::connect(
        dev,
        srv.local_addr(),
        RdmaConfig::default().with_inline(1024),
        b,
    )
    .await
    .unwrap();
    for (nd, nb) in [(5001u32, 3001u32), (100_000, 20_000)] {
        let mut a = Payload::builder();
        a.u32(nd).u32(nb);
        let req = Request::new(PROG_BIG, 1, 1, a.finish())
            .with_result_buf(BytesMut::with_capacity(nd as usize));
        let (res, r) = c.call_with_report(req).await.unwrap();
        assert_eq!(r.reply_mode, rpcrdma::ReplyMode::Long, "{r}");
        assert_eq!(r.write_chunk_bytes, vec![u64::from(nd)], "{r}");
        let mut d = res.decoder();
        assert_eq!(
            d.opaque(1 << 20).unwrap(),
            rdmatest::pattern::pattern(11, nd as usize)
        );
        assert_eq!(
            d.opaque(1 << 20).unwrap(),
            rdmatest::pattern::pattern(12, nb as usize)
        );
    }
    c.close();
    srv.shutdown().await;
}

/// RFC 8797 §5: "An implementation ... MUST be prepared for the settings to
/// change upon a reconnection." The first connection's responder
/// advertises 8 KiB (R set), the second sends no Private Data: after the
/// reconnect our requester must use 1024-byte thresholds and no remote
/// invalidation, and send a 2000-byte ECHO as a Long Call. (Passes; no test
/// changed the peer's Private Data across a reconnect.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_data_may_change_on_reconnect() {
    use common::stand_in;
    use rpcrdma_proto::private_data::PrivateData;
    // (connection, rdma_proc) of every message received.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(usize, u32)>();
    let cfg = RdmaConfig {
        call_timeout: Duration::from_millis(500),
        ..RdmaConfig::default()
    };
    let c = stand_in::client_of(cfg, move |req, dev, conn| {
        let tx = tx.clone();
        async move {
            let pdata = if conn == 0 {
                PrivateData {
                    remote_invalidation: true,
                    send_size: 8192,
                    recv_size: 8192,
                }
                .encode()
                .to_vec()
            } else {
                Vec::new()
            };
            stand_in::serve_with(req, dev, Bytes::from(pdata), 8192, move |b, pd, qp| {
                let w = |i: usize| {
                    b.get(i * 4..i * 4 + 4)
                        .map_or(u32::MAX, |x| u32::from_be_bytes(x.try_into().unwrap()))
                };
                let (xid, proc_) = (w(0), w(3));
                let _ = tx.send((conn, proc_));
                // Answer RDMA_MSG NULL calls (RPC procedure word 12).
                if proc_ == 0 && w(12) == 0 {
                    let reply = stand_in::words(&[xid, 1, 8, 0, 0, 0, 0, xid, 1, 0, 0, 0, 0]);
                    return Some(vec![stand_in::send(pd, qp, u64::from(xid), reply)?]);
                }
                Some(Vec::new())
            })
            .await
        }
    })
    .await;
    let t = common::typed(&c);
    t.null().await.unwrap();
    let th = c.thresholds().unwrap();
    assert_eq!((th.call_inline, th.reply_inline), (4096, 4096));
    assert_eq!(c.remote_invalidation(), Some(true));
    // A 2000-byte ECHO fits inline here.
    let _ = t.echo(Bytes::from(vec![5u8; 2000])).await;
    assert_eq!(rx.recv().await, Some((0, 0))); // the NULL
    assert_eq!(
        rx.recv().await,
        Some((0, 0)),
        "ECHO inline on the 4 KiB connection"
    );
    c.disconnect_for_test();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let _ = t.null().await; // reconnects
    let th = c.thresholds().unwrap();
    assert_eq!((th.call_inline, th.reply_inline), (1024, 1024));
    assert_eq!(c.remote_invalidation(), Some(false));
    let _ = t.echo(Bytes::from(vec![5u8; 2000])).await;
    let mut seen = Vec::new();
    while let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(300), rx.recv()).await {
        seen.push(m);
    }
    assert!(
        seen.contains(&(1, 1)),
        "no RDMA_NOMSG (Long Call) on the second connection: {seen:?}"
    );
    c.close();
}

/// RFC 8166 §4.5/§4.5.1: an RDMA_ERROR/ERR_VERS completes the call (a
/// permanent error carrying the Responder's version range); the Requester
/// neither retransmits it nor waits for its timeout, and the grant it
/// carries is applied. (Passes; only the unit test in rules_reply.rs
/// covered ERR_VERS at a Requester.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn err_vers_retires_the_call_with_its_range() {
    use common::stand_in;
    use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
    use std::sync::Arc;
    let calls = Arc::new(AtomicU32::new(0));
    let seen = calls.clone();
    let cfg = RdmaConfig {
        call_timeout: Duration::from_secs(20),
        ..RdmaConfig::default()
    };
    let c = stand_in::client_of(cfg, move |req, dev, _| {
        let seen = seen.clone();
        stand_in::serve(req, dev, move |msg, pd, qp| {
            let xid = u32::from_be_bytes([msg[0], msg[1], msg[2], msg[3]]);
            let n = seen.fetch_add(1, Relaxed) as u64;
            // rdma_vers echoes the call's (1); we "support" 2..=3 only.
            let e = stand_in::words(&[xid, 1, 4, 4, 1, 2, 3]);
            Some(vec![stand_in::send(pd, qp, n, e)?])
        })
    })
    .await;
    let t = common::typed(&c);
    for _ in 0..3 {
        let start = std::time::Instant::now();
        let e = t.null().await.unwrap_err();
        let rdmatest::ClientError::Rpc(e) = e else {
            panic!("{e:?}")
        };
        assert_eq!(
            rpcrdma::TransportError::from_rpc(&e),
            Some(&rpcrdma::TransportError::ErrVers { low: 2, high: 3 })
        );
        assert!(start.elapsed() < Duration::from_secs(5));
    }
    assert_eq!(calls.load(Relaxed), 3, "no retransmission");
    assert_eq!(c.outstanding(), 0);
    c.close();
}
