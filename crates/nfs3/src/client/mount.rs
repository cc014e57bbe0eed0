//! [`MountClient`]: the MOUNT version 3 procedures over an
//! [`oncrpc::Channel`].

use std::time::Duration;

use oncrpc::{Channel, Credential, Request};
use xdr::XdrDecode;

use super::Error;
use crate::codec::PayloadEncode;
use crate::mount::*;

/// A MOUNT version 3 client over any [`Channel`].
#[derive(Debug, Clone)]
pub struct MountClient<C> {
    channel: C,
    cred: Credential,
    timeout: Option<Duration>,
}

impl<C: Channel> MountClient<C> {
    /// A client with AUTH_NONE and the transport's default timeout.
    pub fn new(channel: C) -> Self {
        MountClient {
            channel,
            cred: Credential::None,
            timeout: None,
        }
    }

    /// Use this credential for every call.
    pub fn with_credential(mut self, cred: Credential) -> Self {
        self.cred = cred;
        self
    }

    /// Use an AUTH_SYS credential.
    pub fn with_auth_sys(
        self,
        uid: u32,
        gid: u32,
        gids: Vec<u32>,
        machine_name: &str,
    ) -> Result<Self, Error> {
        Ok(self.with_credential(super::auth_sys(uid, gid, gids, machine_name)?))
    }

    /// Set a timeout for every call.
    pub fn with_timeout(mut self, t: Duration) -> Self {
        self.timeout = Some(t);
        self
    }

    async fn call<A: PayloadEncode, R: XdrDecode>(
        &self,
        procedure: u32,
        args: &A,
    ) -> Result<R, Error> {
        let mut req = Request::new(MOUNT_PROGRAM, MOUNT_V3, procedure, args.to_payload())
            .with_cred(self.cred.clone());
        req.timeout = self.timeout;
        let res = self.channel.call(req).await?;
        crate::codec::decode_payload(&res).map_err(|source| Error::Decode {
            procedure: mount_proc_name(procedure).unwrap_or("?"),
            source,
        })
    }

    fn dirpath(path: &str) -> Result<Dirpath, Error> {
        if path.len() > MNTPATHLEN as usize {
            return Err(Error::InvalidArgument(format!(
                "mount path of {} bytes exceeds {MNTPATHLEN}",
                path.len()
            )));
        }
        Ok(Dirpath::from(path))
    }

    /// NULL.
    pub async fn null(&self) -> Result<(), Error> {
        self.call(mntproc::NULL, &()).await
    }

    /// MNT `path`: the export's root file handle and accepted flavors; a
    /// status other than `MNT3_OK` is [`Error::Mount`].
    pub async fn mnt(&self, path: &str) -> Result<Mountres3Ok, Error> {
        match self.call(mntproc::MNT, &Self::dirpath(path)?).await? {
            Mountres3::Ok(ok) => Ok(ok),
            Mountres3::Fail(s) => Err(Error::Mount(s)),
        }
    }

    /// UMNT `path`.
    pub async fn umnt(&self, path: &str) -> Result<(), Error> {
        self.call(mntproc::UMNT, &Self::dirpath(path)?).await
    }

    /// UMNTALL.
    pub async fn umntall(&self) -> Result<(), Error> {
        self.call(mntproc::UMNTALL, &()).await
    }

    /// DUMP: the server's list of mounts.
    pub async fn dump(&self) -> Result<Vec<Mountbody>, Error> {
        let l: Mountlist = self.call(mntproc::DUMP, &()).await?;
        Ok(l.0)
    }

    /// EXPORT: the server's export list.
    pub async fn export(&self) -> Result<Vec<Exportnode>, Error> {
        let l: Exports = self.call(mntproc::EXPORT, &()).await?;
        Ok(l.0)
    }
}
