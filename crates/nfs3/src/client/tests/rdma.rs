//! The clients over RPC-over-RDMA (`rpcrdma` on its in-memory provider)
//! with the RFC 8267 bindings on both sides, against the fake server:
//! what each call put on the wire, from the requester's reports.

use std::sync::Mutex;

use bytes::{Bytes, BytesMut};
use oncrpc::{Channel, Dispatcher, Payload, Request, RpcError};
use rpcrdma::memfabric::Fabric;
use rpcrdma::{Bindings, CallKind, CallReport, RdmaClient, RdmaConfig, RdmaServer, ReplyMode};

use super::fake::{fh, new_state, FakeMount, FakeNfs, Kind, ROOT};
use crate::binding::{MountBinding, Nfs3Binding};
use crate::client::{MountClient, Nfs3Client};
use crate::types::*;

/// A channel that keeps the report of every call.
struct Recorder {
    client: RdmaClient<Fabric>,
    reports: Mutex<Vec<CallReport>>,
}

impl Recorder {
    fn take(&self) -> Vec<CallReport> {
        std::mem::take(&mut *self.reports.lock().unwrap())
    }

    fn last(&self) -> CallReport {
        self.take().pop().expect("a call was made")
    }
}

impl Channel for Recorder {
    async fn call(&self, req: Request) -> Result<Payload, RpcError> {
        let (p, r) = self.client.call_with_report(req).await?;
        self.reports.lock().unwrap().push(r);
        Ok(p)
    }
}

fn bindings() -> Bindings {
    let mut b = Bindings::new();
    b.add(Nfs3Binding);
    b.add(MountBinding);
    b
}

#[tokio::test]
async fn rfc8267_ddp_items_move_in_chunks_and_large_listings_in_reply_chunks() {
    let s = new_state();
    let (file, link) = {
        let mut st = s.lock().unwrap();
        st.page = 400;
        for i in 0..300 {
            st.add(ROOT, &format!("entry-{i:04}"), Kind::File(vec![]));
        }
        let f = st.add(ROOT, "big", Kind::File(vec![0x5A; 200_000]));
        let l = st.add(ROOT, "link", Kind::Link(Bytes::from(vec![b'p'; 2000])));
        (f, l)
    };
    let disp = Dispatcher::builder()
        .service(FakeNfs(s.clone()))
        .service(FakeMount(s.clone()))
        .build();
    let dev = Fabric::new();
    let cfg = RdmaConfig::default().with_inline(1024);
    let srv = RdmaServer::bind(
        dev.clone(),
        "127.0.0.1:0".parse().unwrap(),
        disp,
        cfg.clone(),
        bindings(),
    )
    .await
    .unwrap();
    let ch = Recorder {
        client: RdmaClient::connect(dev, srv.local_addr(), cfg, bindings())
            .await
            .unwrap(),
        reports: Mutex::new(Vec::new()),
    };
    let nfs = Nfs3Client::new(&ch)
        .with_auth_sys(1, 1, vec![], "h")
        .unwrap();

    // MNT and GETATTR: small replies, inline, no Reply chunk.
    let root = MountClient::new(&ch).mnt("/export").await.unwrap().fhandle;
    let r = ch.last();
    assert!(!r.reply_chunk_offered, "MNT: {r:?}");
    nfs.getattr(&root).await.unwrap();
    let r = ch.last();
    assert!(!r.reply_chunk_offered, "GETATTR: {r:?}");
    assert_eq!(r.reply_mode, ReplyMode::Short);
    nfs.lookup(&root, b"big").await.unwrap();
    assert!(!ch.last().reply_chunk_offered, "LOOKUP");

    // READ: one Write chunk, the data placed into our buffer.
    let buf = BytesMut::with_capacity(150_000);
    let ptr = buf.as_ptr();
    let ok = nfs.read_into(&fh(file), 10, 150_000, buf).await.unwrap();
    assert_eq!(ok.data.len(), 150_000);
    assert!(ok.data.iter().all(|&b| b == 0x5A));
    assert_eq!(ok.data.as_ptr(), ptr, "READ data not placed in the buffer");
    let r = ch.last();
    assert_eq!(r.write_chunks, 1, "{r:?}");
    assert_eq!(r.write_chunk_bytes, vec![150_000]);
    assert!(!r.reply_chunk_offered, "READ: {r:?}");

    // WRITE: the data in a Read chunk.
    let data = Bytes::from(vec![0xA5; 100_000]);
    let w = nfs
        .write(&fh(file), 0, data, StableHow::FileSync)
        .await
        .unwrap();
    assert_eq!(w.count, 100_000);
    let r = ch.last();
    assert_eq!(r.call_kind, CallKind::Chunked, "{r:?}");
    assert_eq!((r.read_chunks, r.read_chunk_bytes), (1, 100_000));
    assert!(!r.reply_chunk_offered, "WRITE: {r:?}");
    let back = nfs.read(&fh(file), 0, 100_000).await.unwrap();
    assert!(back.data.iter().all(|&b| b == 0xA5));
    ch.take();

    // READLINK: the path in a Write chunk.
    let rl = nfs.readlink(&fh(link)).await.unwrap();
    assert_eq!(rl.data.as_bytes().len(), 2000);
    let r = ch.last();
    assert_eq!(r.write_chunk_bytes, vec![2000], "{r:?}");
    assert!(!r.reply_chunk_offered);

    // SYMLINK with a target longer than the inline threshold: a Read chunk.
    let target = vec![b't'; 3000];
    nfs.symlink(&root, b"l2", &target, Sattr3::default())
        .await
        .unwrap();
    let r = ch.last();
    assert_eq!((r.read_chunks, r.read_chunk_bytes), (1, 3000), "{r:?}");

    // READDIRPLUS of 300+ entries: a Reply chunk, the reply written into it.
    let all = nfs.readdirplus_all(&root).await.unwrap();
    assert_eq!(all.len(), 303);
    let reports = ch.take();
    // 300 entries of about 140 bytes do not fit one 32 KiB maxcount: the
    // server cut the listing and the client followed the cookies.
    assert!(reports.len() >= 2, "{}", reports.len());
    for r in &reports {
        assert!(r.reply_chunk_offered, "READDIRPLUS: {r:?}");
    }
    assert!(reports.iter().any(|r| r.reply_mode == ReplyMode::Long));
    let all = nfs.readdir_all(&root).await.unwrap();
    assert_eq!(all.len(), 303);
    assert!(ch.take().iter().all(|r| r.reply_chunk_offered));
    srv.shutdown().await;
}
