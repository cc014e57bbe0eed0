//! `RdmaConfig::write_pad` (the implementation-experience draft §3.6, case
//! 2) against our own responder over software iWARP: a requester that
//! offers an XDR pad segment after each Write chunk for an unaligned result
//! gets its results right, and our responder returns exact lengths (RFC
//! 8166 §3.4.6: it never writes roundup, the pad segment comes back empty),
//! with remote invalidation on and off.

mod common;

use std::sync::atomic::Ordering::Relaxed;

use bytes::BytesMut;
use oncrpc::{Payload, Request};
use rdmatest::proto::PROC_GET2;
use rdmatest::Get2Args;
use rpcrdma::RdmaConfig;

fn dev() -> iwarp::Device {
    iwarp::Device::default()
}

async fn gets_with_pad(remote_invalidation: bool) {
    let cfg = RdmaConfig {
        remote_invalidation,
        ..Default::default()
    };
    let srv = common::server(dev(), cfg.clone()).await;
    let c = common::client(
        dev(),
        srv.local_addr(),
        RdmaConfig {
            write_pad: true,
            ..cfg
        },
    )
    .await;
    // Unaligned sizes get a pad segment; 4 MiB + 1 B takes 5 data
    // segments of the 16 a chunk may have, so it has room for one.
    let sizes = [1u32, 3, 1001, 4096, 65_537, (4 << 20) + 1];
    let mut pads = 0;
    for (seed, &len) in sizes.iter().enumerate() {
        let (res, report) = c
            .call_with_report(common::get_req(len, seed as u32, Some(len as usize)))
            .await
            .unwrap_or_else(|e| panic!("GET {len}: {e}"));
        common::check_get(&res, len, seed as u32);
        assert_eq!(report.write_chunks, 1, "{len}");
        assert_eq!(
            report.write_chunk_bytes,
            vec![u64::from(len)],
            "GET {len}: exact length returned, nothing in the pad"
        );
        assert_eq!(
            report.write_pad_segments,
            usize::from(len % 4 != 0),
            "{len}"
        );
        pads += u64::from(len % 4 != 0);
        assert_eq!(c.stats().write_pads.load(Relaxed), pads, "{len}");
    }
    // Two Write chunks, both unaligned.
    let (a, b) = (1021u32, 70_001u32);
    let mut args = Payload::builder();
    args.item(&Get2Args {
        len_a: a,
        len_b: b,
        seed: 9,
    });
    let req = Request::new(common::PROG, common::VERS, PROC_GET2, args.finish())
        .with_result_buf(BytesMut::with_capacity(a as usize))
        .with_result_buf(BytesMut::with_capacity(b as usize));
    let (res, report) = c.call_with_report(req).await.expect("GET2");
    assert_eq!(report.write_chunk_bytes, vec![u64::from(a), u64::from(b)]);
    assert_eq!(report.write_pad_segments, 2);
    assert!(
        report
            .to_string()
            .contains("2 write chunk(s) + 2 pad segment(s)"),
        "{report}"
    );
    let got = rdmatest::RdmatestClient::new(c.clone())
        .get2(a, b, 9)
        .await
        .expect("GET2 verified");
    let mut d = res.decoder();
    use xdr::XdrRead;
    assert_eq!(d.opaque(a).unwrap(), got.a);
    assert_eq!(d.u32().unwrap(), rdmatest::proto::GET2_MARKER);
    assert_eq!(d.opaque(b).unwrap(), got.b);
    d.finish().unwrap();
    assert_eq!(c.stats().write_pads.load(Relaxed), pads + 4);
    if remote_invalidation {
        assert!(c.stats().remote_invalidations.load(Relaxed) > 0);
    }
    c.close();
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_pad_with_remote_invalidation() {
    gets_with_pad(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_pad_without_remote_invalidation() {
    gets_with_pad(false).await;
}

/// A result longer than the caller's buffer must not
/// land in the pad segment. Our responder answers ERR_CHUNK (the Write
/// chunk is too small) with or without `write_pad`: the pad segment's 4
/// bytes do not count as chunk capacity (else the responder would
/// RDMA-Write result bytes into it and the requester fail the call with
/// "write chunk overrun").
async fn get_longer_than_buffer(write_pad: bool) -> Result<(), rpcrdma::TransportError> {
    let cfg = RdmaConfig::default();
    let srv = common::server(dev(), cfg.clone()).await;
    let c = common::client(dev(), srv.local_addr(), RdmaConfig { write_pad, ..cfg }).await;
    // A 7-byte result into a 5-byte buffer: Write chunk [5] (+ pad [4]).
    let r = c.call_with_report(common::get_req(7, 1, Some(5))).await;
    let out = match r {
        Ok(_) => Ok(()),
        Err(e) => Err(rpcrdma::TransportError::from_rpc(&e)
            .cloned()
            .unwrap_or_else(|| panic!("not a transport error: {e:?}"))),
    };
    // The connection stays usable either way.
    let (res, _) = c
        .call_with_report(common::get_req(5, 2, Some(5)))
        .await
        .expect("GET 5 after");
    common::check_get(&res, 5, 2);
    c.close();
    srv.shutdown().await;
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn result_longer_than_buffer_never_written_into_pad() {
    let without = get_longer_than_buffer(false).await;
    assert!(
        matches!(without, Err(rpcrdma::TransportError::ErrChunk)),
        "without pad: {without:?}"
    );
    let with = get_longer_than_buffer(true).await;
    assert!(
        matches!(with, Err(rpcrdma::TransportError::ErrChunk)),
        "with pad: the responder must not put result bytes into the pad segment: {with:?}"
    );
}
