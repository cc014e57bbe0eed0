//! Client tests against the in-crate fake server (`tests/fake.rs`) through
//! `oncrpc::testing::LocalChannel`, in both of its modes: pieces kept (as
//! RPC-over-RDMA delivers them: DDP arguments reach the server as DDP
//! pieces, DDP results are placed in the client's buffers) and flattened
//! (as TCP delivers them).

mod fake;
mod rdma;

use bytes::{Bytes, BytesMut};
use oncrpc::testing::{LocalChannel, LocalMode};
use oncrpc::{Credential, Dispatcher, RpcError};

use super::*;
use crate::args::{Createhow3, Mknoddata3};
use crate::mount::Mountstat3;
use crate::types::*;
use fake::{fh, new_state, FakeMount, FakeNfs, Kind, Shared, ROOT};

fn channel(s: &Shared, mode: LocalMode) -> LocalChannel {
    let d = Dispatcher::builder()
        .service(FakeNfs(s.clone()))
        .service(FakeMount(s.clone()))
        .build();
    LocalChannel::with_mode(d, mode)
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

const MODES: [LocalMode; 2] = [LocalMode::Pieces, LocalMode::Flatten];

#[test]
fn mount_lookup_path_read_write() {
    for mode in MODES {
        let s = new_state();
        let file = {
            let mut st = s.lock().unwrap();
            let d = st.add(ROOT, "dir", Kind::Dir(Default::default()));
            st.add(d, "file", Kind::File(b"hello, world".to_vec()))
        };
        let ch = channel(&s, mode);
        rt().block_on(async {
            let m = MountClient::new(&ch);
            let ok = m.mnt("/export").await.unwrap();
            assert_eq!(ok.auth_flavors, vec![0, 1]);
            let root = ok.fhandle;
            let nfs = Nfs3Client::new(&ch);
            let (f, attrs) = nfs.lookup_path(&root, "/dir//./file").await.unwrap();
            assert_eq!(f, fh(file));
            assert_eq!(attrs.unwrap().size, 12);
            // Empty path: the root and its attributes.
            let (r, attrs) = nfs.lookup_path(&root, "").await.unwrap();
            assert_eq!(r, root);
            assert_eq!(attrs.unwrap().ftype, Ftype3::Dir);

            // READ into a caller buffer.
            let buf = BytesMut::with_capacity(64);
            let ptr = buf.as_ptr();
            let ok = nfs.read_into(&f, 7, 64, buf).await.unwrap();
            assert_eq!(&ok.data[..], b"world");
            assert!(ok.eof);
            if mode == LocalMode::Pieces {
                assert_eq!(ok.data.as_ptr(), ptr, "READ data not placed in the buffer");
            }

            // WRITE: sent as a DDP piece, then read back.
            let w = nfs
                .write(&f, 7, Bytes::from_static(b"there!"), StableHow::Unstable)
                .await
                .unwrap();
            assert_eq!(w.count, 6);
            assert_eq!(w.verf, Writeverf3([7; 8]));
            let ok = nfs.read(&f, 0, 100).await.unwrap();
            assert_eq!(&ok.data[..], b"hello, there!");
            assert_eq!(ok.count, 13);
            let c = nfs.commit(&f, 0, 0).await.unwrap();
            assert_eq!(c.verf, Writeverf3([7; 8]));
        });
        let st = s.lock().unwrap();
        assert_eq!(st.ddp_args, vec![mode == LocalMode::Pieces]);
    }
}

#[test]
fn nfs_errors_are_named() {
    let s = new_state();
    let ch = channel(&s, LocalMode::Pieces);
    rt().block_on(async {
        let nfs = Nfs3Client::new(&ch);
        let e = nfs.lookup(&fh(ROOT), b"missing").await.unwrap_err();
        assert_eq!(e.nfs_status(), Some(Nfsstat3::Noent));
        assert_eq!(e.to_string(), "LOOKUP: NFS3ERR_NOENT");
        let e = nfs.lookup_path(&fh(ROOT), "a/b").await.unwrap_err();
        assert_eq!(e.nfs_status(), Some(Nfsstat3::Noent));
        let e = nfs.getattr(&fh(999)).await.unwrap_err();
        assert_eq!(e.to_string(), "GETATTR: NFS3ERR_STALE");
        let e = nfs.read(&fh(ROOT), 0, 10).await.unwrap_err();
        assert_eq!(e.nfs_status(), Some(Nfsstat3::Isdir));
        // The whole result, resfail arm included, through `call`.
        let r: crate::res::Lookup3Res = nfs
            .call(
                crate::proc3::LOOKUP,
                &crate::args::Lookup3Args {
                    what: Diropargs3 {
                        dir: fh(ROOT),
                        name: Filename3::from("x"),
                    },
                },
            )
            .await
            .unwrap();
        assert_eq!(r.status(), Nfsstat3::Noent);
        // Arguments over the limits never reach the server.
        let long = vec![b'a'; 256];
        assert!(matches!(
            nfs.lookup(&fh(ROOT), &long).await,
            Err(Error::InvalidArgument(_))
        ));
        let big = Bytes::from(vec![0u8; MAX_IO_SIZE as usize + 1]);
        assert!(matches!(
            nfs.write(&fh(ROOT), 0, big, StableHow::FileSync).await,
            Err(Error::InvalidArgument(_))
        ));
        // MOUNT status.
        let m = MountClient::new(&ch);
        let e = m.mnt("/nope").await.unwrap_err();
        assert_eq!(e.mount_status(), Some(Mountstat3::Noent));
        assert_eq!(e.to_string(), "MNT: MNT3ERR_NOENT");
    });
}

#[test]
fn rpc_and_decode_errors() {
    let s = new_state();
    s.lock().unwrap().garbage_getattr = true;
    let ch = channel(&s, LocalMode::Pieces);
    rt().block_on(async {
        let nfs = Nfs3Client::new(&ch);
        let e = nfs.getattr(&fh(ROOT)).await.unwrap_err();
        assert!(
            matches!(
                e,
                Error::Decode {
                    procedure: "GETATTR",
                    ..
                }
            ),
            "{e:?}"
        );
        // A program the dispatcher does not serve: an RPC error.
        let ch2 = LocalChannel::new(Dispatcher::builder().build());
        let e = Nfs3Client::new(&ch2).null().await.unwrap_err();
        assert!(matches!(e, Error::Rpc(RpcError::ProgUnavail)), "{e:?}");
        // Hostile handle bytes from the client side: GARBAGE_ARGS.
        let r: Result<(), Error> = nfs
            .call(crate::proc3::GETATTR, &Bytes::from_static(&[0, 0, 0, 99]))
            .await;
        assert!(matches!(r, Err(Error::Rpc(RpcError::GarbageArgs))), "{r:?}");
    });
    // A server that answers READDIR with no entries and no eof.
    let s = new_state();
    s.lock().unwrap().stall_readdir = true;
    let ch = channel(&s, LocalMode::Pieces);
    rt().block_on(async {
        let e = Nfs3Client::new(&ch)
            .readdir_all(&fh(ROOT))
            .await
            .unwrap_err();
        assert!(matches!(e, Error::Protocol { .. }), "{e:?}");
    });
}

impl crate::codec::PayloadEncode for Bytes {
    fn encode_payload(&self, b: &mut oncrpc::PayloadBuilder) {
        b.xdr_bytes(self.clone());
    }
}

#[test]
fn listings_follow_cookies_to_eof() {
    for mode in MODES {
        let s = new_state();
        {
            let mut st = s.lock().unwrap();
            for n in ["a", "b", "c", "d", "e"] {
                st.add(ROOT, n, Kind::File(vec![1; 3]));
            }
            st.page = 2;
        }
        let ch = channel(&s, mode);
        rt().block_on(async {
            let nfs = Nfs3Client::new(&ch).with_readdir_size(1024, 4096);
            let all = nfs.readdirplus_all(&fh(ROOT)).await.unwrap();
            let names: Vec<&[u8]> = all.iter().map(|e| e.name.as_bytes()).collect();
            assert_eq!(names, [b"a", b"b", b"c", b"d", b"e"]);
            assert!(all.iter().all(|e| e.name_handle.is_some()));
            assert_eq!(all[4].name_attributes.unwrap().size, 3);
            let all = nfs.readdir_all(&fh(ROOT)).await.unwrap();
            assert_eq!(all.len(), 5);
            assert_eq!(all.last().unwrap().cookie, 5);
            // An empty directory: one call, eof.
            let d = nfs
                .mkdir(&fh(ROOT), b"empty", Sattr3::default())
                .await
                .unwrap();
            let d = d.obj.unwrap();
            assert!(nfs.readdirplus_all(&d).await.unwrap().is_empty());
        });
        // 3 READDIRPLUS + 3 READDIR + MKDIR + 1 READDIRPLUS.
        assert_eq!(s.lock().unwrap().creds.len(), 8);
    }
}

#[test]
fn auth_sys_credentials_reach_the_server() {
    let s = new_state();
    let ch = channel(&s, LocalMode::Pieces);
    rt().block_on(async {
        let nfs = Nfs3Client::new(&ch)
            .with_auth_sys(1000, 100, vec![100, 27], "client.example")
            .unwrap();
        nfs.null().await.unwrap();
        let m = MountClient::new(&ch)
            .with_auth_sys(0, 0, vec![], "m")
            .unwrap();
        m.null().await.unwrap();
        let mut anon = Nfs3Client::new(&ch);
        anon.getattr(&fh(ROOT)).await.unwrap();
        anon.set_credential(auth_sys(5, 6, vec![], "x").unwrap());
        anon.getattr(&fh(ROOT)).await.unwrap();
        assert!(matches!(
            Nfs3Client::new(&ch).with_auth_sys(0, 0, vec![0; 17], "x"),
            Err(Error::InvalidArgument(_))
        ));
    });
    let st = s.lock().unwrap();
    let Credential::Sys(a) = &st.creds[0] else {
        panic!("{:?}", st.creds[0])
    };
    assert_eq!((a.uid(), a.gid(), a.gids()), (1000, 100, &[100, 27][..]));
    assert_eq!(&a.machine_name()[..], b"client.example");
    assert!(matches!(&st.creds[1], Credential::Sys(a) if a.uid() == 0));
    assert_eq!(st.creds[2], Credential::None);
    assert!(matches!(&st.creds[3], Credential::Sys(a) if a.uid() == 5));
}

#[test]
fn namespace_procedures() {
    for mode in MODES {
        let s = new_state();
        let ch = channel(&s, mode);
        rt().block_on(async {
            let nfs = Nfs3Client::new(&ch);
            let root = fh(ROOT);
            nfs.null().await.unwrap();
            let f = nfs
                .create(&root, b"f", Createhow3::Guarded(Sattr3::default()))
                .await
                .unwrap();
            let f = f.obj.unwrap();
            let e = nfs
                .create(&root, b"f", Createhow3::Guarded(Sattr3::default()))
                .await
                .unwrap_err();
            assert_eq!(e.nfs_status(), Some(Nfsstat3::Exist));
            // SYMLINK (target as a DDP piece) and READLINK (placed).
            let l = nfs
                .symlink(&root, b"l", b"f", Sattr3::default())
                .await
                .unwrap();
            let l = l.obj.unwrap();
            let rl = nfs.readlink(&l).await.unwrap();
            assert_eq!(rl.data.as_bytes(), b"f");
            let e = nfs.readlink(&f).await.unwrap_err();
            assert_eq!(e.nfs_status(), Some(Nfsstat3::Inval));
            let long = vec![b'x'; 4097];
            assert!(matches!(
                nfs.symlink(&root, b"m", &long, Sattr3::default()).await,
                Err(Error::InvalidArgument(_))
            ));
            nfs.mknod(&root, b"p", Mknoddata3::Fifo(Sattr3::default()))
                .await
                .unwrap();
            let e = nfs
                .mknod(&root, b"q", Mknoddata3::Other(Ftype3::Reg))
                .await
                .unwrap_err();
            assert_eq!(e.nfs_status(), Some(Nfsstat3::Badtype));
            nfs.rename(&root, b"p", &root, b"p2").await.unwrap();
            nfs.link(&f, &root, b"f2").await.unwrap();
            nfs.lookup(&root, b"f2").await.unwrap();
            let e = nfs.rmdir(&root, b"f2").await.unwrap_err();
            assert_eq!(e.nfs_status(), Some(Nfsstat3::Notdir));
            nfs.remove(&root, b"f2").await.unwrap();
            nfs.mkdir(&root, b"d", Sattr3::default()).await.unwrap();
            let e = nfs.remove(&root, b"d").await.unwrap_err();
            assert_eq!(e.nfs_status(), Some(Nfsstat3::Isdir));
            nfs.rmdir(&root, b"d").await.unwrap();
            nfs.setattr(&f, Sattr3::default(), Some(Nfstime3::default()))
                .await
                .unwrap();
            let a = nfs.access(&f, access::ALL).await.unwrap();
            assert_eq!(a.access, access::READ | access::LOOKUP);
            let i = nfs.fsinfo(&root).await.unwrap();
            assert_eq!(i.rtmax, MAX_IO_SIZE);
            assert_eq!(nfs.fsstat(&root).await.unwrap().tfiles, 1000);
            assert_eq!(nfs.pathconf(&root).await.unwrap().name_max, 255);
            let names: Vec<Vec<u8>> = nfs
                .readdir_all(&root)
                .await
                .unwrap()
                .into_iter()
                .map(|e| e.name.as_bytes().to_vec())
                .collect();
            assert_eq!(names, [b"f".to_vec(), b"l".to_vec(), b"p2".to_vec()]);
            // MOUNT's other procedures.
            let m = MountClient::new(&ch);
            m.null().await.unwrap();
            let d = m.dump().await.unwrap();
            assert_eq!(d[0].ml_directory.as_bytes(), b"/export");
            let x = m.export().await.unwrap();
            assert_eq!(x[0].ex_groups.0[0].as_bytes(), b"*");
            m.umnt("/export").await.unwrap();
            m.umntall().await.unwrap();
        });
        assert_eq!(
            s.lock().unwrap().ddp_args,
            vec![mode == LocalMode::Pieces],
            "SYMLINK target as a DDP piece"
        );
    }
}
