//! Shared test harness: an RDMATEST server and clients over any provider.
#![allow(dead_code)]

pub mod raw;
pub mod stand_in;

use std::net::SocketAddr;

use oncrpc::Dispatcher;
use rdma_verbs::Device;
use rdmatest::{RdmatestClient, RdmatestServer};
use rpcrdma::{Bindings, RdmaClient, RdmaConfig, RdmaServer};

pub fn dispatcher() -> Dispatcher {
    Dispatcher::builder()
        .service(RdmatestServer::default())
        .build()
}

pub async fn server<D: Device>(dev: D, config: RdmaConfig) -> RdmaServer<D> {
    server_with(dev, dispatcher(), config).await
}

/// A server of `disp` (with the RDMATEST bindings) on loopback.
pub async fn server_with<D: Device>(dev: D, disp: Dispatcher, config: RdmaConfig) -> RdmaServer<D> {
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    RdmaServer::bind(dev, addr, disp, config, Bindings::rdmatest())
        .await
        .expect("bind")
}

pub async fn client<D: Device>(dev: D, addr: SocketAddr, config: RdmaConfig) -> RdmaClient<D> {
    RdmaClient::connect(dev, addr, config, Bindings::rdmatest())
        .await
        .expect("connect")
}

/// A server and one client over the software iWARP provider on loopback,
/// both with the default configuration.
pub async fn iwarp_pair() -> (RdmaServer<iwarp::Device>, RdmaClient<iwarp::Device>) {
    let srv = server(iwarp::Device::default(), RdmaConfig::default()).await;
    let c = client(
        iwarp::Device::default(),
        srv.local_addr(),
        RdmaConfig::default(),
    )
    .await;
    (srv, c)
}

/// Reconnection off: a broken connection fails its calls at once.
pub fn no_reconnect() -> rpcrdma::Backoff {
    rpcrdma::Backoff {
        max_attempts: 0,
        ..RdmaConfig::default().reconnect
    }
}

pub fn typed<D: Device>(c: &RdmaClient<D>) -> RdmatestClient<RdmaClient<D>> {
    RdmatestClient::new(c.clone())
}

use bytes::{Bytes, BytesMut};
use oncrpc::{Payload, Request};
use rdmatest::proto::{PROC_GET, PROC_PUT};
use rdmatest::{ClientError, GetArgs};
use rpcrdma::{CallKind, CallReport, MessageKind, ReplyMode, TransportError};

pub const PROG: u32 = rdmatest::PROGRAM;
pub const VERS: u32 = rdmatest::VERSION;

/// A GET request, with or without a result buffer.
pub fn get_req(len: u32, seed: u32, buf: Option<usize>) -> Request {
    let mut a = Payload::builder();
    a.item(&GetArgs { length: len, seed });
    let mut r = Request::new(PROG, VERS, PROC_GET, a.finish());
    if let Some(cap) = buf {
        r = r.with_result_buf(BytesMut::with_capacity(cap));
    }
    r
}

/// Decodes and checks GET results (status 0 + pattern).
pub fn check_get(res: &Payload, len: u32, seed: u32) -> Bytes {
    use xdr::XdrRead;
    let mut d = res.decoder();
    assert_eq!(d.u32().unwrap(), 0, "GET status");
    let data = d.opaque(len).unwrap();
    d.finish().unwrap();
    assert_eq!(data.len(), len as usize);
    rdmatest::pattern::verify_pattern(seed, &data).expect("pattern");
    data
}

/// Runs every message kind at one inline threshold; returns nothing, panics
/// on the first failure.
pub async fn message_kinds<D: Device>(srv_dev: D, cli_dev: D, inline: u32) {
    let cfg = RdmaConfig::default().with_inline(inline);
    let srv = server(srv_dev, cfg.clone()).await;
    let c = client(cli_dev, srv.local_addr(), cfg.clone()).await;
    let th = c.thresholds().unwrap();
    assert_eq!((th.call_inline, th.reply_inline), (inline, inline));
    let t = typed(&c);

    // Short Call / Short Reply.
    let mut a = Payload::builder();
    a.opaque(b"hello");
    let (_, r) = c
        .call_with_report(Request::new(
            PROG,
            VERS,
            rdmatest::proto::PROC_ECHO,
            a.finish(),
        ))
        .await
        .unwrap();
    assert_eq!(
        (r.call_kind, r.reply_mode),
        (CallKind::Short, ReplyMode::Short),
        "{r}"
    );
    t.null().await.unwrap();

    // PUT: Read chunk (Chunked Call) for data above the inline threshold,
    // odd lengths, several segments; small PUT stays Short.
    for len in [
        1usize,
        3,
        100,
        inline as usize + 1,
        65_537,
        (1 << 20) + 3,
        (3 << 20) + 1,
    ] {
        let data = rdmatest::pattern::pattern(len as u32, len);
        let mut a = Payload::builder();
        a.ddp_opaque(data.clone());
        let (res, r) = c
            .call_with_report(Request::new(PROG, VERS, PROC_PUT, a.finish()))
            .await
            .unwrap();
        let got: rdmatest::PutResult = res.decoder().decode().unwrap();
        assert_eq!(got.length as usize, len);
        assert_eq!(got.crc32c, crc32c::crc32c(&data));
        if len + 100 > inline as usize {
            assert_eq!(r.call_kind, CallKind::Chunked, "PUT {len}: {r}");
            assert_eq!(r.read_chunks, 1);
            assert_eq!(r.read_chunk_bytes, len as u64);
            assert_eq!(r.read_segments, len.div_ceil(1 << 20));
        } else {
            assert_eq!(r.call_kind, CallKind::Short, "PUT {len}: {r}");
        }
        t.put(data).await.unwrap();
    }

    // GET: Write chunk, 1 B .. 16 MiB, odd lengths.
    for len in [1u32, 3, 1023, 4097, 65_537, (1 << 20) + 1, 16 << 20] {
        let (res, r) = c
            .call_with_report(get_req(len, len ^ 5, Some(len as usize)))
            .await
            .unwrap();
        check_get(&res, len, len ^ 5);
        assert_eq!(r.write_chunks, 1, "{r}");
        assert_eq!(r.write_chunk_bytes, vec![len as u64], "{r}");
        assert_eq!(r.reply_mode, ReplyMode::Short);
        // Zero copy: the result is a slice of the caller's buffer.
        assert!(res.pieces().iter().any(|p| p.is_ddp()));
    }
    t.get(777, 1).await.unwrap();

    // GET2: two Write chunks.
    let g = t.get2(100_001, 3, 42).await.unwrap();
    assert_eq!((g.a.len(), g.b.len()), (100_001, 3));

    // GET above the server maximum: status 1, the Write chunk comes back unused.
    let over = (16 << 20) + 1;
    let (res, r) = c
        .call_with_report(get_req(over, 1, Some(over as usize)))
        .await
        .unwrap();
    {
        use xdr::XdrRead;
        let mut d = res.decoder();
        assert_eq!(d.u32().unwrap(), 1);
        d.finish().unwrap();
    }
    assert_eq!(r.write_chunk_bytes, vec![0], "{r}");
    match t.get(over, 1).await {
        Err(ClientError::GetStatus(1)) => {}
        other => panic!("expected status 1, got {other:?}"),
    }

    // Result forced inline by an empty Write list: small -> Short Reply,
    // large -> Long Reply through the Reply chunk.
    let small = inline / 4;
    let (res, r) = c.call_with_report(get_req(small, 9, None)).await.unwrap();
    check_get(&res, small, 9);
    assert_eq!((r.write_chunks, r.reply_mode), (0, ReplyMode::Short), "{r}");
    assert!(!r.reply_chunk_offered, "{r}");
    // A result that would fit inline, but for which the requester offered a
    // Reply chunk (it provisions room for a 400-byte verifier): the
    // responder uses the chunk, as Linux's server does.
    let mid = inline - 400;
    let (res, r) = c.call_with_report(get_req(mid, 9, None)).await.unwrap();
    check_get(&res, mid, 9);
    assert!(r.reply_chunk_offered, "{r}");
    assert_eq!(
        (r.write_chunks, r.reply_mode, r.reply_message),
        (0, ReplyMode::Long, MessageKind::NoMsg),
        "{r}"
    );
    assert!(
        r.reply_chunk_bytes > mid as u64 && r.reply_chunk_bytes < inline as u64,
        "{r}"
    );
    let (res, r) = c.call_with_report(get_req(200_003, 9, None)).await.unwrap();
    check_get(&res, 200_003, 9);
    assert_eq!(r.write_chunks, 0);
    assert!(r.reply_chunk_offered);
    assert_eq!(
        (r.reply_mode, r.reply_message),
        (ReplyMode::Long, MessageKind::NoMsg),
        "{r}"
    );

    // Long Call alone: PUT with the data sent as plain (non-DDP) XDR.
    let data = rdmatest::pattern::pattern(1, 3 * inline as usize);
    let mut a = Payload::builder();
    a.opaque_bytes(data.clone());
    let (res, r) = c
        .call_with_report(Request::new(PROG, VERS, PROC_PUT, a.finish()))
        .await
        .unwrap();
    let got: rdmatest::PutResult = res.decoder().decode().unwrap();
    assert_eq!(got.crc32c, crc32c::crc32c(&data));
    assert_eq!(
        (r.call_kind, r.call_message),
        (CallKind::Long, MessageKind::NoMsg),
        "{r}"
    );
    assert!(r.position_zero_bytes > 3 * inline as u64);
    assert_eq!(r.reply_mode, ReplyMode::Short);

    // Long Call and Long Reply at once: a large ECHO.
    for len in [2 * inline as usize + 1, 300_001] {
        let data = rdmatest::pattern::pattern(7, len);
        let mut a = Payload::builder();
        a.opaque_bytes(data.clone());
        let (res, r) = c
            .call_with_report(
                Request::new(PROG, VERS, rdmatest::proto::PROC_ECHO, a.finish())
                    .with_max_reply_len(len + 600),
            )
            .await
            .unwrap();
        assert_eq!(res.decoder().opaque(len as u32).unwrap(), data);
        assert_eq!(
            (r.call_kind, r.reply_mode),
            (CallKind::Long, ReplyMode::Long),
            "{r}"
        );
        t.echo(data).await.unwrap();
    }

    // A result buffer smaller than the result: the responder cannot convey
    // it and answers ERR_CHUNK, surfaced as a typed error.
    let e = c
        .call_with_report(get_req(5000, 1, Some(100)))
        .await
        .unwrap_err();
    assert_eq!(
        TransportError::from_rpc(&e),
        Some(&TransportError::ErrChunk),
        "{e}"
    );
    // The connection is still fine afterwards.
    t.get(5000, 2).await.unwrap();

    let s = srv.stats().counters.snapshot();
    assert!(
        s.calls_short > 0 && s.calls_chunked > 0 && s.calls_long > 0,
        "{s}"
    );
    assert!(
        s.replies_short > 0 && s.replies_long > 0 && s.err_chunk >= 1,
        "{s}"
    );
    c.close();
    srv.shutdown().await;
}

/// Remote invalidation on and off: what the client saw.
pub async fn remote_invalidation<D: Device>(srv_dev: D, cli_dev: D) {
    for on in [true, false] {
        let srv = server(srv_dev.clone(), RdmaConfig::default()).await;
        let cfg = RdmaConfig {
            remote_invalidation: on,
            ..Default::default()
        };
        let c = client(cli_dev.clone(), srv.local_addr(), cfg).await;
        assert_eq!(c.remote_invalidation(), Some(on));
        let (res, r): (Payload, CallReport) = c
            .call_with_report(get_req(100_000, 4, Some(100_000)))
            .await
            .unwrap();
        check_get(&res, 100_000, 4);
        assert_eq!(r.remote_invalidated, on, "{r}");
        assert_eq!(r.local_invalidations, if on { 0 } else { 1 }, "{r}");
        // Two registrations (GET2): never remotely invalidated, both local.
        let (_, r) = c
            .call_with_report({
                let mut a = Payload::builder();
                a.item(&rdmatest::Get2Args {
                    len_a: 10,
                    len_b: 20,
                    seed: 1,
                });
                Request::new(PROG, VERS, rdmatest::proto::PROC_GET2, a.finish())
                    .with_result_buf(BytesMut::with_capacity(10))
                    .with_result_buf(BytesMut::with_capacity(20))
            })
            .await
            .unwrap();
        assert!(!r.remote_invalidated);
        assert_eq!(r.local_invalidations, 2);
        // A Write chunk of three segments (2.5 MiB at the default 1 MiB
        // segment size) has one registration per segment, so three
        // handles: the call exposes more than one STag, so none is
        // invalidated remotely (RFC 8797 §6) and all three locally.
        let len = (5 << 20) / 2 + 3;
        let (res, r) = c
            .call_with_report(get_req(len, 9, Some(len as usize)))
            .await
            .unwrap();
        let data = check_get(&res, len, 9);
        assert_eq!(data.len(), len as usize);
        assert!(!r.remote_invalidated, "{r}");
        assert_eq!(r.local_invalidations, 3, "{r}");
        let st = srv.stats();
        assert_eq!(
            st.send_with_invalidate
                .load(std::sync::atomic::Ordering::Relaxed),
            on as u64
        );
        assert_eq!(
            c.stats()
                .remote_invalidations
                .load(std::sync::atomic::Ordering::Relaxed),
            on as u64
        );
        c.close();
        srv.shutdown().await;
    }
}
