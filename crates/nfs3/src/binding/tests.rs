//! Binding tests: eligibility, estimates (checked against the largest
//! encodings and against the transport's Reply-chunk decision), layouts.

use bytes::Bytes;
use oncrpc::{Payload, Piece};
use rpcrdma_proto::binding::{ArgsView, BindingLookup, UpperLayerBinding};
use rpcrdma_proto::marshal::{plan_call, ChunkLimits, RegionSource, ReplyShape, Thresholds};
use rpcrdma_proto::reassemble::WriteChunkCursor;
use rpcrdma_proto::stream::Item;
use rpcrdma_proto::wire::{Segment, WriteChunkRepr};
use xdr::XdrEncode;

use super::*;
use crate::args::*;
use crate::codec::PayloadEncode;
use crate::procs::{Nfs3Args, Nfs3Res};
use crate::res::*;
use crate::types::*;

/// What `rpcrdma`'s client adds to a binding's estimate for the RPC reply
/// header (its default `reply_overhead`).
const REPLY_OVERHEAD: u64 = 512;

fn fh64() -> NfsFh3 {
    NfsFh3::new(vec![0xAB; 64]).unwrap()
}

fn fh(n: usize) -> NfsFh3 {
    NfsFh3::new(vec![0xCD; n]).unwrap()
}

fn fattr() -> Fattr3 {
    Fattr3 {
        ftype: Ftype3::Reg,
        mode: 0o644,
        nlink: 1,
        uid: 1,
        gid: 1,
        size: 1,
        used: 1,
        rdev: Specdata3::default(),
        fsid: 1,
        fileid: 1,
        atime: Nfstime3::default(),
        mtime: Nfstime3::default(),
        ctime: Nfstime3::default(),
    }
}

fn wcc() -> WccData {
    WccData {
        before: Some(WccAttr::default()),
        after: Some(fattr()),
    }
}

/// The estimate for these arguments, seen as the transport sees them
/// (the first `Xdr` piece as `head`).
fn estimate(b: &dyn UpperLayerBinding, args: &Nfs3Args) -> ReplyEstimate {
    let p = args.to_payload();
    let head = match p.pieces().first() {
        Some(Piece::Xdr(b)) => b.clone(),
        _ => Bytes::new(),
    };
    b.reply_estimate(
        args.procedure(),
        ArgsView {
            head: &head,
            len: p.xdr_len() as u64,
        },
    )
    .unwrap_or_else(|| panic!("no estimate for {}", args.name()))
}

/// Whether the transport offers a Reply chunk for this estimate, Write
/// chunks provided for every DDP-eligible result (as the client does).
fn offers_reply_chunk(est: &ReplyEstimate, reply_inline: u32) -> bool {
    let shape = ReplyShape {
        write_chunks: est.ddp_results.clone(),
        max_reduced_len: REPLY_OVERHEAD + est.max_reduced_results,
        write_pad: false,
    };
    let th = Thresholds {
        call_inline: 1024,
        reply_inline,
    };
    let plan = plan_call(
        1,
        1,
        &[Item::Xdr(200)],
        &shape,
        &th,
        &ChunkLimits::default(),
    )
    .unwrap();
    plan.regions
        .iter()
        .any(|r| r.source == RegionSource::ReplyChunk)
}

#[test]
fn rfc8267_eligibility() {
    let b = Nfs3Binding;
    for p in 0..proc3::COUNT {
        let pb = b.procedure(p).unwrap();
        let (args, results) = match p {
            proc3::WRITE => (1, 0),
            proc3::SYMLINK => (1, 0),
            proc3::READ => (0, 1),
            proc3::READLINK => (0, 1),
            _ => (0, 0),
        };
        assert_eq!(pb.ddp_args.len(), args, "{}", pb.name);
        assert_eq!(pb.ddp_results.len(), results, "{}", pb.name);
        assert_eq!(b.max_read_chunks(NFS_PROGRAM, NFS_V3, p), args);
    }
    assert!(b.procedure(proc3::COUNT).is_none());
    assert_eq!(b.max_read_chunks(NFS_PROGRAM, 2, proc3::WRITE), 0);
    assert_eq!(
        b.procedure(proc3::WRITE).unwrap().ddp_args[0].max_len,
        MAX_IO_SIZE
    );
    assert_eq!(
        b.procedure(proc3::SYMLINK).unwrap().ddp_args[0].max_len,
        4096
    );
    let m = MountBinding;
    for p in 0..crate::mount::mntproc::COUNT {
        let pb = m.procedure(p).unwrap();
        assert!(pb.ddp_args.is_empty() && pb.ddp_results.is_empty());
    }
    assert!(m.procedure(6).is_none());
    assert_eq!(m.program(), 100_005);
    assert!(m.reply_layout().is_none());
}

/// Each estimate equals the encoded size of the largest result this crate
/// can produce for that procedure (64-byte handles, attributes present),
/// with DDP-eligible results removed.
#[test]
fn rfc8166_s6_2_estimates_are_the_largest_results() {
    let b = Nfs3Binding;
    let read = Nfs3Args::Read(Read3Args {
        file: fh64(),
        offset: 0,
        count: 8192,
    });
    let pa = Some(fattr());
    let cases: Vec<(Nfs3Args, Nfs3Res)> = vec![
        (
            Nfs3Args::Getattr(Getattr3Args { object: fh64() }),
            Nfs3Res::Getattr(NfsResult::Ok(Getattr3ResOk {
                obj_attributes: fattr(),
            })),
        ),
        (
            Nfs3Args::Lookup(Lookup3Args {
                what: Diropargs3 {
                    dir: fh64(),
                    name: Filename3::from("x"),
                },
            }),
            Nfs3Res::Lookup(NfsResult::Ok(Lookup3ResOk {
                object: fh64(),
                obj_attributes: pa,
                dir_attributes: pa,
            })),
        ),
        (
            Nfs3Args::Write(Write3Args {
                file: fh64(),
                offset: 0,
                count: 1,
                stable: StableHow::FileSync,
                data: Bytes::from_static(b"x"),
            }),
            Nfs3Res::Write(NfsResult::Ok(Write3ResOk {
                file_wcc: wcc(),
                count: 1,
                committed: StableHow::FileSync,
                verf: Writeverf3::default(),
            })),
        ),
        (
            Nfs3Args::Create(Create3Args {
                where_: Diropargs3 {
                    dir: fh64(),
                    name: Filename3::from("x"),
                },
                how: Createhow3::Unchecked(Sattr3::default()),
            }),
            Nfs3Res::Create(NfsResult::Ok(Create3ResOk {
                obj: Some(fh64()),
                obj_attributes: pa,
                dir_wcc: wcc(),
            })),
        ),
        (
            Nfs3Args::Rename(Rename3Args {
                from: Diropargs3 {
                    dir: fh64(),
                    name: Filename3::from("a"),
                },
                to: Diropargs3 {
                    dir: fh64(),
                    name: Filename3::from("b"),
                },
            }),
            Nfs3Res::Rename(NfsResult::Ok(Rename3ResOk {
                fromdir_wcc: wcc(),
                todir_wcc: wcc(),
            })),
        ),
        (
            Nfs3Args::Fsinfo(Fsinfo3Args { fsroot: fh64() }),
            Nfs3Res::Fsinfo(NfsResult::Ok(Fsinfo3ResOk {
                obj_attributes: pa,
                rtmax: 0,
                rtpref: 0,
                rtmult: 0,
                wtmax: 0,
                wtpref: 0,
                wtmult: 0,
                dtpref: 0,
                maxfilesize: 0,
                time_delta: Nfstime3::default(),
                properties: 0,
            })),
        ),
        (
            Nfs3Args::Fsstat(Fsstat3Args { fsroot: fh64() }),
            Nfs3Res::Fsstat(NfsResult::Ok(Fsstat3ResOk {
                obj_attributes: pa,
                tbytes: 0,
                fbytes: 0,
                abytes: 0,
                tfiles: 0,
                ffiles: 0,
                afiles: 0,
                invarsec: 0,
            })),
        ),
        (
            Nfs3Args::Pathconf(Pathconf3Args { object: fh64() }),
            Nfs3Res::Pathconf(NfsResult::Ok(Pathconf3ResOk {
                obj_attributes: pa,
                linkmax: 0,
                name_max: 0,
                no_trunc: true,
                chown_restricted: true,
                case_insensitive: false,
                case_preserving: true,
            })),
        ),
        (
            Nfs3Args::Commit(Commit3Args {
                file: fh64(),
                offset: 0,
                count: 0,
            }),
            Nfs3Res::Commit(NfsResult::Ok(Commit3ResOk {
                file_wcc: wcc(),
                verf: Writeverf3::default(),
            })),
        ),
        (
            Nfs3Args::Link(Link3Args {
                file: fh64(),
                link: Diropargs3 {
                    dir: fh64(),
                    name: Filename3::from("l"),
                },
            }),
            Nfs3Res::Link(NfsResult::Ok(Link3ResOk {
                file_attributes: pa,
                linkdir_wcc: wcc(),
            })),
        ),
        (
            Nfs3Args::Access(Access3Args {
                object: fh64(),
                access: access::ALL,
            }),
            Nfs3Res::Access(NfsResult::Ok(Access3ResOk {
                obj_attributes: pa,
                access: access::ALL,
            })),
        ),
        (
            Nfs3Args::Setattr(Setattr3Args {
                object: fh64(),
                new_attributes: Sattr3::default(),
                guard: None,
            }),
            Nfs3Res::Setattr(NfsResult::Ok(Setattr3ResOk { obj_wcc: wcc() })),
        ),
        (
            read.clone(),
            Nfs3Res::Read(NfsResult::Ok(Read3ResOk {
                file_attributes: pa,
                count: 8192,
                eof: false,
                data: Bytes::from(vec![0u8; 8192]),
            })),
        ),
        (
            Nfs3Args::Readlink(Readlink3Args { symlink: fh64() }),
            Nfs3Res::Readlink(NfsResult::Ok(Readlink3ResOk {
                symlink_attributes: pa,
                data: Nfspath3(Bytes::from(vec![b'a'; 4096])),
            })),
        ),
    ];
    for (args, res) in cases {
        let est = estimate(&b, &args);
        let p = res.to_payload();
        assert_eq!(
            est.max_reduced_results,
            p.inline_len() as u64,
            "{}",
            args.name()
        );
        assert_eq!(
            est.ddp_results.iter().map(|&n| n as usize).sum::<usize>(),
            p.ddp_len(),
            "{}",
            args.name()
        );
        // The failure arm is never larger.
        let wfail = 4 + WccDataFail { wcc: wcc() }.encoded_len();
        let pfail = 4 + PostOpAttrFail { attributes: pa }.encoded_len();
        let fail = match &res {
            Nfs3Res::Getattr(_) => 4,
            Nfs3Res::Lookup(_) | Nfs3Res::Access(_) | Nfs3Res::Read(_) => pfail,
            Nfs3Res::Readlink(_) | Nfs3Res::Fsstat(_) | Nfs3Res::Fsinfo(_) => pfail,
            Nfs3Res::Pathconf(_) => pfail,
            Nfs3Res::Rename(_) => 4 + 2 * wcc().encoded_len(),
            Nfs3Res::Link(_) => {
                4 + Link3ResOk {
                    file_attributes: pa,
                    linkdir_wcc: wcc(),
                }
                .encoded_len()
            }
            _ => wfail,
        };
        assert!(fail as u64 <= est.max_reduced_results, "{}", args.name());
    }
}

#[test]
fn read_estimate_follows_count_after_any_handle() {
    let b = Nfs3Binding;
    for n in [0, 1, 8, 13, 28, 32, 64] {
        let a = Nfs3Args::Read(Read3Args {
            file: fh(n),
            offset: u64::MAX,
            count: 12345,
        });
        assert_eq!(estimate(&b, &a).ddp_results, vec![12345], "fh {n}");
        let a = Nfs3Args::Readdir(Readdir3Args {
            dir: fh(n),
            cookie: u64::MAX,
            cookieverf: Cookieverf3([0xFF; 8]),
            count: 7000,
        });
        assert_eq!(estimate(&b, &a).max_reduced_results, 4 + 7000, "fh {n}");
        let a = Nfs3Args::Readdirplus(Readdirplus3Args {
            dir: fh(n),
            cookie: u64::MAX,
            cookieverf: Cookieverf3([0xFF; 8]),
            dircount: 1,
            maxcount: 9000,
        });
        assert_eq!(estimate(&b, &a).max_reduced_results, 4 + 9000, "fh {n}");
    }
    // Clamped counts.
    let a = Nfs3Args::Read(Read3Args {
        file: fh(8),
        offset: 0,
        count: u32::MAX,
    });
    assert_eq!(estimate(&b, &a).ddp_results, vec![MAX_IO_SIZE]);
    let a = Nfs3Args::Readdirplus(Readdirplus3Args {
        dir: fh(8),
        cookie: 0,
        cookieverf: Cookieverf3::default(),
        dircount: 0,
        maxcount: 0,
    });
    assert_eq!(estimate(&b, &a).max_reduced_results, 4 + 104);
    // A handle length word above 64, or arguments cut short: no estimate.
    let mut head = vec![0, 0, 0, 65];
    head.extend_from_slice(&[0; 100]);
    let v = ArgsView {
        head: &head,
        len: head.len() as u64,
    };
    assert!(b.reply_estimate(proc3::READ, v).is_none());
    let head = [0, 0, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0];
    let v = ArgsView {
        head: &head,
        len: 14,
    };
    assert!(b.reply_estimate(proc3::READDIR, v).is_none());
    assert!(b.reply_estimate(22, v).is_none());
}

/// The transport's decision (rpcrdma_proto::marshal::plan_call with the
/// client's 512-byte reply overhead): no Reply chunk for any procedure
/// with a small result, even at a 1024-byte inline threshold; one for
/// large directory listings.
#[test]
fn rfc8166_s4_3_3_reply_chunk_only_when_needed() {
    let b = Nfs3Binding;
    let small = [
        Nfs3Args::Null,
        Nfs3Args::Getattr(Getattr3Args { object: fh64() }),
        Nfs3Args::Lookup(Lookup3Args {
            what: Diropargs3 {
                dir: fh64(),
                name: Filename3::from("x"),
            },
        }),
        Nfs3Args::Read(Read3Args {
            file: fh64(),
            offset: 0,
            count: 1 << 20,
        }),
        Nfs3Args::Readlink(Readlink3Args { symlink: fh64() }),
        Nfs3Args::Write(Write3Args {
            file: fh64(),
            offset: 0,
            count: 0,
            stable: StableHow::Unstable,
            data: Bytes::new(),
        }),
        Nfs3Args::Mknod(Mknod3Args {
            where_: Diropargs3 {
                dir: fh64(),
                name: Filename3::from("x"),
            },
            what: Mknoddata3::Fifo(Sattr3::default()),
        }),
        Nfs3Args::Rename(Rename3Args {
            from: Diropargs3 {
                dir: fh64(),
                name: Filename3::from("a"),
            },
            to: Diropargs3 {
                dir: fh64(),
                name: Filename3::from("b"),
            },
        }),
        Nfs3Args::Fsstat(Fsstat3Args { fsroot: fh64() }),
        Nfs3Args::Commit(Commit3Args {
            file: fh64(),
            offset: 0,
            count: 0,
        }),
    ];
    for a in &small {
        let est = estimate(&b, a);
        assert!(!offers_reply_chunk(&est, 1024), "{}: {est:?}", a.name());
    }
    // GETATTR's estimate alone is far below 1024.
    let est = estimate(&b, &small[1]);
    assert!(est.max_reduced_results + 24 <= 1024);

    let rdp = |maxcount| {
        Nfs3Args::Readdirplus(Readdirplus3Args {
            dir: fh(32),
            cookie: 0,
            cookieverf: Cookieverf3::default(),
            dircount: maxcount / 4,
            maxcount,
        })
    };
    let est = estimate(&b, &rdp(32768));
    assert!(est.max_reduced_results > 4096);
    assert!(offers_reply_chunk(&est, 4096));
    assert!(offers_reply_chunk(&est, 1024));
    let rd = Nfs3Args::Readdir(Readdir3Args {
        dir: fh(32),
        cookie: 0,
        cookieverf: Cookieverf3::default(),
        count: 8192,
    });
    assert!(offers_reply_chunk(&estimate(&b, &rd), 4096));
    // A READDIRPLUS whose maxcount fits the threshold stays inline.
    assert!(!offers_reply_chunk(&estimate(&b, &rdp(256)), 1024));

    // MOUNT: MNT stays inline, EXPORT gets a Reply chunk.
    let m = MountBinding;
    let mnt_args = crate::mount::MountArgs::Mnt(crate::mount::Dirpath::from("/export"));
    let p: Payload = mnt_args.to_payload();
    let head = p.flatten();
    let v = ArgsView {
        head: &head,
        len: head.len() as u64,
    };
    let est = m.reply_estimate(crate::mount::mntproc::MNT, v).unwrap();
    assert!(!offers_reply_chunk(&est, 1024));
    let est = m.reply_estimate(crate::mount::mntproc::EXPORT, v).unwrap();
    assert!(offers_reply_chunk(&est, 4096));
    assert!(m.reply_estimate(6, v).is_none());
}

fn chunk(len: u32) -> WriteChunkRepr {
    WriteChunkRepr {
        segments: vec![Segment {
            handle: 1,
            length: len,
            offset: 0,
        }],
    }
}

/// The reduced results of a READ reply (data removed) for a layout test.
fn reduced(res: &Nfs3Res) -> Vec<u8> {
    let p = res.to_payload();
    let mut out = Vec::new();
    for piece in p.pieces() {
        if let Piece::Xdr(b) = piece {
            out.extend_from_slice(b);
        }
    }
    out
}

#[test]
fn layout_read_with_and_without_attributes() {
    let b = Nfs3Binding;
    for attrs in [None, Some(fattr())] {
        let res = Nfs3Res::Read(NfsResult::Ok(Read3ResOk {
            file_attributes: attrs,
            count: 5,
            eof: true,
            data: Bytes::from_static(b"hello"),
        }));
        let r = reduced(&res);
        let wl = [chunk(5)];
        let mut cur = WriteChunkCursor::from_repr(&wl);
        let p = b.locate(proc3::READ, &r, &mut cur).unwrap();
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].offset, r.len(), "data belongs at the end");
        assert_eq!((p[0].chunk, p[0].len), (0, 5));
    }
    // Failure: no DDP result even with a Write chunk offered.
    let res = Nfs3Res::Read(NfsResult::Fail(
        Nfsstat3::Io,
        PostOpAttrFail {
            attributes: Some(fattr()),
        },
    ));
    let wl = [chunk(5)];
    let mut cur = WriteChunkCursor::from_repr(&wl);
    assert!(b
        .locate(proc3::READ, &reduced(&res), &mut cur)
        .unwrap()
        .is_empty());
    // Inline (empty Write chunk): located as inline, nothing placed.
    let res = Nfs3Res::Read(NfsResult::Ok(Read3ResOk {
        file_attributes: None,
        count: 3,
        eof: false,
        data: Bytes::from_static(b"abc"),
    }));
    let flat = res.to_payload().flatten();
    let wl = [WriteChunkRepr::default()];
    let mut cur = WriteChunkCursor::from_repr(&wl);
    assert!(b.locate(proc3::READ, &flat, &mut cur).unwrap().is_empty());
}

#[test]
fn layout_readlink_and_other_procedures() {
    let b = Nfs3Binding;
    let res = Nfs3Res::Readlink(NfsResult::Ok(Readlink3ResOk {
        symlink_attributes: Some(fattr()),
        data: Nfspath3::from("../some/where"),
    }));
    let r = reduced(&res);
    let wl = [chunk(13)];
    let mut cur = WriteChunkCursor::from_repr(&wl);
    let p = b.locate(proc3::READLINK, &r, &mut cur).unwrap();
    assert_eq!(p.len(), 1);
    assert_eq!((p[0].offset, p[0].len), (4 + 88 + 4, 13));
    // GETATTR has no DDP result.
    let res = Nfs3Res::Getattr(NfsResult::Ok(Getattr3ResOk {
        obj_attributes: fattr(),
    }));
    let mut cur = WriteChunkCursor::from_repr(&wl);
    assert!(b
        .locate(proc3::GETATTR, &reduced(&res), &mut cur)
        .unwrap()
        .is_empty());
}

#[test]
fn layout_hostile_results_are_errors() {
    let b = Nfs3Binding;
    let wl = [chunk(8)];
    // Truncated at every length.
    let res = Nfs3Res::Read(NfsResult::Ok(Read3ResOk {
        file_attributes: Some(fattr()),
        count: 8,
        eof: true,
        data: Bytes::from_static(b"12345678"),
    }));
    let r = reduced(&res);
    for cut in 0..r.len() {
        let mut cur = WriteChunkCursor::from_repr(&wl);
        assert!(
            b.locate(proc3::READ, &r[..cut], &mut cur).is_err(),
            "cut {cut}"
        );
    }
    // A bad post_op_attr discriminant.
    let mut bad = r.clone();
    bad[4..8].copy_from_slice(&7u32.to_be_bytes());
    let mut cur = WriteChunkCursor::from_repr(&wl);
    assert!(b.locate(proc3::READ, &bad, &mut cur).is_err());
    // A length word disagreeing with the Write chunk.
    let mut bad = r.clone();
    let n = bad.len();
    bad[n - 4..].copy_from_slice(&100u32.to_be_bytes());
    let mut cur = WriteChunkCursor::from_repr(&wl);
    assert!(b.locate(proc3::READ, &bad, &mut cur).is_err());
}
