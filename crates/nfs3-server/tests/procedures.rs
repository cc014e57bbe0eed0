//! Every NFSv3 procedure against a real directory, through an in-process
//! dispatcher (LocalChannel), checked against what the file system says.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};

use bytes::Bytes;
use common::*;
use nfs3::args::*;
use nfs3::procs::{Nfs3Args, Nfs3Res};
use nfs3::types::*;
use nfs3_server::ExportOptions;

fn ok<T: std::fmt::Debug, F: std::fmt::Debug>(r: NfsResult<T, F>) -> T {
    match r {
        NfsResult::Ok(t) => t,
        r => panic!("expected NFS3_OK, got {r:?}"),
    }
}

#[tokio::test]
async fn getattr_reports_the_file_system() {
    let fx = Fx::new();
    std::fs::write(fx.path("f"), vec![7u8; 10_000]).unwrap();
    let fh = fx.walk("f").await;
    let a = ok(fx.getattr(&root(), &fh).await).obj_attributes;
    let m = std::fs::metadata(fx.path("f")).unwrap();
    assert_eq!(a.ftype, Ftype3::Reg);
    assert_eq!(a.fileid, m.ino());
    assert_eq!(a.size, 10_000);
    assert_eq!(a.used, m.blocks() * 512);
    assert_eq!(a.mode, m.mode() & 0o7777);
    assert_eq!(a.nlink, 1);
    assert_eq!((a.uid, a.gid), (m.uid(), m.gid()));
    assert_eq!(a.mtime.seconds, m.mtime() as u32);
    assert_eq!(a.mtime.nseconds, m.mtime_nsec() as u32);
    assert_eq!(a.ctime.nseconds, m.ctime_nsec() as u32);
    assert_eq!(a.fsid, fx.export.fsid());
    let r = ok(fx.getattr(&root(), &fx.root_fh()).await).obj_attributes;
    assert_eq!(r.ftype, Ftype3::Dir);
    assert_eq!(r.fileid, ino(&fx.root));
    assert_eq!(r.fsid, a.fsid, "one fsid for the whole export");
    assert!(fx.root_fh().len() <= 64);
}

#[tokio::test]
async fn lookup_and_read_with_eof() {
    let fx = Fx::new();
    std::fs::create_dir(fx.path("d")).unwrap();
    let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(fx.path("d/f"), &data).unwrap();
    let d = fx.walk("d").await;
    let l = ok(fx.lookup(&root(), &d, "f").await);
    assert_eq!(l.obj_attributes.unwrap().size, 100_000);
    assert_eq!(l.dir_attributes.unwrap().ftype, Ftype3::Dir);
    let f = l.object;
    let r = ok(fx.read(&root(), &f, 0, 4096).await);
    assert_eq!((r.count, r.eof), (4096, false));
    assert_eq!(&r.data[..], &data[..4096]);
    // Across EOF: short, eof set.
    let r = ok(fx.read(&root(), &f, 99_000, 4096).await);
    assert_eq!((r.count, r.eof), (1000, true));
    assert_eq!(&r.data[..], &data[99_000..]);
    // Exactly to EOF.
    let r = ok(fx.read(&root(), &f, 96_000, 4000).await);
    assert_eq!((r.count, r.eof), (4000, true));
    // Past EOF.
    let r = ok(fx.read(&root(), &f, 200_000, 10).await);
    assert_eq!((r.count, r.eof), (0, true));
    assert!(r.data.is_empty());
    // Missing name, and READ of a directory.
    assert_eq!(st(&fx.lookup(&root(), &d, "nope").await), Nfsstat3::Noent);
    assert_eq!(st(&fx.read(&root(), &d, 0, 10).await), Nfsstat3::Isdir);
    // "." and "..".
    let dot = ok(fx.lookup(&root(), &d, ".").await).object;
    assert_eq!(dot, d);
    let up = ok(fx.lookup(&root(), &d, "..").await).object;
    assert_eq!(up, fx.root_fh());
}

#[tokio::test]
async fn read_count_is_clamped_to_max_io() {
    let fx = Fx::with(ExportOptions {
        max_io: 8192,
        root_squash: false,
        ..Default::default()
    });
    std::fs::write(fx.path("f"), vec![1u8; 100_000]).unwrap();
    let f = fx.walk("f").await;
    let r = ok(fx.read(&root(), &f, 0, 50_000).await);
    assert_eq!((r.count, r.eof, r.data.len()), (8192, false, 8192));
    // WRITE above max_io is refused.
    let w = fx
        .write(&root(), &f, 0, &[0u8; 9000], StableHow::Unstable)
        .await;
    assert_eq!(st(&w), Nfsstat3::Inval);
    assert_eq!(std::fs::read(fx.path("f")).unwrap(), vec![1u8; 100_000]);
}

#[tokio::test]
async fn write_stabilities_and_commit_share_one_verifier() {
    let fx = Fx::new();
    std::fs::write(fx.path("f"), b"").unwrap();
    let f = fx.walk("f").await;
    let mut verfs = Vec::new();
    for (i, how) in [
        StableHow::Unstable,
        StableHow::DataSync,
        StableHow::FileSync,
    ]
    .into_iter()
    .enumerate()
    {
        let w = ok(fx.write(&root(), &f, i as u64 * 5, b"abcde", how).await);
        assert_eq!(w.count, 5);
        assert_eq!(w.committed, how);
        let before = w.file_wcc.before.expect("pre-op attributes");
        let after = w.file_wcc.after.expect("post-op attributes");
        assert_eq!(before.size, i as u64 * 5);
        assert_eq!(after.size, (i as u64 + 1) * 5);
        verfs.push(w.verf);
        // The data is in the file when the reply comes, whatever the stability.
        assert_eq!(std::fs::read(fx.path("f")).unwrap().len(), (i + 1) * 5);
    }
    let c = Nfs3Args::Commit(Commit3Args {
        file: f.clone(),
        offset: 0,
        count: 0,
    });
    let Nfs3Res::Commit(c) = fx.call(&root(), c).await else {
        panic!()
    };
    let c = ok(c);
    verfs.push(c.verf);
    assert!(c.file_wcc.before.is_some() && c.file_wcc.after.is_some());
    assert!(verfs.iter().all(|v| *v == verfs[0]));
    assert_eq!(verfs[0].0, fx.export.write_verifier());
    assert_eq!(std::fs::read(fx.path("f")).unwrap(), b"abcdeabcdeabcde");
}

#[tokio::test]
async fn create_modes_and_ownership() {
    let fx = Fx::new();
    let r = fx.root_fh();
    let alice = sys(1000, 1000, &[]);
    chmod(&fx.root, 0o777);
    // UNCHECKED creates with the mode asked (no umask) and the caller's ids.
    let s = Sattr3 {
        mode: Some(0o640),
        ..Default::default()
    };
    let c = ok(fx
        .create(&alice, &r, "u", Createhow3::Unchecked(s.clone()))
        .await);
    assert!(c.obj.is_some());
    assert!(c.dir_wcc.before.is_some() && c.dir_wcc.after.is_some());
    let m = std::fs::metadata(fx.path("u")).unwrap();
    assert_eq!((m.uid(), m.gid(), m.mode() & 0o7777), (1000, 1000, 0o640));
    // UNCHECKED over an existing file: fine, size applied.
    std::fs::write(fx.path("u"), b"12345").unwrap();
    let s0 = Sattr3 {
        size: Some(0),
        ..Default::default()
    };
    ok(fx.create(&alice, &r, "u", Createhow3::Unchecked(s0)).await);
    assert_eq!(std::fs::metadata(fx.path("u")).unwrap().len(), 0);
    // GUARDED over an existing file: EXIST.
    assert_eq!(
        st(&fx
            .create(&alice, &r, "u", Createhow3::Guarded(s.clone()))
            .await),
        Nfsstat3::Exist
    );
    ok(fx
        .create(&alice, &r, "g", Createhow3::Guarded(s.clone()))
        .await);
    // EXCLUSIVE: a retransmission with the same verifier succeeds with the
    // same object; another verifier is EXIST.
    let v = Createverf3(*b"\x01\x02\x03\x04\x05\x06\x07\x08");
    let a = ok(fx.create(&alice, &r, "x", Createhow3::Exclusive(v)).await);
    let b = ok(fx.create(&alice, &r, "x", Createhow3::Exclusive(v)).await);
    assert_eq!(a.obj, b.obj);
    let other = Createverf3(*b"\x09\x02\x03\x04\x05\x06\x07\x08");
    assert_eq!(
        st(&fx
            .create(&alice, &r, "x", Createhow3::Exclusive(other))
            .await),
        Nfsstat3::Exist
    );
    // A setgid directory gives new objects its group.
    std::fs::create_dir(fx.path("sg")).unwrap();
    chown(&fx.path("sg"), 1000, 4242);
    chmod(&fx.path("sg"), 0o2777);
    let sg = fx.walk("sg").await;
    ok(fx
        .create(&alice, &sg, "f", Createhow3::Unchecked(Sattr3::default()))
        .await);
    ok(fx.mkdir(&alice, &sg, "sub", 0o755).await);
    let m = std::fs::metadata(fx.path("sg/f")).unwrap();
    assert_eq!((m.uid(), m.gid()), (1000, 4242));
    let m = std::fs::metadata(fx.path("sg/sub")).unwrap();
    assert_eq!(m.gid(), 4242);
    assert_ne!(
        m.mode() & 0o2000,
        0,
        "subdirectory of a setgid directory is setgid"
    );
    // Names "." and "..": EXIST.
    assert_eq!(
        st(&fx
            .create(&alice, &r, "..", Createhow3::Unchecked(Sattr3::default()))
            .await),
        Nfsstat3::Exist
    );
}

#[tokio::test]
async fn mkdir_symlink_mknod_readlink() {
    let fx = Fx::new();
    let r = fx.root_fh();
    let d = ok(fx.mkdir(&root(), &r, "d", 0o750).await);
    let m = std::fs::metadata(fx.path("d")).unwrap();
    assert!(m.is_dir());
    assert_eq!(m.mode() & 0o7777, 0o750);
    assert_eq!(d.obj_attributes.unwrap().ftype, Ftype3::Dir);
    assert_eq!(
        st(&fx.mkdir(&root(), &r, "d", 0o750).await),
        Nfsstat3::Exist
    );

    let a = Symlink3Args {
        where_: Diropargs3 {
            dir: r.clone(),
            name: name("l"),
        },
        symlink: Symlinkdata3 {
            symlink_attributes: Sattr3::default(),
            symlink_data: Nfspath3::from("../some/where"),
        },
    };
    let Nfs3Res::Symlink(s) = fx.call(&root(), Nfs3Args::Symlink(a)).await else {
        panic!()
    };
    let s = ok(s);
    assert_eq!(
        std::fs::read_link(fx.path("l")).unwrap().to_str(),
        Some("../some/where")
    );
    let Nfs3Res::Readlink(rl) = fx
        .call(
            &root(),
            Nfs3Args::Readlink(Readlink3Args {
                symlink: s.obj.unwrap(),
            }),
        )
        .await
    else {
        panic!()
    };
    assert_eq!(ok(rl).data.as_bytes(), b"../some/where");

    let fifo = Mknod3Args {
        where_: Diropargs3 {
            dir: r.clone(),
            name: name("p"),
        },
        what: Mknoddata3::Fifo(Sattr3 {
            mode: Some(0o620),
            ..Default::default()
        }),
    };
    let Nfs3Res::Mknod(m) = fx
        .call(&sys(1000, 1000, &[]), Nfs3Args::Mknod(fifo.clone()))
        .await
    else {
        panic!()
    };
    // Root directory 0755 owned by root: uid 1000 may not create in it.
    assert_eq!(st(&m), Nfsstat3::Acces);
    let Nfs3Res::Mknod(m) = fx.call(&root(), Nfs3Args::Mknod(fifo)).await else {
        panic!()
    };
    assert_eq!(ok(m).obj_attributes.unwrap().ftype, Ftype3::Fifo);
    let meta = std::fs::symlink_metadata(fx.path("p")).unwrap();
    assert_eq!(meta.mode() & 0o170777, 0o010620);
    let sock = Mknod3Args {
        where_: Diropargs3 {
            dir: r.clone(),
            name: name("s"),
        },
        what: Mknoddata3::Sock(Sattr3::default()),
    };
    let Nfs3Res::Mknod(m) = fx.call(&root(), Nfs3Args::Mknod(sock)).await else {
        panic!()
    };
    assert_eq!(ok(m).obj_attributes.unwrap().ftype, Ftype3::Sock);
    // Devices: only for root.
    chmod(&fx.root, 0o777);
    // A symlink made by a user belongs to that user (the link itself).
    let a = Symlink3Args {
        where_: Diropargs3 {
            dir: r.clone(),
            name: name("alices-link"),
        },
        symlink: Symlinkdata3 {
            symlink_attributes: Sattr3::default(),
            symlink_data: Nfspath3::from("/etc/passwd"),
        },
    };
    let Nfs3Res::Symlink(s) = fx.call(&sys(1000, 1001, &[]), Nfs3Args::Symlink(a)).await else {
        panic!()
    };
    ok(s);
    let lm = std::fs::symlink_metadata(fx.path("alices-link")).unwrap();
    assert_eq!((lm.uid(), lm.gid()), (1000, 1001));
    assert_eq!(
        std::fs::metadata("/etc/passwd").unwrap().uid(),
        0,
        "the target is untouched"
    );
    let chr = Mknod3Args {
        where_: Diropargs3 {
            dir: r.clone(),
            name: name("c"),
        },
        what: Mknoddata3::Chr(Devicedata3 {
            dev_attributes: Sattr3::default(),
            spec: Specdata3 {
                specdata1: 1,
                specdata2: 3,
            },
        }),
    };
    let Nfs3Res::Mknod(m) = fx
        .call(&sys(1000, 1000, &[]), Nfs3Args::Mknod(chr.clone()))
        .await
    else {
        panic!()
    };
    assert_eq!(st(&m), Nfsstat3::Perm);
    let Nfs3Res::Mknod(m) = fx.call(&root(), Nfs3Args::Mknod(chr)).await else {
        panic!()
    };
    let a = ok(m).obj_attributes.unwrap();
    assert_eq!(
        (a.ftype, a.rdev.specdata1, a.rdev.specdata2),
        (Ftype3::Chr, 1, 3)
    );
}

#[tokio::test]
async fn remove_rmdir_rename_link() {
    let fx = Fx::new();
    let r = fx.root_fh();
    std::fs::write(fx.path("a"), b"A").unwrap();
    std::fs::write(fx.path("b"), b"B").unwrap();
    std::fs::create_dir_all(fx.path("d/e")).unwrap();
    // LINK: a second name, nlink 2.
    let a = fx.walk("a").await;
    let l = Link3Args {
        file: a.clone(),
        link: Diropargs3 {
            dir: r.clone(),
            name: name("a2"),
        },
    };
    let Nfs3Res::Link(lr) = fx.call(&root(), Nfs3Args::Link(l)).await else {
        panic!()
    };
    let lr = ok(lr);
    assert_eq!(lr.file_attributes.unwrap().nlink, 2);
    assert!(lr.linkdir_wcc.before.is_some());
    assert_eq!(ino(&fx.path("a2")), ino(&fx.path("a")));
    // RENAME over an existing name.
    let rn = Rename3Args {
        from: Diropargs3 {
            dir: r.clone(),
            name: name("a"),
        },
        to: Diropargs3 {
            dir: r.clone(),
            name: name("b"),
        },
    };
    let Nfs3Res::Rename(rr) = fx.call(&root(), Nfs3Args::Rename(rn)).await else {
        panic!()
    };
    let rr = ok(rr);
    assert!(rr.fromdir_wcc.after.is_some() && rr.todir_wcc.before.is_some());
    assert_eq!(std::fs::read(fx.path("b")).unwrap(), b"A");
    assert!(!fx.path("a").exists());
    // The handle follows the object.
    assert_eq!(ok(fx.read(&root(), &a, 0, 10).await).data.as_ref(), b"A");
    // RMDIR of a non-empty directory, then empty.
    let d = fx.walk("d").await;
    let rm = |dir: &NfsFh3, n: &str| {
        Nfs3Args::Rmdir(Rmdir3Args {
            object: Diropargs3 {
                dir: dir.clone(),
                name: name(n),
            },
        })
    };
    let Nfs3Res::Rmdir(x) = fx.call(&root(), rm(&r, "d")).await else {
        panic!()
    };
    assert_eq!(st(&x), Nfsstat3::Notempty);
    let Nfs3Res::Rmdir(x) = fx.call(&root(), rm(&d, "e")).await else {
        panic!()
    };
    ok(x);
    assert!(!fx.path("d/e").exists());
    // REMOVE of a directory is ISDIR; RMDIR of a file NOTDIR.
    assert_eq!(st(&fx.remove(&root(), &r, "d").await), Nfsstat3::Isdir);
    let Nfs3Res::Rmdir(x) = fx.call(&root(), rm(&r, "b")).await else {
        panic!()
    };
    assert_eq!(st(&x), Nfsstat3::Notdir);
    let w = ok(fx.remove(&root(), &r, "b").await);
    assert!(w.wcc.before.is_some() && w.wcc.after.is_some());
    assert!(!fx.path("b").exists());
    // The object lives on through its other name.
    assert_eq!(ok(fx.read(&root(), &a, 0, 10).await).data.as_ref(), b"A");
    ok(fx.remove(&root(), &r, "a2").await);
    assert_eq!(st(&fx.read(&root(), &a, 0, 10).await), Nfsstat3::Stale);
    assert_eq!(st(&fx.remove(&root(), &r, "a2").await), Nfsstat3::Noent);
}

#[tokio::test]
async fn setattr_rules() {
    let fx = Fx::new();
    std::fs::write(fx.path("f"), b"0123456789").unwrap();
    chown(&fx.path("f"), 1000, 1000);
    chmod(&fx.path("f"), 0o644);
    let f = fx.walk("f").await;
    let alice = sys(1000, 1000, &[50]);
    let bob = sys(1001, 1001, &[]);
    // chmod: owner yes, others PERM.
    let m = |mode| Sattr3 {
        mode: Some(mode),
        ..Default::default()
    };
    let w = ok(fx.setattr(&alice, &f, m(0o600)).await);
    assert!(w.obj_wcc.before.is_some() && w.obj_wcc.after.is_some());
    assert_eq!(
        std::fs::metadata(fx.path("f"))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777,
        0o600
    );
    assert_eq!(st(&fx.setattr(&bob, &f, m(0o666)).await), Nfsstat3::Perm);
    // chown: only root.
    let u = Sattr3 {
        uid: Some(1001),
        ..Default::default()
    };
    assert_eq!(st(&fx.setattr(&alice, &f, u.clone()).await), Nfsstat3::Perm);
    // chgrp: owner to a group he is in.
    let g = |gid| Sattr3 {
        gid: Some(gid),
        ..Default::default()
    };
    ok(fx.setattr(&alice, &f, g(50)).await);
    assert_eq!(std::fs::metadata(fx.path("f")).unwrap().gid(), 50);
    assert_eq!(st(&fx.setattr(&alice, &f, g(51)).await), Nfsstat3::Perm);
    ok(fx.setattr(&root(), &f, u).await);
    assert_eq!(std::fs::metadata(fx.path("f")).unwrap().uid(), 1001);
    // size: needs write permission (bob owns it now; alice does not).
    let s = Sattr3 {
        size: Some(3),
        ..Default::default()
    };
    assert_eq!(
        st(&fx.setattr(&alice, &f, s.clone()).await),
        Nfsstat3::Acces
    );
    ok(fx.setattr(&bob, &f, s).await);
    assert_eq!(std::fs::read(fx.path("f")).unwrap(), b"012");
    // Times: a given time only by the owner, to the nanosecond.
    let t = Nfstime3 {
        seconds: 1_000_000_000,
        nseconds: 123_456_789,
    };
    let ts = Sattr3 {
        mtime: SetTime::SetToClientTime(t),
        ..Default::default()
    };
    assert_eq!(
        st(&fx.setattr(&alice, &f, ts.clone()).await),
        Nfsstat3::Perm
    );
    let w = ok(fx.setattr(&bob, &f, ts).await);
    assert_eq!(w.obj_wcc.after.unwrap().mtime, t);
    let meta = std::fs::metadata(fx.path("f")).unwrap();
    assert_eq!(
        (meta.mtime(), meta.mtime_nsec()),
        (1_000_000_000, 123_456_789)
    );
    // Guard: a ctime that does not match is NOT_SYNC.
    let a = Setattr3Args {
        object: f.clone(),
        new_attributes: m(0o644),
        guard: Some(Nfstime3 {
            seconds: 1,
            nseconds: 1,
        }),
    };
    let Nfs3Res::Setattr(x) = fx.call(&bob, Nfs3Args::Setattr(a)).await else {
        panic!()
    };
    assert_eq!(st(&x), Nfsstat3::NotSync);
}

#[tokio::test]
async fn access_answers_for_the_credential() {
    let fx = Fx::new();
    std::fs::write(fx.path("f"), b"x").unwrap();
    chown(&fx.path("f"), 1000, 100);
    chmod(&fx.path("f"), 0o640);
    let f = fx.walk("f").await;
    let ask = |cred: oncrpc::Credential| {
        let f = f.clone();
        let fx = &fx;
        async move {
            let Nfs3Res::Access(a) = fx
                .call(
                    &cred,
                    Nfs3Args::Access(Access3Args {
                        object: f,
                        access: access::ALL,
                    }),
                )
                .await
            else {
                panic!()
            };
            ok(a).access
        }
    };
    assert_eq!(
        ask(sys(1000, 1, &[])).await,
        access::READ | access::MODIFY | access::EXTEND
    );
    assert_eq!(ask(sys(1001, 1, &[100])).await, access::READ);
    assert_eq!(ask(sys(1002, 1, &[])).await, 0);
    let r = fx.root_fh();
    let Nfs3Res::Access(a) = fx
        .call(
            &sys(1002, 1, &[]),
            Nfs3Args::Access(Access3Args {
                object: r,
                access: access::ALL,
            }),
        )
        .await
    else {
        panic!()
    };
    assert_eq!(ok(a).access, access::READ | access::LOOKUP);
}

async fn list_all(fx: &Fx, dir: &NfsFh3, plus: bool, count: u32) -> (Vec<String>, usize) {
    let mut names = Vec::new();
    let mut cookie = 0;
    let mut verf = Cookieverf3::default();
    let mut calls = 0;
    loop {
        calls += 1;
        assert!(calls < 10_000, "listing does not end");
        let (entries, eof, v) = if plus {
            let a = Readdirplus3Args {
                dir: dir.clone(),
                cookie,
                cookieverf: verf,
                dircount: count,
                maxcount: count * 4,
            };
            let Nfs3Res::Readdirplus(r) = fx.call(&root(), Nfs3Args::Readdirplus(a)).await else {
                panic!()
            };
            let r = ok(r);
            let e: Vec<(String, u64)> = r
                .reply
                .entries
                .iter()
                .map(|e| {
                    if e.name.as_bytes() != b".." {
                        assert!(e.name_attributes.is_some() && e.name_handle.is_some());
                    }
                    (
                        String::from_utf8_lossy(e.name.as_bytes()).into_owned(),
                        e.cookie,
                    )
                })
                .collect();
            (e, r.reply.eof, r.cookieverf)
        } else {
            let a = Readdir3Args {
                dir: dir.clone(),
                cookie,
                cookieverf: verf,
                count,
            };
            let Nfs3Res::Readdir(r) = fx.call(&root(), Nfs3Args::Readdir(a)).await else {
                panic!()
            };
            let r = ok(r);
            let e = r
                .reply
                .entries
                .iter()
                .map(|e| {
                    (
                        String::from_utf8_lossy(e.name.as_bytes()).into_owned(),
                        e.cookie,
                    )
                })
                .collect();
            (e, r.reply.eof, r.cookieverf)
        };
        verf = v;
        if let Some((_, c)) = entries.last() {
            cookie = *c;
        }
        names.extend(entries.into_iter().map(|(n, _)| n));
        if eof {
            return (names, calls);
        }
    }
}

#[tokio::test]
async fn readdir_lists_ten_thousand_entries_over_many_calls() {
    let fx = Fx::new();
    std::fs::create_dir(fx.path("big")).unwrap();
    for i in 0..10_000 {
        std::fs::write(fx.path(&format!("big/file-{i:05}")), b"").unwrap();
    }
    let d = fx.walk("big").await;
    for plus in [false, true] {
        let (mut names, calls) = list_all(&fx, &d, plus, 4096).await;
        assert!(calls > 20, "{calls} calls: count not honoured");
        names.sort();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n, "an entry listed twice");
        assert_eq!(n, 10_002, "plus={plus}");
        assert!(names.contains(&".".to_string()) && names.contains(&"..".to_string()));
    }
    // A cookie verifier that is not the directory's: BAD_COOKIE.
    let a = Readdir3Args {
        dir: d.clone(),
        cookie: 5,
        cookieverf: Cookieverf3([9; 8]),
        count: 4096,
    };
    let Nfs3Res::Readdir(r) = fx.call(&root(), Nfs3Args::Readdir(a)).await else {
        panic!()
    };
    assert_eq!(st(&r), Nfsstat3::BadCookie);
    // A count too small for one entry: TOOSMALL.
    let a = Readdir3Args {
        dir: d,
        cookie: 0,
        cookieverf: Cookieverf3::default(),
        count: 100,
    };
    let Nfs3Res::Readdir(r) = fx.call(&root(), Nfs3Args::Readdir(a)).await else {
        panic!()
    };
    assert_eq!(st(&r), Nfsstat3::Toosmall);
}

#[tokio::test]
async fn fsinfo_fsstat_pathconf() {
    let fx = Fx::new();
    let r = fx.root_fh();
    let Nfs3Res::Fsinfo(i) = fx
        .call(&root(), Nfs3Args::Fsinfo(Fsinfo3Args { fsroot: r.clone() }))
        .await
    else {
        panic!()
    };
    let i = ok(i);
    assert_eq!((i.rtmax, i.wtmax), (1 << 20, 1 << 20));
    assert_eq!((i.rtpref, i.wtpref), (1 << 20, 1 << 20));
    assert!(i.dtpref >= 4096);
    assert_eq!(
        i.time_delta,
        Nfstime3 {
            seconds: 0,
            nseconds: 1
        }
    );
    assert_ne!(i.properties & fsf::LINK, 0);
    assert_ne!(i.properties & fsf::SYMLINK, 0);
    assert_ne!(i.properties & fsf::CANSETTIME, 0);
    assert!(i.maxfilesize >= 1 << 40);
    let Nfs3Res::Fsstat(s) = fx
        .call(&root(), Nfs3Args::Fsstat(Fsstat3Args { fsroot: r.clone() }))
        .await
    else {
        panic!()
    };
    let s = ok(s);
    assert!(s.tbytes >= s.fbytes && s.fbytes >= s.abytes && s.tbytes > 0);
    assert!(s.tfiles >= s.ffiles && s.tfiles > 0);
    let Nfs3Res::Pathconf(p) = fx
        .call(&root(), Nfs3Args::Pathconf(Pathconf3Args { object: r }))
        .await
    else {
        panic!()
    };
    let p = ok(p);
    assert_eq!(p.name_max, 255);
    assert!(p.no_trunc && p.chown_restricted && p.case_preserving && !p.case_insensitive);
}

#[tokio::test]
async fn garbage_arguments_and_unknown_procedures() {
    let fx = Fx::new();
    // A READ whose arguments stop short.
    let e = fx
        .raw(
            100_003,
            3,
            6,
            oncrpc::Payload::from(vec![0, 0, 0, 32, 1, 2]),
            &root(),
        )
        .await;
    assert!(matches!(e, Err(oncrpc::RpcError::GarbageArgs)), "{e:?}");
    // A handle longer than 64 bytes.
    let mut b = vec![0, 0, 0, 65];
    b.extend([0u8; 68]);
    let e = fx
        .raw(100_003, 3, 1, oncrpc::Payload::from(b), &root())
        .await;
    assert!(matches!(e, Err(oncrpc::RpcError::GarbageArgs)), "{e:?}");
    // Trailing bytes after GETATTR's handle.
    let mut p = nfs3::PayloadEncode::to_payload(&Getattr3Args {
        object: fx.root_fh(),
    })
    .flatten()
    .to_vec();
    p.extend([0u8; 4]);
    let e = fx
        .raw(100_003, 3, 1, oncrpc::Payload::from(p), &root())
        .await;
    assert!(matches!(e, Err(oncrpc::RpcError::GarbageArgs)), "{e:?}");
    let e = fx
        .raw(100_003, 3, 22, oncrpc::Payload::new(), &root())
        .await;
    assert!(matches!(e, Err(oncrpc::RpcError::ProcUnavail)), "{e:?}");
    // NULL answers.
    fx.raw(100_003, 3, 0, oncrpc::Payload::new(), &root())
        .await
        .unwrap();
    // NFSACL is not served: the dispatcher says PROG_UNAVAIL.
    let e = fx
        .raw(
            nfs3::procs::NFSACL_PROGRAM,
            3,
            0,
            oncrpc::Payload::new(),
            &root(),
        )
        .await;
    assert!(matches!(e, Err(oncrpc::RpcError::ProgUnavail)), "{e:?}");
    // NFS version 2 is not served either.
    let e = fx.raw(100_003, 2, 0, oncrpc::Payload::new(), &root()).await;
    assert!(
        matches!(e, Err(oncrpc::RpcError::ProgMismatch { low: 3, high: 3 })),
        "{e:?}"
    );
}

#[tokio::test]
async fn sync_all_syncs_what_is_open() {
    let fx = Fx::new();
    std::fs::write(fx.path("f"), b"").unwrap();
    let f = fx.walk("f").await;
    ok(fx
        .write(&root(), &f, 0, b"unstable", StableHow::Unstable)
        .await);
    assert!(fx.export.cached_fds() >= 1);
    fx.export.sync_all().unwrap();
    assert_eq!(std::fs::read(fx.path("f")).unwrap(), b"unstable");
}

#[tokio::test]
async fn read_reply_data_is_a_ddp_piece() {
    let fx = Fx::new();
    std::fs::write(fx.path("f"), vec![5u8; 1 << 20]).unwrap();
    let f = fx.walk("f").await;
    let a = Read3Args {
        file: f,
        offset: 0,
        count: 1 << 20,
    };
    let reply = fx
        .raw(100_003, 3, 6, nfs3::PayloadEncode::to_payload(&a), &root())
        .await
        .unwrap();
    assert_eq!(reply.ddp_count(), 1);
    assert_eq!(reply.ddp_len(), 1 << 20);
    let _ = Bytes::new();
}
