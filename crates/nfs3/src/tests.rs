//! Codec tests: proptest round trips of every type (through a contiguous
//! encoding and through a payload with DDP pieces), truncation and garbage,
//! and known bytes laid out by hand from RFC 1813.

pub(crate) mod strategies;

use bytes::{Bytes, BytesMut};
use oncrpc::{Payload, Piece};
use proptest::prelude::*;
use xdr::{BytesDecoder, Decoder, XdrDecode, XdrEncode, XdrRead};

use crate::args::*;
use crate::codec::{shares_memory, PayloadEncode};
use crate::mount::*;
use crate::procs::*;
use crate::res::*;
use crate::types::*;
use strategies::*;

/// Encode `v` contiguously and through a payload; both must decode back to
/// `v`, have the declared length, and the payload's logical stream must
/// equal the contiguous encoding. Every strict prefix must fail to decode.
fn round_trip<T>(v: &T)
where
    T: XdrEncode + XdrDecode + PayloadEncode + PartialEq + core::fmt::Debug,
{
    let flat = xdr::encode_to_bytes(v).unwrap();
    assert_eq!(flat.len(), v.encoded_len());
    let mut d = Decoder::new(&flat);
    assert_eq!(&T::decode(&mut d).unwrap(), v);
    d.finish().unwrap();
    let p = v.to_payload();
    assert_eq!(
        p.flatten(),
        flat,
        "payload stream differs from XDR encoding"
    );
    assert_eq!(&crate::decode_payload::<T>(&p).unwrap(), v);
    let inline = Payload::from_xdr(flat.clone());
    assert_eq!(&crate::decode_payload::<T>(&inline).unwrap(), v);
    // Truncations (step 4 keeps the test fast on long values; the last
    // three bytes cover a cut inside the final word).
    let n = flat.len();
    let cuts = (0..n).step_by(4).chain(n.saturating_sub(3)..n);
    for cut in cuts {
        let mut d = Decoder::new(&flat[..cut]);
        let r = T::decode(&mut d).and_then(|_| d.finish());
        assert!(r.is_err(), "prefix of {cut}/{n} bytes decoded");
    }
}

fn proc_round_trip_args(a: &Nfs3Args) {
    let p = a.to_payload();
    assert_eq!(p.xdr_len(), a.encoded_len());
    assert_eq!(&Nfs3Args::decode_payload(a.procedure(), &p).unwrap(), a);
}

fn proc_round_trip_res(r: &Nfs3Res) {
    let p = r.to_payload();
    assert_eq!(p.xdr_len(), r.encoded_len());
    assert_eq!(&Nfs3Res::decode_payload(r.procedure(), &p).unwrap(), r);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn basic_types_round_trip(
        f in fattr3(), w in wcc_data(), s in sattr3(), d in diropargs3(),
        h in nfs_fh3(),
    ) {
        round_trip(&Getattr3ResOk { obj_attributes: f });
        round_trip(&Setattr3ResOk { obj_wcc: w });
        round_trip(&Lookup3Args { what: d });
        round_trip(&Mkdir3Args { where_: diropargs(h), attributes: s });
    }

    #[test]
    fn every_argument_round_trips(a in nfs3_args()) {
        proc_round_trip_args(&a);
        match &a {
            Nfs3Args::Null => {}
            Nfs3Args::Getattr(x) => round_trip(x),
            Nfs3Args::Setattr(x) => round_trip(x),
            Nfs3Args::Lookup(x) => round_trip(x),
            Nfs3Args::Access(x) => round_trip(x),
            Nfs3Args::Readlink(x) => round_trip(x),
            Nfs3Args::Read(x) => round_trip(x),
            Nfs3Args::Write(x) => round_trip(x),
            Nfs3Args::Create(x) => round_trip(x),
            Nfs3Args::Mkdir(x) => round_trip(x),
            Nfs3Args::Symlink(x) => round_trip(x),
            Nfs3Args::Mknod(x) => round_trip(x),
            Nfs3Args::Remove(x) => round_trip(x),
            Nfs3Args::Rmdir(x) => round_trip(x),
            Nfs3Args::Rename(x) => round_trip(x),
            Nfs3Args::Link(x) => round_trip(x),
            Nfs3Args::Readdir(x) => round_trip(x),
            Nfs3Args::Readdirplus(x) => round_trip(x),
            Nfs3Args::Fsstat(x) => round_trip(x),
            Nfs3Args::Fsinfo(x) => round_trip(x),
            Nfs3Args::Pathconf(x) => round_trip(x),
            Nfs3Args::Commit(x) => round_trip(x),
        }
    }

    #[test]
    fn every_result_round_trips(r in nfs3_res()) {
        proc_round_trip_res(&r);
        match &r {
            Nfs3Res::Null => {}
            Nfs3Res::Getattr(x) => round_trip(x),
            Nfs3Res::Setattr(x) => round_trip(x),
            Nfs3Res::Lookup(x) => round_trip(x),
            Nfs3Res::Access(x) => round_trip(x),
            Nfs3Res::Readlink(x) => round_trip(x),
            Nfs3Res::Read(x) => round_trip(x),
            Nfs3Res::Write(x) => round_trip(x),
            Nfs3Res::Create(x) => round_trip(x),
            Nfs3Res::Mkdir(x) => round_trip(x),
            Nfs3Res::Symlink(x) => round_trip(x),
            Nfs3Res::Mknod(x) => round_trip(x),
            Nfs3Res::Remove(x) => round_trip(x),
            Nfs3Res::Rmdir(x) => round_trip(x),
            Nfs3Res::Rename(x) => round_trip(x),
            Nfs3Res::Link(x) => round_trip(x),
            Nfs3Res::Readdir(x) => round_trip(x),
            Nfs3Res::Readdirplus(x) => round_trip(x),
            Nfs3Res::Fsstat(x) => round_trip(x),
            Nfs3Res::Fsinfo(x) => round_trip(x),
            Nfs3Res::Pathconf(x) => round_trip(x),
            Nfs3Res::Commit(x) => round_trip(x),
        }
    }

    #[test]
    fn mount_round_trips(a in mount_args(), r in mount_res()) {
        let p = a.to_payload();
        prop_assert_eq!(MountArgs::decode_payload(a.procedure(), &p).unwrap(), a.clone());
        let p = r.to_payload();
        prop_assert_eq!(p.xdr_len(), r.encoded_len());
        prop_assert_eq!(MountRes::decode_payload(r.procedure(), &p).unwrap(), r.clone());
        match &r {
            MountRes::Mnt(x) => round_trip(x),
            MountRes::Dump(x) => round_trip(x),
            MountRes::Export(x) => round_trip(x),
            _ => {}
        }
    }

    /// Arbitrary bytes never panic any decoder and never decode to a value
    /// whose encoding is longer than the input.
    #[test]
    fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600), p in 0u32..24) {
        let b = Bytes::from(bytes);
        let pl = Payload::from_xdr(b.clone());
        if let Ok(a) = Nfs3Args::decode_payload(p, &pl) {
            prop_assert_eq!(a.encoded_len(), b.len());
        }
        if let Ok(r) = Nfs3Res::decode_payload(p, &pl) {
            prop_assert_eq!(r.encoded_len(), b.len());
        }
        if let Ok(a) = MountArgs::decode_payload(p, &pl) {
            prop_assert_eq!(a.encoded_len(), b.len());
        }
        if let Ok(r) = MountRes::decode_payload(p, &pl) {
            prop_assert_eq!(r.encoded_len(), b.len());
        }
    }

    /// Flipping one word of a valid encoding gives an error or a value that
    /// re-encodes to the same length (never a panic).
    #[test]
    fn corrupted_results_never_panic(r in nfs3_res(), at in any::<prop::sample::Index>(), w in any::<u32>()) {
        let mut flat = BytesMut::from(&xdr::encode_to_bytes(&r).unwrap()[..]);
        if flat.len() >= 4 {
            let i = at.index(flat.len() / 4) * 4;
            flat[i..i + 4].copy_from_slice(&w.to_be_bytes());
        }
        let pl = Payload::from_xdr(flat.freeze());
        if let Ok(v) = Nfs3Res::decode_payload(r.procedure(), &pl) {
            prop_assert_eq!(v.encoded_len(), pl.xdr_len());
        }
    }
}

#[test]
fn nfsstat3_display_and_numbers() {
    assert_eq!(Nfsstat3::Noent.to_string(), "NFS3ERR_NOENT");
    assert_eq!(Nfsstat3::Ok.to_string(), "NFS3_OK");
    assert_eq!(Nfsstat3::NotSync.to_string(), "NFS3ERR_NOT_SYNC");
    assert_eq!(Nfsstat3::Jukebox as u32, 10008);
    assert_eq!(Nfsstat3::ALL.len(), 29);
    for s in Nfsstat3::ALL {
        assert_eq!(Nfsstat3::from_u32(*s as u32), Some(*s));
    }
    let e: Box<dyn std::error::Error> = Box::new(Nfsstat3::Acces);
    assert_eq!(e.to_string(), "NFS3ERR_ACCES");
    assert_eq!(Mountstat3::Notdir.to_string(), "MNT3ERR_NOTDIR");
    assert_eq!(proc_name(proc3::READDIRPLUS), Some("READDIRPLUS"));
    assert_eq!(proc_name(22), None);
}

/// A GETATTR reply laid out by hand from RFC 1813 §3.3.1 and §2.5: status,
/// then the 84-byte fattr3.
#[test]
fn known_bytes_getattr_reply() {
    let words: [u32; 22] = [
        0, // NFS3_OK
        2, // NF3DIR
        0o755,
        3, // nlink
        1000,
        100,
        0,
        4096, // size
        0,
        8192, // used
        0,
        0, // rdev
        0,
        7, // fsid
        0,
        42, // fileid
        1_700_000_000,
        1,
        1_700_000_001,
        2,
        1_700_000_002,
        3,
    ];
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_be_bytes()).collect();
    assert_eq!(bytes.len(), 4 + FATTR3_LEN);
    let r: Getattr3Res = Decoder::new(&bytes).decode().unwrap();
    let NfsResult::Ok(ok) = &r else {
        panic!("not OK: {r:?}")
    };
    let a = ok.obj_attributes;
    assert_eq!(a.ftype, Ftype3::Dir);
    assert_eq!(a.mode, 0o755);
    assert_eq!((a.nlink, a.uid, a.gid), (3, 1000, 100));
    assert_eq!((a.size, a.used, a.fsid, a.fileid), (4096, 8192, 7, 42));
    assert_eq!(
        a.ctime,
        Nfstime3 {
            seconds: 1_700_000_002,
            nseconds: 3
        }
    );
    assert_eq!(xdr::encode_to_vec(&r).unwrap(), bytes);
    // A failure: NFS3ERR_STALE and nothing else.
    let stale = 70u32.to_be_bytes();
    let r: Getattr3Res = Decoder::new(&stale).decode().unwrap();
    assert_eq!(r, NfsResult::Fail(Nfsstat3::Stale, ()));
    // An unknown status is an error.
    assert!(matches!(
        Decoder::new(&3u32.to_be_bytes()).decode::<Getattr3Res>(),
        Err(xdr::Error::InvalidDiscriminant { .. })
    ));
}

/// A LOOKUP call's arguments by hand (RFC 1813 §3.3.3): the handle, then the
/// name, each with length word and pad.
#[test]
fn known_bytes_lookup_args() {
    let a = Lookup3Args {
        what: Diropargs3 {
            dir: NfsFh3::new(&[0xAA, 0xBB, 0xCC, 0xDD, 0xEE][..]).unwrap(),
            name: Filename3::from("abc"),
        },
    };
    let want: &[u8] = &[
        0, 0, 0, 5, 0xAA, 0xBB, 0xCC, 0xDD, 0xEE, 0, 0, 0, 0, 0, 0, 3, b'a', b'b', b'c', 0,
    ];
    assert_eq!(&xdr::encode_to_vec(&a).unwrap()[..], want);
}

#[test]
fn ddp_items_are_pieces_and_decode_zero_copy() {
    let fh = NfsFh3::new(&[1u8; 32][..]).unwrap();
    let data = Bytes::from(vec![7u8; 10_001]);
    let w = Write3Args {
        file: fh.clone(),
        offset: 1 << 40,
        count: 10_001,
        stable: StableHow::Unstable,
        data: data.clone(),
    };
    let p = w.to_payload();
    assert_eq!(p.ddp_count(), 1);
    assert!(matches!(&p.pieces()[1], Piece::Ddp(d) if d.as_ptr() == data.as_ptr()));
    let back: Write3Args = crate::decode_payload(&p).unwrap();
    assert_eq!(back.data.as_ptr(), data.as_ptr(), "decode copied the data");

    let r: Read3Res = NfsResult::Ok(Read3ResOk {
        file_attributes: None,
        count: 3,
        eof: true,
        data: Bytes::from_static(b"xyz"),
    });
    let p = r.to_payload();
    assert_eq!(p.ddp_count(), 1);
    assert_eq!(p.ddp_len(), 3);
    // Through a BytesDecoder over the flat stream, too: zero-copy.
    let flat = p.flatten();
    let mut d = BytesDecoder::new(flat.clone());
    let NfsResult::Ok(ok) = Read3Res::decode(&mut d).unwrap() else {
        panic!()
    };
    assert!(shares_memory(&flat, &ok.data));

    let s = Symlink3Args {
        where_: diropargs(fh.clone()),
        symlink: Symlinkdata3 {
            symlink_attributes: Sattr3::default(),
            symlink_data: Nfspath3::from("../target"),
        },
    };
    let p = s.to_payload();
    assert_eq!(p.ddp_count(), 1);
    assert_eq!(p.ddp_len(), 9);
    let rl: Readlink3Res = NfsResult::Ok(Readlink3ResOk {
        symlink_attributes: None,
        data: Nfspath3::from("/x"),
    });
    assert_eq!(rl.to_payload().ddp_count(), 1);
    // Failure arms and every other procedure have no DDP piece.
    let f: Read3Res = NfsResult::Fail(Nfsstat3::Io, PostOpAttrFail::default());
    assert_eq!(f.to_payload().ddp_count(), 0);
}

#[test]
fn limits_are_enforced() {
    // A 65-byte handle.
    let mut b = vec![0, 0, 0, 65];
    b.extend_from_slice(&[0u8; 68]);
    assert!(matches!(
        Decoder::new(&b).decode::<NfsFh3>(),
        Err(xdr::Error::TooLong { len: 65, max: 64 })
    ));
    assert!(NfsFh3::new(vec![0u8; 65]).is_err());
    // A 256-byte name.
    let mut b = vec![0, 0, 1, 0];
    b.extend_from_slice(&[b'a'; 256]);
    assert!(Decoder::new(&b).decode::<Filename3>().is_err());
    // A huge length word with little input: an error, no allocation.
    let b = [0xFF, 0xFF, 0xFF, 0xF0, 1, 2, 3, 4];
    assert!(Decoder::new(&b).decode::<Nfspath3>().is_err());
    // A READDIR list with too many entries is refused (built by hand:
    // MAX_DIR_ENTRIES + 1 minimal entries).
    let mut b = Vec::new();
    for _ in 0..=MAX_DIR_ENTRIES {
        b.extend_from_slice(&1u32.to_be_bytes());
        b.extend_from_slice(&[0u8; 20]);
    }
    b.extend_from_slice(&[0u8; 8]);
    assert!(matches!(
        Decoder::new(&b).decode::<Dirlist3>(),
        Err(xdr::Error::TooLong { .. })
    ));
    // Booleans other than 0/1 in a list.
    let b = [0, 0, 0, 2];
    assert!(Decoder::new(&b).decode::<Mountlist>().is_err());
    // auth_flavors count beyond the input.
    let mut b = vec![0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0];
    b[4..8].copy_from_slice(&0u32.to_be_bytes());
    b[8..12].copy_from_slice(&30u32.to_be_bytes());
    assert!(Decoder::new(&b).decode::<Mountres3>().is_err());
}

#[test]
fn unknown_procedures() {
    let p = Payload::new();
    assert_eq!(
        Nfs3Args::decode_payload(22, &p),
        Err(DecodeError::UnknownProcedure(22))
    );
    assert_eq!(
        MountRes::decode_payload(6, &p),
        Err(DecodeError::UnknownProcedure(6))
    );
    assert_eq!(
        oncrpc::ProcError::from(DecodeError::UnknownProcedure(1)),
        oncrpc::ProcError::ProcUnavail
    );
    assert_eq!(
        oncrpc::ProcError::from(DecodeError::Xdr(xdr::Error::InvalidUtf8)),
        oncrpc::ProcError::GarbageArgs
    );
    // Trailing bytes after valid arguments.
    let mut b = xdr::encode_to_vec(&Getattr3Args {
        object: NfsFh3::new(&[1u8][..]).unwrap(),
    })
    .unwrap();
    b.extend_from_slice(&[0, 0, 0, 0]);
    assert!(Nfs3Args::decode_payload(proc3::GETATTR, &Payload::from(b)).is_err());
}

#[test]
fn fail_with_ok_status_encodes_serverfault() {
    let r: Getattr3Res = NfsResult::Fail(Nfsstat3::Ok, ());
    assert_eq!(r.status(), Nfsstat3::Serverfault);
    let b = xdr::encode_to_vec(&r).unwrap();
    assert_eq!(b, 10006u32.to_be_bytes());
    let m = Mountres3::Fail(Mountstat3::Ok);
    assert_eq!(xdr::encode_to_vec(&m).unwrap(), 10006u32.to_be_bytes());
}

#[test]
fn decoders_leave_position_right_after_the_value() {
    let a = Readdirplus3Args {
        dir: NfsFh3::new(&[9u8; 28][..]).unwrap(),
        cookie: 5,
        cookieverf: Cookieverf3([1; 8]),
        dircount: 4096,
        maxcount: 32768,
    };
    let mut b = xdr::encode_to_vec(&a).unwrap();
    b.extend_from_slice(&[0xAB; 4]);
    let mut d = Decoder::new(&b);
    assert_eq!(d.decode::<Readdirplus3Args>().unwrap(), a);
    assert_eq!(d.remaining(), 4);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// RFC 8166 §6.2: no result of a procedure with a fixed-size estimate
    /// is larger than the Nfs3Binding estimate (DDP-eligible data
    /// excluded), whatever the arguments.
    #[test]
    fn results_never_exceed_the_binding_estimate(r in nfs3_res(), a in nfs3_args()) {
        use rpcrdma_proto::binding::{ArgsView, UpperLayerBinding};
        let p = r.procedure();
        prop_assume!(p != proc3::READDIR && p != proc3::READDIRPLUS);
        // READ needs its own arguments for the count; take any READ args.
        let args = match (&r, a) {
            (Nfs3Res::Read(_), Nfs3Args::Read(a)) => Nfs3Args::Read(a),
            (Nfs3Res::Read(_), _) => return Ok(()),
            (_, a) => a,
        };
        let head = xdr::encode_to_bytes(&args).unwrap();
        let est = crate::binding::Nfs3Binding
            .reply_estimate(p, ArgsView { head: &head, len: head.len() as u64 })
            .unwrap();
        let pl = r.to_payload();
        prop_assert!(pl.inline_len() as u64 <= est.max_reduced_results,
            "{}: {} > {}", r.name(), pl.inline_len(), est.max_reduced_results);
        prop_assert!(pl.ddp_count() <= est.ddp_results.len());
        if let Nfs3Res::Readlink(NfsResult::Ok(ok)) = &r {
            prop_assert!(ok.data.0.len() as u32 <= est.ddp_results[0]);
        }
    }
}
