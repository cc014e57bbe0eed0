//! [`Nfs3Client`]: the NFS version 3 procedures over an [`oncrpc::Channel`].

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use oncrpc::{Channel, Credential, Payload, Request};
use xdr::XdrDecode;

use super::Error;
use crate::args::*;
use crate::codec::PayloadEncode;
use crate::procs::{proc3, proc_name, NFS_PROGRAM, NFS_V3};
use crate::res::*;
use crate::types::*;

/// READDIRPLUS `dircount` used by [`Nfs3Client::readdirplus_all`] unless
/// changed with [`Nfs3Client::with_readdir_size`].
pub const DEFAULT_DIRCOUNT: u32 = 8192;
/// READDIR `count` and READDIRPLUS `maxcount` used by the `*_all`
/// listings unless changed (32 KiB: larger than the inline threshold, so
/// on RPC-over-RDMA the reply comes in a Reply chunk).
pub const DEFAULT_MAXCOUNT: u32 = 32768;

/// An NFS version 3 client over any [`Channel`].
///
/// Every method makes one call (the `*_all` and
/// [`lookup_path`](Self::lookup_path) ones several) and returns the `resok`
/// arm; a status other than `NFS3_OK` is [`Error::Nfs`]. To see a
/// `resfail` arm (e.g. `wcc_data` of a failed WRITE), use
/// [`call`](Self::call) with the whole `XXX3res` type.
#[derive(Debug, Clone)]
pub struct Nfs3Client<C> {
    channel: C,
    cred: Credential,
    timeout: Option<Duration>,
    dircount: u32,
    maxcount: u32,
}

impl<C: Channel> Nfs3Client<C> {
    /// A client with AUTH_NONE and the transport's default timeout.
    pub fn new(channel: C) -> Self {
        Nfs3Client {
            channel,
            cred: Credential::None,
            timeout: None,
            dircount: DEFAULT_DIRCOUNT,
            maxcount: DEFAULT_MAXCOUNT,
        }
    }

    /// Use this credential for every call.
    pub fn with_credential(mut self, cred: Credential) -> Self {
        self.cred = cred;
        self
    }

    /// Use an AUTH_SYS credential (machine name ≤ 255 bytes, ≤ 16 gids).
    pub fn with_auth_sys(
        self,
        uid: u32,
        gid: u32,
        gids: Vec<u32>,
        machine_name: &str,
    ) -> Result<Self, Error> {
        Ok(self.with_credential(super::auth_sys(uid, gid, gids, machine_name)?))
    }

    /// Change the credential.
    pub fn set_credential(&mut self, cred: Credential) {
        self.cred = cred;
    }

    /// The credential in use.
    pub fn credential(&self) -> &Credential {
        &self.cred
    }

    /// Set a timeout for every call.
    pub fn with_timeout(mut self, t: Duration) -> Self {
        self.timeout = Some(t);
        self
    }

    /// READDIRPLUS `dircount` and READDIR/READDIRPLUS `maxcount` of the
    /// `*_all` listings.
    pub fn with_readdir_size(mut self, dircount: u32, maxcount: u32) -> Self {
        self.dircount = dircount;
        self.maxcount = maxcount;
        self
    }

    /// The channel.
    pub fn channel(&self) -> &C {
        &self.channel
    }

    fn request(&self, procedure: u32, args: Payload) -> Request {
        let mut r = Request::new(NFS_PROGRAM, NFS_V3, procedure, args).with_cred(self.cred.clone());
        r.timeout = self.timeout;
        r
    }

    async fn exchange(&self, req: Request) -> Result<Payload, Error> {
        Ok(self.channel.call(req).await?)
    }

    /// Decode a whole results payload as `R`.
    fn decode<R: XdrDecode>(procedure: u32, p: &Payload) -> Result<R, Error> {
        crate::codec::decode_payload(p).map_err(|source| Error::Decode {
            procedure: name(procedure),
            source,
        })
    }

    /// Make one call of `procedure` with `args` and decode its whole
    /// results as `R` (e.g. [`Lookup3Res`] to see the `resfail` arm).
    pub async fn call<A: PayloadEncode, R: XdrDecode>(
        &self,
        procedure: u32,
        args: &A,
    ) -> Result<R, Error> {
        let res = self
            .exchange(self.request(procedure, args.to_payload()))
            .await?;
        Self::decode(procedure, &res)
    }

    async fn ok<A: PayloadEncode, T: XdrDecode, F: XdrDecode>(
        &self,
        procedure: u32,
        args: &A,
    ) -> Result<T, Error> {
        let r: NfsResult<T, F> = self.call(procedure, args).await?;
        r.into_result().map_err(|status| Error::Nfs {
            procedure: name(procedure),
            status,
        })
    }

    /// NULL.
    pub async fn null(&self) -> Result<(), Error> {
        self.call(proc3::NULL, &()).await
    }

    /// GETATTR: the attributes of `object`.
    pub async fn getattr(&self, object: &NfsFh3) -> Result<Fattr3, Error> {
        let args = Getattr3Args {
            object: object.clone(),
        };
        let ok: Getattr3ResOk = self.ok::<_, _, ()>(proc3::GETATTR, &args).await?;
        Ok(ok.obj_attributes)
    }

    /// SETATTR: set `new_attributes`, if `guard` is given only when the
    /// object's ctime equals it.
    pub async fn setattr(
        &self,
        object: &NfsFh3,
        new_attributes: Sattr3,
        guard: Option<Nfstime3>,
    ) -> Result<WccData, Error> {
        let args = Setattr3Args {
            object: object.clone(),
            new_attributes,
            guard,
        };
        let ok: Setattr3ResOk = self
            .ok::<_, _, Setattr3ResFail>(proc3::SETATTR, &args)
            .await?;
        Ok(ok.obj_wcc)
    }

    /// LOOKUP `name` in `dir`.
    pub async fn lookup(&self, dir: &NfsFh3, name: &[u8]) -> Result<Lookup3ResOk, Error> {
        let args = Lookup3Args {
            what: diropargs(dir, name)?,
        };
        self.ok::<_, _, Lookup3ResFail>(proc3::LOOKUP, &args).await
    }

    /// ACCESS: which of the [`access`](crate::types::access) bits in
    /// `access` the server grants.
    pub async fn access(&self, object: &NfsFh3, access: u32) -> Result<Access3ResOk, Error> {
        let args = Access3Args {
            object: object.clone(),
            access,
        };
        self.ok::<_, _, PostOpAttrFail>(proc3::ACCESS, &args).await
    }

    /// READLINK: the target of a symbolic link (up to 4096 bytes; on
    /// RPC-over-RDMA placed in a buffer of this client through a Write
    /// chunk).
    pub async fn readlink(&self, symlink: &NfsFh3) -> Result<Readlink3ResOk, Error> {
        let args = Readlink3Args {
            symlink: symlink.clone(),
        };
        let req = self
            .request(proc3::READLINK, args.to_payload())
            .with_result_buf(BytesMut::with_capacity(Nfspath3::MAX as usize));
        let res = self.exchange(req).await?;
        let r: Readlink3Res = Self::decode(proc3::READLINK, &res)?;
        r.into_result().map_err(|status| Error::Nfs {
            procedure: "READLINK",
            status,
        })
    }

    /// READ `count` bytes at `offset` into a new buffer of `count` bytes.
    pub async fn read(&self, file: &NfsFh3, offset: u64, count: u32) -> Result<Read3ResOk, Error> {
        let count = count.min(MAX_IO_SIZE);
        self.read_into(file, offset, count, BytesMut::with_capacity(count as usize))
            .await
    }

    /// READ up to `count` bytes at `offset` into `buf` (`count` is clamped
    /// to `buf`'s capacity and to [`MAX_IO_SIZE`]). On
    /// RPC-over-RDMA the server writes the data straight into `buf`; the
    /// returned `data` is then a frozen slice of it, never a copy. On a
    /// byte-stream transport `data` is a slice of the received message.
    pub async fn read_into(
        &self,
        file: &NfsFh3,
        offset: u64,
        count: u32,
        buf: BytesMut,
    ) -> Result<Read3ResOk, Error> {
        let count = count
            .min(MAX_IO_SIZE)
            .min(buf.capacity().try_into().unwrap_or(u32::MAX));
        let args = Read3Args {
            file: file.clone(),
            offset,
            count,
        };
        let req = self
            .request(proc3::READ, args.to_payload())
            .with_result_buf(buf);
        let res = self.exchange(req).await?;
        let r: Read3Res = Self::decode(proc3::READ, &res)?;
        let ok = r.into_result().map_err(|status| Error::Nfs {
            procedure: "READ",
            status,
        })?;
        if ok.data.len() > count as usize || ok.count as usize != ok.data.len() {
            return Err(Error::Protocol {
                procedure: "READ",
                reason: format!(
                    "asked for {count} bytes, got count {} and {} bytes of data",
                    ok.count,
                    ok.data.len()
                ),
            });
        }
        Ok(ok)
    }

    /// WRITE `data` at `offset`. `data` is sent without copying, as a DDP
    /// piece (a Read chunk on RPC-over-RDMA); at most [`MAX_IO_SIZE`]
    /// bytes.
    pub async fn write(
        &self,
        file: &NfsFh3,
        offset: u64,
        data: Bytes,
        stable: StableHow,
    ) -> Result<Write3ResOk, Error> {
        if data.len() > MAX_IO_SIZE as usize {
            return Err(Error::InvalidArgument(format!(
                "WRITE of {} bytes exceeds {MAX_IO_SIZE}",
                data.len()
            )));
        }
        let args = Write3Args {
            file: file.clone(),
            offset,
            count: data.len() as u32,
            stable,
            data,
        };
        let ok: Write3ResOk = self.ok::<_, _, WccDataFail>(proc3::WRITE, &args).await?;
        if ok.count > args.count {
            return Err(Error::Protocol {
                procedure: "WRITE",
                reason: format!("wrote {} of {} bytes", ok.count, args.count),
            });
        }
        Ok(ok)
    }

    /// CREATE `name` in `dir`.
    pub async fn create(
        &self,
        dir: &NfsFh3,
        name: &[u8],
        how: Createhow3,
    ) -> Result<Create3ResOk, Error> {
        let args = Create3Args {
            where_: diropargs(dir, name)?,
            how,
        };
        self.ok::<_, _, WccDataFail>(proc3::CREATE, &args).await
    }

    /// MKDIR `name` in `dir`.
    pub async fn mkdir(
        &self,
        dir: &NfsFh3,
        name: &[u8],
        attributes: Sattr3,
    ) -> Result<Create3ResOk, Error> {
        let args = Mkdir3Args {
            where_: diropargs(dir, name)?,
            attributes,
        };
        self.ok::<_, _, WccDataFail>(proc3::MKDIR, &args).await
    }

    /// SYMLINK: create `name` in `dir` pointing to `target` (≤ 4096 bytes,
    /// sent as a DDP piece).
    pub async fn symlink(
        &self,
        dir: &NfsFh3,
        name: &[u8],
        target: &[u8],
        attributes: Sattr3,
    ) -> Result<Create3ResOk, Error> {
        if target.len() > Nfspath3::MAX as usize {
            return Err(Error::InvalidArgument(format!(
                "symbolic link target of {} bytes exceeds {}",
                target.len(),
                Nfspath3::MAX
            )));
        }
        let args = Symlink3Args {
            where_: diropargs(dir, name)?,
            symlink: Symlinkdata3 {
                symlink_attributes: attributes,
                symlink_data: Nfspath3::from(target),
            },
        };
        self.ok::<_, _, WccDataFail>(proc3::SYMLINK, &args).await
    }

    /// MKNOD `name` in `dir`.
    pub async fn mknod(
        &self,
        dir: &NfsFh3,
        name: &[u8],
        what: Mknoddata3,
    ) -> Result<Create3ResOk, Error> {
        let args = Mknod3Args {
            where_: diropargs(dir, name)?,
            what,
        };
        self.ok::<_, _, WccDataFail>(proc3::MKNOD, &args).await
    }

    /// REMOVE `name` from `dir`.
    pub async fn remove(&self, dir: &NfsFh3, name: &[u8]) -> Result<WccData, Error> {
        let args = Remove3Args {
            object: diropargs(dir, name)?,
        };
        let ok: WccDataFail = self.ok::<_, _, WccDataFail>(proc3::REMOVE, &args).await?;
        Ok(ok.wcc)
    }

    /// RMDIR `name` from `dir`.
    pub async fn rmdir(&self, dir: &NfsFh3, name: &[u8]) -> Result<WccData, Error> {
        let args = Rmdir3Args {
            object: diropargs(dir, name)?,
        };
        let ok: WccDataFail = self.ok::<_, _, WccDataFail>(proc3::RMDIR, &args).await?;
        Ok(ok.wcc)
    }

    /// RENAME `from_dir`/`from_name` to `to_dir`/`to_name`.
    pub async fn rename(
        &self,
        from_dir: &NfsFh3,
        from_name: &[u8],
        to_dir: &NfsFh3,
        to_name: &[u8],
    ) -> Result<Rename3ResOk, Error> {
        let args = Rename3Args {
            from: diropargs(from_dir, from_name)?,
            to: diropargs(to_dir, to_name)?,
        };
        self.ok::<_, _, Rename3ResOk>(proc3::RENAME, &args).await
    }

    /// LINK: a new name `name` in `dir` for `file`.
    pub async fn link(
        &self,
        file: &NfsFh3,
        dir: &NfsFh3,
        name: &[u8],
    ) -> Result<Link3ResOk, Error> {
        let args = Link3Args {
            file: file.clone(),
            link: diropargs(dir, name)?,
        };
        self.ok::<_, _, Link3ResOk>(proc3::LINK, &args).await
    }

    /// READDIR from `cookie` (0 to start; `cookieverf` from the previous
    /// reply, zero to start), reply of at most `count` bytes.
    pub async fn readdir(
        &self,
        dir: &NfsFh3,
        cookie: u64,
        cookieverf: Cookieverf3,
        count: u32,
    ) -> Result<Readdir3ResOk, Error> {
        let args = Readdir3Args {
            dir: dir.clone(),
            cookie,
            cookieverf,
            count,
        };
        self.ok::<_, _, PostOpAttrFail>(proc3::READDIR, &args).await
    }

    /// READDIRPLUS from `cookie`, at most `dircount` bytes of directory
    /// information and a reply of at most `maxcount` bytes.
    pub async fn readdirplus(
        &self,
        dir: &NfsFh3,
        cookie: u64,
        cookieverf: Cookieverf3,
        dircount: u32,
        maxcount: u32,
    ) -> Result<Readdirplus3ResOk, Error> {
        let args = Readdirplus3Args {
            dir: dir.clone(),
            cookie,
            cookieverf,
            dircount,
            maxcount,
        };
        self.ok::<_, _, PostOpAttrFail>(proc3::READDIRPLUS, &args)
            .await
    }

    /// FSSTAT.
    pub async fn fsstat(&self, fsroot: &NfsFh3) -> Result<Fsstat3ResOk, Error> {
        let args = Fsstat3Args {
            fsroot: fsroot.clone(),
        };
        self.ok::<_, _, PostOpAttrFail>(proc3::FSSTAT, &args).await
    }

    /// FSINFO.
    pub async fn fsinfo(&self, fsroot: &NfsFh3) -> Result<Fsinfo3ResOk, Error> {
        let args = Fsinfo3Args {
            fsroot: fsroot.clone(),
        };
        self.ok::<_, _, PostOpAttrFail>(proc3::FSINFO, &args).await
    }

    /// PATHCONF.
    pub async fn pathconf(&self, object: &NfsFh3) -> Result<Pathconf3ResOk, Error> {
        let args = Pathconf3Args {
            object: object.clone(),
        };
        self.ok::<_, _, PostOpAttrFail>(proc3::PATHCONF, &args)
            .await
    }

    /// COMMIT `count` bytes at `offset` (0, 0: the whole file).
    pub async fn commit(
        &self,
        file: &NfsFh3,
        offset: u64,
        count: u32,
    ) -> Result<Commit3ResOk, Error> {
        let args = Commit3Args {
            file: file.clone(),
            offset,
            count,
        };
        self.ok::<_, _, WccDataFail>(proc3::COMMIT, &args).await
    }

    /// Resolve a slash-separated `path` relative to `root` with one LOOKUP
    /// per component (empty components and `.` are skipped; `..` is
    /// looked up like any name, the server decides). Returns the handle
    /// and attributes of the last component; for an empty path, `root`
    /// and its GETATTR attributes.
    pub async fn lookup_path(
        &self,
        root: &NfsFh3,
        path: &str,
    ) -> Result<(NfsFh3, PostOpAttr), Error> {
        let mut fh = root.clone();
        let mut attrs = None;
        let mut any = false;
        for comp in path.split('/').filter(|c| !c.is_empty() && *c != ".") {
            let ok = self.lookup(&fh, comp.as_bytes()).await?;
            fh = ok.object;
            attrs = ok.obj_attributes;
            any = true;
        }
        if !any {
            attrs = Some(self.getattr(root).await?);
        }
        Ok((fh, attrs))
    }

    /// Every entry of `dir`, by READDIR calls of `count` bytes (see
    /// [`with_readdir_size`](Self::with_readdir_size)) from cookie 0 until
    /// `eof`.
    pub async fn readdir_all(&self, dir: &NfsFh3) -> Result<Vec<Entry3>, Error> {
        const PROCEDURE: &str = "READDIR";
        let mut out = Vec::new();
        let mut cookie = 0;
        let mut verf = Cookieverf3::default();
        loop {
            let ok = self.readdir(dir, cookie, verf, self.maxcount).await?;
            verf = ok.cookieverf;
            let eof = ok.reply.eof;
            cookie = next_cookie("READDIR", ok.reply.entries.last().map(|e| e.cookie), eof)?;
            out.extend(ok.reply.entries);
            if eof {
                return Ok(out);
            }
            check_listed(PROCEDURE, out.len())?;
        }
    }

    /// Every entry of `dir` with attributes and handles, by READDIRPLUS
    /// calls from cookie 0 until `eof`.
    pub async fn readdirplus_all(&self, dir: &NfsFh3) -> Result<Vec<Entryplus3>, Error> {
        const PROCEDURE: &str = "READDIRPLUS";
        let mut out = Vec::new();
        let mut cookie = 0;
        let mut verf = Cookieverf3::default();
        loop {
            let ok = self
                .readdirplus(dir, cookie, verf, self.dircount, self.maxcount)
                .await?;
            verf = ok.cookieverf;
            let eof = ok.reply.eof;
            cookie = next_cookie(
                "READDIRPLUS",
                ok.reply.entries.last().map(|e| e.cookie),
                eof,
            )?;
            out.extend(ok.reply.entries);
            if eof {
                return Ok(out);
            }
            check_listed(PROCEDURE, out.len())?;
        }
    }
}

/// Most entries [`Nfs3Client::readdir_all`] and
/// [`Nfs3Client::readdirplus_all`] collect: a server that never says `eof`
/// ends the listing with an error here rather than exhausting memory.
pub const MAX_LISTING_ENTRIES: usize = 1 << 22;

/// A listing not at `eof` may go on only while under
/// [`MAX_LISTING_ENTRIES`].
fn check_listed(procedure: &'static str, listed: usize) -> Result<(), Error> {
    if listed >= MAX_LISTING_ENTRIES {
        return Err(Error::Protocol {
            procedure,
            reason: format!(
                "no eof after {listed} entries (at most {MAX_LISTING_ENTRIES} are listed)"
            ),
        });
    }
    Ok(())
}

/// The cookie to continue a listing from: the last entry's. A reply with
/// no entry and no `eof` would make the listing loop for ever.
fn next_cookie(procedure: &'static str, last: Option<u64>, eof: bool) -> Result<u64, Error> {
    match (last, eof) {
        (Some(c), _) => Ok(c),
        (None, true) => Ok(0),
        (None, false) => Err(Error::Protocol {
            procedure,
            reason: "reply has no entries and no eof".into(),
        }),
    }
}

fn name(procedure: u32) -> &'static str {
    proc_name(procedure).unwrap_or("?")
}

fn diropargs(dir: &NfsFh3, name: &[u8]) -> Result<Diropargs3, Error> {
    if name.len() > Filename3::MAX as usize {
        return Err(Error::InvalidArgument(format!(
            "name of {} bytes exceeds {}",
            name.len(),
            Filename3::MAX
        )));
    }
    Ok(Diropargs3 {
        dir: dir.clone(),
        name: Filename3::from(name),
    })
}

#[cfg(test)]
mod listing_tests {
    use super::{check_listed, MAX_LISTING_ENTRIES};

    /// A listing stops with an error at the cap, not before it.
    #[test]
    fn a_listing_without_eof_stops_at_the_cap() {
        assert!(check_listed("READDIR", MAX_LISTING_ENTRIES - 1).is_ok());
        let e = check_listed("READDIRPLUS", MAX_LISTING_ENTRIES).unwrap_err();
        assert!(e.to_string().contains("no eof"), "{e}");
    }
}
