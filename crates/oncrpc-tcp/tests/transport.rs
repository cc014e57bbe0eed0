//! Transport behaviour of `TcpServer` and `TcpChannel` with a small test
//! program: multi-fragment records both ways, replies out of order,
//! timeouts, connection loss, misbehaving peers, graceful shutdown.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use oncrpc::xdr;
use oncrpc::{Call, Channel, Dispatcher, Payload, ProcError, Request, RpcError, Service};
use oncrpc_tcp::io::RecordReader;
use oncrpc_tcp::record::{RecordEncoder, RecordLimits};
use oncrpc_tcp::{ClientConfig, ServerConfig, ShutdownHandle, TcpChannel, TcpServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const PROG: u32 = 0x2000_7777;
const NULL: u32 = 0;
const ECHO: u32 = 1;
const SLEEP: u32 = 2;

/// ECHO returns its opaque argument; SLEEP(ms) waits, then returns ms.
struct TestProgram;

impl Service for TestProgram {
    fn program(&self) -> u32 {
        PROG
    }
    fn versions(&self) -> std::ops::RangeInclusive<u32> {
        1..=1
    }
    async fn handle(&self, call: Call) -> Result<Payload, ProcError> {
        let mut d = call.args.decoder();
        match call.procedure {
            NULL => Ok(Payload::new()),
            ECHO => {
                let data = d.opaque(u32::MAX)?;
                let mut out = Payload::builder();
                out.ddp_opaque(data);
                Ok(out.finish())
            }
            SLEEP => {
                let ms = xdr::XdrRead::u32(&mut d)?;
                tokio::time::sleep(Duration::from_millis(ms.into())).await;
                let mut out = Payload::builder();
                out.u32(ms);
                Ok(out.finish())
            }
            _ => Err(ProcError::ProcUnavail),
        }
    }
}

async fn start(
    config: ServerConfig,
) -> (
    std::net::SocketAddr,
    ShutdownHandle,
    tokio::task::JoinHandle<std::io::Result<()>>,
) {
    let dispatcher = Dispatcher::builder().service(TestProgram).build();
    let server = TcpServer::bind("127.0.0.1:0", Arc::new(dispatcher), config)
        .await
        .unwrap();
    let addr = server.local_addr().unwrap();
    let stop = server.shutdown_handle();
    (addr, stop, tokio::spawn(server.run()))
}

fn echo_req(data: Bytes) -> Request {
    let mut args = Payload::builder();
    args.ddp_opaque(data);
    Request::new(PROG, 1, ECHO, args.finish())
}

fn sleep_req(ms: u32) -> Request {
    let mut args = Payload::builder();
    args.u32(ms);
    Request::new(PROG, 1, SLEEP, args.finish())
}

async fn echo(ch: &TcpChannel, data: Bytes) -> Result<Bytes, RpcError> {
    let res = ch.call(echo_req(data)).await?;
    let mut d = res.decoder();
    let out = d.opaque(u32::MAX)?;
    Ok(out)
}

fn data(len: usize) -> Bytes {
    (0..len)
        .map(|i| (i * 31 + 7) as u8)
        .collect::<Vec<u8>>()
        .into()
}

#[tokio::test]
async fn echo_sizes_single_and_multi_fragment() {
    within(async {
        // Small fragments both ways: calls and replies span many fragments
        // (16 MiB in 4 KiB fragments is 4096 fragments, within the default
        // limit of 16384 per record).
        let (addr, stop, task) = start(ServerConfig {
            max_fragment_size: 4096,
            ..Default::default()
        })
        .await;
        let small = TcpChannel::connect_with(
            addr,
            ClientConfig {
                max_fragment_size: 777,
                ..Default::default()
            },
        )
        .await
        .unwrap();
        let big = TcpChannel::connect(addr).await.unwrap();
        for len in [0, 1, 3, 4, 5, 776, 777, 778, 4095, 4096, 4097, 100_003] {
            let d = data(len);
            assert_eq!(echo(&small, d.clone()).await.unwrap(), d, "len {len}");
            assert_eq!(echo(&big, d.clone()).await.unwrap(), d, "len {len}");
        }
        let d = data(16 << 20);
        assert_eq!(echo(&big, d.clone()).await.unwrap(), d);
        stop.shutdown();
        task.await.unwrap().unwrap();
    })
    .await
}

#[tokio::test]
async fn replies_complete_out_of_order() {
    within(async {
        let (addr, stop, task) = start(ServerConfig::default()).await;
        let ch = Arc::new(TcpChannel::connect(addr).await.unwrap());
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for ms in [400u32, 0] {
            let (ch, tx) = (ch.clone(), tx.clone());
            tokio::spawn(async move {
                let r = ch.call(sleep_req(ms)).await.unwrap();
                tx.send(xdr::XdrRead::u32(&mut r.decoder()).unwrap())
                    .unwrap();
            });
            // Make sure the slow call is sent first.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(rx.recv().await, Some(0));
        assert_eq!(rx.recv().await, Some(400));
        stop.shutdown();
        task.await.unwrap().unwrap();
    })
    .await
}

#[tokio::test]
async fn timeout_leaves_connection_usable() {
    within(async {
        let (addr, stop, task) = start(ServerConfig::default()).await;
        let ch = TcpChannel::connect(addr).await.unwrap();
        let r = ch
            .call(sleep_req(300).with_timeout(Duration::from_millis(30)))
            .await;
        assert!(matches!(r, Err(RpcError::Timeout)), "{r:?}");
        assert_eq!(ch.outstanding(), 0);
        // The late reply is ignored; the connection carries on.
        tokio::time::sleep(Duration::from_millis(350)).await;
        assert_eq!(echo(&ch, data(10)).await.unwrap(), data(10));
        assert!(!ch.is_closed());
        stop.shutdown();
        task.await.unwrap().unwrap();
    })
    .await
}

#[tokio::test]
async fn errors_from_the_server_are_typed() {
    within(async {
        let (addr, stop, task) = start(ServerConfig::default()).await;
        let ch = TcpChannel::connect(addr).await.unwrap();
        let r = ch.call(Request::new(PROG, 1, 99, Payload::new())).await;
        assert!(matches!(r, Err(RpcError::ProcUnavail)), "{r:?}");
        let r = ch.call(Request::new(PROG, 7, NULL, Payload::new())).await;
        assert!(
            matches!(r, Err(RpcError::ProgMismatch { low: 1, high: 1 })),
            "{r:?}"
        );
        let r = ch
            .call(Request::new(PROG + 1, 1, NULL, Payload::new()))
            .await;
        assert!(matches!(r, Err(RpcError::ProgUnavail)), "{r:?}");
        let r = ch.call(Request::new(PROG, 1, ECHO, Payload::new())).await;
        assert!(matches!(r, Err(RpcError::GarbageArgs)), "{r:?}");
        stop.shutdown();
        task.await.unwrap().unwrap();
    })
    .await
}

/// A "server" that reads one call record and then drops the connection.
#[tokio::test]
async fn connection_loss_fails_outstanding_calls() {
    within(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (sock, _) = listener.accept().await.unwrap();
            let mut reader = RecordReader::new(sock, RecordLimits::default());
            let _ = reader.next_record().await.unwrap();
            // Dropping the reader closes the socket.
        });
        let ch = Arc::new(
            TcpChannel::connect_with(
                addr,
                ClientConfig {
                    default_timeout: None,
                    ..Default::default()
                },
            )
            .await
            .unwrap(),
        );
        let calls: Vec<_> = (0..5)
            .map(|_| {
                let ch = ch.clone();
                tokio::spawn(async move { ch.call(sleep_req(1)).await })
            })
            .collect();
        server.await.unwrap();
        for c in calls {
            let r = c.await.unwrap();
            assert!(matches!(r, Err(RpcError::ConnectionLost)), "{r:?}");
        }
        assert!(ch.is_closed());
        let r = ch.call(Request::new(PROG, 1, NULL, Payload::new())).await;
        assert!(matches!(r, Err(RpcError::ConnectionLost)), "{r:?}");
    })
    .await
}

/// Reads until the peer closes; true if it closed (EOF or reset) within 5 s.
async fn closed_by_peer(sock: &mut TcpStream) -> bool {
    let mut buf = [0u8; 1024];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        match tokio::time::timeout_at(deadline, sock.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
        }
    }
}

#[tokio::test]
async fn misbehaving_connections_are_closed_alone() {
    within(async {
        let (addr, stop, task) = start(ServerConfig {
            limits: RecordLimits {
                max_record_size: 1 << 20,
                max_fragments: 64,
            },
            ..Default::default()
        })
        .await;
        let good = TcpChannel::connect(addr).await.unwrap();
        assert_eq!(echo(&good, data(100)).await.unwrap(), data(100));

        // 1. A fragment header announcing more than the record limit.
        let mut oversize = TcpStream::connect(addr).await.unwrap();
        oversize
            .write_all(&(0x8000_0000u32 | (2 << 20)).to_be_bytes())
            .await
            .unwrap();
        assert!(
            closed_by_peer(&mut oversize).await,
            "oversize record not closed"
        );

        // 2. Fragments that add up past the limit.
        let mut creeping = TcpStream::connect(addr).await.unwrap();
        let chunk = vec![0u8; 600 << 10];
        let mut wire = Vec::new();
        for _ in 0..2 {
            wire.extend_from_slice(&((600u32) << 10).to_be_bytes());
            wire.extend_from_slice(&chunk);
        }
        let _ = creeping.write_all(&wire).await;
        assert!(
            closed_by_peer(&mut creeping).await,
            "over-limit record not closed"
        );

        // 3. A flood of empty non-last fragments.
        let mut flood = TcpStream::connect(addr).await.unwrap();
        let _ = flood.write_all(&[0u8; 4 * 100]).await;
        assert!(
            closed_by_peer(&mut flood).await,
            "fragment flood not closed"
        );

        // Meanwhile the well-behaved connection is unaffected.
        assert_eq!(echo(&good, data(5000)).await.unwrap(), data(5000));
        let fresh = TcpChannel::connect(addr).await.unwrap();
        assert_eq!(echo(&fresh, data(7)).await.unwrap(), data(7));
        stop.shutdown();
        task.await.unwrap().unwrap();
    })
    .await
}

#[tokio::test]
async fn garbage_record_is_dropped_and_connection_kept() {
    within(async {
        let (addr, stop, task) = start(ServerConfig::default()).await;
        let sock = TcpStream::connect(addr).await.unwrap();
        let (rd, mut wr) = sock.into_split();
        let enc = RecordEncoder::default();
        // Not an RPC call (too short to hold a header): no reply.
        wr.write_all(&enc.encode_to_vec(&[Bytes::from_static(b"junk")]))
            .await
            .unwrap();
        // Then a valid NULL call on the same connection is answered.
        let call = Request::new(PROG, 1, NULL, Payload::new()).encode(0x1234_5678);
        wr.write_all(&enc.encode_to_vec(&[call.flatten()]))
            .await
            .unwrap();
        let mut reader = RecordReader::new(rd, RecordLimits::default());
        let reply = tokio::time::timeout(Duration::from_secs(5), reader.next_record())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        let reply = reply.into_contiguous();
        // xid, REPLY, MSG_ACCEPTED, AUTH_NONE verifier, SUCCESS.
        let mut want = BytesMut::new();
        for w in [0x1234_5678u32, 1, 0, 0, 0, 0] {
            want.extend_from_slice(&w.to_be_bytes());
        }
        assert_eq!(&reply[..], &want[..]);
        stop.shutdown();
        task.await.unwrap().unwrap();
    })
    .await
}

#[tokio::test]
async fn graceful_shutdown_finishes_calls_in_progress() {
    within(async {
        let (addr, stop, task) = start(ServerConfig::default()).await;
        let ch = Arc::new(TcpChannel::connect(addr).await.unwrap());
        let slow = {
            let ch = ch.clone();
            tokio::spawn(async move { ch.call(sleep_req(300)).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        stop.shutdown();
        let r = slow.await.unwrap().unwrap();
        assert_eq!(xdr::XdrRead::u32(&mut r.decoder()).unwrap(), 300);
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("server did not stop")
            .unwrap()
            .unwrap();
        // The listener is gone.
        assert!(TcpStream::connect(addr).await.is_err());
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_outstanding_calls_on_one_connection() {
    within(async {
        let (addr, stop, task) = start(ServerConfig {
            max_calls_per_connection: 16,
            ..Default::default()
        })
        .await;
        let ch = Arc::new(TcpChannel::connect(addr).await.unwrap());
        let mut tasks = Vec::new();
        for i in 0..300usize {
            let ch = ch.clone();
            tasks.push(tokio::spawn(async move {
                if i % 3 == 0 {
                    let r = ch.call(sleep_req((i % 7) as u32)).await.unwrap();
                    assert_eq!(xdr::XdrRead::u32(&mut r.decoder()).unwrap(), (i % 7) as u32);
                } else {
                    let d = data(i * 97);
                    assert_eq!(echo(&ch, d.clone()).await.unwrap(), d);
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(ch.outstanding(), 0);
        stop.shutdown();
        task.await.unwrap().unwrap();
    })
    .await
}

/// A peer that sends calls but does not read the replies is no longer read
/// once its calls in progress (replies not yet written) reach the limit: the
/// server's memory stays bounded, and the peer's writes block.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peer_not_reading_replies_is_throttled() {
    within(async {
        let (addr, stop, task) = start(ServerConfig {
            max_calls_per_connection: 2,
            ..Default::default()
        })
        .await;
        let sock = TcpStream::connect(addr).await.unwrap();
        let (rd, mut wr) = sock.into_split();
        const CALLS: u32 = 64;
        let payload = data(1 << 20);
        let writer = tokio::spawn(async move {
            let enc = RecordEncoder::default();
            for xid in 1..=CALLS {
                let call = echo_req(payload.clone()).encode(xid);
                let chunks: Vec<Bytes> = call.xdr_chunks().collect();
                wr.write_all(&enc.encode_to_vec(&chunks)).await.unwrap();
            }
            wr
        });
        // 64 MiB of calls cannot all be buffered by the kernel: if the server
        // kept reading, the writes would complete.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(!writer.is_finished(), "server kept reading calls");
        // Reading the replies lets everything through, every reply intact.
        let mut reader = RecordReader::new(rd, RecordLimits::default());
        let mut xids = Vec::new();
        for _ in 0..CALLS {
            let reply = tokio::time::timeout(Duration::from_secs(20), reader.next_record())
                .await
                .expect("reply")
                .unwrap()
                .unwrap()
                .into_contiguous();
            assert_eq!(reply.len(), 24 + 4 + (1 << 20));
            xids.push(u32::from_be_bytes(reply[..4].try_into().unwrap()));
        }
        xids.sort_unstable();
        assert_eq!(xids, (1..=CALLS).collect::<Vec<_>>());
        drop(writer.await.unwrap());
        stop.shutdown();
        task.await.unwrap().unwrap();
    })
    .await
}

/// A server whose reply breaks the client's record limit: the client closes
/// the connection and the call fails with `ConnectionLost`.
#[tokio::test]
async fn oversize_reply_closes_the_client_connection() {
    within(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (sock, _) = listener.accept().await.unwrap();
            let (rd, mut wr) = sock.into_split();
            let mut reader = RecordReader::new(rd, RecordLimits::default());
            let _ = reader.next_record().await.unwrap();
            // Announce a 1 GiB reply, then wait for the client to hang up.
            wr.write_all(&(0x8000_0000u32 | (1 << 30)).to_be_bytes())
                .await
                .unwrap();
            reader.next_record().await
        });
        let ch = TcpChannel::connect_with(
            addr,
            ClientConfig {
                limits: RecordLimits {
                    max_record_size: 1 << 20,
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .unwrap();
        let r = ch.call(Request::new(PROG, 1, NULL, Payload::new())).await;
        assert!(matches!(r, Err(RpcError::ConnectionLost)), "{r:?}");
        assert!(ch.is_closed());
        // The client really closed the socket: the server sees the end.
        let end = tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("client kept the connection open");
        assert!(matches!(end.unwrap(), Ok(None)));
    })
    .await
}

/// Fails the test instead of hanging when something never completes.
async fn within<F: std::future::Future>(test: F) -> F::Output {
    tokio::time::timeout(std::time::Duration::from_secs(60), test)
        .await
        .expect("test did not finish within 60 s")
}

#[tokio::test]
async fn idle_connections_are_closed() {
    within(async {
        let (addr, stop, task) = start(ServerConfig {
            idle_timeout: Some(Duration::from_millis(500)),
            ..Default::default()
        })
        .await;
        // Silent, and stuck inside a record: both closed.
        let mut silent = TcpStream::connect(addr).await.unwrap();
        let mut half_sent = TcpStream::connect(addr).await.unwrap();
        half_sent.write_all(&[0x80, 0, 0, 100, 1, 2]).await.unwrap();
        // Busy: a call in progress longer than the idle timeout, then
        // regular calls; stays open.
        let busy = TcpChannel::connect(addr).await.unwrap();
        let started = std::time::Instant::now();
        busy.call(sleep_req(800)).await.unwrap();
        for _ in 0..4 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            busy.call(Request::new(PROG, 1, NULL, Payload::new()))
                .await
                .unwrap();
        }
        assert!(!busy.is_closed());
        assert!(closed_by_peer(&mut silent).await);
        assert!(closed_by_peer(&mut half_sent).await);
        assert!(started.elapsed() >= Duration::from_millis(800));
        // Left alone, the busy connection is closed too.
        tokio::time::sleep(Duration::from_millis(1200)).await;
        assert!(busy.is_closed());
        stop.shutdown();
        task.await.unwrap().unwrap();
    })
    .await
}

/// Over TCP, a complete call header whose credential has
/// non-zero XDR padding is answered (MSG_DENIED AUTH_ERROR AUTH_BADCRED,
/// RFC 5531 §9), not silently dropped with the connection kept open.
#[tokio::test]
async fn credential_with_nonzero_padding_is_answered() {
    within(async {
        let (addr, stop, _task) = start(ServerConfig::default()).await;
        let (rd, mut wr) = TcpStream::connect(addr).await.unwrap().into_split();
        let mut msg = Vec::new();
        // xid, CALL, rpcvers 2, prog, vers, proc; AUTH_SYS with 1 byte.
        for w in [0x55u32, 0, 2, PROG, 1, NULL, 1, 1] {
            msg.extend_from_slice(&w.to_be_bytes());
        }
        msg.extend_from_slice(&[0, 0xff, 0xff, 0xff]); // body 00, bad padding
        msg.extend_from_slice(&[0; 8]); // AUTH_NONE verifier
        let wire = RecordEncoder::default().encode_to_vec(&[Bytes::from(msg)]);
        wr.write_all(&wire).await.unwrap();
        let mut reader = RecordReader::new(rd, RecordLimits::default());
        let got = tokio::time::timeout(Duration::from_secs(5), reader.next_record())
            .await
            .expect("no reply within 5 s to a complete call header")
            .unwrap()
            .expect("connection closed instead of an answer");
        let (xid, res) = oncrpc::decode_reply(&Payload::from(got.into_contiguous())).unwrap();
        assert_eq!(xid, 0x55);
        assert!(
            matches!(res, Err(RpcError::AuthError(oncrpc::AuthStat::BadCred))),
            "{res:?}"
        );
        stop.shutdown();
    })
    .await
}

/// A per-call timeout of `Duration::MAX` (no deadline,
/// as `tokio::time::timeout` takes it) must not panic the calling task
/// (`Instant + Duration` overflow in `ClientCore::start_call`).
#[tokio::test]
async fn call_with_duration_max_timeout_completes() {
    within(async {
        let (addr, stop, _task) = start(ServerConfig::default()).await;
        let ch = Arc::new(TcpChannel::connect(addr).await.unwrap());
        let c = ch.clone();
        let r = tokio::spawn(async move {
            c.call(Request::new(PROG, 1, NULL, Payload::new()).with_timeout(Duration::MAX))
                .await
                .map(|_| ())
        })
        .await;
        stop.shutdown();
        match r {
            Ok(res) => res.unwrap(),
            Err(e) => panic!("the call panicked: {e}"),
        }
    })
    .await
}

/// `idle_timeout: Some(Duration::MAX)` means "never idle"; the idle
/// deadline (`Instant + Duration`) must not overflow and panic every
/// connection task.
#[tokio::test]
async fn idle_timeout_duration_max_serves_calls() {
    within(async {
        let (addr, stop, task) = start(ServerConfig {
            idle_timeout: Some(Duration::MAX),
            ..Default::default()
        })
        .await;
        let ch = TcpChannel::connect(addr).await.unwrap();
        for _ in 0..3 {
            ch.call(
                Request::new(PROG, 1, NULL, Payload::new()).with_timeout(Duration::from_secs(5)),
            )
            .await
            .unwrap();
        }
        stop.shutdown();
        task.await.unwrap().unwrap();
    })
    .await
}

/// `shutdown_grace: Duration::MAX` drains the connections at shutdown;
/// `TcpServer::run` must not panic on a `Duration + Duration` overflow.
#[tokio::test]
async fn shutdown_grace_duration_max_shuts_down() {
    within(async {
        let (addr, stop, task) = start(ServerConfig {
            shutdown_grace: Duration::MAX,
            ..Default::default()
        })
        .await;
        let ch = TcpChannel::connect(addr).await.unwrap();
        let slow = tokio::spawn(async move { ch.call(sleep_req(200)).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        stop.shutdown();
        let r = tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("shutdown did not finish within 5 s");
        assert!(
            matches!(r, Ok(Ok(()))),
            "TcpServer::run failed at shutdown: {r:?}"
        );
        // The call in progress was allowed to finish.
        slow.await.unwrap().unwrap();
    })
    .await
}
