//! Property tests for the wire formats: round trips, decoding arbitrary
//! bytes never panics, and FPDU deframing is independent of how the TCP
//! stream is cut.

use proptest::prelude::*;

use super::ddp::{segments, DdpRepr, MessageTemplate, TaggedRepr, UntaggedRepr};
use super::fpdu::{fpdu_len, parse_fpdu, Deframer, Event, FpduBuilder, FpduError};
use super::mpa::{FrameKind, IrdOrd, MpaRepr};
use super::rdmap::{Opcode, RdmapRepr, ReadRequestRepr};
use super::sgl::{sgl_len, sgl_range};
use super::terminate::{TerminateCause, TerminateRepr};

fn arb_rdmap() -> impl Strategy<Value = RdmapRepr> {
    prop_oneof![
        (any::<u32>(), any::<u64>(), any::<bool>())
            .prop_map(|(stag, to, last)| RdmapRepr::RdmaWrite { stag, to, last }),
        (any::<u32>(), any::<u64>(), any::<bool>())
            .prop_map(|(stag, to, last)| RdmapRepr::RdmaReadResponse { stag, to, last }),
        (any::<u32>(), any::<u32>(), any::<bool>())
            .prop_map(|(msn, mo, last)| RdmapRepr::RdmaReadRequest { msn, mo, last }),
        (
            any::<bool>(),
            proptest::option::of(any::<u32>()),
            any::<u32>(),
            any::<u32>(),
            any::<bool>()
        )
            .prop_map(|(solicited, invalidate, msn, mo, last)| RdmapRepr::Send {
                solicited,
                invalidate,
                msn,
                mo,
                last
            }),
        (any::<u32>(), any::<u32>(), any::<bool>())
            .prop_map(|(msn, mo, last)| RdmapRepr::Terminate { msn, mo, last }),
    ]
}

fn arb_ddp() -> impl Strategy<Value = DdpRepr> {
    prop_oneof![
        (any::<bool>(), any::<u8>(), any::<u32>(), any::<u64>()).prop_map(
            |(last, rsvd_ulp, stag, to)| DdpRepr::Tagged(TaggedRepr {
                last,
                rsvd_ulp,
                stag,
                to
            })
        ),
        (
            any::<bool>(),
            any::<[u8; 5]>(),
            any::<u32>(),
            any::<u32>(),
            any::<u32>()
        )
            .prop_map(
                |(last, rsvd_ulp, qn, msn, mo)| DdpRepr::Untagged(UntaggedRepr {
                    last,
                    rsvd_ulp,
                    qn,
                    msn,
                    mo
                })
            ),
    ]
}

/// A sequence of FPDUs (header, payload) and the stream they make.
fn arb_stream() -> impl Strategy<Value = (bool, Vec<(RdmapRepr, Vec<u8>)>)> {
    (
        any::<bool>(),
        proptest::collection::vec(
            (arb_rdmap(), proptest::collection::vec(any::<u8>(), 0..700)),
            1..8,
        ),
    )
}

fn build_stream(crc: bool, fpdus: &[(RdmapRepr, Vec<u8>)]) -> Vec<u8> {
    let b = FpduBuilder::new(crc);
    let mut s = Vec::new();
    for (h, p) in fpdus {
        let mut hb = [0u8; 18];
        let n = h.emit(&mut hb).unwrap();
        // Split the payload into a few SGL pieces to exercise vectored input.
        let third = p.len() / 3;
        let pieces = [&p[..third], &p[third..2 * third], &p[2 * third..]];
        b.frame(&hb[..n], pieces).unwrap().write_to(pieces, &mut s);
    }
    s
}

/// (raw header, payload) per FPDU decoded from `stream` cut at `cuts`.
type Decoded = Vec<(Vec<u8>, Vec<u8>)>;

fn deframe_cut(crc: bool, stream: &[u8], cuts: &[usize]) -> (Decoded, Option<FpduError>) {
    let mut d = Deframer::new(crc, 65535);
    let mut out: Decoded = Vec::new();
    let mut ended = 0usize;
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (stream.len() + 1)).collect();
    points.push(0);
    points.push(stream.len());
    points.sort_unstable();
    points.dedup();
    for w in points.windows(2) {
        let mut input = &stream[w[0]..w[1]];
        loop {
            match d.feed(input) {
                Err(e) => {
                    out.truncate(ended);
                    return (out, Some(e));
                }
                Ok((n, ev)) => {
                    input = &input[n..];
                    match ev {
                        Some(Event::Header(h)) => out.push((h.raw().to_vec(), Vec::new())),
                        Some(Event::Payload { offset, data }) => {
                            let p = &mut out.last_mut().expect("payload before header").1;
                            assert_eq!(offset, p.len());
                            p.extend_from_slice(data);
                        }
                        Some(Event::End) => ended = out.len(),
                        None => {
                            assert!(input.is_empty());
                            break;
                        }
                    }
                }
            }
        }
    }
    // Only completed FPDUs count.
    out.truncate(ended);
    (out, None)
}

fn parse_contiguous(crc: bool, stream: &[u8]) -> (Decoded, Option<FpduError>) {
    let mut out = Vec::new();
    let mut off = 0;
    loop {
        match parse_fpdu(&stream[off..], crc, 65535) {
            Ok(Some(f)) => {
                let hl = f.header_len();
                let mut raw = stream[off..off + 2].to_vec();
                raw.extend_from_slice(&f.ulpdu[..hl]);
                out.push((raw, f.payload().to_vec()));
                off += f.wire_len;
            }
            Ok(None) => return (out, None),
            Err(e) => return (out, Some(e)),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn deframing_is_independent_of_segmentation(
        (crc, fpdus) in arb_stream(),
        cuts in proptest::collection::vec(any::<usize>(), 0..40),
    ) {
        let stream = build_stream(crc, &fpdus);
        let (whole, e1) = deframe_cut(crc, &stream, &[]);
        let (cut, e2) = deframe_cut(crc, &stream, &cuts);
        prop_assert_eq!(e1, None);
        prop_assert_eq!(e2, None);
        prop_assert_eq!(&whole, &cut);
        prop_assert_eq!(whole.len(), fpdus.len());
        for ((raw, payload), (h, p)) in whole.iter().zip(&fpdus) {
            prop_assert_eq!(RdmapRepr::parse_ulpdu(&raw[2..]).unwrap(), *h);
            prop_assert_eq!(payload, p);
        }
        prop_assert_eq!(parse_contiguous(crc, &stream), (whole, None));
    }

    #[test]
    fn corrupted_stream_is_detected_with_crc(
        fpdus in proptest::collection::vec(
            (arb_rdmap(), proptest::collection::vec(any::<u8>(), 0..300)), 1..4),
        pos in any::<usize>(),
        bit in 0u8..8,
        cuts in proptest::collection::vec(any::<usize>(), 0..10),
    ) {
        let mut stream = build_stream(true, &fpdus);
        let pos = pos % stream.len();
        stream[pos] ^= 1 << bit;
        let (good, err) = deframe_cut(true, &stream, &cuts);
        // A flipped bit can never yield the original FPDU sequence.
        let ok_all = err.is_none() && good.len() == fpdus.len()
            && good.iter().zip(&fpdus).all(|((r, p), (h, q))| {
                RdmapRepr::parse_ulpdu(&r[2..]).ok() == Some(*h) && p == q
            });
        prop_assert!(!ok_all);
        // Same verdict as the contiguous parser.
        let (cgood, cerr) = parse_contiguous(true, &stream);
        prop_assert_eq!(good, cgood);
        prop_assert_eq!(err.is_some(), cerr.is_some());
    }

    #[test]
    fn deframer_never_panics_on_garbage(
        crc in any::<bool>(),
        max in 0usize..70000,
        bytes in proptest::collection::vec(any::<u8>(), 0..3000),
        cuts in proptest::collection::vec(any::<usize>(), 0..20),
    ) {
        let mut d = Deframer::new(crc, max);
        let mut points: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
        points.push(0);
        points.push(bytes.len());
        points.sort_unstable();
        for w in points.windows(2) {
            let mut input = &bytes[w[0]..w[1]];
            while let Ok((n, Some(ev))) = d.feed(input) {
                input = &input[n..];
                if let Event::Header(h) = ev {
                    let _ = h.ddp();
                    let _ = h.rdmap();
                    prop_assert!(h.ulpdu_len() <= max);
                }
            }
        }
        let _ = parse_fpdu(&bytes, crc, max);
    }

    #[test]
    fn mpa_parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = MpaRepr::parse_bytes(&bytes);
        let _ = super::mpa::frame_len_hint(&bytes);
    }

    #[test]
    fn mpa_parse_valid_keys_never_panics(
        req in any::<bool>(),
        rest in proptest::collection::vec(any::<u8>(), 0..600),
    ) {
        let mut v = if req { b"MPA ID Req Frame".to_vec() } else { b"MPA ID Rep Frame".to_vec() };
        v.extend_from_slice(&rest);
        if let Ok(r) = MpaRepr::parse_bytes(&v) {
            prop_assert!(r.private_data.len() <= 512);
            let out = r.to_vec().unwrap();
            prop_assert_eq!(MpaRepr::parse_bytes(&out).unwrap(), r);
        }
    }

    #[test]
    fn mpa_round_trip(
        reply in any::<bool>(),
        markers in any::<bool>(),
        crc in any::<bool>(),
        reject in any::<bool>(),
        io in proptest::option::of((0u16..=0x3FFF, 0u16..=0x3FFF, any::<[bool; 4]>())),
        pd in proptest::collection::vec(any::<u8>(), 0..=508),
        rev1 in any::<bool>(),
    ) {
        let ird_ord = io.map(|(ird, ord, f)| IrdOrd {
            ird, ord, peer_to_peer: f[0], rtr_send: f[1], rtr_write: f[2], rtr_read: f[3],
        });
        let r = MpaRepr {
            kind: if reply { FrameKind::Reply } else { FrameKind::Request },
            markers,
            crc,
            reject: reject && reply,
            revision: if rev1 && ird_ord.is_none() { 1 } else { 2 },
            ird_ord,
            private_data: &pd,
        };
        let v = r.to_vec().unwrap();
        prop_assert_eq!(v.len(), r.buffer_len());
        prop_assert_eq!(MpaRepr::parse_bytes(&v).unwrap(), r);
    }

    #[test]
    fn ddp_round_trip(h in arb_ddp(), payload in proptest::collection::vec(any::<u8>(), 0..64)) {
        let (b, n) = h.to_bytes();
        let mut v = b[..n].to_vec();
        v.extend_from_slice(&payload);
        prop_assert_eq!(DdpRepr::parse_bytes(&v).unwrap(), h);
        let seg = super::ddp::Segment::new_checked(&v[..]).unwrap();
        prop_assert_eq!(seg.payload(), &payload[..]);
    }

    #[test]
    fn rdmap_round_trip(h in arb_rdmap()) {
        let mut b = [0u8; 18];
        let n = h.emit(&mut b).unwrap();
        prop_assert_eq!(n, h.header_len());
        prop_assert_eq!(RdmapRepr::parse_ulpdu(&b[..n]), Ok(h));
        prop_assert_eq!(RdmapRepr::from_ddp(&h.to_ddp()), Ok(h));
    }

    #[test]
    fn ulpdu_parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let _ = RdmapRepr::parse_ulpdu(&bytes);
        let _ = DdpRepr::parse_bytes(&bytes);
        let _ = ReadRequestRepr::parse(&bytes);
        if let Ok(t) = TerminateRepr::parse(&bytes) {
            let mut out = [0u8; super::terminate::MAX_BODY_LEN];
            let n = t.emit_body(&mut out).unwrap();
            prop_assert_eq!(TerminateRepr::parse(&out[..n]).unwrap(), t);
        }
    }

    #[test]
    fn read_request_round_trip(a in any::<(u32, u64, u32, u32, u64)>()) {
        let r = ReadRequestRepr { sink_stag: a.0, sink_to: a.1, size: a.2, src_stag: a.3, src_to: a.4 };
        prop_assert_eq!(ReadRequestRepr::parse(&r.to_bytes()), Ok(r));
    }

    #[test]
    fn terminate_for_cause_never_panics_and_round_trips(
        idx in 0usize..33,
        offending in proptest::collection::vec(any::<u8>(), 0..80),
    ) {
        let cause = TerminateCause::all().nth(idx).unwrap();
        let t = TerminateRepr::for_cause(cause, &offending);
        prop_assert_eq!(t.cause(), Some(cause));
        let (u, n) = t.to_ulpdu();
        prop_assert_eq!(n, t.ulpdu_len());
        match RdmapRepr::parse_ulpdu(&u[..n]) {
            Ok(RdmapRepr::Terminate { msn: 1, mo: 0, last: true }) => {}
            other => prop_assert!(false, "bad terminate header {:?}", other),
        }
        prop_assert_eq!(TerminateRepr::parse(&u[18..n]).unwrap(), t);
    }

    #[test]
    fn segmentation_covers_message(
        tagged in any::<bool>(),
        len in 0usize..20000,
        mulpdu in 19usize..3000,
        to in any::<u64>(),
    ) {
        let t = if tagged {
            MessageTemplate::Tagged { rsvd_ulp: Opcode::RdmaWrite.control_byte(), stag: 1, to }
        } else {
            MessageTemplate::Untagged { rsvd_ulp: [Opcode::Send.control_byte(), 0, 0, 0, 0], qn: 0, msn: 1 }
        };
        match segments(t, len, mulpdu) {
            Err(super::Error::ToWrap) => prop_assert!(tagged && to.checked_add(len as u64 - 1).is_none()),
            Err(e) => prop_assert!(false, "unexpected {:?}", e),
            Ok(it) => {
                let expect = it.len();
                let segs: Vec<_> = it.collect();
                prop_assert_eq!(segs.len(), expect);
                let mut next = 0;
                for (i, s) in segs.iter().enumerate() {
                    prop_assert_eq!(s.range.start, next);
                    next = s.range.end;
                    prop_assert!(s.header.header_len() + s.range.len() <= mulpdu);
                    prop_assert_eq!(s.header.last(), i + 1 == segs.len());
                    if len > 0 { prop_assert!(!s.range.is_empty()); }
                    match s.header {
                        DdpRepr::Tagged(h) => prop_assert_eq!(h.to, to.wrapping_add(s.range.start as u64)),
                        DdpRepr::Untagged(h) => prop_assert_eq!(h.mo as usize, s.range.start),
                    }
                    let ulpdu = s.header.header_len() + s.range.len();
                    prop_assert_eq!(fpdu_len(ulpdu) % 4, 0);
                }
                prop_assert_eq!(next, len);
            }
        }
    }

    #[test]
    fn io_slices_equal_write_to(
        crc in any::<bool>(),
        h in arb_rdmap(),
        parts in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..50), 0..6),
    ) {
        let mut hb = [0u8; 18];
        let n = h.emit(&mut hb).unwrap();
        let refs: Vec<&[u8]> = parts.iter().map(|p| &p[..]).collect();
        let f = FpduBuilder::new(crc).frame(&hb[..n], refs.iter().copied()).unwrap();
        let mut flat = Vec::new();
        f.write_to(refs.iter().copied(), &mut flat);
        let mut io = Vec::new();
        f.io_slices(refs.iter().copied(), &mut io);
        let joined: Vec<u8> = io.iter().flat_map(|s| s.iter().copied()).collect();
        prop_assert_eq!(&joined, &flat);
        prop_assert_eq!(flat.len(), f.wire_len());
        prop_assert_eq!(flat.len(), fpdu_len(n + sgl_len(&refs)));
        let p = parse_fpdu(&flat, crc, 65535).unwrap().unwrap();
        prop_assert_eq!(p.wire_len, flat.len());
        prop_assert_eq!(p.payload(), &parts.concat()[..]);
    }

    #[test]
    fn sgl_range_matches_concatenation(
        parts in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..20), 0..8),
        a in 0usize..200,
        b in 0usize..200,
    ) {
        let cat: Vec<u8> = parts.concat();
        let (s, e) = (a.min(b), a.max(b));
        let got: Vec<u8> = sgl_range(&parts, s..e).flatten().copied().collect();
        let s2 = s.min(cat.len());
        let e2 = e.min(cat.len());
        prop_assert_eq!(got, cat[s2..e2].to_vec());
        prop_assert_eq!(sgl_len(&parts), cat.len());
    }
}
