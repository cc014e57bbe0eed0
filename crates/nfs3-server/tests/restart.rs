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

#[tokio::test]
async fn readdir_cookies_continue_across_a_restart() {
    use nfs3::args::Readdir3Args;
    use nfs3::procs::{Nfs3Args, Nfs3Res};
    let mut fx = Fx::new();
    std::fs::create_dir(fx.path("d")).unwrap();
    for i in 0..500 {
        std::fs::write(fx.path(&format!("d/n{i:03}")), b"").unwrap();
    }
    let d = fx.walk("d").await;
    async fn page(fx: &Fx, d: &NfsFh3, cookie: u64, verf: Cookieverf3) -> nfs3::res::Readdir3ResOk {
        let a = Readdir3Args {
            dir: d.clone(),
            cookie,
            cookieverf: verf,
            count: 2048,
        };
        let Nfs3Res::Readdir(r) = fx.call(&root(), Nfs3Args::Readdir(a)).await else {
            panic!()
        };
        r.into_result().unwrap()
    }
    let first = page(&fx, &d, 0, Cookieverf3::default()).await;
    assert!(!first.reply.eof);
    let mut names: Vec<Vec<u8>> = first
        .reply
        .entries
        .iter()
        .map(|e| e.name.as_bytes().to_vec())
        .collect();
    let mut cookie = first.reply.entries.last().unwrap().cookie;
    let mut verf = first.cookieverf;
    fx.restart(ExportOptions {
        root_squash: false,
        ..Default::default()
    });
    loop {
        let p = page(&fx, &d, cookie, verf).await;
        assert_eq!(p.cookieverf, verf, "the cookie verifier survives a restart");
        names.extend(p.reply.entries.iter().map(|e| e.name.as_bytes().to_vec()));
        if p.reply.eof {
            break;
        }
        cookie = p.reply.entries.last().unwrap().cookie;
        verf = p.cookieverf;
    }
    let n = names.len();
    names.sort();
    names.dedup();
    assert_eq!((n, names.len()), (502, 502));
}

/// A failed fsync may have lost unstable data of any client: the write
/// verifier changes then (and only then, within one run), so every client
/// resends what it has not seen committed.
#[test]
fn a_failed_sync_changes_the_write_verifier() {
    let dir = tempfile::tempdir().unwrap();
    let ex = nfs3_server::Export::open(dir.path(), ExportOptions::default()).unwrap();
    let first = ex.write_verifier();
    assert_eq!(ex.write_verifier(), first, "stable within a run");
    ex.sync_failed();
    let second = ex.write_verifier();
    assert_ne!(second, first);
    assert_eq!(ex.write_verifier(), second);
}
