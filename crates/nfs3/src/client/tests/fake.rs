//! A small in-memory NFS version 3 and MOUNT version 3 server as
//! `oncrpc::Service`s, for the client tests: a tree of directories, files
//! and symbolic links keyed by file id, handles of 8 bytes (the id).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use oncrpc::{Call, Credential, Payload, ProcError, Service};
use xdr::XdrEncode;

use crate::args::*;
use crate::codec::PayloadEncode;
use crate::mount::*;
use crate::procs::*;
use crate::res::*;
use crate::types::*;

pub const ROOT: u64 = 1;

#[derive(Debug, Clone)]
pub enum Kind {
    Dir(BTreeMap<Bytes, u64>),
    File(Vec<u8>),
    Link(Bytes),
}

#[derive(Debug, Default)]
pub struct State {
    pub nodes: HashMap<u64, Kind>,
    pub next: u64,
    /// Credential of every call, in order.
    pub creds: Vec<Credential>,
    /// Whether each WRITE / SYMLINK call carried its data as a DDP piece.
    pub ddp_args: Vec<bool>,
    /// Entries per READDIR / READDIRPLUS reply.
    pub page: usize,
    /// Answer READDIR with no entries and no eof (a broken server).
    pub stall_readdir: bool,
    /// Answer GETATTR with bytes that do not decode.
    pub garbage_getattr: bool,
}

pub type Shared = Arc<Mutex<State>>;

/// One listed entry: file id, name, cookie.
type Listed = (u64, Bytes, u64);

pub fn fh(id: u64) -> NfsFh3 {
    NfsFh3::new(id.to_be_bytes().to_vec()).unwrap()
}

fn id(fh: &NfsFh3) -> Option<u64> {
    Some(u64::from_be_bytes(fh.as_bytes().try_into().ok()?))
}

fn pfail<T>(s: Nfsstat3) -> NfsResult<T, PostOpAttrFail> {
    NfsResult::Fail(s, PostOpAttrFail::default())
}

/// The leading `entries` whose linked-list encoding keeps a `resok` of
/// `base` bytes within `count` (RFC 1813 §3.3.16: `count` bounds the
/// whole `READDIR3resok`), and whether some were cut; `None` if not even
/// one fits.
fn fit<T: XdrEncode>(base: usize, entries: Vec<T>, count: u32) -> Option<(Vec<T>, bool)> {
    let n = entries.len();
    let mut size = base;
    let mut out = Vec::new();
    for e in entries {
        size += 4 + e.encoded_len();
        if size > count as usize {
            break;
        }
        out.push(e);
    }
    if out.is_empty() && n > 0 {
        return None;
    }
    let cut = out.len() < n;
    Some((out, cut))
}

pub fn new_state() -> Shared {
    let mut s = State {
        next: ROOT + 1,
        page: 2,
        ..State::default()
    };
    s.nodes.insert(ROOT, Kind::Dir(BTreeMap::new()));
    Arc::new(Mutex::new(s))
}

impl State {
    pub fn add(&mut self, dir: u64, name: &str, k: Kind) -> u64 {
        let n = self.next;
        self.next += 1;
        self.nodes.insert(n, k);
        if let Some(Kind::Dir(m)) = self.nodes.get_mut(&dir) {
            m.insert(Bytes::copy_from_slice(name.as_bytes()), n);
        }
        n
    }

    fn attr(&self, id: u64) -> Option<Fattr3> {
        let k = self.nodes.get(&id)?;
        let (ftype, size) = match k {
            Kind::Dir(m) => (Ftype3::Dir, m.len() as u64),
            Kind::File(d) => (Ftype3::Reg, d.len() as u64),
            Kind::Link(p) => (Ftype3::Lnk, p.len() as u64),
        };
        Some(Fattr3 {
            ftype,
            mode: 0o755,
            nlink: 1,
            uid: 0,
            gid: 0,
            size,
            used: size,
            rdev: Specdata3::default(),
            fsid: 1,
            fileid: id,
            atime: Nfstime3::default(),
            mtime: Nfstime3::default(),
            ctime: Nfstime3::default(),
        })
    }

    fn dir(&mut self, d: &NfsFh3) -> Result<&mut BTreeMap<Bytes, u64>, Nfsstat3> {
        match id(d).and_then(|i| self.nodes.get_mut(&i)) {
            Some(Kind::Dir(m)) => Ok(m),
            Some(_) => Err(Nfsstat3::Notdir),
            None => Err(Nfsstat3::Stale),
        }
    }

    fn wcc(&self, d: &NfsFh3) -> WccData {
        WccData {
            before: None,
            after: id(d).and_then(|i| self.attr(i)),
        }
    }

    fn create(&mut self, w: &Diropargs3, k: Kind) -> Create3Res {
        let exists = match self.dir(&w.dir) {
            Ok(m) => m.contains_key(&w.name.0),
            Err(s) => return NfsResult::Fail(s, WccDataFail::default()),
        };
        if exists {
            return NfsResult::Fail(
                Nfsstat3::Exist,
                WccDataFail {
                    wcc: self.wcc(&w.dir),
                },
            );
        }
        let n = self.next;
        self.next += 1;
        self.nodes.insert(n, k);
        if let Ok(m) = self.dir(&w.dir) {
            m.insert(w.name.0.clone(), n);
        }
        NfsResult::Ok(Create3ResOk {
            obj: Some(fh(n)),
            obj_attributes: self.attr(n),
            dir_wcc: self.wcc(&w.dir),
        })
    }

    fn unlink(&mut self, o: &Diropargs3, want_dir: bool) -> Remove3Res {
        let m = match self.dir(&o.dir) {
            Ok(m) => m,
            Err(s) => return NfsResult::Fail(s, WccDataFail::default()),
        };
        let Some(&n) = m.get(&o.name.0) else {
            return NfsResult::Fail(Nfsstat3::Noent, WccDataFail::default());
        };
        let is_dir = matches!(self.nodes.get(&n), Some(Kind::Dir(_)));
        if is_dir != want_dir {
            let s = if want_dir {
                Nfsstat3::Notdir
            } else {
                Nfsstat3::Isdir
            };
            return NfsResult::Fail(s, WccDataFail::default());
        }
        if let Ok(m) = self.dir(&o.dir) {
            m.remove(&o.name.0);
        }
        NfsResult::Ok(WccDataFail {
            wcc: self.wcc(&o.dir),
        })
    }

    /// Entries after `cookie` (cookie = index + 1), one page.
    fn listing(&mut self, d: &NfsFh3, cookie: u64) -> Result<(Vec<Listed>, bool), Nfsstat3> {
        let page = self.page;
        let m = self.dir(d)?;
        let all: Vec<(Bytes, u64)> = m.iter().map(|(k, v)| (k.clone(), *v)).collect();
        let start = cookie as usize;
        let items: Vec<_> = all
            .iter()
            .enumerate()
            .skip(start)
            .take(page)
            .map(|(i, (name, n))| (*n, name.clone(), i as u64 + 1))
            .collect();
        let eof = start + items.len() >= all.len();
        Ok((items, eof))
    }

    pub fn handle(&mut self, a: Nfs3Args) -> Nfs3Res {
        use NfsResult::{Fail, Ok as Good};
        match a {
            Nfs3Args::Null => Nfs3Res::Null,
            Nfs3Args::Getattr(a) => {
                Nfs3Res::Getattr(match id(&a.object).and_then(|i| self.attr(i)) {
                    Some(obj_attributes) => Good(Getattr3ResOk { obj_attributes }),
                    None => Fail(Nfsstat3::Stale, ()),
                })
            }
            Nfs3Args::Setattr(a) => Nfs3Res::Setattr(Good(Setattr3ResOk {
                obj_wcc: self.wcc(&a.object),
            })),
            Nfs3Args::Lookup(a) => Nfs3Res::Lookup(match self.dir(&a.what.dir) {
                Err(s) => Fail(s, Lookup3ResFail::default()),
                Ok(m) => match m.get(&a.what.name.0).copied() {
                    Some(n) => Good(Lookup3ResOk {
                        object: fh(n),
                        obj_attributes: self.attr(n),
                        dir_attributes: id(&a.what.dir).and_then(|i| self.attr(i)),
                    }),
                    None => Fail(Nfsstat3::Noent, Lookup3ResFail::default()),
                },
            }),
            Nfs3Args::Access(a) => Nfs3Res::Access(Good(Access3ResOk {
                obj_attributes: None,
                access: a.access & (access::READ | access::LOOKUP),
            })),
            Nfs3Args::Readlink(a) => {
                Nfs3Res::Readlink(match id(&a.symlink).and_then(|i| self.nodes.get(&i)) {
                    Some(Kind::Link(p)) => Good(Readlink3ResOk {
                        symlink_attributes: None,
                        data: Nfspath3(p.clone()),
                    }),
                    Some(_) => pfail(Nfsstat3::Inval),
                    None => pfail(Nfsstat3::Stale),
                })
            }
            Nfs3Args::Read(a) => {
                Nfs3Res::Read(match id(&a.file).and_then(|i| self.nodes.get(&i)) {
                    Some(Kind::File(d)) => {
                        let start = (a.offset as usize).min(d.len());
                        let end = start.saturating_add(a.count as usize).min(d.len());
                        Good(Read3ResOk {
                            file_attributes: id(&a.file).and_then(|i| self.attr(i)),
                            count: (end - start) as u32,
                            eof: end == d.len(),
                            data: Bytes::copy_from_slice(&d[start..end]),
                        })
                    }
                    Some(Kind::Dir(_)) => pfail(Nfsstat3::Isdir),
                    _ => pfail(Nfsstat3::Stale),
                })
            }
            Nfs3Args::Write(a) => {
                Nfs3Res::Write(match id(&a.file).and_then(|i| self.nodes.get_mut(&i)) {
                    Some(Kind::File(d)) => {
                        let end = a.offset as usize + a.data.len();
                        if d.len() < end {
                            d.resize(end, 0);
                        }
                        d[a.offset as usize..end].copy_from_slice(&a.data);
                        Good(Write3ResOk {
                            file_wcc: self.wcc(&a.file),
                            count: a.data.len() as u32,
                            committed: StableHow::FileSync,
                            verf: Writeverf3([7; 8]),
                        })
                    }
                    _ => Fail(Nfsstat3::Stale, WccDataFail::default()),
                })
            }
            Nfs3Args::Create(a) => Nfs3Res::Create(self.create(&a.where_, Kind::File(Vec::new()))),
            Nfs3Args::Mkdir(a) => {
                Nfs3Res::Mkdir(self.create(&a.where_, Kind::Dir(BTreeMap::new())))
            }
            Nfs3Args::Symlink(a) => Nfs3Res::Symlink(
                self.create(&a.where_, Kind::Link(a.symlink.symlink_data.0.clone())),
            ),
            Nfs3Args::Mknod(a) => Nfs3Res::Mknod(match a.what {
                Mknoddata3::Fifo(_) => self.create(&a.where_, Kind::File(Vec::new())),
                _ => Fail(Nfsstat3::Badtype, WccDataFail::default()),
            }),
            Nfs3Args::Remove(a) => Nfs3Res::Remove(self.unlink(&a.object, false)),
            Nfs3Args::Rmdir(a) => Nfs3Res::Rmdir(self.unlink(&a.object, true)),
            Nfs3Args::Rename(a) => Nfs3Res::Rename({
                let n = self
                    .dir(&a.from.dir)
                    .ok()
                    .and_then(|m| m.remove(&a.from.name.0));
                match (n, self.dir(&a.to.dir)) {
                    (Some(n), Ok(m)) => {
                        m.insert(a.to.name.0.clone(), n);
                        Good(Rename3ResOk::default())
                    }
                    _ => Fail(Nfsstat3::Noent, Rename3ResOk::default()),
                }
            }),
            Nfs3Args::Link(a) => Nfs3Res::Link(match (id(&a.file), self.dir(&a.link.dir)) {
                (Some(n), Ok(m)) => {
                    m.insert(a.link.name.0.clone(), n);
                    Good(Link3ResOk::default())
                }
                _ => Fail(Nfsstat3::Stale, Link3ResOk::default()),
            }),
            Nfs3Args::Readdir(a) => Nfs3Res::Readdir(if self.stall_readdir {
                Good(Readdir3ResOk {
                    dir_attributes: None,
                    cookieverf: Cookieverf3::default(),
                    reply: Dirlist3::default(),
                })
            } else {
                match self.listing(&a.dir, a.cookie) {
                    Ok((items, eof)) => {
                        let entries = items
                            .into_iter()
                            .map(|(fileid, name, cookie)| Entry3 {
                                fileid,
                                name: Filename3(name),
                                cookie,
                            })
                            .collect();
                        let mut ok = Readdir3ResOk {
                            dir_attributes: None,
                            cookieverf: Cookieverf3([1; 8]),
                            reply: Dirlist3 {
                                entries: Vec::new(),
                                eof,
                            },
                        };
                        match fit(ok.encoded_len(), entries, a.count) {
                            Some((entries, cut)) => {
                                ok.reply.entries = entries;
                                ok.reply.eof &= !cut;
                                Good(ok)
                            }
                            None => pfail(Nfsstat3::Toosmall),
                        }
                    }
                    Err(s) => pfail(s),
                }
            }),
            Nfs3Args::Readdirplus(a) => {
                Nfs3Res::Readdirplus(match self.listing(&a.dir, a.cookie) {
                    Ok((items, eof)) => {
                        let entries = items
                            .into_iter()
                            .map(|(fileid, name, cookie)| Entryplus3 {
                                fileid,
                                name: Filename3(name),
                                cookie,
                                name_attributes: self.attr(fileid),
                                name_handle: Some(fh(fileid)),
                            })
                            .collect();
                        let mut ok = Readdirplus3ResOk {
                            dir_attributes: None,
                            cookieverf: Cookieverf3([2; 8]),
                            reply: Dirlistplus3 {
                                entries: Vec::new(),
                                eof,
                            },
                        };
                        match fit(ok.encoded_len(), entries, a.maxcount) {
                            Some((entries, cut)) => {
                                ok.reply.entries = entries;
                                ok.reply.eof &= !cut;
                                Good(ok)
                            }
                            None => pfail(Nfsstat3::Toosmall),
                        }
                    }
                    Err(s) => pfail(s),
                })
            }
            Nfs3Args::Fsstat(_) => Nfs3Res::Fsstat(Good(Fsstat3ResOk {
                obj_attributes: None,
                tbytes: 1 << 30,
                fbytes: 1 << 29,
                abytes: 1 << 29,
                tfiles: 1000,
                ffiles: 900,
                afiles: 900,
                invarsec: 0,
            })),
            Nfs3Args::Fsinfo(_) => Nfs3Res::Fsinfo(Good(Fsinfo3ResOk {
                obj_attributes: None,
                rtmax: MAX_IO_SIZE,
                rtpref: 65536,
                rtmult: 4096,
                wtmax: MAX_IO_SIZE,
                wtpref: 65536,
                wtmult: 4096,
                dtpref: 8192,
                maxfilesize: u64::MAX,
                time_delta: Nfstime3 {
                    seconds: 0,
                    nseconds: 1,
                },
                properties: fsf::LINK | fsf::SYMLINK | fsf::HOMOGENEOUS | fsf::CANSETTIME,
            })),
            Nfs3Args::Pathconf(_) => Nfs3Res::Pathconf(Good(Pathconf3ResOk {
                obj_attributes: None,
                linkmax: 32000,
                name_max: 255,
                no_trunc: true,
                chown_restricted: true,
                case_insensitive: false,
                case_preserving: true,
            })),
            Nfs3Args::Commit(a) => Nfs3Res::Commit(Good(Commit3ResOk {
                file_wcc: self.wcc(&a.file),
                verf: Writeverf3([7; 8]),
            })),
        }
    }
}

/// The NFS service.
pub struct FakeNfs(pub Shared);

impl Service for FakeNfs {
    fn program(&self) -> u32 {
        NFS_PROGRAM
    }
    fn versions(&self) -> std::ops::RangeInclusive<u32> {
        3..=3
    }
    async fn handle(&self, call: Call) -> Result<Payload, ProcError> {
        let args = Nfs3Args::decode_payload(call.procedure, &call.args)?;
        let mut s = self.0.lock().unwrap();
        s.creds.push(call.cred.clone());
        if matches!(args, Nfs3Args::Write(_) | Nfs3Args::Symlink(_)) {
            s.ddp_args.push(call.args.ddp_count() == 1);
        }
        if s.garbage_getattr && matches!(args, Nfs3Args::Getattr(_)) {
            // NFS3_OK followed by a truncated fattr3.
            return Ok(Payload::from_xdr(Bytes::from_static(&[
                0, 0, 0, 0, 0, 0, 0, 1,
            ])));
        }
        Ok(s.handle(args).to_payload())
    }
}

/// The MOUNT service: one export, `/export`.
pub struct FakeMount(pub Shared);

impl Service for FakeMount {
    fn program(&self) -> u32 {
        MOUNT_PROGRAM
    }
    fn versions(&self) -> std::ops::RangeInclusive<u32> {
        3..=3
    }
    async fn handle(&self, call: Call) -> Result<Payload, ProcError> {
        let args = MountArgs::decode_payload(call.procedure, &call.args)?;
        self.0.lock().unwrap().creds.push(call.cred.clone());
        let res = match args {
            MountArgs::Null => MountRes::Null,
            MountArgs::Mnt(p) if p.as_bytes() == b"/export" => {
                MountRes::Mnt(Mountres3::Ok(Mountres3Ok {
                    fhandle: fh(ROOT),
                    auth_flavors: vec![0, 1],
                }))
            }
            MountArgs::Mnt(_) => MountRes::Mnt(Mountres3::Fail(Mountstat3::Noent)),
            MountArgs::Dump => MountRes::Dump(Mountlist(vec![Mountbody {
                ml_hostname: Name::from("client"),
                ml_directory: Dirpath::from("/export"),
            }])),
            MountArgs::Umnt(_) => MountRes::Umnt,
            MountArgs::Umntall => MountRes::Umntall,
            MountArgs::Export => MountRes::Export(Exports(vec![Exportnode {
                ex_dir: Dirpath::from("/export"),
                ex_groups: Groups(vec![Name::from("*")]),
            }])),
        };
        Ok(res.to_payload())
    }
}
