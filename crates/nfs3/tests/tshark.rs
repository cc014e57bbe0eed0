//! Cross-check against an independent decoder: a call and a reply of
//! every NFS version 3 procedure and of MOUNT's MNT, DUMP and EXPORT,
//! encoded by this crate (with an AUTH_SYS credential), are written to a
//! pcap as UDP datagrams to and from port 2049 (NFS) or 20048 (MOUNT) and
//! dissected by tshark: no frame may be malformed or carry an expert error,
//! every frame must be recognised as the procedure we encoded, and chosen
//! fields must have the values we encoded.
//!
//! Without tshark the test is skipped (with a message), unless the
//! environment has `CI` set, in which case it fails.

use std::collections::HashMap;
use std::io::Write as _;
use std::process::Command;

use bytes::Bytes;
use nfs3::args::*;
use nfs3::mount::*;
use nfs3::res::*;
use nfs3::types::*;
use nfs3::{Nfs3Args, Nfs3Res, PayloadEncode, MOUNT_PROGRAM, NFS_PROGRAM};
use oncrpc::{AcceptStat, AuthSys, Credential, Payload, ReplyHeader, Request};

fn fh(n: u8) -> NfsFh3 {
    NfsFh3::new(vec![n; 32]).unwrap()
}

fn attr(fileid: u64, size: u64) -> Fattr3 {
    Fattr3 {
        ftype: Ftype3::Reg,
        mode: 0o644,
        nlink: 1,
        uid: 1000,
        gid: 1000,
        size,
        used: 4096,
        rdev: Specdata3::default(),
        fsid: 0x42,
        fileid,
        atime: Nfstime3 {
            seconds: 1_700_000_000,
            nseconds: 5,
        },
        mtime: Nfstime3 {
            seconds: 1_700_000_001,
            nseconds: 6,
        },
        ctime: Nfstime3 {
            seconds: 1_700_000_002,
            nseconds: 7,
        },
    }
}

fn wcc() -> WccData {
    WccData {
        before: Some(WccAttr {
            size: 10,
            mtime: Nfstime3::default(),
            ctime: Nfstime3::default(),
        }),
        after: Some(attr(9, 20)),
    }
}

fn dop(name: &str) -> Diropargs3 {
    Diropargs3 {
        dir: fh(1),
        name: Filename3::from(name),
    }
}

fn created() -> Create3ResOk {
    Create3ResOk {
        obj: Some(fh(7)),
        obj_attributes: Some(attr(7, 0)),
        dir_wcc: wcc(),
    }
}

fn sattr() -> Sattr3 {
    Sattr3 {
        mode: Some(0o600),
        uid: None,
        gid: Some(100),
        size: Some(0),
        atime: SetTime::SetToServerTime,
        mtime: SetTime::SetToClientTime(Nfstime3 {
            seconds: 1,
            nseconds: 2,
        }),
    }
}

/// A call and a reply of every NFS version 3 procedure.
fn nfs_pairs() -> Vec<(Nfs3Args, Nfs3Res)> {
    use NfsResult::{Fail, Ok};
    vec![
        (Nfs3Args::Null, Nfs3Res::Null),
        (
            Nfs3Args::Getattr(Getattr3Args { object: fh(2) }),
            Nfs3Res::Getattr(Ok(Getattr3ResOk {
                obj_attributes: attr(2, 123_456),
            })),
        ),
        (
            Nfs3Args::Setattr(Setattr3Args {
                object: fh(2),
                new_attributes: sattr(),
                guard: Some(Nfstime3::default()),
            }),
            Nfs3Res::Setattr(Ok(Setattr3ResOk { obj_wcc: wcc() })),
        ),
        (
            Nfs3Args::Lookup(Lookup3Args {
                what: dop("file.txt"),
            }),
            Nfs3Res::Lookup(Ok(Lookup3ResOk {
                object: fh(3),
                obj_attributes: Some(attr(3, 1)),
                dir_attributes: None,
            })),
        ),
        (
            Nfs3Args::Access(Access3Args {
                object: fh(2),
                access: access::READ | access::LOOKUP,
            }),
            Nfs3Res::Access(Ok(Access3ResOk {
                obj_attributes: None,
                access: access::READ,
            })),
        ),
        (
            Nfs3Args::Readlink(Readlink3Args { symlink: fh(4) }),
            Nfs3Res::Readlink(Ok(Readlink3ResOk {
                symlink_attributes: None,
                data: Nfspath3::from("../target/path"),
            })),
        ),
        (
            Nfs3Args::Read(Read3Args {
                file: fh(2),
                offset: 4096,
                count: 11,
            }),
            Nfs3Res::Read(Ok(Read3ResOk {
                file_attributes: Some(attr(2, 8192)),
                count: 11,
                eof: true,
                data: Bytes::from_static(b"hello world"),
            })),
        ),
        (
            Nfs3Args::Write(Write3Args {
                file: fh(2),
                offset: 8192,
                count: 5,
                stable: StableHow::FileSync,
                data: Bytes::from_static(b"abcde"),
            }),
            Nfs3Res::Write(Ok(Write3ResOk {
                file_wcc: wcc(),
                count: 5,
                committed: StableHow::FileSync,
                verf: Writeverf3([1, 2, 3, 4, 5, 6, 7, 8]),
            })),
        ),
        (
            Nfs3Args::Create(Create3Args {
                where_: dop("new.txt"),
                how: Createhow3::Exclusive(Createverf3([9; 8])),
            }),
            Nfs3Res::Create(Ok(created())),
        ),
        (
            Nfs3Args::Mkdir(Mkdir3Args {
                where_: dop("newdir"),
                attributes: sattr(),
            }),
            Nfs3Res::Mkdir(Fail(Nfsstat3::Exist, WccDataFail { wcc: wcc() })),
        ),
        (
            Nfs3Args::Symlink(Symlink3Args {
                where_: dop("sym"),
                symlink: Symlinkdata3 {
                    symlink_attributes: Sattr3::default(),
                    symlink_data: Nfspath3::from("/some/where"),
                },
            }),
            Nfs3Res::Symlink(Ok(created())),
        ),
        (
            Nfs3Args::Mknod(Mknod3Args {
                where_: dop("dev"),
                what: Mknoddata3::Chr(Devicedata3 {
                    dev_attributes: Sattr3::default(),
                    spec: Specdata3 {
                        specdata1: 1,
                        specdata2: 3,
                    },
                }),
            }),
            Nfs3Res::Mknod(Ok(created())),
        ),
        (
            Nfs3Args::Remove(Remove3Args {
                object: dop("old.txt"),
            }),
            Nfs3Res::Remove(Fail(Nfsstat3::Noent, WccDataFail::default())),
        ),
        (
            Nfs3Args::Rmdir(Rmdir3Args {
                object: dop("olddir"),
            }),
            Nfs3Res::Rmdir(Ok(WccDataFail { wcc: wcc() })),
        ),
        (
            Nfs3Args::Rename(Rename3Args {
                from: dop("a"),
                to: dop("b"),
            }),
            Nfs3Res::Rename(Ok(Rename3ResOk {
                fromdir_wcc: wcc(),
                todir_wcc: wcc(),
            })),
        ),
        (
            Nfs3Args::Link(Link3Args {
                file: fh(2),
                link: dop("hard"),
            }),
            Nfs3Res::Link(Ok(Link3ResOk {
                file_attributes: Some(attr(2, 1)),
                linkdir_wcc: wcc(),
            })),
        ),
        (
            Nfs3Args::Readdir(Readdir3Args {
                dir: fh(1),
                cookie: 0,
                cookieverf: Cookieverf3::default(),
                count: 4096,
            }),
            Nfs3Res::Readdir(Ok(Readdir3ResOk {
                dir_attributes: None,
                cookieverf: Cookieverf3([3; 8]),
                reply: Dirlist3 {
                    entries: vec![
                        Entry3 {
                            fileid: 11,
                            name: Filename3::from("alpha"),
                            cookie: 1,
                        },
                        Entry3 {
                            fileid: 12,
                            name: Filename3::from("beta"),
                            cookie: 2,
                        },
                    ],
                    eof: true,
                },
            })),
        ),
        (
            Nfs3Args::Readdirplus(Readdirplus3Args {
                dir: fh(1),
                cookie: 0,
                cookieverf: Cookieverf3::default(),
                dircount: 1024,
                maxcount: 8192,
            }),
            Nfs3Res::Readdirplus(Ok(Readdirplus3ResOk {
                dir_attributes: Some(attr(1, 4096)),
                cookieverf: Cookieverf3([4; 8]),
                reply: Dirlistplus3 {
                    entries: vec![Entryplus3 {
                        fileid: 21,
                        name: Filename3::from("gamma"),
                        cookie: 7,
                        name_attributes: Some(attr(21, 3)),
                        name_handle: Some(fh(21)),
                    }],
                    eof: false,
                },
            })),
        ),
        (
            Nfs3Args::Fsstat(Fsstat3Args { fsroot: fh(1) }),
            Nfs3Res::Fsstat(Ok(Fsstat3ResOk {
                obj_attributes: None,
                tbytes: 1 << 40,
                fbytes: 1 << 39,
                abytes: 1 << 39,
                tfiles: 1 << 20,
                ffiles: 1 << 19,
                afiles: 1 << 19,
                invarsec: 0,
            })),
        ),
        (
            Nfs3Args::Fsinfo(Fsinfo3Args { fsroot: fh(1) }),
            Nfs3Res::Fsinfo(Ok(Fsinfo3ResOk {
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
        ),
        (
            Nfs3Args::Pathconf(Pathconf3Args { object: fh(1) }),
            Nfs3Res::Pathconf(Ok(Pathconf3ResOk {
                obj_attributes: None,
                linkmax: 32000,
                name_max: 255,
                no_trunc: true,
                chown_restricted: true,
                case_insensitive: false,
                case_preserving: true,
            })),
        ),
        (
            Nfs3Args::Commit(Commit3Args {
                file: fh(2),
                offset: 0,
                count: 0,
            }),
            Nfs3Res::Commit(Ok(Commit3ResOk {
                file_wcc: wcc(),
                verf: Writeverf3([1, 2, 3, 4, 5, 6, 7, 8]),
            })),
        ),
    ]
}

fn mount_pairs() -> Vec<(MountArgs, MountRes)> {
    vec![
        (
            MountArgs::Mnt(Dirpath::from("/export")),
            MountRes::Mnt(Mountres3::Ok(Mountres3Ok {
                fhandle: fh(1),
                auth_flavors: vec![1],
            })),
        ),
        (
            MountArgs::Dump,
            MountRes::Dump(Mountlist(vec![Mountbody {
                ml_hostname: Name::from("client1"),
                ml_directory: Dirpath::from("/export"),
            }])),
        ),
        (
            MountArgs::Export,
            MountRes::Export(Exports(vec![Exportnode {
                ex_dir: Dirpath::from("/export"),
                ex_groups: Groups(vec![Name::from("*")]),
            }])),
        ),
    ]
}

/// Ethernet / IPv4 / UDP frame (UDP checksum 0: none, RFC 768).
fn udp(payload: &[u8], sport: u16, dport: u16, to_server: bool) -> Vec<u8> {
    let (src, dst) = if to_server {
        ([10, 0, 0, 1], [10, 0, 0, 2])
    } else {
        ([10, 0, 0, 2], [10, 0, 0, 1])
    };
    let udp_len = 8 + payload.len();
    let ip_len = 20 + udp_len;
    let mut ip = vec![
        0x45,
        0,
        (ip_len >> 8) as u8,
        ip_len as u8,
        0,
        1,
        0x40,
        0,
        64,
        17,
        0,
        0,
    ];
    ip.extend_from_slice(&src);
    ip.extend_from_slice(&dst);
    let mut sum = 0u32;
    for c in ip.chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    let mut f = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x08, 0x00];
    f.extend_from_slice(&ip);
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&(udp_len as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(payload);
    f
}

/// A pcap file (microsecond timestamps, Ethernet link type).
fn pcap(frames: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&4u16.to_le_bytes());
    out.extend_from_slice(&0i32.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&65535u32.to_le_bytes());
    out.extend_from_slice(&1u32.to_le_bytes());
    for (i, f) in frames.iter().enumerate() {
        out.extend_from_slice(&1_700_000_000u32.to_le_bytes());
        out.extend_from_slice(&(i as u32).to_le_bytes());
        out.extend_from_slice(&(f.len() as u32).to_le_bytes());
        out.extend_from_slice(&(f.len() as u32).to_le_bytes());
        out.extend_from_slice(f);
    }
    out
}

fn call_msg(xid: u32, prog: u32, procedure: u32, args: Payload) -> Vec<u8> {
    let cred = Credential::Sys(AuthSys::new(0, "client1", 1000, 1000, vec![1000, 27]).unwrap());
    Request::new(prog, 3, procedure, args)
        .with_cred(cred)
        .encode(xid)
        .flatten()
        .to_vec()
}

fn reply_msg(xid: u32, results: Payload) -> Vec<u8> {
    oncrpc::reply_message(&ReplyHeader::accepted(xid, AcceptStat::Success), results)
        .flatten()
        .to_vec()
}

/// One frame's expectations: tshark field name -> value.
type Expect = Vec<(&'static str, String)>;

#[test]
fn tshark_dissects_every_procedure() {
    if Command::new("tshark").arg("--version").output().is_err() {
        assert!(
            std::env::var_os("CI").is_none(),
            "tshark is required when CI is set"
        );
        eprintln!("tshark not found: NFS dissection cross-check skipped");
        return;
    }
    let mut frames = Vec::new();
    let mut expect: Vec<Expect> = Vec::new();
    let mut xid = 0x5000_0000u32;
    for (args, res) in nfs_pairs() {
        xid += 1;
        let p = args.procedure().to_string();
        // DDP-eligible items are DDP pieces; on UDP they travel inline.
        frames.push(udp(
            &call_msg(xid, NFS_PROGRAM, args.procedure(), args.to_payload()),
            800,
            2049,
            true,
        ));
        expect.push(vec![
            ("rpc.msgtyp", "0".into()),
            ("nfs.procedure_v3", p.clone()),
        ]);
        frames.push(udp(&reply_msg(xid, res.to_payload()), 2049, 800, false));
        let mut e = vec![("rpc.msgtyp", "1".into()), ("nfs.procedure_v3", p)];
        if res.procedure() != nfs3::proc3::NULL {
            e.push(("nfs.status", (res.status() as u32).to_string()));
        }
        expect.push(e);
    }
    for (args, res) in mount_pairs() {
        xid += 1;
        let p = args.procedure().to_string();
        frames.push(udp(
            &call_msg(xid, MOUNT_PROGRAM, args.procedure(), args.to_payload()),
            801,
            20048,
            true,
        ));
        expect.push(vec![
            ("rpc.msgtyp", "0".into()),
            ("mount.procedure_v3", p.clone()),
        ]);
        frames.push(udp(&reply_msg(xid, res.to_payload()), 20048, 801, false));
        expect.push(vec![("rpc.msgtyp", "1".into()), ("mount.procedure_v3", p)]);
    }
    // Field values of chosen frames (1-based frame numbers).
    let getattr_reply = 4;
    expect[getattr_reply - 1].push(("nfs.fattr3.size", "123456".into()));
    expect[getattr_reply - 1].push(("nfs.fattr3.fileid", "2".into()));
    let lookup_call = 7;
    expect[lookup_call - 1].push(("nfs.name", "file.txt".into()));
    let read_reply = 14;
    expect[read_reply - 1].push(("nfs.read.eof", "1".into()));
    expect[read_reply - 1].push(("nfs.data", "68656c6c6f20776f726c64".into()));
    let write_call = 15;
    expect[write_call - 1].push(("nfs.offset3", "8192".into()));
    expect[write_call - 1].push(("nfs.data", "6162636465".into()));
    let symlink_call = 21;
    expect[symlink_call - 1].push(("nfs.symlink.to", "/some/where".into()));
    let mnt_call = 45;
    expect[mnt_call - 1].push(("mount.path", "/export".into()));

    let dir = std::env::temp_dir().join(format!("nfs3-tshark-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("nfs3.pcap");
    std::fs::File::create(&path)
        .unwrap()
        .write_all(&pcap(&frames))
        .unwrap();
    let mut fields: Vec<&str> = vec!["frame.number", "_ws.malformed", "_ws.expert.severity"];
    for e in &expect {
        for (f, _) in e {
            if !fields.contains(f) {
                fields.push(f);
            }
        }
    }
    let mut cmd = Command::new("tshark");
    cmd.args([
        "-2",
        "-o",
        "iwarp_ddp_rdmap.reassemble_iwarp_rdma_send:FALSE",
        "-o",
        "tcp.try_heuristic_first:TRUE",
        "-o",
        "rpc.dissect_unknown_programs:TRUE",
        "-d",
        "udp.port==20048,rpc",
        "-r",
    ])
    .arg(&path)
    .args([
        "-T",
        "fields",
        "-E",
        "separator=|",
        "-E",
        "occurrence=a",
        "-E",
        "aggregator=;",
    ]);
    for f in &fields {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("run tshark");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<HashMap<&str, &str>> = stdout
        .lines()
        .map(|l| fields.iter().copied().zip(l.split('|')).collect())
        .collect();
    assert_eq!(rows.len(), frames.len(), "{stdout}");
    for (i, (row, exp)) in rows.iter().zip(&expect).enumerate() {
        let n = i + 1;
        assert_eq!(row["_ws.malformed"], "", "frame {n} malformed: {row:?}");
        // Expert severities (printed in decimal): 0x00800000 (error) and
        // above fail; notes and warnings pass.
        for sev in row["_ws.expert.severity"]
            .split(';')
            .filter(|s| !s.is_empty())
        {
            let v = match sev.strip_prefix("0x") {
                Some(h) => u32::from_str_radix(h, 16),
                None => sev.parse(),
            }
            .unwrap_or(u32::MAX);
            assert!(v < 0x0080_0000, "frame {n} expert error {sev}: {row:?}");
        }
        for (f, want) in exp {
            let got = row[f];
            assert!(
                got.split(';').any(|g| g == want),
                "frame {n}: {f} = {got:?}, want {want:?}; row {row:?}"
            );
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}
