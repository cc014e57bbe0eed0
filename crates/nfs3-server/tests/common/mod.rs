//! Test fixture: a temporary directory with an `export/` served through
//! an in-process dispatcher (LocalChannel), an `outside/` directory next
//! to it holding a secret, and typed NFSv3 / MOUNT calls.
#![allow(dead_code)]

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use nfs3::args::*;
use nfs3::procs::{Nfs3Args, Nfs3Res};
use nfs3::res::*;
use nfs3::types::*;
use nfs3::{MountArgs, PayloadEncode, MOUNT_PROGRAM, MOUNT_V3, NFS_PROGRAM, NFS_V3};
use nfs3_server::{Export, ExportOptions, MountService, NfsService};
use oncrpc::testing::LocalChannel;
use oncrpc::{AuthSys, Channel, Credential, Dispatcher, Payload, Request, RpcError};

/// The secret kept outside the export.
pub const SECRET: &[u8] = b"outside secret: never served";

pub struct Fx {
    pub tmp: tempfile::TempDir,
    pub root: PathBuf,
    pub outside: PathBuf,
    pub export: Arc<Export>,
    pub ch: LocalChannel,
}

pub fn sys(uid: u32, gid: u32, gids: &[u32]) -> Credential {
    Credential::Sys(AuthSys::new(1, "testhost", uid, gid, gids.to_vec()).unwrap())
}

/// Root, not squashed unless the export squashes it.
pub fn root() -> Credential {
    sys(0, 0, &[])
}

pub fn name(s: &str) -> Filename3 {
    Filename3::from(s)
}

impl Fx {
    pub fn new() -> Fx {
        Fx::with(ExportOptions {
            root_squash: false,
            ..Default::default()
        })
    }

    pub fn with(opts: ExportOptions) -> Fx {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("export");
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&root).unwrap();
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("secret"), SECRET).unwrap();
        let export = Export::open(&root, opts).unwrap();
        let ch = channel(&export);
        Fx {
            tmp,
            root,
            outside,
            export,
            ch,
        }
    }

    /// Serve the same directory again with a new `Export` (a restart).
    pub fn restart(&mut self, opts: ExportOptions) {
        self.export = Export::open(&self.root, opts).unwrap();
        self.ch = channel(&self.export);
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    pub fn root_fh(&self) -> NfsFh3 {
        NfsFh3::new(Bytes::copy_from_slice(&self.export.root_handle())).unwrap()
    }

    pub async fn raw(
        &self,
        prog: u32,
        vers: u32,
        procedure: u32,
        args: Payload,
        cred: &Credential,
    ) -> Result<Payload, RpcError> {
        self.ch
            .call(Request::new(prog, vers, procedure, args).with_cred(cred.clone()))
            .await
    }

    pub async fn call(&self, cred: &Credential, args: Nfs3Args) -> Nfs3Res {
        let p = args.procedure();
        let reply = self
            .raw(NFS_PROGRAM, NFS_V3, p, args.to_payload(), cred)
            .await
            .unwrap();
        Nfs3Res::decode_payload(p, &reply).unwrap()
    }

    pub async fn mount(&self, cred: &Credential, args: MountArgs) -> Payload {
        self.raw(
            MOUNT_PROGRAM,
            MOUNT_V3,
            args.procedure(),
            args.to_payload(),
            cred,
        )
        .await
        .unwrap()
    }

    pub async fn getattr(&self, cred: &Credential, fh: &NfsFh3) -> Getattr3Res {
        match self
            .call(cred, Nfs3Args::Getattr(Getattr3Args { object: fh.clone() }))
            .await
        {
            Nfs3Res::Getattr(r) => r,
            r => panic!("{r:?}"),
        }
    }

    pub async fn lookup(&self, cred: &Credential, dir: &NfsFh3, n: &str) -> Lookup3Res {
        let a = Lookup3Args {
            what: Diropargs3 {
                dir: dir.clone(),
                name: name(n),
            },
        };
        match self.call(cred, Nfs3Args::Lookup(a)).await {
            Nfs3Res::Lookup(r) => r,
            r => panic!("{r:?}"),
        }
    }

    /// LOOKUP that must succeed; the handle.
    pub async fn fh(&self, cred: &Credential, dir: &NfsFh3, n: &str) -> NfsFh3 {
        match self.lookup(cred, dir, n).await {
            NfsResult::Ok(ok) => ok.object,
            r => panic!("lookup {n}: {r:?}"),
        }
    }

    /// The handle of a path below the root (LOOKUP by LOOKUP, as root).
    pub async fn walk(&self, rel: &str) -> NfsFh3 {
        let mut fh = self.root_fh();
        for c in rel.split('/').filter(|c| !c.is_empty()) {
            fh = self.fh(&root(), &fh, c).await;
        }
        fh
    }

    pub async fn read(&self, cred: &Credential, fh: &NfsFh3, offset: u64, count: u32) -> Read3Res {
        let a = Read3Args {
            file: fh.clone(),
            offset,
            count,
        };
        match self.call(cred, Nfs3Args::Read(a)).await {
            Nfs3Res::Read(r) => r,
            r => panic!("{r:?}"),
        }
    }

    pub async fn write(
        &self,
        cred: &Credential,
        fh: &NfsFh3,
        offset: u64,
        data: &[u8],
        stable: StableHow,
    ) -> Write3Res {
        let a = Write3Args {
            file: fh.clone(),
            offset,
            count: data.len() as u32,
            stable,
            data: Bytes::copy_from_slice(data),
        };
        match self.call(cred, Nfs3Args::Write(a)).await {
            Nfs3Res::Write(r) => r,
            r => panic!("{r:?}"),
        }
    }

    pub async fn create(
        &self,
        cred: &Credential,
        dir: &NfsFh3,
        n: &str,
        how: Createhow3,
    ) -> Create3Res {
        let a = Create3Args {
            where_: Diropargs3 {
                dir: dir.clone(),
                name: name(n),
            },
            how,
        };
        match self.call(cred, Nfs3Args::Create(a)).await {
            Nfs3Res::Create(r) => r,
            r => panic!("{r:?}"),
        }
    }

    pub async fn mkdir(&self, cred: &Credential, dir: &NfsFh3, n: &str, mode: u32) -> Mkdir3Res {
        let a = Mkdir3Args {
            where_: Diropargs3 {
                dir: dir.clone(),
                name: name(n),
            },
            attributes: Sattr3 {
                mode: Some(mode),
                ..Default::default()
            },
        };
        match self.call(cred, Nfs3Args::Mkdir(a)).await {
            Nfs3Res::Mkdir(r) => r,
            r => panic!("{r:?}"),
        }
    }

    pub async fn remove(&self, cred: &Credential, dir: &NfsFh3, n: &str) -> Remove3Res {
        let a = Remove3Args {
            object: Diropargs3 {
                dir: dir.clone(),
                name: name(n),
            },
        };
        match self.call(cred, Nfs3Args::Remove(a)).await {
            Nfs3Res::Remove(r) => r,
            r => panic!("{r:?}"),
        }
    }

    pub async fn setattr(&self, cred: &Credential, fh: &NfsFh3, s: Sattr3) -> Setattr3Res {
        let a = Setattr3Args {
            object: fh.clone(),
            new_attributes: s,
            guard: None,
        };
        match self.call(cred, Nfs3Args::Setattr(a)).await {
            Nfs3Res::Setattr(r) => r,
            r => panic!("{r:?}"),
        }
    }
}

pub fn channel(export: &Arc<Export>) -> LocalChannel {
    LocalChannel::new(
        Dispatcher::builder()
            .service(NfsService::new(export.clone()))
            .service(MountService::new(export.clone()))
            .build(),
    )
}

pub fn ino(p: &Path) -> u64 {
    std::fs::symlink_metadata(p).unwrap().ino()
}

pub fn chown(p: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::lchown(p, Some(uid), Some(gid)).unwrap();
}

pub fn chmod(p: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The status of any NFS result.
pub fn st<T, F>(r: &NfsResult<T, F>) -> Nfsstat3 {
    r.status()
}
