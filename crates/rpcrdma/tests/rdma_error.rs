//! RDMA_ERROR paths, checked with a raw verbs peer talking to the responder
//! over the iWARP loopback, and the credit rule enforced by the responder.

mod common;

use common::raw::Raw;

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use rdma_verbs::{Access, MemoryRegion, MrBuffer, ProtectionDomain, QueuePair, SendWr, Sge};
use rpcrdma::RdmaConfig;
use rpcrdma_proto::wire::{Body, DecodeLimits, ErrorBody, Header};

/// `reply` is RDMA_ERROR / ERR_CHUNK for `xid`.
fn assert_err_chunk(reply: &[u8], xid: u32) {
    let h = Header::parse(reply, &DecodeLimits::default()).unwrap();
    assert_eq!(h.xid, xid);
    assert!(
        matches!(h.body, Body::Error(ErrorBody::Chunk)),
        "{:?}",
        h.body
    );
}

fn words(w: &[u32]) -> Vec<u8> {
    w.iter().flat_map(|x| x.to_be_bytes()).collect()
}

/// An RPC NULL call header (40 bytes) for RDMATEST.
fn null_call(xid: u32) -> Vec<u32> {
    vec![xid, 0, 2, common::PROG, common::VERS, 0, 0, 0, 0, 0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_version_gets_err_vers() {
    let srv = common::server(iwarp::Device::default(), RdmaConfig::default()).await;
    let pd = RdmaConfig::default().private_data().encode();
    let mut raw = Raw::connect(srv.local_addr(), &pd).await;
    let mut m = vec![0x1234, 2, 1, 0, 0, 0, 0];
    m.extend(null_call(0x1234));
    let reply = raw.exchange(words(&m)).await;
    // RFC 8166 §4.5.1: rdma_vers echoes the request's; body lists 1..=1.
    assert_eq!(&reply[..4], &0x1234u32.to_be_bytes());
    assert_eq!(&reply[4..8], &2u32.to_be_bytes(), "rdma_vers echoed");
    assert_eq!(&reply[12..16], &4u32.to_be_bytes(), "RDMA_ERROR");
    assert_eq!(&reply[16..20], &1u32.to_be_bytes(), "ERR_VERS");
    assert_eq!(&reply[20..28], &words(&[1, 1])[..]);
    assert_eq!(srv.stats().counters.snapshot().err_vers, 1);
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_chunk_on_ineligible_procedure_gets_err_chunk_and_no_private_data_is_accepted() {
    let srv = common::server(iwarp::Device::default(), RdmaConfig::default()).await;
    // No private data: the responder assumes 1024-byte thresholds.
    let mut raw = Raw::connect(srv.local_addr(), &[]).await;
    assert!(
        raw.info.private_data.len() >= 8,
        "responder sends RFC 8797 data"
    );
    // A Read chunk at Position 40 on NULL, which has no DDP-eligible argument.
    let mut m = vec![7, 1, 1, 0, 1, 40, 0xdead_beef, 8, 0, 0, 0, 0, 0];
    m.extend(null_call(7));
    let reply = raw.exchange(words(&m)).await;
    let h = Header::parse(&reply, &DecodeLimits::default()).unwrap();
    assert_eq!(h.xid, 7);
    assert!(
        matches!(h.body, Body::Error(ErrorBody::Chunk)),
        "{:?}",
        h.body
    );
    assert!(h.credit >= 1, "grant is never 0");
    // A valid NULL afterwards works on the same connection.
    let mut m = vec![8, 1, 1, 0, 0, 0, 0];
    m.extend(null_call(8));
    let reply = raw.exchange(words(&m)).await;
    let h = Header::parse(&reply, &DecodeLimits::default()).unwrap();
    assert!(matches!(h.body, Body::Msg { .. }));
    assert_eq!(&h.payload().unwrap()[..4], &8u32.to_be_bytes());
    assert_eq!(srv.stats().counters.snapshot().err_chunk, 1);
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_rpc_call_gets_err_chunk() {
    let srv = common::server(iwarp::Device::default(), RdmaConfig::default()).await;
    let pd = RdmaConfig::default().private_data().encode();
    let mut raw = Raw::connect(srv.local_addr(), &pd).await;
    // A valid RDMA_MSG header, then a CALL header cut short after its XID
    // and msg_type: an XDR error of the Transport stream (RFC 8166 §4.5.2),
    // answered with ERR_CHUNK, never silence. (A REPLY here is discarded
    // instead: it may be a backchannel reply, RFC 8167.)
    for (xid, rpc) in [(21u32, vec![21, 0]), (22, vec![22, 0, 2, common::PROG])] {
        let mut m = vec![xid, 1, 1, 0, 0, 0, 0];
        m.extend(rpc);
        let reply = raw.exchange(words(&m)).await;
        assert_err_chunk(&reply, xid);
    }
    // The connection goes on serving.
    let mut m = vec![23, 1, 1, 0, 0, 0, 0];
    m.extend(null_call(23));
    let reply = raw.exchange(words(&m)).await;
    let h = Header::parse(&reply, &DecodeLimits::default()).unwrap();
    assert!(matches!(h.body, Body::Msg { .. }));
    assert_eq!(srv.stats().counters.snapshot().err_chunk, 2);
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requester_exceeding_its_grant_is_disconnected_alone() {
    let cfg = RdmaConfig {
        credits: 2,
        ..Default::default()
    };
    let srv = common::server(iwarp::Device::default(), cfg.clone()).await;
    let good = common::client(
        iwarp::Device::default(),
        srv.local_addr(),
        RdmaConfig::default(),
    )
    .await;
    let pd = RdmaConfig::default().private_data().encode();
    let raw = Raw::connect(srv.local_addr(), &pd).await;
    // Three SLEEP calls at once against a grant of 2.
    for xid in 1..=3u32 {
        let mut m = vec![xid, 1, 1, 0, 0, 0, 0];
        m.extend([xid, 0, 2, common::PROG, common::VERS, 5, 0, 0, 0, 0, 200]);
        let b = words(&m);
        let len = b.len() as u32;
        let mr = raw
            .pd
            .register(MrBuffer::Frozen(Bytes::from(b)), Access::NONE)
            .unwrap();
        raw.qp
            .post_send(SendWr::send(xid as u64, vec![Sge::new(mr.lkey(), 0, len)]))
            .unwrap();
        std::mem::forget(mr);
    }
    let ev = tokio::time::timeout(Duration::from_secs(10), raw.qp.next_event()).await;
    assert!(ev.is_ok(), "the overrunning connection is closed");
    let st = srv.stats();
    assert_eq!(
        st.credit_overruns
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    // The other connection is unaffected.
    common::typed(&good).get(10_000, 1).await.unwrap();
    srv.shutdown().await;
}

/// A reply that would need more RDMA Writes than a quarter of
/// the send queue (here a Write chunk of 300 tiny segments against a 1024
/// deep queue) is answered ERR_CHUNK rather than flooding the queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reply_needing_too_many_rdma_writes_gets_err_chunk() {
    const SEGS: u32 = 300;
    let cfg = RdmaConfig {
        credits: 1,
        max_segments: 512,
        ..RdmaConfig::default().with_inline(8192)
    };
    let srv = common::server(iwarp::Device::default(), cfg).await;
    // Both sides' inline thresholds fit the call and the reply header,
    // whose Write lists carry 300 segments (about 5 KB).
    let pd = RdmaConfig::default()
        .with_inline(8192)
        .private_data()
        .encode();
    let mut raw = Raw::connect(srv.local_addr(), &pd).await;
    let sink = raw
        .pd
        .register(
            MrBuffer::Mutable(BytesMut::zeroed((SEGS * 16) as usize)),
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        )
        .unwrap();
    let xid = 0x5151;
    // RDMA_MSG, no Read list, one Write chunk of SEGS 16-byte segments.
    let mut m = vec![xid, 1, 1, 0, 0, 1, SEGS];
    for i in 0..SEGS {
        m.extend([sink.rkey(), 16, 0, i * 16]);
    }
    m.extend([0, 0]);
    m.extend([
        xid,
        0,
        2,
        common::PROG,
        common::VERS,
        rdmatest::proto::PROC_GET,
        0,
        0,
        0,
        0,
        SEGS * 16,
        5,
    ]);
    let reply = raw.exchange(words(&m)).await;
    assert_err_chunk(&reply, xid);
    assert_eq!(
        srv.stats()
            .rdma_writes
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    srv.shutdown().await;
}
