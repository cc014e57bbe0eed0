//! [`MountService`]: MOUNT version 3 (program 100005, RFC 1813 Appendix I).

use std::collections::VecDeque;
use std::ops::RangeInclusive;
use std::os::unix::ffi::OsStrExt;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use nfs3::mount::{
    Dirpath, Exportnode, Exports, Groups, Mountbody, Mountlist, Mountres3, Mountres3Ok, Name,
};
use nfs3::{MountArgs, MountRes, Mountstat3, NfsFh3, PayloadEncode, MOUNT_PROGRAM, MOUNT_V3};
use oncrpc::{AuthFlavor, Call, Credential, Payload, ProcError, Service};

use crate::export::Export;

/// Most (host, path) pairs the mount list keeps; the oldest goes first.
pub const MAX_MOUNT_LIST: usize = 1024;

/// MOUNT version 3 for one [`Export`].
///
/// MNT of `/` or of the export path exactly as given to
/// [`Export::open`] (a trailing `/` ignored) returns the root handle and
/// offers AUTH_SYS and AUTH_NONE; a path below the export is
/// MNT3ERR_ACCES (only the export itself is exported); any other path
/// MNT3ERR_NOENT. DUMP, UMNT and UMNTALL keep a list of at most
/// [`MAX_MOUNT_LIST`] entries (it is advisory, RFC 1813 Appendix I);
/// EXPORT lists the export, open to every host.
#[derive(Debug)]
pub struct MountService {
    export: Arc<Export>,
    mounts: Mutex<VecDeque<(Bytes, Bytes)>>,
}

impl MountService {
    /// The service for `export`.
    pub fn new(export: Arc<Export>) -> Self {
        MountService {
            export,
            mounts: Mutex::new(VecDeque::new()),
        }
    }

    fn list(&self) -> std::sync::MutexGuard<'_, VecDeque<(Bytes, Bytes)>> {
        self.mounts.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn export_path(&self) -> &[u8] {
        self.export.path().as_os_str().as_bytes()
    }

    fn mnt(&self, cred: &Credential, host: Bytes, path: &[u8]) -> Mountres3 {
        let trim = |p: &[u8]| -> Vec<u8> {
            let mut v = p.to_vec();
            while v.len() > 1 && v.ends_with(b"/") {
                v.pop();
            }
            v
        };
        let want = trim(path);
        let ours = trim(self.export_path());
        if want == b"/" || want == ours {
            let mut l = self.list();
            let entry = (host, Bytes::copy_from_slice(path));
            if !l.contains(&entry) {
                if l.len() >= MAX_MOUNT_LIST {
                    l.pop_front();
                }
                l.push_back(entry);
            }
            let fh =
                NfsFh3::new(Bytes::copy_from_slice(&self.export.root_handle())).unwrap_or_default();
            return Mountres3::Ok(Mountres3Ok {
                fhandle: fh,
                auth_flavors: vec![AuthFlavor::SYS.0, AuthFlavor::NONE.0],
            });
        }
        let below = want.starts_with(&ours) && want.get(ours.len()) == Some(&b'/');
        let st = if below {
            Mountstat3::Acces
        } else {
            Mountstat3::Noent
        };
        tracing::warn!(
            caller = ?cred.flavor(),
            path = %String::from_utf8_lossy(path),
            status = %st,
            "MNT refused: not the export"
        );
        Mountres3::Fail(st)
    }

    async fn run(&self, call: Call) -> Result<Payload, ProcError> {
        let args = MountArgs::decode_payload(call.procedure, &call.args)?;
        let host = match &call.cred {
            Credential::Sys(s) => s.machine_name().clone(),
            _ => Bytes::from_static(b"(unknown)"),
        };
        let res = match args {
            MountArgs::Null => MountRes::Null,
            MountArgs::Mnt(p) => MountRes::Mnt(self.mnt(&call.cred, host, p.as_bytes())),
            MountArgs::Dump => MountRes::Dump(Mountlist(
                self.list()
                    .iter()
                    .map(|(h, d)| Mountbody {
                        ml_hostname: Name(h.slice(..h.len().min(Name::MAX as usize))),
                        ml_directory: Dirpath(d.clone()),
                    })
                    .collect(),
            )),
            MountArgs::Umnt(p) => {
                self.list()
                    .retain(|(h, d)| !(h == &host && d.as_ref() == p.as_bytes()));
                MountRes::Umnt
            }
            MountArgs::Umntall => {
                self.list().retain(|(h, _)| h != &host);
                MountRes::Umntall
            }
            MountArgs::Export => MountRes::Export(Exports(vec![Exportnode {
                ex_dir: Dirpath(Bytes::copy_from_slice(self.export_path())),
                ex_groups: Groups(Vec::new()),
            }])),
        };
        Ok(res.to_payload())
    }
}

impl Service for MountService {
    fn program(&self) -> u32 {
        MOUNT_PROGRAM
    }

    fn versions(&self) -> RangeInclusive<u32> {
        MOUNT_V3..=MOUNT_V3
    }

    fn handle(
        &self,
        call: Call,
    ) -> impl std::future::Future<Output = Result<Payload, ProcError>> + Send {
        self.run(call)
    }
}
