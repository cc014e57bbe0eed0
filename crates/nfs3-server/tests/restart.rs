//! Handles survive a server restart (a new `Export` on the same
//! directory); the write verifier does not.

mod common;

use common::*;
use nfs3::types::*;
use nfs3_server::ExportOptions;

#[tokio::test]
async fn handles_outlive_a_restart_and_the_verifier_changes() {
    let mut fx = Fx::new();
    std::fs::create_dir_all(fx.path("a/b/c")).unwrap();
    std::fs::write(fx.path("a/b/c/deep"), b"deep data").unwrap();
    std::fs::write(fx.path("top"), b"top data").unwrap();
    std::os::unix::fs::symlink("a/b", fx.path("ln")).unwrap();
    let deep = fx.walk("a/b/c/deep").await;
    let c = fx.walk("a/b/c").await;
    let top = fx.walk("top").await;
    let ln = fx.walk("ln").await;
    let root_fh = fx.root_fh();
    let w1 = fx
        .write(&root(), &top, 0, b"TOP", StableHow::Unstable)
        .await
        .into_result()
        .unwrap();

    // Restart: nothing cached, nothing located.
    fx.restart(ExportOptions {
        root_squash: false,
        ..Default::default()
    });
    assert_eq!(fx.root_fh(), root_fh, "the root handle is stable");
    assert_eq!(
        fx.read(&root(), &deep, 0, 100)
            .await
            .into_result()
            .unwrap()
            .data
            .as_ref(),
        b"deep data"
    );
    assert_eq!(fx.fh(&root(), &c, "deep").await, deep);
    assert_eq!(
        fx.getattr(&root(), &ln)
            .await
            .into_result()
            .unwrap()
            .obj_attributes
            .ftype,
        Ftype3::Lnk
    );
    let w2 = fx
        .write(&root(), &top, 0, b"TOP", StableHow::Unstable)
        .await
        .into_result()
        .unwrap();
    assert_ne!(w1.verf, w2.verf, "a restart changes the write verifier");
    assert_eq!(std::fs::read(fx.path("top")).unwrap(), b"TOP data");
    let walks = fx
        .export
        .counters()
        .walks
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(walks >= 1, "a restart needs a walk to find unseen handles");

    // A file removed while the server was down is STALE afterwards.
    std::fs::remove_file(fx.path("top")).unwrap();
    fx.restart(ExportOptions {
        root_squash: false,
        ..Default::default()
    });
    assert_eq!(st(&fx.getattr(&root(), &top).await), Nfsstat3::Stale);
    // Renamed while down: still found by its handle.
    std::fs::rename(fx.path("a/b/c/deep"), fx.path("a/moved")).unwrap();
    fx.restart(ExportOptions {
        root_squash: false,
        ..Default::default()
    });
    assert_eq!(
        fx.read(&root(), &deep, 0, 100)
            .await
            .into_result()
            .unwrap()
            .data
            .as_ref(),
        b"deep data"
    );
}
