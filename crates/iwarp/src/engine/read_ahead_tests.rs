//! Read-ahead of Read Responses (`Rx::place_read_ahead`): the requester
//! reads several response segments per read, each payload straight into the
//! sink where it is expected. Checked against the same engine without
//! direct placement (every byte through the stage), on responses segmented
//! regularly and irregularly, interleaved with other messages, corrupted,
//! and cut at arbitrary points.

use super::rx::{Rx, RxStatus};
use super::tx::Tx;
use super::SqItem;
use crate::cq::Cq;
use crate::crc;
use crate::mem::{Region, StagTable};
use crate::wire::fpdu::pad_len;
use crate::wire::rdmap::RdmapRepr;
use bytes::BytesMut;
use proptest::prelude::*;
use rdma_verbs::{Access, CompletionQueue, MrBuffer, RemoteAddr, SendWr, Sge, WorkCompletion};
use std::io;
use std::sync::Arc;

/// A requester with one RDMA Read of `len` bytes outstanding, its sink
/// split into `parts` regions, and a region a peer may write (`target`).
struct Requester {
    rx: Rx,
    cq: Cq,
    sinks: Vec<Arc<Region>>,
    target: Arc<Region>,
    target_stag: u32,
    sink_stag: u32,
    sink_to: u64,
}

fn requester(direct: bool, len: usize, parts: usize) -> Requester {
    let table = Arc::new(StagTable::default());
    let cq = Cq::new(1 << 16);
    let sh = super::tests::established(&table, &cq, 4, 4, true);
    let mut sinks = Vec::new();
    let mut sgl = Vec::new();
    for i in 0..parts {
        let n = if i + 1 == parts {
            len - len / parts * (parts - 1)
        } else {
            len / parts
        };
        let r = table.insert(
            7,
            n,
            Access::LOCAL_WRITE,
            Some(MrBuffer::from(BytesMut::zeroed(n))),
        );
        let stag = r.stag_for(r.lock().key);
        sgl.push(Sge::new(stag, 0, n as u32));
        sinks.push(r);
    }
    let target = table.insert(
        7,
        4096,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        Some(MrBuffer::from(BytesMut::zeroed(4096))),
    );
    let target_stag = target.stag_for(target.lock().key);
    {
        let mut g = sh.lock();
        g.sq_outstanding += 1;
        g.sq.push_back(SqItem::Wr(SendWr::read(
            1,
            sgl,
            RemoteAddr {
                rkey: 0x0102_0304,
                offset: 0,
            },
        )));
    }
    // Produce the Read Request (the ORQ entry) and drop the bytes.
    let mut tx = Tx::new(sh.clone(), true, 65_535, None);
    let mut out = Vec::new();
    while tx.poll_transmit(&mut out, usize::MAX) > 0 {}
    let (sink_stag, sink_to) = {
        let g = sh.lock();
        let e = g.orq.front().expect("read outstanding");
        (e.sink_stag, e.sink_to)
    };
    let mut rx = Rx::with_placement(sh, true, direct);
    rx.set_read_ahead(true);
    Requester {
        rx,
        cq,
        sinks,
        target,
        target_stag,
        sink_stag,
        sink_to,
    }
}

fn fpdu(repr: RdmapRepr, payload: &[u8]) -> Vec<u8> {
    let mut hdr = [0u8; 18];
    let hl = repr.emit(&mut hdr).unwrap();
    let ulpdu = hl + payload.len();
    let mut v = (ulpdu as u16).to_be_bytes().to_vec();
    v.extend_from_slice(&hdr[..hl]);
    v.extend_from_slice(payload);
    v.extend(std::iter::repeat_n(0u8, pad_len(ulpdu)));
    let c = crc::crc32c(&v);
    v.extend_from_slice(&crc::to_wire(c));
    v
}

fn data(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed) ^ (i >> 9) as u8)
        .collect()
}

/// The response stream: `data` in segments of the given sizes (the last
/// takes the rest), with a 100-byte RDMA Write to `target` after segment
/// `write_after` if given.
fn response(r: &Requester, data: &[u8], sizes: &[usize], write_after: Option<usize>) -> Vec<u8> {
    let mut v = Vec::new();
    let mut off = 0;
    let mut i = 0;
    while off < data.len() {
        // At most 65,521 payload bytes fit an FPDU (16-bit ULPDU_Length).
        let n = sizes
            .get(i)
            .copied()
            .unwrap_or(65_521)
            .clamp(1, 65_521)
            .min(data.len() - off);
        let last = off + n == data.len();
        v.extend(fpdu(
            RdmapRepr::RdmaReadResponse {
                stag: r.sink_stag,
                to: r.sink_to + off as u64,
                last,
            },
            &data[off..off + n],
        ));
        if write_after == Some(i) {
            v.extend(fpdu(
                RdmapRepr::RdmaWrite {
                    stag: r.target_stag,
                    to: 100,
                    last: true,
                },
                &[0xAB; 100],
            ));
        }
        off += n;
        i += 1;
    }
    v
}

/// How many segments [`response`] cuts `len` bytes into.
fn segments(len: usize, sizes: &[usize]) -> usize {
    let (mut off, mut i) = (0, 0);
    while off < len {
        off += sizes
            .get(i)
            .copied()
            .unwrap_or(65_521)
            .clamp(1, 65_521)
            .min(len - off);
        i += 1;
    }
    i
}

/// Feeds `bytes` with reads cut by `cuts` (cyclically); returns the final
/// status and the number of read calls that returned bytes.
fn feed(r: &mut Requester, bytes: &[u8], cuts: &[usize]) -> (RxStatus, usize) {
    let (mut pos, mut reads, mut k) = (0, 0, 0);
    loop {
        let st =
            r.rx.recv(|bufs| {
                if pos == bytes.len() {
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                let mut cut = cuts[k % cuts.len()].max(1);
                k += 1;
                reads += 1;
                let mut total = 0;
                for buf in bufs.iter_mut() {
                    let m = buf.len().min(bytes.len() - pos).min(cut);
                    buf[..m].copy_from_slice(&bytes[pos..pos + m]);
                    pos += m;
                    total += m;
                    cut -= m;
                }
                Ok(total)
            })
            .unwrap();
        if st != RxStatus::Budget {
            return (st, reads);
        }
    }
}

/// What a requester ends with: completions, sink and target contents,
/// whether it died.
fn outcome(r: &Requester) -> (Vec<WorkCompletion>, Vec<u8>, Vec<u8>, bool) {
    let mut wcs = Vec::new();
    r.cq.poll(&mut wcs, usize::MAX);
    let mut sink = Vec::new();
    for s in &r.sinks {
        sink.extend_from_slice(s.lock().buffer.as_ref().unwrap().as_slice());
    }
    let target = r.target.lock().buffer.as_ref().unwrap().as_slice().to_vec();
    (wcs, sink, target, r.rx.is_dead())
}

#[test]
fn a_regular_response_is_read_several_segments_at_a_time() {
    let len = 1 << 20;
    let payload = data(len, 1);
    let mut a = requester(true, len, 1);
    let bytes = response(&a, &payload, &[65_521; 17], None);
    let (st, reads) = feed(&mut a, &bytes, &[usize::MAX]);
    assert_eq!(st, RxStatus::WouldBlock);
    let (wcs, sink, _, dead) = outcome(&a);
    assert!(!dead);
    assert_eq!(wcs.len(), 1);
    assert!(wcs[0].is_success(), "{wcs:?}");
    assert_eq!(wcs[0].byte_len, len as u32);
    assert_eq!(sink, payload);
    // 17 segments: one read for the first header, then up to four segments
    // per read.
    assert!(reads <= 7, "{reads} reads for 17 segments");
}

#[test]
fn irregular_segments_and_an_interleaved_write_are_handed_back() {
    let len = 600_000;
    let payload = data(len, 2);
    for (sizes, write_after) in [
        (vec![65_521, 65_000, 65_521, 65_521], None),
        (vec![65_521, 65_521, 4_096, 65_521, 65_521], Some(1)),
        (vec![40_000, 40_000, 40_000, 39_999, 60_000], Some(0)),
    ] {
        for direct in [true, false] {
            let mut a = requester(direct, len, 2);
            let bytes = response(&a, &payload, &sizes, write_after);
            // The first read takes only the first header, so that the
            // response is read with read-ahead, not through the stage.
            let (st, _) = feed(&mut a, &bytes, &[16, usize::MAX, 70_000, 3, 100_000]);
            assert_eq!(st, RxStatus::WouldBlock, "{sizes:?} direct {direct}");
            let (wcs, sink, target, dead) = outcome(&a);
            assert!(!dead);
            assert_eq!(wcs.len(), 1, "{wcs:?}");
            assert!(wcs[0].is_success());
            assert_eq!(sink, payload, "{sizes:?} direct {direct}");
            let wrote = write_after.is_some();
            assert_eq!(target[100..200].iter().all(|&b| b == 0xAB), wrote);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Read-ahead changes nothing observable: the same completions, sink,
    /// Write target and fate as placement through the stage, for any
    /// segmentation, interleaving, corruption and read cuts.
    #[test]
    fn read_ahead_matches_staged_placement(
        len in 1usize..400_000,
        sizes in proptest::collection::vec(prop_oneof![Just(65_521usize), 1usize..65_521], 1..12),
        parts in 1usize..4,
        write_after in proptest::option::of(0usize..8),
        corrupt in proptest::option::of(any::<prop::sample::Index>()),
        cuts in proptest::collection::vec(prop_oneof![Just(usize::MAX), 1usize..200_000, 1usize..40], 1..8),
    ) {
        let payload = data(len, 3);
        let mut fast = requester(true, len, parts.min(len));
        let mut slow = requester(false, len, parts.min(len));
        // Same STags on both (same table layout and random keys differ):
        // build each side's stream from its own STags.
        let mut bf = response(&fast, &payload, &sizes, write_after);
        let mut bs = response(&slow, &payload, &sizes, write_after);
        // Where the Read Response ends: before the Write when the Write
        // comes after the last segment.
        let plain = response(&fast, &payload, &sizes, None).len();
        let resp_end = if write_after == Some(segments(len, &sizes) - 1) {
            plain
        } else {
            bf.len()
        };
        let mut corrupt_in_response = false;
        if let Some(i) = corrupt {
            // Corrupt the same payload byte position in both (past the
            // first header, which carries the STags).
            let at = 20 + i.index(bf.len() - 20);
            bf[at] ^= 0x5A;
            bs[at] ^= 0x5A;
            corrupt_in_response = at < resp_end;
        }
        let (sf, _) = feed(&mut fast, &bf, &cuts);
        let (ss, _) = feed(&mut slow, &bs, &cuts);
        prop_assert_eq!(sf, ss);
        let (wf, kf, tf, df) = outcome(&fast);
        let (ws, ks, ts, ds) = outcome(&slow);
        prop_assert_eq!(df, ds);
        let strip = |w: &[WorkCompletion]| -> Vec<_> {
            w.iter().map(|c| (c.wr_id, c.status, c.opcode, c.byte_len)).collect()
        };
        prop_assert_eq!(strip(&wf), strip(&ws));
        prop_assert_eq!(tf, ts);
        if corrupt.is_none() {
            prop_assert!(!df);
            prop_assert_eq!(&kf, &payload);
            prop_assert_eq!(&ks, &payload);
        } else if corrupt_in_response {
            // Every byte is covered by a CRC: the Read never succeeds. (A
            // corrupted length may leave the receiver waiting for bytes
            // that never come instead of dying.) A corrupted Write after
            // the last segment comes too late to fail it.
            prop_assert!(!wf.iter().any(|c| c.is_success()), "{:?}", wf);
        }
    }
}

/// A Terminate between segments of a read-ahead Read Response, at
/// several cut patterns: same outcome as with staged placement, the Read
/// completes once with an error, nothing after the Terminate is written to
/// the target.
#[test]
fn terminate_inside_a_read_ahead_response() {
    use crate::wire::terminate::{TerminateCause, TerminateRepr};
    let len = 8 * 8192;
    let d = data(len, 5);
    for after in [0usize, 1, 3] {
        for cuts in [
            vec![usize::MAX],
            vec![1000],
            vec![8192 + 20],
            vec![7, 70000],
        ] {
            let mut results = Vec::new();
            for direct in [true, false] {
                let mut r = requester(direct, len, 3);
                let mut v = Vec::new();
                let mut off = 0;
                let mut i = 0;
                while off < len {
                    let n = 8192.min(len - off);
                    v.extend(fpdu(
                        RdmapRepr::RdmaReadResponse {
                            stag: r.sink_stag,
                            to: r.sink_to + off as u64,
                            last: off + n == len,
                        },
                        &d[off..off + n],
                    ));
                    if i == after {
                        let t =
                            TerminateRepr::for_cause(TerminateCause::RdmapCatastrophicStream, &[]);
                        v.extend(super::tx::terminate_fpdu(&t, true));
                        v.extend(fpdu(
                            RdmapRepr::RdmaWrite {
                                stag: r.target_stag,
                                to: 0,
                                last: true,
                            },
                            &[0xAB; 100],
                        ));
                    }
                    off += n;
                    i += 1;
                }
                let (st, _) = feed(&mut r, &v, &cuts);
                let (wcs, sink, target, dead) = outcome(&r);
                assert_eq!(
                    st,
                    RxStatus::Dead,
                    "after {after} cuts {cuts:?} direct {direct}"
                );
                assert!(dead);
                assert_eq!(wcs.len(), 1, "{wcs:?}");
                assert_ne!(wcs[0].status, rdma_verbs::WcStatus::Success);
                assert!(
                    target.iter().all(|&b| b == 0),
                    "write after Terminate placed"
                );
                // What was placed before the Terminate is correct.
                let good = (after + 1) * 8192;
                assert_eq!(&sink[..good], &d[..good]);
                results.push(wcs[0].status);
            }
            assert_eq!(results[0], results[1]);
        }
    }
}
