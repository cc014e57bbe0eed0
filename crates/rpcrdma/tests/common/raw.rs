//! A raw verbs requester over the iWARP loopback, as another
//! implementation would be: it sends hand-built transport messages and
//! returns what comes back.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use rdma_verbs::{
    Access, CompletionQueue, ConnParam, Device as _, MemoryRegion, MrBuffer, ProtectionDomain,
    QpInit, QueuePair, RecvWr, SendWr, Sge, WcOpcode,
};

/// Receive buffer size of the raw peer (large enough for any reply here).
pub const RAW_RECV: usize = 16384;

pub struct Raw {
    _dev: iwarp::Device,
    pub pd: iwarp::Pd,
    pub cq: iwarp::Cq,
    pub qp: iwarp::Qp,
    pub recvs: Vec<iwarp::Mr>,
    pub info: rdma_verbs::ConnInfo,
}

impl Raw {
    pub async fn connect(addr: std::net::SocketAddr, private: &[u8]) -> Raw {
        let dev = iwarp::Device::default();
        let pd = dev.alloc_pd().unwrap();
        let cq = dev.create_cq(256).unwrap();
        let qp = dev.create_qp(&pd, QpInit::with_cq(cq.clone())).unwrap();
        let mut recvs = Vec::new();
        for i in 0..8u64 {
            let mr = pd
                .register(
                    MrBuffer::Mutable(BytesMut::zeroed(RAW_RECV)),
                    Access::LOCAL_WRITE,
                )
                .unwrap();
            qp.post_recv(RecvWr::new(
                i,
                vec![Sge::new(mr.lkey(), 0, RAW_RECV as u32)],
            ))
            .unwrap();
            recvs.push(mr);
        }
        let info = dev
            .connect(
                &qp,
                addr,
                ConnParam::new(Bytes::copy_from_slice(private), 4, 4),
            )
            .await
            .unwrap();
        Raw {
            _dev: dev,
            pd,
            cq,
            qp,
            recvs,
            info,
        }
    }

    /// Sends `msg` and returns the next received message.
    pub async fn exchange(&mut self, msg: Vec<u8>) -> Vec<u8> {
        let len = msg.len() as u32;
        let mr = self
            .pd
            .register(MrBuffer::Frozen(Bytes::from(msg)), Access::NONE)
            .unwrap();
        self.qp
            .post_send(SendWr::send(100, vec![Sge::new(mr.lkey(), 0, len)]))
            .unwrap();
        loop {
            let wc = tokio::time::timeout(Duration::from_secs(10), self.cq.next())
                .await
                .expect("no reply");
            assert!(wc.is_success(), "{wc:?}");
            if wc.opcode == WcOpcode::Recv {
                let mr = self.recvs.remove(0);
                let mut b = mr.deregister().unwrap().try_into_bytes_mut().unwrap();
                b.truncate(wc.byte_len as usize);
                return b.to_vec();
            }
        }
    }
}
