//! Randomized integrity check over real sockets: a hostile
//! connection and many good calls at once, all in small fragments.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use oncrpc::xdr::XdrRead;
use oncrpc::{Call, Channel, Dispatcher, Payload, ProcError, Request, Service};
use oncrpc_tcp::io::RecordReader;
use oncrpc_tcp::record::RecordLimits;
use oncrpc_tcp::{ClientConfig, ServerConfig, TcpChannel, TcpServer};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const PROG: u32 = 0x2000_7777;

/// NULL; ECHO(data, delay) returns `data` after `delay % 5` ms.
struct Prog;
impl Service for Prog {
    fn program(&self) -> u32 {
        PROG
    }
    fn versions(&self) -> std::ops::RangeInclusive<u32> {
        1..=1
    }
    async fn handle(&self, call: Call) -> Result<Payload, ProcError> {
        let mut d = call.args.decoder();
        match call.procedure {
            0 => Ok(Payload::new()),
            1 => {
                let data = d.opaque(1 << 20)?;
                let delay = d.u32()?;
                d.finish()?;
                if delay > 0 {
                    tokio::time::sleep(Duration::from_millis((delay % 5).into())).await;
                }
                let mut out = Payload::builder();
                out.opaque_bytes(data);
                Ok(out.finish())
            }
            _ => Err(ProcError::ProcUnavail),
        }
    }
}

/// xorshift64: reproducible pseudo-random choices.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// A hostile connection sends mutated calls in 1-9 byte fragments with
/// empty fragments between them, written in random-sized chunks, then
/// half-closes (20 rounds): every reply is decodable, answers an xid that
/// was sent, and comes at most once. Meanwhile 1600 ECHO calls in 5-byte
/// fragments (7-byte reply fragments) on a good connection come back
/// intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_fragmented_calls_and_good_calls_stay_intact() {
    let d = Dispatcher::builder().service(Prog).build();
    let server = TcpServer::bind(
        "127.0.0.1:0",
        Arc::new(d),
        ServerConfig {
            max_fragment_size: 7,
            limits: RecordLimits {
                max_record_size: 1 << 20,
                max_fragments: 1 << 20,
            },
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let addr = server.local_addr().unwrap();
    let stop = server.shutdown_handle();
    let task = tokio::spawn(server.run());

    // Hostile raw connection: mutated calls in random fragments.
    let hostile = tokio::spawn(async move {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for round in 0..20 {
            let sock = TcpStream::connect(addr).await.unwrap();
            let (rd, mut wr) = sock.into_split();
            let mut sent: HashSet<u32> = HashSet::new();
            let mut wire = Vec::new();
            for i in 0..50u32 {
                let xid = round * 1000 + i;
                let len = rng.below(40) as usize;
                let data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
                let mut args = Payload::builder();
                args.opaque(&data).u32(rng.below(3) as u32);
                let mut msg = Request::new(PROG, 1, rng.below(3) as u32, args.finish())
                    .encode(xid)
                    .flatten()
                    .to_vec();
                if rng.below(3) == 0 {
                    let k = 4 + rng.below(msg.len() as u64 - 4) as usize;
                    msg[k] = rng.next() as u8;
                }
                sent.insert(xid);
                // random fragmentation
                let mut off = 0;
                while off < msg.len() {
                    let n = (1 + rng.below(9) as usize).min(msg.len() - off);
                    let last = off + n == msg.len();
                    let h = n as u32 | if last { 0x8000_0000 } else { 0 };
                    wire.extend_from_slice(&h.to_be_bytes());
                    wire.extend_from_slice(&msg[off..off + n]);
                    off += n;
                    if rng.below(4) == 0 && !last {
                        wire.extend_from_slice(&0u32.to_be_bytes()); // empty fragment
                    }
                }
            }
            let writer = tokio::spawn(async move {
                let mut rng = Rng(0x1234_5678 + round as u64);
                let mut off = 0;
                while off < wire.len() {
                    let n = (1 + rng.below(64) as usize).min(wire.len() - off);
                    wr.write_all(&wire[off..off + n]).await.unwrap();
                    off += n;
                }
                wr.shutdown().await.unwrap();
                wr
            });
            let mut reader = RecordReader::new(rd, RecordLimits::default());
            let mut seen: HashMap<u32, usize> = HashMap::new();
            while let Some(rec) =
                tokio::time::timeout(Duration::from_secs(10), reader.next_record())
                    .await
                    .expect("server stalled")
                    .expect("bad record from server")
            {
                let p = Payload::from(rec.into_contiguous());
                let (xid, _) = oncrpc::decode_reply(&p).expect("undecodable reply");
                assert!(sent.contains(&xid), "reply to unknown xid {xid}");
                *seen.entry(xid).or_default() += 1;
                assert_eq!(seen[&xid], 1, "two replies for xid {xid}");
            }
            let _ = writer.await.unwrap();
        }
    });

    // Good client with multi-fragment calls, many concurrent.
    let ch = Arc::new(
        TcpChannel::connect_with(
            addr,
            ClientConfig {
                max_fragment_size: 5,
                ..Default::default()
            },
        )
        .await
        .unwrap(),
    );
    let mut js = tokio::task::JoinSet::new();
    for t in 0..8u64 {
        let ch = ch.clone();
        js.spawn(async move {
            let mut rng = Rng(0xABCDEF + t);
            for _ in 0..200 {
                let len = rng.below(300) as usize;
                let data: Bytes = (0..len)
                    .map(|_| rng.next() as u8)
                    .collect::<Vec<u8>>()
                    .into();
                let mut args = Payload::builder();
                args.opaque(&data).u32(rng.below(5) as u32);
                let res = ch
                    .call(
                        Request::new(PROG, 1, 1, args.finish())
                            .with_timeout(Duration::from_secs(10)),
                    )
                    .await
                    .unwrap();
                let mut d = res.decoder();
                let got = d.opaque(1 << 20).unwrap();
                d.finish().unwrap();
                assert_eq!(got, data);
            }
        });
    }
    while let Some(r) = js.join_next().await {
        r.unwrap();
    }
    hostile.await.unwrap();
    stop.shutdown();
    task.await.unwrap().unwrap();
}
