//! The requester across reconnects.
//!
//! A call being prepared (outside the state lock) on a connection
//! that dies, while the reconnect installs a new connection before the
//! prepare ends, was queued again after the new connection's pump had run,
//! and then never sent: it waited for its timeout. A wrapper device makes
//! one `alloc_mr` slow (as a large registration or a preempted thread
//! would) to open that window deterministically.
//!
//! A retransmitted call keeps the caller's result buffer whole.

mod common;

use std::ops::RangeInclusive;
use std::sync::Arc;

use bytes::BytesMut;
use oncrpc::{Call, Dispatcher, Payload, ProcError, Service};
use rdmatest::RdmatestServer;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rdma_verbs::{
    ConnInfo, ConnParam, Device, MrBuffer, ProtectionDomain, QpInit, RegisterError, VerbsError,
};
use rpcrdma::memfabric::Fabric;
use rpcrdma::{Backoff, RdmaConfig};

/// Milliseconds the next `alloc_mr` sleeps (0: none).
static SLOW_NEXT_ALLOC_MS: AtomicU64 = AtomicU64::new(0);

#[derive(Clone)]
struct SlowDev(Fabric);
struct SlowPd(<Fabric as Device>::Pd);

impl ProtectionDomain for SlowPd {
    type Mr = <Fabric as Device>::Mr;
    fn register(&self, b: MrBuffer, a: rdma_verbs::Access) -> Result<Self::Mr, RegisterError> {
        self.0.register(b, a)
    }
    fn alloc_mr(&self, max_len: usize) -> Result<Self::Mr, VerbsError> {
        let ms = SLOW_NEXT_ALLOC_MS.swap(0, Ordering::SeqCst);
        if ms > 0 {
            std::thread::sleep(Duration::from_millis(ms));
        }
        self.0.alloc_mr(max_len)
    }
}

impl Device for SlowDev {
    type Pd = SlowPd;
    type Mr = <Fabric as Device>::Mr;
    type Cq = <Fabric as Device>::Cq;
    type Qp = <Fabric as Device>::Qp;
    type Listener = <Fabric as Device>::Listener;
    fn name(&self) -> &str {
        "slow-memfabric"
    }
    fn max_private_data(&self) -> usize {
        self.0.max_private_data()
    }
    fn alloc_pd(&self) -> Result<SlowPd, VerbsError> {
        self.0.alloc_pd().map(SlowPd)
    }
    fn create_cq(&self, c: usize) -> Result<Self::Cq, VerbsError> {
        self.0.create_cq(c)
    }
    fn create_qp(&self, pd: &SlowPd, init: QpInit<Self::Cq>) -> Result<Self::Qp, VerbsError> {
        self.0.create_qp(&pd.0, init)
    }
    fn connect(
        &self,
        qp: &Self::Qp,
        addr: SocketAddr,
        param: ConnParam,
    ) -> impl std::future::Future<Output = Result<ConnInfo, VerbsError>> + Send {
        self.0.connect(qp, addr, param)
    }
    fn listen(
        &self,
        addr: SocketAddr,
    ) -> impl std::future::Future<Output = Result<Self::Listener, VerbsError>> + Send {
        self.0.listen(addr)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn call_prepared_across_a_reconnect_is_sent_on_the_new_connection() {
    let fabric = Fabric::new();
    let srv = common::server(fabric.clone(), RdmaConfig::default()).await;
    let cfg = RdmaConfig {
        reconnect: Backoff {
            initial: Duration::from_millis(1),
            max: Duration::from_millis(5),
            max_attempts: 8,
        },
        ..Default::default()
    };
    let c = common::client(SlowDev(fabric.clone()), srv.local_addr(), cfg).await;
    let t = common::typed(&c);
    t.null().await.unwrap();

    // The next registration (the GET's Write chunk) takes 300 ms.
    SLOW_NEXT_ALLOC_MS.store(300, Ordering::SeqCst);
    let c2 = c.clone();
    let call = tokio::spawn(async move {
        let start = Instant::now();
        let r = c2
            .call_with_report(
                common::get_req(64 << 10, 7, Some(64 << 10)).with_timeout(Duration::from_secs(5)),
            )
            .await;
        (r.map(|(p, _)| p), start.elapsed())
    });
    // The connection dies while the call is being prepared; the client
    // reconnects (1 ms backoff) long before the prepare ends.
    tokio::time::sleep(Duration::from_millis(50)).await;
    c.disconnect_for_test();
    // Within its 5 s timeout: not left in the queue.
    let (r, took) = call.await.unwrap();
    let p = r.unwrap_or_else(|e| panic!("call failed after {took:?}: {e}"));
    common::check_get(&p, 64 << 10, 7);
    assert!(c.stats().reconnects.load(Ordering::Relaxed) >= 1);
}

/// A GET that takes 200 ms at the server (time to cut the connection).
struct SlowGet(Arc<RdmatestServer>);

impl Service for SlowGet {
    fn program(&self) -> u32 {
        rdmatest::PROGRAM
    }
    fn versions(&self) -> RangeInclusive<u32> {
        1..=1
    }
    fn handle(
        &self,
        call: Call,
    ) -> impl std::future::Future<Output = Result<Payload, ProcError>> + Send {
        let inner = self.0.clone();
        async move {
            if call.procedure == rdmatest::proto::PROC_GET {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            inner.handle(call).await
        }
    }
}

async fn run(disconnect: bool) -> bool {
    let fabric = Fabric::new();
    let disp = Dispatcher::builder()
        .service(SlowGet(Arc::new(RdmatestServer::default())))
        .build();
    let srv = common::server_with(fabric.clone(), disp, RdmaConfig::default()).await;
    let c = common::client(fabric, srv.local_addr(), RdmaConfig::default()).await;
    common::typed(&c).null().await.unwrap();
    const LEN: u32 = 3 << 20; // three 1 MiB segments
    let buf = BytesMut::with_capacity(LEN as usize);
    let base = buf.as_ptr() as usize;
    let mut a = Payload::builder();
    a.item(&rdmatest::GetArgs {
        length: LEN,
        seed: 5,
    });
    let req = oncrpc::Request::new(
        rdmatest::PROGRAM,
        rdmatest::VERSION,
        rdmatest::proto::PROC_GET,
        a.finish(),
    )
    .with_result_buf(buf);
    let c2 = c.clone();
    let h = tokio::spawn(async move { c2.call_with_report(req).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    if disconnect {
        c.disconnect_for_test();
    }
    let (p, r) = h.await.unwrap().unwrap();
    common::check_get(&p, LEN, 5);
    let inside = match p.pieces().iter().find(|x| x.is_ddp()) {
        Some(d) => {
            let at = d.bytes().as_ptr() as usize;
            at >= base && at < base + LEN as usize
        }
        None => false,
    };
    assert_eq!(r.retransmits, u32::from(disconnect), "{r}");
    inside
}

/// A GET into the caller's buffer, registered in three segments,
/// is retransmitted after a connection loss; the result must still be
/// placed in the caller's buffer (only the last segment's piece was kept,
/// so the retransmission offered no Write chunk and got a Long Reply in a
/// fresh allocation).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retransmitted_get_keeps_the_callers_buffer() {
    assert!(run(false).await, "control: no reconnect, zero copy");
    assert!(
        run(true).await,
        "after a retransmission the result is not in the caller's buffer"
    );
}

/// A connection that goes silent (no reply, no FIN or RST: a peer or
/// a middlebox that lost its state) is replaced once a call times out with
/// nothing received and a NULL probe times out too; the live calls go on,
/// on a new connection. The stand-in answers its first call, then nothing
/// on that connection; later connections answer everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connection_is_replaced() {
    use common::stand_in;
    let cfg = RdmaConfig {
        call_timeout: Duration::from_millis(200),
        ..Default::default()
    };
    let c = stand_in::client_of(cfg, |req, dev, conn| {
        let mut n = 0u64;
        stand_in::serve(req, dev, move |msg, pd, qp| {
            n += 1;
            if conn == 0 && n > 1 {
                return Some(vec![]); // silent
            }
            let xid = u32::from_be_bytes([msg[0], msg[1], msg[2], msg[3]]);
            let reply = stand_in::words(&[xid, 1, 32, 0, 0, 0, 0, xid, 1, 0, 0, 0, 0]);
            Some(vec![stand_in::send(pd, qp, n, reply)?])
        })
    })
    .await;
    let t = common::typed(&c);
    t.null().await.unwrap();
    // Times out; the probe times out too; the connection is replaced.
    assert!(t.null().await.is_err());
    let mut ok_at = None;
    for i in 0..20 {
        if t.null().await.is_ok() {
            ok_at = Some(i);
            break;
        }
    }
    let s = c.stats();
    assert!(
        ok_at.is_some(),
        "no call succeeded after the connection went silent (reconnects {})",
        s.reconnects.load(Ordering::Relaxed)
    );
    assert_eq!(s.silent_disconnects.load(Ordering::Relaxed), 1);
    assert_eq!(s.reconnects.load(Ordering::Relaxed), 1);
}

/// A peer that accepts every new connection and closes it at once
/// must not get a reconnect (and a retransmission of the outstanding
/// calls) every 10 ms for ever: connections that carry no message count as
/// failed attempts, so the backoff grows and the call fails, typed, after
/// `max_attempts`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_closed_at_once_count_as_failed_attempts() {
    use common::stand_in;
    use rdma_verbs::{ConnParam, ConnectRequest, Device as _, QpInit, QueuePair};
    use std::sync::atomic::AtomicUsize;
    static ACCEPTED: AtomicUsize = AtomicUsize::new(0);
    let attempts = 5;
    let cfg = RdmaConfig {
        reconnect: Backoff {
            initial: Duration::from_millis(5),
            max: Duration::from_millis(40),
            max_attempts: attempts,
        },
        call_timeout: Duration::from_secs(10),
        ..Default::default()
    };
    let c = stand_in::client_of(cfg, |req, dev, conn| async move {
        if conn == 0 {
            let mut n = 0u64;
            stand_in::serve(req, dev, move |msg, pd, qp| {
                n += 1;
                let xid = u32::from_be_bytes([msg[0], msg[1], msg[2], msg[3]]);
                let reply = stand_in::words(&[xid, 1, 32, 0, 0, 0, 0, xid, 1, 0, 0, 0, 0]);
                // The second call is not answered; the test cuts the
                // connection under it.
                if n == 2 {
                    return Some(vec![]);
                }
                Some(vec![stand_in::send(pd, qp, n, reply)?])
            })
            .await;
            return;
        }
        ACCEPTED.fetch_add(1, Ordering::SeqCst);
        let pd = dev.alloc_pd().unwrap();
        let cq = dev.create_cq(16).unwrap();
        let qp = dev.create_qp(&pd, QpInit::with_cq(cq)).unwrap();
        let pdata = RdmaConfig::default().private_data().encode();
        let param = ConnParam::new(bytes::Bytes::copy_from_slice(&pdata), 4, 4);
        if req.accept(&qp, param).await.is_ok() {
            qp.disconnect();
        }
    })
    .await;
    let t = common::typed(&c);
    t.null().await.unwrap();
    let c2 = c.clone();
    let call = tokio::spawn(async move { common::typed(&c2).null().await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    c.disconnect_for_test();
    let r = call.await.unwrap();
    let e = r.expect_err("no connection carries the call");
    assert!(
        e.to_string().contains("reconnect failed"),
        "a typed reconnect failure, not {e}"
    );
    let accepted = ACCEPTED.load(Ordering::SeqCst);
    assert!(
        accepted <= attempts as usize,
        "{accepted} connections for {attempts} attempts"
    );
    // The retransmissions are bounded by the attempts too.
    assert!(c.stats().retransmits.load(Ordering::Relaxed) <= u64::from(attempts) + 1);
}
