//! End to end: the typed NFSv3 and MOUNT v3 clients (`nfs3::client`)
//! against `NfsService` and `MountService` over RPC-over-RDMA on the
//! in-memory provider (memfabric) and on soft iWARP over 127.0.0.1, and
//! over ONC RPC over TCP. Every NFS procedure is called and checked
//! against the file system; over RDMA, each call's `CallReport` shows the
//! chunks RFC 8267 §3 puts where they belong:
//!
//! * READ data in a Write chunk, WRITE data in a Read chunk (1 B, 4 KiB,
//!   odd sizes, 1 MiB, across EOF);
//! * a 4000-byte SYMLINK target in a Read chunk, its READLINK in a Write
//!   chunk;
//! * READDIRPLUS of 10,000 entries in Reply chunks at inline thresholds
//!   1024 and 4096;
//! * every other (small) procedure inline, with no chunk at all.

use std::net::SocketAddr;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use nfs3::args::{Createhow3, Mknoddata3};
use nfs3::client::{MountClient, Nfs3Client};
use nfs3::procs::proc3;
use nfs3::types::{access, Createverf3, Ftype3, NfsFh3, Sattr3, StableHow};
use nfs3::{MountBinding, Nfs3Binding};
use nfs3_server::{Export, ExportOptions, MountService, NfsService};
use oncrpc::{Channel, Dispatcher, Payload, Request, RpcError};
use oncrpc_tcp::{ServerConfig, TcpChannel, TcpServer};
use rpcrdma::memfabric::Fabric;
use rpcrdma::{Bindings, CallReport, RdmaClient, RdmaConfig, RdmaServer, ReplyMode};

fn bindings() -> Bindings {
    let mut b = Bindings::new();
    b.add(Nfs3Binding).add(MountBinding);
    b
}

fn dispatcher(export: &Arc<Export>) -> Dispatcher {
    Dispatcher::builder()
        .service(NfsService::new(export.clone()))
        .service(MountService::new(export.clone()))
        .build()
}

/// A client connection of one of the three transports; RDMA calls keep
/// their reports, tagged with the procedure number.
enum Conn {
    Mem(RdmaClient<Fabric>),
    Iwarp(RdmaClient<iwarp::Device>),
    Tcp(TcpChannel),
}

/// What the tests call through.
struct Recorded {
    conn: Conn,
    reports: Mutex<Vec<(u32, u32, CallReport)>>,
}

impl Recorded {
    fn take(&self) -> Vec<(u32, u32, CallReport)> {
        std::mem::take(&mut *self.reports.lock().unwrap())
    }

    fn is_rdma(&self) -> bool {
        !matches!(self.conn, Conn::Tcp(_))
    }

    /// The one report of the last call of `procedure` (NFS) since the
    /// last `take`.
    fn last(&self, procedure: u32) -> CallReport {
        let r = self.reports.lock().unwrap();
        r.iter()
            .rev()
            .find(|(prog, p, _)| *prog == nfs3::NFS_PROGRAM && *p == procedure)
            .map(|(_, _, r)| r.clone())
            .unwrap_or_else(|| panic!("no report of procedure {procedure}"))
    }
}

impl Channel for Recorded {
    async fn call(&self, req: Request) -> Result<Payload, RpcError> {
        let (prog, procedure) = (req.prog, req.procedure);
        let (payload, report) = match &self.conn {
            Conn::Mem(c) => c.call_with_report(req).await.map(|(p, r)| (p, Some(r)))?,
            Conn::Iwarp(c) => c.call_with_report(req).await.map(|(p, r)| (p, Some(r)))?,
            Conn::Tcp(c) => (c.call(req).await?, None),
        };
        if let Some(r) = report {
            self.reports.lock().unwrap().push((prog, procedure, r));
        }
        Ok(payload)
    }
}

/// A temporary export served over one transport, and a client of it.
struct Rig {
    _tmp: tempfile::TempDir,
    root_dir: std::path::PathBuf,
    ch: Arc<Recorded>,
    nfs: Nfs3Client<Arc<Recorded>>,
    root: NfsFh3,
    stop: Box<dyn FnOnce() + Send>,
}

#[derive(Clone, Copy, Debug)]
enum Transport {
    Mem,
    Iwarp,
    Tcp,
}

impl Rig {
    async fn new(t: Transport, inline: u32) -> Rig {
        let tmp = tempfile::tempdir().unwrap();
        let root_dir = tmp.path().join("export");
        std::fs::create_dir(&root_dir).unwrap();
        let export = Export::open(
            &root_dir,
            ExportOptions {
                root_squash: false,
                ..ExportOptions::default()
            },
        )
        .unwrap();
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let config = RdmaConfig::default().with_inline(inline);
        let (conn, stop): (Conn, Box<dyn FnOnce() + Send>) = match t {
            Transport::Mem => {
                let f = Fabric::new();
                let srv = RdmaServer::bind(
                    f.clone(),
                    any,
                    dispatcher(&export),
                    config.clone(),
                    bindings(),
                )
                .await
                .unwrap();
                let c = RdmaClient::connect(f, srv.local_addr(), config, bindings())
                    .await
                    .unwrap();
                let srv = Arc::new(srv);
                (
                    Conn::Mem(c),
                    Box::new(move || {
                        tokio::spawn(async move { srv.shutdown().await });
                    }),
                )
            }
            Transport::Iwarp => {
                let srv = RdmaServer::bind(
                    iwarp::Device::default(),
                    any,
                    dispatcher(&export),
                    config.clone(),
                    bindings(),
                )
                .await
                .unwrap();
                let c = RdmaClient::connect(
                    iwarp::Device::default(),
                    srv.local_addr(),
                    config,
                    bindings(),
                )
                .await
                .unwrap();
                let srv = Arc::new(srv);
                (
                    Conn::Iwarp(c),
                    Box::new(move || {
                        tokio::spawn(async move { srv.shutdown().await });
                    }),
                )
            }
            Transport::Tcp => {
                let srv = TcpServer::bind(
                    "127.0.0.1:0",
                    Arc::new(dispatcher(&export)),
                    ServerConfig::default(),
                )
                .await
                .unwrap();
                let addr = srv.local_addr().unwrap();
                let handle = srv.shutdown_handle();
                tokio::spawn(srv.run());
                let c = TcpChannel::connect(addr).await.unwrap();
                (Conn::Tcp(c), Box::new(move || handle.shutdown()))
            }
        };
        let ch = Arc::new(Recorded {
            conn,
            reports: Mutex::new(Vec::new()),
        });
        let mount = MountClient::new(ch.clone())
            .with_auth_sys(0, 0, vec![], "e2e")
            .unwrap();
        mount.null().await.unwrap();
        let root = mount.mnt("/").await.unwrap().fhandle;
        let by_path = mount.mnt(root_dir.to_str().unwrap()).await.unwrap().fhandle;
        assert_eq!(root, by_path, "the export by / and by its path");
        assert!(!mount.export().await.unwrap().is_empty());
        for (_, p, r) in ch.take() {
            if p == nfs3::mount::mntproc::EXPORT {
                // The export list may be long: a Reply chunk (RFC 8267 §4).
                assert!(r.reply_chunk_offered, "MOUNT EXPORT: {r}");
            } else {
                assert_inline(&r, &format!("MOUNT procedure {p}"));
            }
        }
        let nfs = Nfs3Client::new(ch.clone())
            .with_auth_sys(0, 0, vec![], "e2e")
            .unwrap();
        Rig {
            _tmp: tmp,
            root_dir,
            ch,
            nfs,
            root,
            stop,
        }
    }

    fn path(&self, rel: &str) -> std::path::PathBuf {
        self.root_dir.join(rel)
    }

    fn finish(self) {
        (self.stop)();
    }
}

/// A pattern no two offsets of a small range share.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_be_bytes()[1] ^ seed)
        .collect()
}

/// No chunk of any kind, both ways.
fn assert_inline(r: &CallReport, what: &str) {
    assert_eq!(r.read_chunks, 0, "{what}: {r}");
    assert_eq!(r.position_zero_bytes, 0, "{what}: {r}");
    assert_eq!(r.write_chunks, 0, "{what}: {r}");
    assert!(!r.reply_chunk_offered, "{what}: {r}");
    assert_eq!(r.reply_mode, ReplyMode::Short, "{what}: {r}");
}

/// READ and WRITE at the sizes RFC 8267 must carry in chunks.
async fn read_write_sizes(rig: &Rig) {
    let nfs = &rig.nfs;
    let f = nfs
        .create(&rig.root, b"rw", Createhow3::Unchecked(Sattr3::default()))
        .await
        .unwrap()
        .obj
        .unwrap();
    let mut offset = 0u64;
    let mut expect = Vec::new();
    for (i, len) in [1usize, 4096, 4097, 12_345, 65_537, 1 << 20]
        .into_iter()
        .enumerate()
    {
        let data = pattern(len, i as u8);
        let w = nfs
            .write(&f, offset, Bytes::from(data.clone()), StableHow::Unstable)
            .await
            .unwrap();
        assert_eq!(w.count as usize, len);
        if rig.ch.is_rdma() {
            let r = rig.ch.last(proc3::WRITE);
            if len >= r.thresholds.call_inline as usize {
                // The call cannot fit inline: the data, and only the data,
                // travels in a Read chunk (RFC 8267 §3.1).
                assert_eq!(r.read_chunks, 1, "WRITE {len}: data in a Read chunk: {r}");
                assert_eq!(r.read_chunk_bytes, len as u64, "WRITE {len}: {r}");
                assert_eq!(r.call_kind, rpcrdma::CallKind::Chunked, "WRITE {len}: {r}");
            } else if len == 1 {
                // A call that fits may carry its DDP-eligible data inline
                // (RFC 8166 §3.5.2).
                assert_inline(&r, "WRITE 1");
            }
            if r.read_chunks > 0 {
                assert_eq!(r.read_chunk_bytes, len as u64, "WRITE {len}: {r}");
            }
            assert_eq!(r.position_zero_bytes, 0, "WRITE {len}: {r}");
            assert_eq!(r.write_chunks, 0, "WRITE {len}: {r}");
            assert!(!r.reply_chunk_offered, "WRITE {len}: {r}");
        }
        let back = nfs.read(&f, offset, len as u32).await.unwrap();
        assert_eq!(&back.data[..], &data[..], "READ {len} at {offset}");
        assert_eq!(back.count as usize, len);
        if rig.ch.is_rdma() {
            let r = rig.ch.last(proc3::READ);
            assert_eq!(r.write_chunks, 1, "READ {len}: data in a Write chunk: {r}");
            assert_eq!(r.write_chunk_bytes, vec![len as u64], "READ {len}: {r}");
            assert_eq!(r.read_chunks, 0, "READ {len}: {r}");
            assert!(!r.reply_chunk_offered, "READ {len}: {r}");
        }
        expect.extend_from_slice(&data);
        offset += len as u64;
    }
    let c = nfs.commit(&f, 0, 0).await.unwrap();
    let w = nfs
        .write(&f, 0, Bytes::from_static(b"x"), StableHow::FileSync)
        .await
        .unwrap();
    assert_eq!(w.committed, StableHow::FileSync);
    assert_eq!(w.verf, c.verf, "one verifier while the server runs");
    expect[0] = b'x';
    assert_eq!(std::fs::read(rig.path("rw")).unwrap(), expect);

    // Across EOF: 100 bytes are left of the 4096 asked for.
    let size = expect.len() as u64;
    let r = nfs.read(&f, size - 100, 4096).await.unwrap();
    assert!(r.eof);
    assert_eq!(&r.data[..], &expect[expect.len() - 100..]);
    if rig.ch.is_rdma() {
        let rep = rig.ch.last(proc3::READ);
        assert_eq!(rep.write_chunk_bytes, vec![100], "READ across EOF: {rep}");
    }
    // At EOF: nothing, and the Write chunk stays unused.
    let r = nfs.read(&f, size, 4096).await.unwrap();
    assert!(r.eof && r.data.is_empty());
    if rig.ch.is_rdma() {
        let rep = rig.ch.last(proc3::READ);
        assert_eq!(rep.write_chunk_bytes, vec![0], "READ at EOF: {rep}");
    }
    assert_eq!(nfs.getattr(&f).await.unwrap().size, size);
}

/// Every other procedure, checked against the file system; over RDMA
/// each is inline without chunks, except SYMLINK/READLINK of 4000 bytes.
async fn every_procedure(rig: &Rig) {
    let nfs = &rig.nfs;
    let root = &rig.root;
    nfs.null().await.unwrap();
    let a = nfs.getattr(root).await.unwrap();
    assert_eq!(a.ftype, Ftype3::Dir);
    assert_eq!(a.fileid, std::fs::metadata(&rig.root_dir).unwrap().ino());
    let info = nfs.fsinfo(root).await.unwrap();
    assert!(info.rtmax >= 1 << 20 && info.wtmax >= 1 << 20, "{info:?}");
    nfs.fsstat(root).await.unwrap();
    nfs.pathconf(root).await.unwrap();
    let acc = nfs.access(root, access::ALL).await.unwrap();
    assert_eq!(acc.access & access::READ, access::READ);

    // CREATE in the three modes.
    let u = nfs
        .create(
            root,
            b"u",
            Createhow3::Unchecked(Sattr3 {
                mode: Some(0o640),
                ..Sattr3::default()
            }),
        )
        .await
        .unwrap();
    assert_eq!(
        std::fs::metadata(rig.path("u"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o640
    );
    let g = nfs
        .create(root, b"u", Createhow3::Guarded(Sattr3::default()))
        .await
        .unwrap_err();
    assert_eq!(g.nfs_status(), Some(nfs3::Nfsstat3::Exist));
    let verf = Createverf3(*b"e2e-verf");
    let e1 = nfs
        .create(root, b"x", Createhow3::Exclusive(verf))
        .await
        .unwrap();
    let e2 = nfs
        .create(root, b"x", Createhow3::Exclusive(verf))
        .await
        .unwrap();
    assert_eq!(
        e1.obj, e2.obj,
        "EXCLUSIVE with the same verifier is a retransmission"
    );
    let u = u.obj.unwrap();

    // SETATTR, LOOKUP.
    nfs.setattr(
        &u,
        Sattr3 {
            size: Some(10),
            ..Sattr3::default()
        },
        None,
    )
    .await
    .unwrap();
    assert_eq!(std::fs::metadata(rig.path("u")).unwrap().len(), 10);
    let l = nfs.lookup(root, b"u").await.unwrap();
    assert_eq!(l.object, u);
    let missing = nfs.lookup(root, b"nope").await.unwrap_err();
    assert_eq!(missing.nfs_status(), Some(nfs3::Nfsstat3::Noent));

    // MKDIR, LINK, RENAME (over an existing name), MKNOD.
    let d = nfs
        .mkdir(root, b"d", Sattr3::default())
        .await
        .unwrap()
        .obj
        .unwrap();
    assert!(rig.path("d").is_dir());
    nfs.link(&u, &d, b"hard").await.unwrap();
    assert_eq!(std::fs::metadata(rig.path("u")).unwrap().nlink(), 2);
    nfs.create(&d, b"other", Createhow3::Unchecked(Sattr3::default()))
        .await
        .unwrap();
    nfs.rename(&d, b"hard", &d, b"other").await.unwrap();
    assert_eq!(
        std::fs::metadata(rig.path("d/other")).unwrap().ino(),
        std::fs::metadata(rig.path("u")).unwrap().ino()
    );
    nfs.mknod(&d, b"fifo", Mknoddata3::Fifo(Sattr3::default()))
        .await
        .unwrap();
    assert!(std::fs::metadata(rig.path("d/fifo"))
        .unwrap()
        .file_type()
        .is_fifo());

    if rig.ch.is_rdma() {
        for (prog, p, r) in rig.ch.take() {
            assert_inline(&r, &format!("program {prog} procedure {p}"));
        }
    }

    // SYMLINK and READLINK of 4000 bytes: Read chunk, then Write chunk.
    let target: String = (0..4000).map(|i| (b'a' + (i % 26) as u8) as char).collect();
    let s = nfs
        .symlink(&d, b"link", target.as_bytes(), Sattr3::default())
        .await
        .unwrap()
        .obj
        .unwrap();
    assert_eq!(
        std::fs::read_link(rig.path("d/link"))
            .unwrap()
            .to_str()
            .unwrap(),
        target
    );
    let back = nfs.readlink(&s).await.unwrap();
    assert_eq!(back.data.as_bytes(), target.as_bytes());
    if rig.ch.is_rdma() {
        let r = rig.ch.last(proc3::SYMLINK);
        assert_eq!(
            (r.read_chunks, r.read_chunk_bytes),
            (1, 4000),
            "SYMLINK: {r}"
        );
        assert!(!r.reply_chunk_offered, "SYMLINK: {r}");
        let r = rig.ch.last(proc3::READLINK);
        assert_eq!(r.write_chunk_bytes, vec![4000], "READLINK: {r}");
        assert_eq!(r.read_chunks, 0, "READLINK: {r}");
        rig.ch.take();
    }

    // READDIR and READDIRPLUS of a small directory.
    let names: Vec<Vec<u8>> = nfs
        .readdir_all(&d)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.name.as_bytes().to_vec())
        .collect();
    for n in [&b"other"[..], b"fifo", b"link"] {
        assert!(names.iter().any(|x| x == n), "{names:?}");
    }
    let plus = nfs.readdirplus_all(&d).await.unwrap();
    let link = plus.iter().find(|e| e.name.as_bytes() == b"link").unwrap();
    assert_eq!(link.name_attributes.unwrap().ftype, Ftype3::Lnk);
    assert_eq!(link.name_handle.as_ref(), Some(&s));

    // REMOVE, RMDIR.
    for n in [&b"other"[..], b"fifo", b"link"] {
        nfs.remove(&d, n).await.unwrap();
    }
    nfs.rmdir(root, b"d").await.unwrap();
    assert!(!rig.path("d").exists());
    nfs.remove(root, b"u").await.unwrap();
    nfs.remove(root, b"x").await.unwrap();
    if rig.ch.is_rdma() {
        for (prog, p, r) in rig.ch.take() {
            if p == proc3::READDIR || p == proc3::READDIRPLUS {
                // Their replies may exceed the inline threshold: the
                // binding's estimate offers a Reply chunk (RFC 8267 §3.1).
                assert!(r.reply_chunk_offered, "procedure {p}: {r}");
                continue;
            }
            assert_inline(&r, &format!("program {prog} procedure {p}"));
        }
    }
}

/// READDIRPLUS of a 10,000-entry directory: complete, in Reply chunks.
async fn big_directory(rig: &Rig) {
    let dir = rig.path("many");
    std::fs::create_dir(&dir).unwrap();
    for i in 0..10_000 {
        std::fs::File::create(dir.join(format!("entry-{i:05}"))).unwrap();
    }
    let fh = rig.nfs.lookup(&rig.root, b"many").await.unwrap().object;
    rig.ch.take();
    let entries = rig.nfs.readdirplus_all(&fh).await.unwrap();
    let mut names: Vec<String> = entries
        .iter()
        .map(|e| String::from_utf8_lossy(e.name.as_bytes()).into_owned())
        .filter(|n| n != "." && n != "..")
        .collect();
    names.sort();
    let want: Vec<String> = (0..10_000).map(|i| format!("entry-{i:05}")).collect();
    assert_eq!(names, want);
    assert!(entries
        .iter()
        .all(|e| e.name_handle.is_some() && e.name_attributes.is_some()));
    if rig.ch.is_rdma() {
        let reports = rig.ch.take();
        assert!(reports.len() > 1, "several READDIRPLUS calls");
        for (_, p, r) in reports {
            assert_eq!(p, proc3::READDIRPLUS);
            assert!(r.reply_chunk_offered, "{r}");
            assert_eq!(
                r.reply_mode,
                ReplyMode::Long,
                "the listing came in the Reply chunk: {r}"
            );
            assert!(
                r.reply_chunk_bytes > u64::from(r.thresholds.reply_inline),
                "{r}"
            );
            assert_eq!((r.read_chunks, r.write_chunks), (0, 0), "{r}");
        }
    }
}

async fn all(t: Transport, inline: u32) {
    let rig = Rig::new(t, inline).await;
    every_procedure(&rig).await;
    read_write_sizes(&rig).await;
    rig.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_procedure_over_memfabric() {
    all(Transport::Mem, 4096).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_procedure_over_soft_iwarp() {
    all(Transport::Iwarp, 4096).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_procedure_over_tcp() {
    all(Transport::Tcp, 4096).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_procedure_over_memfabric_inline_1024() {
    all(Transport::Mem, 1024).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readdirplus_10000_entries_memfabric_inline_1024() {
    let rig = Rig::new(Transport::Mem, 1024).await;
    big_directory(&rig).await;
    rig.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readdirplus_10000_entries_memfabric_inline_4096() {
    let rig = Rig::new(Transport::Mem, 4096).await;
    big_directory(&rig).await;
    rig.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readdirplus_10000_entries_soft_iwarp_inline_1024() {
    let rig = Rig::new(Transport::Iwarp, 1024).await;
    big_directory(&rig).await;
    rig.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readdirplus_10000_entries_soft_iwarp_inline_4096() {
    let rig = Rig::new(Transport::Iwarp, 4096).await;
    big_directory(&rig).await;
    rig.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readdirplus_10000_entries_tcp() {
    let rig = Rig::new(Transport::Tcp, 4096).await;
    big_directory(&rig).await;
    rig.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_procedure_over_soft_iwarp_inline_1024() {
    all(Transport::Iwarp, 1024).await;
}
