//! RDMATEST end to end over the in-memory LocalChannel, in the RDMA-like
//! (pieces) and TCP-like (flattened) modes.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use oncrpc::testing::{LocalChannel, LocalMode};
use oncrpc::{Channel, DispatchOutcome, Dispatcher, Payload, Piece, Request, RpcError};
use rdmatest::pattern::{pattern, verify_pattern};
use rdmatest::proto::*;
use rdmatest::{ClientError, RdmatestClient, RdmatestServer, ServerConfig};
use xdr::XdrRead;

const MODES: [LocalMode; 2] = [LocalMode::Pieces, LocalMode::Flatten];
const SIZES: [usize; 8] = [0, 1, 2, 3, 4, 5, 255, 4097];
const MIB16: usize = 16 * 1024 * 1024;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

fn dispatcher(cfg: ServerConfig) -> Dispatcher {
    Dispatcher::builder()
        .service(RdmatestServer::new(cfg))
        .build()
}

fn client(mode: LocalMode, cfg: ServerConfig) -> RdmatestClient<LocalChannel> {
    RdmatestClient::new(LocalChannel::with_mode(dispatcher(cfg), mode))
}

#[test]
fn all_procedures_small_sizes() {
    rt().block_on(async {
        for mode in MODES {
            let c = client(mode, ServerConfig::default());
            c.null().await.unwrap();
            for (i, n) in SIZES.into_iter().enumerate() {
                let seed = 250 + i as u32;
                let data = pattern(seed, n);
                assert_eq!(c.echo(data.clone()).await.unwrap(), data);
                let r = c.put(data.clone()).await.unwrap();
                assert_eq!(r.length as usize, n);
                assert_eq!(r.crc32c, crc32c::crc32c(&data));
                let g = c.get(n as u32, seed).await.unwrap();
                assert_eq!(g, data);
                let g2 = c.get2(n as u32, (n as u32) ^ 3, seed).await.unwrap();
                verify_pattern(seed, &g2.a).unwrap();
                verify_pattern(seed + 1, &g2.b).unwrap();
                assert_eq!(g2.b.len(), n ^ 3);
            }
            c.sleep(5).await.unwrap();
        }
    });
}

#[test]
fn sixteen_mib_everywhere() {
    rt().block_on(async {
        for mode in MODES {
            let c = client(mode, ServerConfig::default());
            let data = pattern(9, MIB16);
            assert_eq!(c.echo(data.clone()).await.unwrap().len(), MIB16);
            assert_eq!(c.put(data.clone()).await.unwrap().length as usize, MIB16);
            assert_eq!(c.get(MIB16 as u32, 9).await.unwrap(), data);
            // One byte over the maximum: GET status 1, ECHO/PUT GARBAGE_ARGS.
            assert!(matches!(
                c.get(MIB16 as u32 + 1, 0).await,
                Err(ClientError::GetStatus(1))
            ));
            let big = Bytes::from(vec![0u8; MIB16 + 1]);
            assert!(matches!(
                c.echo(big.clone()).await,
                Err(ClientError::Rpc(RpcError::GarbageArgs))
            ));
            assert!(matches!(
                c.put(big).await,
                Err(ClientError::Rpc(RpcError::GarbageArgs))
            ));
        }
    });
}

#[test]
fn configured_limits() {
    let cfg = ServerConfig {
        max_get_len: 100,
        max_echo_len: 10,
        max_put_len: 20,
        max_sleep_ms: 50,
    };
    rt().block_on(async {
        let c = client(LocalMode::Pieces, cfg);
        c.get(100, 1).await.unwrap();
        assert!(matches!(
            c.get(101, 1).await,
            Err(ClientError::GetStatus(GET_STATUS_TOO_LONG))
        ));
        assert!(matches!(
            c.get2(101, 1, 1).await,
            Err(ClientError::Rpc(RpcError::GarbageArgs))
        ));
        assert!(matches!(
            c.get2(1, 101, 1).await,
            Err(ClientError::Rpc(RpcError::GarbageArgs))
        ));
        c.echo(Bytes::from(vec![1; 10])).await.unwrap();
        assert!(c.echo(Bytes::from(vec![1; 11])).await.is_err());
        c.put(Bytes::from(vec![1; 20])).await.unwrap();
        assert!(c.put(Bytes::from(vec![1; 21])).await.is_err());
        c.sleep(50).await.unwrap();
        assert!(matches!(
            c.sleep(51).await,
            Err(ClientError::Rpc(RpcError::GarbageArgs))
        ));
    });
}

#[test]
fn wrong_procedures_and_versions() {
    rt().block_on(async {
        let ch = LocalChannel::new(dispatcher(ServerConfig::default()));
        let r = ch
            .call(Request::new(PROGRAM, VERSION, 6, Payload::new()))
            .await;
        assert!(matches!(r, Err(RpcError::ProcUnavail)));
        let r = ch.call(Request::new(PROGRAM, 2, 0, Payload::new())).await;
        assert!(matches!(r, Err(RpcError::ProgMismatch { low: 1, high: 1 })));
        // Arguments with trailing or missing words are garbage.
        let mut a = Payload::builder();
        a.u32(1);
        let r = ch
            .call(Request::new(PROGRAM, VERSION, PROC_NULL, a.finish()))
            .await;
        assert!(matches!(r, Err(RpcError::GarbageArgs)));
        let mut a = Payload::builder();
        a.u32(1);
        let r = ch
            .call(Request::new(PROGRAM, VERSION, PROC_GET, a.finish()))
            .await;
        assert!(matches!(r, Err(RpcError::GarbageArgs)));
    });
}

/// The server emits DDP-eligible items as Ddp pieces and nothing else.
#[test]
fn server_piece_shapes() {
    let d = dispatcher(ServerConfig::default());
    let run = |procedure, args: Payload| match rt()
        .block_on(d.dispatch(Request::new(PROGRAM, VERSION, procedure, args).encode(1)))
    {
        DispatchOutcome::Reply(r) => r,
        o => panic!("{o:?}"),
    };
    let mut a = Payload::builder();
    a.opaque_bytes(Bytes::from(vec![7; 1000]));
    assert_eq!(run(PROC_ECHO, a.finish()).ddp_count(), 0);
    let mut a = Payload::builder();
    a.item(&GetArgs {
        length: 1000,
        seed: 1,
    });
    let r = run(PROC_GET, a.finish());
    assert_eq!(r.ddp_count(), 1);
    assert_eq!(r.ddp_len(), 1000);
    let mut a = Payload::builder();
    a.item(&Get2Args {
        len_a: 10,
        len_b: 20,
        seed: 1,
    });
    let r = run(PROC_GET2, a.finish());
    assert_eq!(r.ddp_count(), 2);
    let ddp: Vec<usize> = r
        .pieces()
        .iter()
        .filter(|p| p.is_ddp())
        .map(|p| p.bytes().len())
        .collect();
    assert_eq!(ddp, [10, 20]);
    // The PUT argument is read from its Ddp piece without copying: the CRC
    // matches, and a length word that differs from the Ddp piece (longer:
    // 1200, or shorter: 1000 > 999 would eat the pad) is garbage.
    let data = Bytes::from(vec![3u8; 999]);
    let mut a = Payload::builder();
    a.ddp_opaque(data.clone());
    let r = run(PROC_PUT, a.finish());
    let mut dec = r.decoder();
    dec.skip(24).unwrap();
    let res: PutResult = dec.decode().unwrap();
    assert_eq!(
        res,
        PutResult {
            length: 999,
            crc32c: crc32c::crc32c(&data)
        }
    );
    let bad = Payload::from_pieces([
        Piece::Xdr(Bytes::from_static(&[0, 0, 4, 0xB0])),
        Piece::Ddp(data),
    ]);
    let r = run(PROC_PUT, bad);
    assert!(matches!(
        oncrpc::decode_reply(&r).unwrap().1,
        Err(RpcError::GarbageArgs)
    ));
}

#[test]
fn get_places_into_caller_buffer() {
    rt().block_on(async {
        let c = client(LocalMode::Pieces, ServerConfig::default());
        let buf = BytesMut::with_capacity(8192);
        let ptr = buf.as_ptr();
        let data = c.get_into(8000, 5, buf).await.unwrap();
        assert_eq!(data.as_ptr(), ptr);
        verify_pattern(5, &data).unwrap();
    });
}

/// A channel that corrupts the results of an inner channel.
struct Corrupt<F> {
    inner: LocalChannel,
    f: F,
}

impl<F: Fn(u32, Bytes) -> Bytes + Send + Sync> Channel for Corrupt<F> {
    async fn call(&self, req: Request) -> Result<Payload, RpcError> {
        let p = req.procedure;
        let r = self.inner.call(req).await?;
        Ok(Payload::from_xdr((self.f)(p, r.flatten())))
    }
}

fn corrupt(
    f: impl Fn(u32, Bytes) -> Bytes + Send + Sync,
) -> RdmatestClient<Corrupt<impl Fn(u32, Bytes) -> Bytes + Send + Sync>> {
    RdmatestClient::new(Corrupt {
        inner: LocalChannel::new(dispatcher(ServerConfig::default())),
        f,
    })
}

fn flip(b: Bytes, at: usize) -> Bytes {
    let mut v = b.to_vec();
    v[at] ^= 0x40;
    Bytes::from(v)
}

#[test]
fn client_detects_wrong_results() {
    rt().block_on(async {
        let c = corrupt(|_, b| flip(b, 4 + 100));
        assert!(matches!(
            c.echo(pattern(0, 200)).await,
            Err(ClientError::EchoMismatch { offset: 100 })
        ));
        assert!(matches!(
            c.get(200, 0).await,
            Err(ClientError::PatternMismatch {
                what: "GET data",
                offset: 96
            })
        ));
        let c = corrupt(|_, b| flip(b, 7));
        assert!(matches!(
            c.put(pattern(0, 200)).await,
            Err(ClientError::CrcMismatch { .. })
        ));
        let c = corrupt(|_, b| flip(b, 3));
        assert!(matches!(
            c.put(pattern(0, 200)).await,
            Err(ClientError::LengthMismatch { .. })
        ));
        // GET2: a then marker then b.
        let c = corrupt(|_, b| flip(b, 4 + 8));
        assert!(matches!(
            c.get2(8, 8, 0).await,
            Err(ClientError::MarkerMismatch(_))
        ));
        let c = corrupt(|_, b| flip(b, 4 + 8 + 4 + 4 + 2));
        assert!(matches!(
            c.get2(8, 8, 0).await,
            Err(ClientError::PatternMismatch {
                what: "GET2 b",
                offset: 2
            })
        ));
        // Truncated or extended results are decode errors.
        let c = corrupt(|_, b| b.slice(..b.len() - 4));
        assert!(matches!(
            c.get2(8, 8, 0).await,
            Err(ClientError::BadResults(_))
        ));
        let c = corrupt(|_, b| {
            let mut v = b.to_vec();
            v.extend_from_slice(&[0; 4]);
            Bytes::from(v)
        });
        assert!(matches!(
            c.null().await,
            Err(ClientError::BadResults(xdr::Error::TrailingBytes(4)))
        ));
        // A GET answer longer than requested is refused by the decode limit.
        let c = corrupt(|_, _| {
            let mut b = Payload::builder();
            b.u32(0).opaque(&[0; 12]);
            b.finish().flatten()
        });
        assert!(matches!(
            c.get(8, 0).await,
            Err(ClientError::BadResults(xdr::Error::TooLong {
                len: 12,
                max: 8
            }))
        ));
    });
}

#[test]
fn concurrent_calls_share_one_channel() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        let c = Arc::new(client(LocalMode::Pieces, ServerConfig::default()));
        let tasks: Vec<_> = (0..32u32)
            .map(|i| {
                let c = c.clone();
                tokio::spawn(async move {
                    let g = c.get(1000 + i, i).await.unwrap();
                    c.put(g).await.unwrap();
                    c.sleep(1).await.unwrap();
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    });
}

#[test]
fn free_functions() {
    rt().block_on(async {
        let ch = LocalChannel::new(dispatcher(ServerConfig::default()));
        rdmatest::client::null(&ch).await.unwrap();
        assert_eq!(
            rdmatest::client::echo(&ch, pattern(1, 9)).await.unwrap(),
            pattern(1, 9)
        );
        assert_eq!(
            rdmatest::client::put(&ch, pattern(1, 9))
                .await
                .unwrap()
                .length,
            9
        );
        assert_eq!(
            rdmatest::client::get(&ch, 9, 1).await.unwrap(),
            pattern(1, 9)
        );
        assert_eq!(
            rdmatest::client::get2(&ch, 3, 4, 1).await.unwrap().b,
            pattern(2, 4)
        );
        rdmatest::client::sleep(&ch, 0).await.unwrap();
    });
}

#[test]
fn piece_debug_is_short() {
    let p = Piece::Ddp(Bytes::from(vec![0xAB; 1 << 20]));
    let s = format!("{p:?}");
    assert!(s.starts_with("Ddp(1048576 bytes: abab"), "{s}");
    assert!(s.len() < 64);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 48, ..Default::default() })]
    /// Random sizes and seeds, both modes: every procedure verifies.
    #[test]
    fn random_sizes_and_seeds(len_a in 0u32..5000, len_b in 0u32..5000, seed: u32, flatten: bool) {
        let mode = if flatten { LocalMode::Flatten } else { LocalMode::Pieces };
        rt().block_on(async {
            let c = client(mode, ServerConfig::default());
            let data = pattern(seed, len_a as usize);
            assert_eq!(c.echo(data.clone()).await.unwrap(), data);
            assert_eq!(c.put(data.clone()).await.unwrap().crc32c, crc32c::crc32c(&data));
            assert_eq!(c.get(len_a, seed).await.unwrap(), data);
            let g2 = c.get2(len_a, len_b, seed).await.unwrap();
            assert_eq!(g2.a, data);
            assert_eq!(g2.b, pattern(seed.wrapping_add(1), len_b as usize));
        });
    }
}
