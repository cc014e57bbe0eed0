//! proptest strategies for every NFS and MOUNT type.

use bytes::Bytes;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;

use crate::args::*;
use crate::mount::*;
use crate::procs::*;
use crate::res::*;
use crate::types::*;

fn bytes_up_to(max: usize) -> impl Strategy<Value = Bytes> {
    vec(any::<u8>(), 0..=max).prop_map(Bytes::from)
}

pub fn nfs_fh3() -> impl Strategy<Value = NfsFh3> {
    bytes_up_to(64).prop_map(|b| NfsFh3::new(b).unwrap())
}

pub fn filename3() -> impl Strategy<Value = Filename3> {
    prop_oneof![bytes_up_to(12), bytes_up_to(255)].prop_map(Filename3)
}

pub fn nfspath3() -> impl Strategy<Value = Nfspath3> {
    prop_oneof![bytes_up_to(20), bytes_up_to(4096)].prop_map(Nfspath3)
}

pub fn data() -> impl Strategy<Value = Bytes> {
    prop_oneof![bytes_up_to(16), bytes_up_to(9000)]
}

pub fn nfstime3() -> impl Strategy<Value = Nfstime3> {
    (any::<u32>(), any::<u32>()).prop_map(|(seconds, nseconds)| Nfstime3 { seconds, nseconds })
}

pub fn ftype3() -> impl Strategy<Value = Ftype3> {
    select(Ftype3::ALL)
}

pub fn nfsstat3_err() -> impl Strategy<Value = Nfsstat3> {
    select(&Nfsstat3::ALL[1..])
}

pub fn fattr3() -> impl Strategy<Value = Fattr3> {
    (
        (
            ftype3(),
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
        ),
        (
            any::<u64>(),
            any::<u64>(),
            any::<(u32, u32)>(),
            any::<u64>(),
            any::<u64>(),
        ),
        (nfstime3(), nfstime3(), nfstime3()),
    )
        .prop_map(
            |(
                (ftype, mode, nlink, uid, gid),
                (size, used, rdev, fsid, fileid),
                (atime, mtime, ctime),
            )| {
                Fattr3 {
                    ftype,
                    mode,
                    nlink,
                    uid,
                    gid,
                    size,
                    used,
                    rdev: Specdata3 {
                        specdata1: rdev.0,
                        specdata2: rdev.1,
                    },
                    fsid,
                    fileid,
                    atime,
                    mtime,
                    ctime,
                }
            },
        )
}

pub fn post_op_attr() -> impl Strategy<Value = PostOpAttr> {
    proptest::option::of(fattr3())
}

pub fn wcc_attr() -> impl Strategy<Value = WccAttr> {
    (any::<u64>(), nfstime3(), nfstime3()).prop_map(|(size, mtime, ctime)| WccAttr {
        size,
        mtime,
        ctime,
    })
}

pub fn wcc_data() -> impl Strategy<Value = WccData> {
    (proptest::option::of(wcc_attr()), post_op_attr())
        .prop_map(|(before, after)| WccData { before, after })
}

pub fn set_time() -> impl Strategy<Value = SetTime> {
    prop_oneof![
        Just(SetTime::DontChange),
        Just(SetTime::SetToServerTime),
        nfstime3().prop_map(SetTime::SetToClientTime),
    ]
}

pub fn sattr3() -> impl Strategy<Value = Sattr3> {
    (
        any::<Option<u32>>(),
        any::<Option<u32>>(),
        any::<Option<u32>>(),
        any::<Option<u64>>(),
        set_time(),
        set_time(),
    )
        .prop_map(|(mode, uid, gid, size, atime, mtime)| Sattr3 {
            mode,
            uid,
            gid,
            size,
            atime,
            mtime,
        })
}

pub fn diropargs(dir: NfsFh3) -> Diropargs3 {
    Diropargs3 {
        dir,
        name: Filename3::from("name"),
    }
}

pub fn diropargs3() -> impl Strategy<Value = Diropargs3> {
    (nfs_fh3(), filename3()).prop_map(|(dir, name)| Diropargs3 { dir, name })
}

fn verf() -> impl Strategy<Value = [u8; 8]> {
    any::<[u8; 8]>()
}

fn createhow3() -> impl Strategy<Value = Createhow3> {
    prop_oneof![
        sattr3().prop_map(Createhow3::Unchecked),
        sattr3().prop_map(Createhow3::Guarded),
        verf().prop_map(|v| Createhow3::Exclusive(Createverf3(v))),
    ]
}

fn devicedata3() -> impl Strategy<Value = Devicedata3> {
    (sattr3(), any::<(u32, u32)>()).prop_map(|(dev_attributes, (a, b))| Devicedata3 {
        dev_attributes,
        spec: Specdata3 {
            specdata1: a,
            specdata2: b,
        },
    })
}

fn mknoddata3() -> impl Strategy<Value = Mknoddata3> {
    prop_oneof![
        devicedata3().prop_map(Mknoddata3::Chr),
        devicedata3().prop_map(Mknoddata3::Blk),
        sattr3().prop_map(Mknoddata3::Sock),
        sattr3().prop_map(Mknoddata3::Fifo),
        select(&[Ftype3::Reg, Ftype3::Dir, Ftype3::Lnk][..]).prop_map(Mknoddata3::Other),
    ]
}

pub fn nfs3_args() -> impl Strategy<Value = Nfs3Args> {
    prop_oneof![
        Just(Nfs3Args::Null),
        nfs_fh3().prop_map(|object| Nfs3Args::Getattr(Getattr3Args { object })),
        (nfs_fh3(), sattr3(), proptest::option::of(nfstime3())).prop_map(
            |(object, new_attributes, guard)| Nfs3Args::Setattr(Setattr3Args {
                object,
                new_attributes,
                guard
            })
        ),
        diropargs3().prop_map(|what| Nfs3Args::Lookup(Lookup3Args { what })),
        (nfs_fh3(), any::<u32>())
            .prop_map(|(object, access)| Nfs3Args::Access(Access3Args { object, access })),
        nfs_fh3().prop_map(|symlink| Nfs3Args::Readlink(Readlink3Args { symlink })),
        (nfs_fh3(), any::<u64>(), any::<u32>()).prop_map(|(file, offset, count)| Nfs3Args::Read(
            Read3Args {
                file,
                offset,
                count
            }
        )),
        (
            nfs_fh3(),
            any::<u64>(),
            any::<u32>(),
            select(StableHow::ALL),
            data()
        )
            .prop_map(
                |(file, offset, count, stable, data)| Nfs3Args::Write(Write3Args {
                    file,
                    offset,
                    count,
                    stable,
                    data
                })
            ),
        (diropargs3(), createhow3())
            .prop_map(|(where_, how)| Nfs3Args::Create(Create3Args { where_, how })),
        (diropargs3(), sattr3())
            .prop_map(|(where_, attributes)| Nfs3Args::Mkdir(Mkdir3Args { where_, attributes })),
        (diropargs3(), sattr3(), nfspath3()).prop_map(|(where_, a, p)| Nfs3Args::Symlink(
            Symlink3Args {
                where_,
                symlink: Symlinkdata3 {
                    symlink_attributes: a,
                    symlink_data: p
                }
            }
        )),
        (diropargs3(), mknoddata3())
            .prop_map(|(where_, what)| Nfs3Args::Mknod(Mknod3Args { where_, what })),
        diropargs3().prop_map(|object| Nfs3Args::Remove(Remove3Args { object })),
        diropargs3().prop_map(|object| Nfs3Args::Rmdir(Rmdir3Args { object })),
        (diropargs3(), diropargs3())
            .prop_map(|(from, to)| Nfs3Args::Rename(Rename3Args { from, to })),
        (nfs_fh3(), diropargs3()).prop_map(|(file, link)| Nfs3Args::Link(Link3Args { file, link })),
        (nfs_fh3(), any::<u64>(), verf(), any::<u32>()).prop_map(|(dir, cookie, v, count)| {
            Nfs3Args::Readdir(Readdir3Args {
                dir,
                cookie,
                cookieverf: Cookieverf3(v),
                count,
            })
        }),
        (nfs_fh3(), any::<u64>(), verf(), any::<u32>(), any::<u32>()).prop_map(
            |(dir, cookie, v, dircount, maxcount)| Nfs3Args::Readdirplus(Readdirplus3Args {
                dir,
                cookie,
                cookieverf: Cookieverf3(v),
                dircount,
                maxcount,
            })
        ),
        nfs_fh3().prop_map(|fsroot| Nfs3Args::Fsstat(Fsstat3Args { fsroot })),
        nfs_fh3().prop_map(|fsroot| Nfs3Args::Fsinfo(Fsinfo3Args { fsroot })),
        nfs_fh3().prop_map(|object| Nfs3Args::Pathconf(Pathconf3Args { object })),
        (nfs_fh3(), any::<u64>(), any::<u32>()).prop_map(|(file, offset, count)| Nfs3Args::Commit(
            Commit3Args {
                file,
                offset,
                count
            }
        )),
    ]
}

fn res<T: core::fmt::Debug + Clone, F: core::fmt::Debug + Clone>(
    ok: impl Strategy<Value = T>,
    fail: impl Strategy<Value = F>,
) -> impl Strategy<Value = NfsResult<T, F>> {
    prop_oneof![
        ok.prop_map(NfsResult::Ok),
        (nfsstat3_err(), fail).prop_map(|(s, f)| NfsResult::Fail(s, f)),
    ]
}

fn pfail() -> impl Strategy<Value = PostOpAttrFail> {
    post_op_attr().prop_map(|attributes| PostOpAttrFail { attributes })
}

fn wfail() -> impl Strategy<Value = WccDataFail> {
    wcc_data().prop_map(|wcc| WccDataFail { wcc })
}

fn create_ok() -> impl Strategy<Value = Create3ResOk> {
    (proptest::option::of(nfs_fh3()), post_op_attr(), wcc_data()).prop_map(
        |(obj, obj_attributes, dir_wcc)| Create3ResOk {
            obj,
            obj_attributes,
            dir_wcc,
        },
    )
}

fn entry3() -> impl Strategy<Value = Entry3> {
    (any::<u64>(), filename3(), any::<u64>()).prop_map(|(fileid, name, cookie)| Entry3 {
        fileid,
        name,
        cookie,
    })
}

fn entryplus3() -> impl Strategy<Value = Entryplus3> {
    (
        any::<u64>(),
        filename3(),
        any::<u64>(),
        post_op_attr(),
        proptest::option::of(nfs_fh3()),
    )
        .prop_map(
            |(fileid, name, cookie, name_attributes, name_handle)| Entryplus3 {
                fileid,
                name,
                cookie,
                name_attributes,
                name_handle,
            },
        )
}

fn rename_ok() -> impl Strategy<Value = Rename3ResOk> {
    (wcc_data(), wcc_data()).prop_map(|(fromdir_wcc, todir_wcc)| Rename3ResOk {
        fromdir_wcc,
        todir_wcc,
    })
}

fn link_ok() -> impl Strategy<Value = Link3ResOk> {
    (post_op_attr(), wcc_data()).prop_map(|(file_attributes, linkdir_wcc)| Link3ResOk {
        file_attributes,
        linkdir_wcc,
    })
}

pub fn nfs3_res() -> impl Strategy<Value = Nfs3Res> {
    prop_oneof![
        Just(Nfs3Res::Null),
        res(
            fattr3().prop_map(|obj_attributes| Getattr3ResOk { obj_attributes }),
            Just(())
        )
        .prop_map(Nfs3Res::Getattr),
        res(
            wcc_data().prop_map(|obj_wcc| Setattr3ResOk { obj_wcc }),
            wcc_data().prop_map(|obj_wcc| Setattr3ResOk { obj_wcc })
        )
        .prop_map(Nfs3Res::Setattr),
        res(
            (nfs_fh3(), post_op_attr(), post_op_attr()).prop_map(|(object, o, d)| Lookup3ResOk {
                object,
                obj_attributes: o,
                dir_attributes: d
            }),
            post_op_attr().prop_map(|dir_attributes| Lookup3ResFail { dir_attributes })
        )
        .prop_map(Nfs3Res::Lookup),
        res(
            (post_op_attr(), any::<u32>()).prop_map(|(obj_attributes, access)| Access3ResOk {
                obj_attributes,
                access
            }),
            pfail()
        )
        .prop_map(Nfs3Res::Access),
        res(
            (post_op_attr(), nfspath3()).prop_map(|(symlink_attributes, data)| Readlink3ResOk {
                symlink_attributes,
                data
            }),
            pfail()
        )
        .prop_map(Nfs3Res::Readlink),
        res(
            (post_op_attr(), any::<u32>(), any::<bool>(), data()).prop_map(
                |(file_attributes, count, eof, data)| Read3ResOk {
                    file_attributes,
                    count,
                    eof,
                    data
                }
            ),
            pfail()
        )
        .prop_map(Nfs3Res::Read),
        res(
            (wcc_data(), any::<u32>(), select(StableHow::ALL), verf()).prop_map(
                |(file_wcc, count, committed, v)| Write3ResOk {
                    file_wcc,
                    count,
                    committed,
                    verf: Writeverf3(v)
                }
            ),
            wfail()
        )
        .prop_map(Nfs3Res::Write),
        res(create_ok(), wfail()).prop_map(Nfs3Res::Create),
        res(create_ok(), wfail()).prop_map(Nfs3Res::Mkdir),
        res(create_ok(), wfail()).prop_map(Nfs3Res::Symlink),
        res(create_ok(), wfail()).prop_map(Nfs3Res::Mknod),
        res(wfail(), wfail()).prop_map(Nfs3Res::Remove),
        res(wfail(), wfail()).prop_map(Nfs3Res::Rmdir),
        res(rename_ok(), rename_ok()).prop_map(Nfs3Res::Rename),
        res(link_ok(), link_ok()).prop_map(Nfs3Res::Link),
        res(
            (post_op_attr(), verf(), vec(entry3(), 0..8), any::<bool>()).prop_map(
                |(dir_attributes, v, entries, eof)| Readdir3ResOk {
                    dir_attributes,
                    cookieverf: Cookieverf3(v),
                    reply: Dirlist3 { entries, eof }
                }
            ),
            pfail()
        )
        .prop_map(Nfs3Res::Readdir),
        res(
            (
                post_op_attr(),
                verf(),
                vec(entryplus3(), 0..6),
                any::<bool>()
            )
                .prop_map(|(dir_attributes, v, entries, eof)| Readdirplus3ResOk {
                    dir_attributes,
                    cookieverf: Cookieverf3(v),
                    reply: Dirlistplus3 { entries, eof }
                }),
            pfail()
        )
        .prop_map(Nfs3Res::Readdirplus),
        res(
            (post_op_attr(), any::<[u64; 6]>(), any::<u32>()).prop_map(
                |(obj_attributes, n, invarsec)| {
                    Fsstat3ResOk {
                        obj_attributes,
                        tbytes: n[0],
                        fbytes: n[1],
                        abytes: n[2],
                        tfiles: n[3],
                        ffiles: n[4],
                        afiles: n[5],
                        invarsec,
                    }
                }
            ),
            pfail()
        )
        .prop_map(Nfs3Res::Fsstat),
        res(
            (
                post_op_attr(),
                any::<[u32; 7]>(),
                any::<u64>(),
                nfstime3(),
                any::<u32>()
            )
                .prop_map(
                    |(obj_attributes, n, maxfilesize, time_delta, properties)| Fsinfo3ResOk {
                        obj_attributes,
                        rtmax: n[0],
                        rtpref: n[1],
                        rtmult: n[2],
                        wtmax: n[3],
                        wtpref: n[4],
                        wtmult: n[5],
                        dtpref: n[6],
                        maxfilesize,
                        time_delta,
                        properties,
                    }
                ),
            pfail()
        )
        .prop_map(Nfs3Res::Fsinfo),
        res(
            (
                post_op_attr(),
                any::<u32>(),
                any::<u32>(),
                any::<[bool; 4]>()
            )
                .prop_map(|(obj_attributes, linkmax, name_max, b)| Pathconf3ResOk {
                    obj_attributes,
                    linkmax,
                    name_max,
                    no_trunc: b[0],
                    chown_restricted: b[1],
                    case_insensitive: b[2],
                    case_preserving: b[3],
                }),
            pfail()
        )
        .prop_map(Nfs3Res::Pathconf),
        res(
            (wcc_data(), verf()).prop_map(|(file_wcc, v)| Commit3ResOk {
                file_wcc,
                verf: Writeverf3(v)
            }),
            wfail()
        )
        .prop_map(Nfs3Res::Commit),
    ]
}

fn dirpath() -> impl Strategy<Value = Dirpath> {
    prop_oneof![bytes_up_to(16), bytes_up_to(1024)].prop_map(Dirpath)
}

fn name() -> impl Strategy<Value = Name> {
    bytes_up_to(255).prop_map(Name)
}

pub fn mount_args() -> impl Strategy<Value = MountArgs> {
    prop_oneof![
        Just(MountArgs::Null),
        dirpath().prop_map(MountArgs::Mnt),
        Just(MountArgs::Dump),
        dirpath().prop_map(MountArgs::Umnt),
        Just(MountArgs::Umntall),
        Just(MountArgs::Export),
    ]
}

pub fn mount_res() -> impl Strategy<Value = MountRes> {
    let mnt = prop_oneof![
        (nfs_fh3(), vec(any::<u32>(), 0..=32)).prop_map(|(fhandle, auth_flavors)| Mountres3::Ok(
            Mountres3Ok {
                fhandle,
                auth_flavors
            }
        )),
        select(&Mountstat3::ALL[1..]).prop_map(Mountres3::Fail),
    ];
    let body = (name(), dirpath()).prop_map(|(ml_hostname, ml_directory)| Mountbody {
        ml_hostname,
        ml_directory,
    });
    let node = (dirpath(), vec(name(), 0..4)).prop_map(|(ex_dir, g)| Exportnode {
        ex_dir,
        ex_groups: Groups(g),
    });
    prop_oneof![
        Just(MountRes::Null),
        mnt.prop_map(MountRes::Mnt),
        vec(body, 0..5).prop_map(|l| MountRes::Dump(Mountlist(l))),
        Just(MountRes::Umnt),
        Just(MountRes::Umntall),
        vec(node, 0..5).prop_map(|l| MountRes::Export(Exports(l))),
    ]
}
