//! A stand-in responder written with raw verbs over the software iWARP
//! provider: it answers what a test tells it to, the way another
//! implementation (or a broken one) would.

use std::future::Future;

use bytes::{Bytes, BytesMut};
use rdma_verbs::{
    Access, CompletionQueue, ConnParam, ConnectRequest, Device, Listener, MemoryRegion, MrBuffer,
    ProtectionDomain, QpInit, QueuePair, RecvWr, SendWr, Sge, WcOpcode,
};
use rpcrdma::{Bindings, RdmaClient, RdmaConfig};

/// The stand-in's protection domain.
pub type Pd = <iwarp::Device as Device>::Pd;
/// The stand-in's queue pair.
pub type Qp = <iwarp::Device as Device>::Qp;
/// A region the stand-in registered.
pub type Mr = <iwarp::Device as Device>::Mr;

/// Accepts `req` with our RFC 8797 private data and 64 receives of 4 KiB
/// posted (never re-posted), then hands each received message to `answer`,
/// which posts what it likes and returns the regions to keep registered,
/// or `None` to stop serving.
pub async fn serve<F>(req: iwarp::device::ConnRequest, dev: iwarp::Device, answer: F)
where
    F: FnMut(&[u8], &Pd, &Qp) -> Option<Vec<Mr>>,
{
    let pdata = RdmaConfig::default().private_data().encode();
    serve_with(req, dev, Bytes::copy_from_slice(&pdata), 4096, answer).await
}

/// [`serve`] accepting with `private_data` (empty: none) and receive
/// buffers of `recv_size` bytes.
pub async fn serve_with<F>(
    req: iwarp::device::ConnRequest,
    dev: iwarp::Device,
    private_data: Bytes,
    recv_size: usize,
    mut answer: F,
) where
    F: FnMut(&[u8], &Pd, &Qp) -> Option<Vec<Mr>>,
{
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(256).unwrap();
    let qp = dev.create_qp(&pd, QpInit::with_cq(cq.clone())).unwrap();
    let mut recvs = std::collections::HashMap::new();
    for i in 0..64u64 {
        let mr = pd
            .register(
                MrBuffer::Mutable(BytesMut::zeroed(recv_size)),
                Access::LOCAL_WRITE,
            )
            .unwrap();
        qp.post_recv(RecvWr::new(
            i,
            vec![Sge::new(mr.lkey(), 0, recv_size as u32)],
        ))
        .unwrap();
        recvs.insert(i, mr);
    }
    if req
        .accept(&qp, ConnParam::new(private_data, 4, 4))
        .await
        .is_err()
    {
        return;
    }
    let mut keep = Vec::new();
    loop {
        let wc = cq.next().await;
        if wc.opcode != WcOpcode::Recv {
            continue;
        }
        if !wc.is_success() {
            return; // flushed: the connection ended
        }
        let Some(mr) = recvs.remove(&wc.wr_id) else {
            continue;
        };
        let mut b = mr.deregister().unwrap().try_into_bytes_mut().unwrap();
        b.truncate(wc.byte_len as usize);
        match answer(&b, &pd, &qp) {
            Some(regions) => keep.extend(regions),
            None => return,
        }
    }
}

/// Posts `msg` as one Send: the region to keep, or `None` if the QP is
/// gone.
pub fn send(pd: &Pd, qp: &Qp, wr_id: u64, msg: Bytes) -> Option<Mr> {
    let len = msg.len() as u32;
    let mr = pd.register(MrBuffer::Frozen(msg), Access::NONE).unwrap();
    qp.post_send(SendWr::send(wr_id, vec![Sge::new(mr.lkey(), 0, len)]))
        .ok()?;
    Some(mr)
}

/// The bytes of big-endian words.
pub fn words(w: &[u32]) -> Bytes {
    w.iter()
        .flat_map(|x| x.to_be_bytes())
        .collect::<Vec<u8>>()
        .into()
}

/// A listener on loopback that serves its `n`-th connection (from 0) with
/// `serve_conn(request, device, n)`, and a client of it.
pub async fn client_of<F, Fut>(cfg: RdmaConfig, serve_conn: F) -> RdmaClient<iwarp::Device>
where
    F: Fn(iwarp::device::ConnRequest, iwarp::Device, usize) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let dev = iwarp::Device::default();
    let listener = dev.listen("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = listener.local_addr();
    tokio::spawn(async move {
        let mut n = 0;
        while let Ok(req) = listener.next_request().await {
            tokio::spawn(serve_conn(req, dev.clone(), n));
            n += 1;
        }
    });
    RdmaClient::connect(iwarp::Device::default(), addr, cfg, Bindings::rdmatest())
        .await
        .unwrap()
}
