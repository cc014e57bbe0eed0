//! A server restart, end to end over soft iWARP: handles taken before the
//! restart still name the same objects after it, and data written
//! UNSTABLE before it is detected as uncommitted because the write
//! verifier changed (RFC 1813 §3.3.7, §3.3.21).

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use nfs3::args::Createhow3;
use nfs3::client::{MountClient, Nfs3Client};
use nfs3::types::{Sattr3, StableHow};
use nfs3::{MountBinding, Nfs3Binding};
use nfs3_server::{Export, ExportOptions, MountService, NfsService};
use oncrpc::Dispatcher;
use rpcrdma::{Bindings, RdmaClient, RdmaConfig, RdmaServer};

fn bindings() -> Bindings {
    let mut b = Bindings::new();
    b.add(Nfs3Binding).add(MountBinding);
    b
}

/// Serves `dir` (a new `Export`, as a new server process would) and
/// connects a client.
async fn serve(
    dir: &std::path::Path,
) -> (
    RdmaServer<iwarp::Device>,
    Nfs3Client<RdmaClient<iwarp::Device>>,
    MountClient<RdmaClient<iwarp::Device>>,
) {
    let export: Arc<Export> = Export::open(
        dir,
        ExportOptions {
            root_squash: false,
            ..ExportOptions::default()
        },
    )
    .unwrap();
    let disp = Dispatcher::builder()
        .service(NfsService::new(export.clone()))
        .service(MountService::new(export))
        .build();
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let srv = RdmaServer::bind(
        iwarp::Device::default(),
        any,
        disp,
        RdmaConfig::default(),
        bindings(),
    )
    .await
    .unwrap();
    let c = RdmaClient::connect(
        iwarp::Device::default(),
        srv.local_addr(),
        RdmaConfig::default(),
        bindings(),
    )
    .await
    .unwrap();
    let nfs = Nfs3Client::new(c.clone())
        .with_auth_sys(0, 0, vec![], "e2e")
        .unwrap();
    let mount = MountClient::new(c)
        .with_auth_sys(0, 0, vec![], "e2e")
        .unwrap();
    (srv, nfs, mount)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handles_survive_a_restart_and_the_verifier_changes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("export");
    std::fs::create_dir(&dir).unwrap();

    let (srv, nfs, mount) = serve(&dir).await;
    let root = mount.mnt("/").await.unwrap().fhandle;
    let d = nfs
        .mkdir(&root, b"d", Sattr3::default())
        .await
        .unwrap()
        .obj
        .unwrap();
    let f = nfs
        .create(&d, b"f", Createhow3::Unchecked(Sattr3::default()))
        .await
        .unwrap()
        .obj
        .unwrap();
    let committed = nfs
        .write(&f, 0, Bytes::from(vec![1u8; 100_000]), StableHow::Unstable)
        .await
        .unwrap();
    let c = nfs.commit(&f, 0, 0).await.unwrap();
    assert_eq!(c.verf, committed.verf);
    let before = nfs
        .write(
            &f,
            100_000,
            Bytes::from(vec![2u8; 50_000]),
            StableHow::Unstable,
        )
        .await
        .unwrap();
    srv.shutdown().await;

    // A new server on the same directory.
    let (srv, nfs, mount) = serve(&dir).await;
    assert_eq!(
        mount.mnt("/").await.unwrap().fhandle,
        root,
        "the root handle is stable"
    );
    let a = nfs.getattr(&f).await.unwrap();
    assert_eq!(a.size, 150_000, "the old file handle names the same file");
    let l = nfs.lookup(&d, b"f").await.unwrap();
    assert_eq!(l.object, f, "the old directory handle still works");
    let after = nfs.commit(&f, 0, 0).await.unwrap();
    assert_ne!(
        after.verf, before.verf,
        "the verifier changed: the client must resend what it had not committed"
    );
    // Resending under the new verifier and committing makes it match.
    let again = nfs
        .write(
            &f,
            100_000,
            Bytes::from(vec![2u8; 50_000]),
            StableHow::Unstable,
        )
        .await
        .unwrap();
    assert_eq!(nfs.commit(&f, 0, 0).await.unwrap().verf, again.verf);
    let mut want = vec![1u8; 100_000];
    want.extend(vec![2u8; 50_000]);
    assert_eq!(std::fs::read(dir.join("d/f")).unwrap(), want);

    // A handle of an object removed meanwhile is stale, never another one.
    std::fs::remove_file(dir.join("d/f")).unwrap();
    std::fs::write(dir.join("d/g"), b"new").unwrap();
    let e = nfs.getattr(&f).await.unwrap_err();
    assert_eq!(e.nfs_status(), Some(nfs3::Nfsstat3::Stale), "{e}");
    srv.shutdown().await;
}
