//! Attacks on the export, each refused with the right status, with
//! nothing outside the export read or changed: `..` at the root, symlink
//! escapes, forged and stale handles, root squash, other users'
//! permissions, a read-only export, hostile names, a flood of forged
//! handles.

mod common;

use std::os::unix::fs::MetadataExt;

use bytes::Bytes;
use common::*;
use nfs3::args::*;
use nfs3::procs::{Nfs3Args, Nfs3Res};
use nfs3::types::*;
use nfs3_server::fh::{FileHandle, FileId};
use nfs3_server::ExportOptions;

fn outside_untouched(fx: &Fx) {
    assert_eq!(std::fs::read(fx.outside.join("secret")).unwrap(), SECRET);
    let names: Vec<_> = std::fs::read_dir(&fx.outside)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("secret")]);
}

/// No reply data anywhere holds the secret.
fn no_secret(data: &[u8]) {
    assert!(
        !data.windows(SECRET.len()).any(|w| w == SECRET),
        "the secret leaked"
    );
}

#[tokio::test]
async fn dotdot_of_the_root_is_the_root() {
    let fx = Fx::new();
    let r = fx.root_fh();
    let up = fx.lookup(&root(), &r, "..").await.into_result().unwrap();
    assert_eq!(up.object, r);
    assert_eq!(up.obj_attributes.unwrap().fileid, ino(&fx.root));
    // And again from the "parent".
    let up2 = fx.fh(&root(), &up.object, "..").await;
    assert_eq!(up2, r);
    // "outside" is not reachable by name from the root's "..".
    assert_eq!(
        st(&fx.lookup(&root(), &up2, "outside").await),
        Nfsstat3::Noent
    );
    // READDIRPLUS of the root shows ".." as the root itself.
    let a = Readdirplus3Args {
        dir: r.clone(),
        cookie: 0,
        cookieverf: Cookieverf3::default(),
        dircount: 4096,
        maxcount: 65536,
    };
    let Nfs3Res::Readdirplus(rp) = fx.call(&root(), Nfs3Args::Readdirplus(a)).await else {
        panic!()
    };
    let rp = rp.into_result().unwrap();
    let dd = rp
        .reply
        .entries
        .iter()
        .find(|e| e.name.as_bytes() == b"..")
        .unwrap();
    assert_eq!(dd.fileid, ino(&fx.root));
    assert_eq!(dd.name_handle.as_ref(), Some(&r));
    // RENAME/REMOVE of ".." refused.
    let rn = Rename3Args {
        from: Diropargs3 {
            dir: r.clone(),
            name: name(".."),
        },
        to: Diropargs3 {
            dir: r.clone(),
            name: name("x"),
        },
    };
    let Nfs3Res::Rename(x) = fx.call(&root(), Nfs3Args::Rename(rn)).await else {
        panic!()
    };
    assert_eq!(st(&x), Nfsstat3::Inval);
    assert_eq!(st(&fx.remove(&root(), &r, "..").await), Nfsstat3::Inval);
    outside_untouched(&fx);
}

#[tokio::test]
async fn symlinks_are_never_followed() {
    let fx = Fx::new();
    std::os::unix::fs::symlink("/etc", fx.path("etc")).unwrap();
    std::os::unix::fs::symlink("../outside", fx.path("up")).unwrap();
    std::os::unix::fs::symlink("../outside/secret", fx.path("sec")).unwrap();
    std::os::unix::fs::symlink(fx.outside.join("secret"), fx.path("abs")).unwrap();
    let r = fx.root_fh();
    for l in ["etc", "up", "sec", "abs"] {
        let o = fx.lookup(&root(), &r, l).await.into_result().unwrap();
        let a = o.obj_attributes.unwrap();
        assert_eq!(a.ftype, Ftype3::Lnk, "{l} is the link itself");
        assert_eq!(a.fileid, ino(&fx.path(l)));
        // READ through the link: refused.
        let rd = fx.read(&root(), &o.object, 0, 4096).await;
        assert_eq!(st(&rd), Nfsstat3::Inval, "{l}");
        // LOOKUP through the link: it is no directory.
        assert_eq!(
            st(&fx.lookup(&root(), &o.object, "secret").await),
            Nfsstat3::Notdir
        );
        assert_eq!(
            st(&fx.lookup(&root(), &o.object, "passwd").await),
            Nfsstat3::Notdir
        );
        // WRITE, SETATTR size through it: refused; the target unchanged.
        let w = fx
            .write(&root(), &o.object, 0, b"pwned", StableHow::FileSync)
            .await;
        assert_eq!(st(&w), Nfsstat3::Inval);
        let s = fx
            .setattr(
                &root(),
                &o.object,
                Sattr3 {
                    size: Some(0),
                    ..Default::default()
                },
            )
            .await;
        assert_eq!(st(&s), Nfsstat3::Inval);
        // CREATE/MKDIR inside it: it is no directory.
        let c = fx
            .create(
                &root(),
                &o.object,
                "new",
                Createhow3::Unchecked(Sattr3::default()),
            )
            .await;
        assert_eq!(st(&c), Nfsstat3::Notdir);
    }
    // CREATE UNCHECKED over the link name does not open the target.
    let c = fx
        .create(
            &root(),
            &r,
            "sec",
            Createhow3::Unchecked(Sattr3 {
                size: Some(0),
                ..Default::default()
            }),
        )
        .await;
    assert_eq!(st(&c), Nfsstat3::Exist);
    // SETATTR mode on the link changes neither the link's target...
    let l = fx.fh(&root(), &r, "abs").await;
    let _ = fx
        .setattr(
            &root(),
            &l,
            Sattr3 {
                mode: Some(0o777),
                ..Default::default()
            },
        )
        .await;
    let m = std::fs::metadata(fx.outside.join("secret")).unwrap();
    assert_ne!(m.mode() & 0o777, 0o777);
    // ...nor do times or owners move on the target.
    let _ = fx
        .setattr(
            &root(),
            &l,
            Sattr3 {
                uid: Some(4321),
                mtime: SetTime::SetToServerTime,
                ..Default::default()
            },
        )
        .await;
    assert_ne!(
        std::fs::metadata(fx.outside.join("secret")).unwrap().uid(),
        4321
    );
    // LINK to a symlink makes a link to the symlink, not to its target.
    let ln = Link3Args {
        file: l.clone(),
        link: Diropargs3 {
            dir: r.clone(),
            name: name("hard"),
        },
    };
    let Nfs3Res::Link(_) = fx.call(&root(), Nfs3Args::Link(ln)).await else {
        panic!()
    };
    if let Ok(m) = std::fs::symlink_metadata(fx.path("hard")) {
        assert!(m.file_type().is_symlink());
    }
    // READDIRPLUS entries of links are links.
    let a = Readdirplus3Args {
        dir: r.clone(),
        cookie: 0,
        cookieverf: Cookieverf3::default(),
        dircount: 65536,
        maxcount: 65536,
    };
    let Nfs3Res::Readdirplus(rp) = fx.call(&root(), Nfs3Args::Readdirplus(a)).await else {
        panic!()
    };
    for e in rp.into_result().unwrap().reply.entries {
        if ["etc", "up", "sec", "abs"].contains(&std::str::from_utf8(e.name.as_bytes()).unwrap()) {
            assert_eq!(e.name_attributes.unwrap().ftype, Ftype3::Lnk);
        }
    }
    outside_untouched(&fx);
}

#[tokio::test]
async fn a_directory_swapped_for_a_symlink_is_not_followed() {
    let fx = Fx::new();
    std::fs::create_dir(fx.path("d")).unwrap();
    std::fs::write(fx.path("d/secret"), b"inside").unwrap();
    let d = fx.walk("d").await;
    let inner = fx.walk("d/secret").await;
    // Replace d by a link to the outside directory behind the server's back.
    std::fs::rename(fx.path("d"), fx.tmp.path().join("moved")).unwrap();
    std::os::unix::fs::symlink("../outside", fx.path("d")).unwrap();
    // The link name resolves to the link.
    let o = fx
        .lookup(&root(), &fx.root_fh(), "d")
        .await
        .into_result()
        .unwrap();
    assert_eq!(o.obj_attributes.unwrap().ftype, Ftype3::Lnk);
    assert_eq!(
        st(&fx.lookup(&root(), &o.object, "secret").await),
        Nfsstat3::Notdir
    );
    // The old handles name objects now outside the export: whatever they
    // answer, they never hand out the outside secret.
    if let NfsResult::Ok(l) = fx.lookup(&root(), &d, "secret").await {
        if let NfsResult::Ok(rd) = fx.read(&root(), &l.object, 0, 100).await {
            no_secret(&rd.data);
        }
    }
    if let NfsResult::Ok(rd) = fx.read(&root(), &inner, 0, 100).await {
        no_secret(&rd.data);
    }
    // Once the cached descriptors are checked again, the moved-out
    // objects are STALE.
    std::thread::sleep(
        nfs3_server::export::RECHECK_INTERVAL + std::time::Duration::from_millis(100),
    );
    assert_eq!(st(&fx.lookup(&root(), &d, "secret").await), Nfsstat3::Stale);
    assert_eq!(st(&fx.read(&root(), &inner, 0, 100).await), Nfsstat3::Stale);
    outside_untouched(&fx);
}

#[tokio::test]
async fn a_file_moved_out_of_the_export_becomes_stale() {
    let fx = Fx::new();
    std::fs::create_dir(fx.path("d")).unwrap();
    std::fs::write(fx.path("d/f"), b"was inside").unwrap();
    std::fs::write(fx.path("g"), b"moves within").unwrap();
    let f = fx.walk("d/f").await;
    let g = fx.walk("g").await;
    assert!(fx.read(&root(), &f, 0, 100).await.is_ok());
    std::fs::rename(fx.path("d/f"), fx.tmp.path().join("taken-out")).unwrap();
    std::fs::rename(fx.path("g"), fx.path("d/g2")).unwrap();
    std::thread::sleep(
        nfs3_server::export::RECHECK_INTERVAL + std::time::Duration::from_millis(100),
    );
    assert_eq!(st(&fx.read(&root(), &f, 0, 100).await), Nfsstat3::Stale);
    assert_eq!(st(&fx.getattr(&root(), &f).await), Nfsstat3::Stale);
    // A file moved inside the export is found again.
    let r = fx.read(&root(), &g, 0, 100).await.into_result().unwrap();
    assert_eq!(r.data.as_ref(), b"moves within");
}

#[tokio::test]
async fn forged_and_stale_handles() {
    let fx = Fx::new();
    std::fs::write(fx.path("f"), b"data").unwrap();
    let r = fx.root_fh();
    // Random bytes of every length: BADHANDLE (or STALE), never an object.
    for len in [0usize, 1, 8, 31, 32, 33, 64] {
        for _ in 0..8 {
            let b: Vec<u8> = (0..len).map(|_| rand::random::<u8>()).collect();
            let fh = NfsFh3::new(Bytes::from(b)).unwrap();
            let s = st(&fx.getattr(&root(), &fh).await);
            assert!(
                matches!(s, Nfsstat3::Badhandle | Nfsstat3::Stale),
                "{len}: {s:?}"
            );
            let s = st(&fx.read(&root(), &fh, 0, 100).await);
            assert!(
                matches!(s, Nfsstat3::Badhandle | Nfsstat3::Stale),
                "{len}: {s:?}"
            );
        }
    }
    // A handle made by hand for the file outside, with its real inode
    // number and birth time and this export's identity: STALE.
    let sx = rustix::fs::statx(
        rustix::fs::CWD,
        fx.outside.join("secret").as_path(),
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
        rustix::fs::StatxFlags::BASIC_STATS | rustix::fs::StatxFlags::BTIME,
    )
    .unwrap();
    let id = FileId {
        ino: sx.stx_ino,
        btime_sec: sx.stx_btime.tv_sec,
        btime_nsec: sx.stx_btime.tv_nsec,
    };
    let forged = FileHandle {
        export: fx.export.fsid(),
        id,
    }
    .encode();
    let forged = NfsFh3::new(Bytes::copy_from_slice(&forged)).unwrap();
    assert_eq!(st(&fx.getattr(&root(), &forged).await), Nfsstat3::Stale);
    let rd = fx.read(&root(), &forged, 0, 100).await;
    assert_eq!(st(&rd), Nfsstat3::Stale);
    // The same for the outside directory (as a directory handle).
    let od = rustix::fs::statx(
        rustix::fs::CWD,
        fx.outside.as_path(),
        rustix::fs::AtFlags::empty(),
        rustix::fs::StatxFlags::BASIC_STATS | rustix::fs::StatxFlags::BTIME,
    )
    .unwrap();
    let fd = FileHandle {
        export: fx.export.fsid(),
        id: FileId {
            ino: od.stx_ino,
            btime_sec: od.stx_btime.tv_sec,
            btime_nsec: od.stx_btime.tv_nsec,
        },
    }
    .encode();
    let fd = NfsFh3::new(Bytes::copy_from_slice(&fd)).unwrap();
    assert_eq!(
        st(&fx.lookup(&root(), &fd, "secret").await),
        Nfsstat3::Stale
    );
    // A real file's handle with a wrong birth time (a reused inode): STALE.
    let f = fx.fh(&root(), &r, "f").await;
    let mut b = f.as_bytes().to_vec();
    b[31] ^= 1;
    let wrong = NfsFh3::new(Bytes::from(b)).unwrap();
    assert_eq!(st(&fx.getattr(&root(), &wrong).await), Nfsstat3::Stale);
    // A handle of another export: STALE.
    let mut b = f.as_bytes().to_vec();
    b[5] ^= 1;
    assert_eq!(
        st(&fx
            .getattr(&root(), &NfsFh3::new(Bytes::from(b)).unwrap())
            .await),
        Nfsstat3::Stale
    );
    // A deleted file's handle: STALE, also after a new file takes the name
    // (and perhaps the inode number).
    assert!(fx.getattr(&root(), &f).await.is_ok());
    std::fs::remove_file(fx.path("f")).unwrap();
    assert_eq!(st(&fx.getattr(&root(), &f).await), Nfsstat3::Stale);
    std::fs::write(fx.path("f"), b"new").unwrap();
    assert_eq!(st(&fx.read(&root(), &f, 0, 10).await), Nfsstat3::Stale);
    let f2 = fx.fh(&root(), &r, "f").await;
    assert_ne!(f2, f);
    assert_eq!(
        fx.read(&root(), &f2, 0, 10)
            .await
            .into_result()
            .unwrap()
            .data
            .as_ref(),
        b"new"
    );
    outside_untouched(&fx);
}

#[tokio::test]
async fn a_flood_of_forged_handles_is_bounded_work() {
    let fx = Fx::new();
    for i in 0..200 {
        std::fs::write(fx.path(&format!("f{i}")), b"").unwrap();
    }
    let t = std::time::Instant::now();
    for i in 0..2000u64 {
        let id = FileId {
            ino: 1_000_000 + i,
            btime_sec: 5,
            btime_nsec: 5,
        };
        let fh = FileHandle {
            export: fx.export.fsid(),
            id,
        }
        .encode();
        let fh = NfsFh3::new(Bytes::copy_from_slice(&fh)).unwrap();
        assert_eq!(st(&fx.getattr(&root(), &fh).await), Nfsstat3::Stale);
    }
    let walks = fx
        .export
        .counters()
        .walks
        .load(std::sync::atomic::Ordering::Relaxed);
    let secs = t.elapsed().as_secs_f64();
    // At most one walk per WALK_INTERVAL (2 s), plus the first.
    assert!(
        walks as f64 <= 1.0 + secs / 2.0,
        "{walks} walks in {secs:.2} s"
    );
    println!("2000 forged handles: {walks} walk(s), {secs:.3} s");
}

#[tokio::test]
async fn root_is_squashed() {
    let fx = Fx::with(ExportOptions::default());
    std::fs::write(fx.path("private"), b"alice's").unwrap();
    chown(&fx.path("private"), 1000, 1000);
    chmod(&fx.path("private"), 0o600);
    chmod(&fx.root, 0o777);
    let r = fx.root_fh();
    let p = fx.fh(&root(), &r, "private").await;
    assert_eq!(st(&fx.read(&root(), &p, 0, 100).await), Nfsstat3::Acces);
    let w = fx.write(&root(), &p, 0, b"x", StableHow::FileSync).await;
    assert_eq!(st(&w), Nfsstat3::Acces);
    let s = fx
        .setattr(
            &root(),
            &p,
            Sattr3 {
                mode: Some(0o666),
                ..Default::default()
            },
        )
        .await;
    assert_eq!(st(&s), Nfsstat3::Perm);
    let s = fx
        .setattr(
            &root(),
            &p,
            Sattr3 {
                uid: Some(0),
                ..Default::default()
            },
        )
        .await;
    assert_eq!(st(&s), Nfsstat3::Perm);
    // Files root creates belong to 65534.
    fx.create(
        &root(),
        &r,
        "byroot",
        Createhow3::Unchecked(Sattr3::default()),
    )
    .await
    .into_result()
    .unwrap();
    let m = std::fs::metadata(fx.path("byroot")).unwrap();
    assert_eq!((m.uid(), m.gid()), (65534, 65534));
    // Alice herself reads it.
    let d = fx
        .read(&sys(1000, 1000, &[]), &p, 0, 100)
        .await
        .into_result()
        .unwrap();
    assert_eq!(d.data.as_ref(), b"alice's");
    // all_squash maps everyone; AUTH_NONE is anonymous.
    let mut fx = fx;
    fx.restart(ExportOptions {
        all_squash: true,
        anon_uid: 4000,
        anon_gid: 4001,
        ..Default::default()
    });
    let r = fx.root_fh();
    let p = fx.fh(&root(), &r, "private").await;
    assert_eq!(
        st(&fx.read(&sys(1000, 1000, &[]), &p, 0, 100).await),
        Nfsstat3::Acces
    );
    fx.create(
        &sys(1000, 1000, &[]),
        &r,
        "squashed",
        Createhow3::Unchecked(Sattr3::default()),
    )
    .await
    .into_result()
    .unwrap();
    let m = std::fs::metadata(fx.path("squashed")).unwrap();
    assert_eq!((m.uid(), m.gid()), (4000, 4001));
    assert_eq!(
        st(&fx.read(&oncrpc::Credential::None, &p, 0, 100).await),
        Nfsstat3::Acces
    );
}

#[tokio::test]
async fn other_users_are_refused() {
    let fx = Fx::new();
    std::fs::create_dir(fx.path("home")).unwrap();
    chown(&fx.path("home"), 1000, 1000);
    chmod(&fx.path("home"), 0o755);
    std::fs::write(fx.path("home/private"), b"alice's").unwrap();
    chown(&fx.path("home/private"), 1000, 1000);
    chmod(&fx.path("home/private"), 0o600);
    std::fs::create_dir(fx.path("tmp")).unwrap();
    chmod(&fx.path("tmp"), 0o1777);
    std::fs::write(fx.path("tmp/alices"), b"a").unwrap();
    chown(&fx.path("tmp/alices"), 1000, 1000);
    let bob = sys(1001, 1001, &[]);
    let home = fx.walk("home").await;
    let p = fx.fh(&bob, &home, "private").await;
    assert_eq!(st(&fx.read(&bob, &p, 0, 100).await), Nfsstat3::Acces);
    assert_eq!(
        st(&fx.write(&bob, &p, 0, b"x", StableHow::Unstable).await),
        Nfsstat3::Acces
    );
    assert_eq!(
        st(&fx
            .create(
                &bob,
                &home,
                "mine",
                Createhow3::Unchecked(Sattr3::default())
            )
            .await),
        Nfsstat3::Acces
    );
    assert_eq!(
        st(&fx.remove(&bob, &home, "private").await),
        Nfsstat3::Acces
    );
    assert_eq!(
        st(&fx.mkdir(&bob, &home, "sub", 0o777).await),
        Nfsstat3::Acces
    );
    let rn = Rename3Args {
        from: Diropargs3 {
            dir: home.clone(),
            name: name("private"),
        },
        to: Diropargs3 {
            dir: fx.walk("tmp").await,
            name: name("stolen"),
        },
    };
    let Nfs3Res::Rename(x) = fx.call(&bob, Nfs3Args::Rename(rn)).await else {
        panic!()
    };
    assert_eq!(st(&x), Nfsstat3::Acces);
    // Sticky /tmp: bob may create but not remove alice's file.
    let tmp = fx.walk("tmp").await;
    fx.create(&bob, &tmp, "bobs", Createhow3::Unchecked(Sattr3::default()))
        .await
        .into_result()
        .unwrap();
    assert_eq!(st(&fx.remove(&bob, &tmp, "alices").await), Nfsstat3::Acces);
    fx.remove(&bob, &tmp, "bobs").await.into_result().unwrap();
    // A directory without search permission hides its names.
    chmod(&fx.path("home"), 0o700);
    assert_eq!(
        st(&fx.lookup(&bob, &home, "private").await),
        Nfsstat3::Acces
    );
    assert_eq!(std::fs::read(fx.path("home/private")).unwrap(), b"alice's");
    assert!(fx.path("tmp/alices").exists());
}

#[tokio::test]
async fn a_read_only_export_refuses_every_change() {
    let mut fx = Fx::new();
    std::fs::write(fx.path("f"), b"keep").unwrap();
    std::fs::create_dir(fx.path("d")).unwrap();
    fx.restart(ExportOptions {
        read_only: true,
        root_squash: false,
        ..Default::default()
    });
    let r = fx.root_fh();
    let f = fx.fh(&root(), &r, "f").await;
    let d = fx.fh(&root(), &r, "d").await;
    let dop = |n: &str| Diropargs3 {
        dir: r.clone(),
        name: name(n),
    };
    let calls = vec![
        Nfs3Args::Setattr(Setattr3Args {
            object: f.clone(),
            new_attributes: Sattr3 {
                mode: Some(0o777),
                ..Default::default()
            },
            guard: None,
        }),
        Nfs3Args::Write(Write3Args {
            file: f.clone(),
            offset: 0,
            count: 1,
            stable: StableHow::FileSync,
            data: Bytes::from_static(b"x"),
        }),
        Nfs3Args::Create(Create3Args {
            where_: dop("n"),
            how: Createhow3::Unchecked(Sattr3::default()),
        }),
        Nfs3Args::Create(Create3Args {
            where_: dop("f"),
            how: Createhow3::Unchecked(Sattr3 {
                size: Some(0),
                ..Default::default()
            }),
        }),
        Nfs3Args::Mkdir(Mkdir3Args {
            where_: dop("n"),
            attributes: Sattr3::default(),
        }),
        Nfs3Args::Symlink(Symlink3Args {
            where_: dop("n"),
            symlink: Symlinkdata3 {
                symlink_attributes: Sattr3::default(),
                symlink_data: Nfspath3::from("x"),
            },
        }),
        Nfs3Args::Mknod(Mknod3Args {
            where_: dop("n"),
            what: Mknoddata3::Fifo(Sattr3::default()),
        }),
        Nfs3Args::Remove(Remove3Args { object: dop("f") }),
        Nfs3Args::Rmdir(Rmdir3Args { object: dop("d") }),
        Nfs3Args::Rename(Rename3Args {
            from: dop("f"),
            to: dop("g"),
        }),
        Nfs3Args::Link(Link3Args {
            file: f.clone(),
            link: dop("h"),
        }),
        Nfs3Args::Commit(Commit3Args {
            file: f.clone(),
            offset: 0,
            count: 0,
        }),
    ];
    for a in calls {
        let n = a.name();
        let res = fx.call(&root(), a).await;
        assert_eq!(res.status(), Nfsstat3::Rofs, "{n}");
    }
    // ACCESS does not offer changes.
    let Nfs3Res::Access(a) = fx
        .call(
            &root(),
            Nfs3Args::Access(Access3Args {
                object: d,
                access: access::ALL,
            }),
        )
        .await
    else {
        panic!()
    };
    assert_eq!(
        a.into_result().unwrap().access & (access::MODIFY | access::EXTEND | access::DELETE),
        0
    );
    // Reading works.
    assert_eq!(
        fx.read(&root(), &f, 0, 10)
            .await
            .into_result()
            .unwrap()
            .data
            .as_ref(),
        b"keep"
    );
    let mut names: Vec<_> = std::fs::read_dir(&fx.root)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["d", "f"]);
    assert_eq!(std::fs::read(fx.path("f")).unwrap(), b"keep");
}

#[tokio::test]
async fn hostile_names_are_refused() {
    let fx = Fx::new();
    let r = fx.root_fh();
    for n in ["", "a/b", "../outside", "/etc", "x\0y"] {
        assert_eq!(
            st(&fx.lookup(&root(), &r, n).await),
            Nfsstat3::Acces,
            "{n:?}"
        );
        let c = fx
            .create(&root(), &r, n, Createhow3::Unchecked(Sattr3::default()))
            .await;
        assert_eq!(st(&c), Nfsstat3::Acces, "{n:?}");
    }
    // A symlink whose text holds NUL: INVAL.
    let a = Symlink3Args {
        where_: Diropargs3 {
            dir: r.clone(),
            name: name("l"),
        },
        symlink: Symlinkdata3 {
            symlink_attributes: Sattr3::default(),
            symlink_data: Nfspath3(Bytes::from_static(b"a\0b")),
        },
    };
    let Nfs3Res::Symlink(s) = fx.call(&root(), Nfs3Args::Symlink(a)).await else {
        panic!()
    };
    assert_eq!(st(&s), Nfsstat3::Inval);
    assert_eq!(std::fs::read_dir(&fx.root).unwrap().count(), 0);
    outside_untouched(&fx);
}

/// COMMIT forces a file to disk: like WRITE, only its owner or a caller
/// with write permission may ask for it.
#[tokio::test]
async fn commit_needs_write_permission() {
    let fx = Fx::new();
    std::fs::write(fx.path("f"), b"data").unwrap();
    chown(&fx.path("f"), 1000, 1000);
    chmod(&fx.path("f"), 0o644);
    let fh = fx.walk("f").await;
    let commit = |cred: oncrpc::Credential| {
        let fh = fh.clone();
        let fx = &fx;
        async move {
            let res = fx
                .call(
                    &cred,
                    Nfs3Args::Commit(Commit3Args {
                        file: fh,
                        offset: 0,
                        count: 0,
                    }),
                )
                .await;
            match res {
                Nfs3Res::Commit(r) => st(&r),
                other => panic!("not a COMMIT reply: {other:?}"),
            }
        }
    };
    assert_eq!(commit(sys(2000, 2000, &[])).await, Nfsstat3::Acces);
    assert_eq!(commit(sys(1000, 1000, &[])).await, Nfsstat3::Ok);
}
