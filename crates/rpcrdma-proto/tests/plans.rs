//! Requester call plans and Responder reply plans (RFC 8166 §3.4–§3.5,
//! §4.3). Each test names the section it checks.

use rpcrdma_proto::marshal::{
    plan_call, Access, CallKind, ChunkLimits, OfferedChunks, PlanError, RegionSource, ReplyShape,
    SegmentSlot, Thresholds,
};
use rpcrdma_proto::reply::{plan_reply, result_capacity, ReplyKind, ReplyPlanError};
use rpcrdma_proto::stream::{Item, Span};
use rpcrdma_proto::wire::{BodyRepr, ErrorBody, Segment, WriteChunkRepr};

const TH: Thresholds = Thresholds {
    call_inline: 1024,
    reply_inline: 1024,
};

fn small_reply() -> ReplyShape {
    ReplyShape {
        write_chunks: vec![],
        max_reduced_len: 32,
        ..Default::default()
    }
}

#[test]
fn rfc8166_s3_5_1_short_call() {
    let items = [Item::Xdr(40), Item::Xdr(4), Item::Ddp(13), Item::Xdr(8)];
    let p = plan_call(1, 8, &items, &small_reply(), &TH, &ChunkLimits::default()).unwrap();
    assert_eq!(p.kind, CallKind::Short);
    assert!(p.regions.is_empty());
    assert_eq!(p.header.chunks().unwrap().read_list.len(), 0);
    // The DDP item stays inline with its 3 pad bytes.
    assert_eq!(
        p.inline(),
        &[
            Span::Item {
                item: 0,
                offset: 0,
                len: 40
            },
            Span::Item {
                item: 1,
                offset: 0,
                len: 4
            },
            Span::Item {
                item: 2,
                offset: 0,
                len: 13
            },
            Span::Zeros(3),
            Span::Item {
                item: 3,
                offset: 0,
                len: 8
            },
        ]
    );
    assert_eq!(p.unreduced_len, 68);
    assert_eq!(p.send_len(), 28 + 68);
}

#[test]
fn rfc8166_s3_4_5_chunked_call_reduces_at_exact_position_without_pad() {
    let items = [Item::Xdr(44), Item::Ddp(5001), Item::Xdr(8)];
    let limits = ChunkLimits {
        max_segments_per_chunk: 16,
        max_segment_bytes: 2048,
        ..Default::default()
    };
    let mut p = plan_call(7, 8, &items, &small_reply(), &TH, &limits).unwrap();
    assert_eq!(p.kind, CallKind::Chunked);
    let rl = &p.header.chunks().unwrap().read_list;
    assert_eq!(rl.len(), 3, "5001 bytes in 2048-byte segments");
    assert!(rl.iter().all(|r| r.position == 44));
    assert_eq!(
        rl.iter().map(|r| r.segment.length).collect::<Vec<_>>(),
        vec![2048, 2048, 905],
        "§3.4.5: chunk length is the item length, no pad"
    );
    // The pad is gone from the payload too; the next item starts aligned.
    assert_eq!(
        p.inline(),
        &[
            Span::Item {
                item: 0,
                offset: 0,
                len: 44
            },
            Span::Item {
                item: 2,
                offset: 0,
                len: 8
            },
        ]
    );
    assert_eq!(p.regions.len(), 1);
    assert_eq!(p.regions[0].source, RegionSource::CallItem { item: 1 });
    assert_eq!(p.regions[0].access, Access::RemoteRead);
    assert_eq!(p.regions[0].len, 5001);
    p.set_region(0, 0xabcd, 0x10_0000);
    let rl = &p.header.chunks().unwrap().read_list;
    assert_eq!(
        rl.iter()
            .map(|r| (r.segment.handle, r.segment.offset))
            .collect::<Vec<_>>(),
        vec![
            (0xabcd, 0x10_0000),
            (0xabcd, 0x10_0800),
            (0xabcd, 0x10_1000)
        ]
    );
}

#[test]
fn rfc8166_s3_5_3_long_call_position_zero_includes_pad() {
    // ECHO of 2001 bytes: nothing DDP-eligible, too large for 1024.
    let items = [Item::Xdr(44), Item::Xdr(2001), Item::Xdr(3)];
    let p = plan_call(9, 8, &items, &small_reply(), &TH, &ChunkLimits::default()).unwrap();
    assert_eq!(p.kind, CallKind::Long);
    assert_eq!(p.header.proc_(), rpcrdma_proto::Proc::NoMsg);
    assert!(p.inline().is_empty());
    let rl = &p.header.chunks().unwrap().read_list;
    assert_eq!(rl.len(), 1);
    assert_eq!(rl[0].position, 0);
    assert_eq!(rl[0].segment.length, 2048);
    assert_eq!(p.regions[0].source, RegionSource::CallPayload);

    // With a DDP item: Position-Zero carries the whole stream, the item and
    // every pad included, as the only Read chunk (Linux's
    // server before 5.11 takes one Read chunk Position only).
    let items = [Item::Xdr(1500), Item::Ddp(9), Item::Xdr(4)];
    let p = plan_call(9, 8, &items, &small_reply(), &TH, &ChunkLimits::default()).unwrap();
    assert_eq!(p.kind, CallKind::Long);
    let rl = &p.header.chunks().unwrap().read_list;
    assert_eq!(rl.len(), 1);
    assert_eq!((rl[0].position, rl[0].segment.length), (0, 1516));
    assert_eq!(p.unreduced_len, 1500 + 12 + 4);
    assert_eq!(p.regions.len(), 1);
    assert_eq!(p.regions[0].source, RegionSource::CallPayload);
    // With item chunks allowed (draft §3.3): Position Zero carries the
    // reduced stream, pads of non-reduced items included; the item keeps
    // its own Read chunk.
    let items_on = ChunkLimits {
        long_call_item_chunks: true,
        ..Default::default()
    };
    let q = plan_call(9, 8, &items, &small_reply(), &TH, &items_on).unwrap();
    assert_eq!(q.kind, CallKind::Long);
    let rl = &q.header.chunks().unwrap().read_list;
    assert_eq!(rl.len(), 2);
    assert_eq!((rl[0].position, rl[0].segment.length), (0, 1504));
    assert_eq!((rl[1].position, rl[1].segment.length), (1500, 9));
    assert_eq!(
        p.payload,
        vec![
            Span::Item {
                item: 0,
                offset: 0,
                len: 1500
            },
            Span::Item {
                item: 1,
                offset: 0,
                len: 9
            },
            Span::Zeros(3),
            Span::Item {
                item: 2,
                offset: 0,
                len: 4
            },
        ]
    );
}

#[test]
fn rfc8166_s3_4_6_write_chunks_sized_for_maximum_without_pad() {
    let reply = ReplyShape {
        write_chunks: vec![10_001, 0],
        max_reduced_len: 64,
        ..Default::default()
    };
    let limits = ChunkLimits {
        max_segments_per_chunk: 16,
        max_segment_bytes: 4096,
        ..Default::default()
    };
    let p = plan_call(3, 8, &[Item::Xdr(48)], &reply, &TH, &limits).unwrap();
    assert_eq!(p.kind, CallKind::Short);
    let c = p.header.chunks().unwrap();
    assert_eq!(c.write_list.len(), 2);
    assert_eq!(seg_lens(&c.write_list[0]), vec![4096, 4096, 1809]);
    assert!(
        c.write_list[1].is_empty(),
        "§4.3.2: empty chunk forces inline"
    );
    assert!(c.reply_chunk.is_none());
    assert_eq!(p.regions.len(), 1);
    assert_eq!(
        p.regions[0].source,
        RegionSource::ReplyWriteChunk { chunk: 0 }
    );
    assert_eq!(p.regions[0].access, Access::RemoteWrite);
    assert_eq!(
        p.regions[0].segments[2].slot,
        SegmentSlot::Write {
            chunk: 0,
            segment: 2
        }
    );
    assert_eq!(p.offered().write_list.len(), 2);
}

/// The implementation-experience draft §3.6 (case 2): with `write_pad`, a
/// Write chunk for a result that is not a multiple of 4 gets one more
/// 4-byte segment, a region of its own; aligned results, empty chunks, and
/// chunks whose data already takes every allowed segment get none.
#[test]
fn draft_s3_6_write_pad_segment_only_for_unaligned_results() {
    let limits = ChunkLimits {
        max_segments_per_chunk: 3,
        max_segment_bytes: 4096,
        ..Default::default()
    };
    let plan = |chunks: Vec<u32>, pad: bool| {
        let reply = ReplyShape {
            write_chunks: chunks,
            max_reduced_len: 64,
            write_pad: pad,
        };
        plan_call(3, 8, &[Item::Xdr(48)], &reply, &TH, &limits).unwrap()
    };
    let lens = |p: &rpcrdma_proto::marshal::CallPlan, i: usize| {
        seg_lens(&p.header.chunks().unwrap().write_list[i])
    };
    // 1001 B, 4 B aligned, an empty chunk, and 3 × 4096 − 1 B (three full
    // segments already: no room for a pad segment).
    let p = plan(vec![1001, 4, 0, 12_287], true);
    assert_eq!(lens(&p, 0), vec![1001, 4]);
    assert_eq!(lens(&p, 1), vec![4]);
    assert!(lens(&p, 2).is_empty());
    assert_eq!(lens(&p, 3), vec![4096, 4096, 4095]);
    let pads: Vec<_> = p
        .regions
        .iter()
        .filter(|r| matches!(r.source, RegionSource::WritePad { .. }))
        .collect();
    assert_eq!(pads.len(), 1);
    assert_eq!(pads[0].source, RegionSource::WritePad { chunk: 0 });
    assert_eq!(pads[0].len, 4);
    assert_eq!(pads[0].access, Access::RemoteWrite);
    assert_eq!(
        pads[0].segments[0].slot,
        SegmentSlot::Write {
            chunk: 0,
            segment: 1
        }
    );
    // The result's own region is unchanged: the pad never holds data.
    let data = p
        .regions
        .iter()
        .find(|r| r.source == RegionSource::ReplyWriteChunk { chunk: 0 })
        .unwrap();
    assert_eq!((data.len, data.segments.len()), (1001, 1));
    // The offered chunk (what a reply is checked against) includes it.
    assert_eq!(p.offered().write_list[0].segments.len(), 2);
    // Off (the default): RFC 8166 §3.4.6, no pad space.
    let p = plan(vec![1001], false);
    assert_eq!(lens(&p, 0), vec![1001]);
    assert_eq!(p.regions.len(), 1);
}

#[test]
fn rfc8166_s4_3_3_reply_chunk_when_reply_may_exceed_threshold() {
    // 28-byte reply header + 996 = 1024: fits, no Reply chunk.
    let fits = ReplyShape {
        write_chunks: vec![],
        max_reduced_len: 996,
        ..Default::default()
    };
    let p = plan_call(1, 1, &[Item::Xdr(40)], &fits, &TH, &ChunkLimits::default()).unwrap();
    assert!(p.header.chunks().unwrap().reply_chunk.is_none());
    let over = ReplyShape {
        write_chunks: vec![],
        max_reduced_len: 997,
        ..Default::default()
    };
    let p = plan_call(1, 1, &[Item::Xdr(40)], &over, &TH, &ChunkLimits::default()).unwrap();
    let rc = p.header.chunks().unwrap().reply_chunk.clone().unwrap();
    assert_eq!(rc.total_len(), 1000, "rounded up to XDR alignment");
    assert!(p
        .regions
        .iter()
        .any(|r| r.source == RegionSource::ReplyChunk && r.access == Access::RemoteWrite));
}

#[test]
fn plan_errors() {
    let limits = ChunkLimits {
        max_segments_per_chunk: 2,
        max_segment_bytes: 1024,
        ..Default::default()
    };
    assert!(matches!(
        plan_call(
            1,
            1,
            &[Item::Xdr(44), Item::Ddp(4096)],
            &small_reply(),
            &TH,
            &limits
        ),
        Err(PlanError::TooManySegments { .. })
    ));
    assert!(matches!(
        plan_call(
            1,
            1,
            &[Item::Xdr(42), Item::Ddp(4096)],
            &small_reply(),
            &TH,
            &limits
        ),
        Err(PlanError::Misaligned {
            item: 1,
            position: 42
        })
    ));
}

/// The segment lengths of a chunk.
fn seg_lens(c: &WriteChunkRepr) -> Vec<u32> {
    c.segments.iter().map(|s| s.length).collect()
}

fn offered_get() -> OfferedChunks {
    OfferedChunks {
        write_list: vec![WriteChunkRepr {
            segments: vec![
                Segment {
                    handle: 5,
                    length: 100,
                    offset: 0x1000,
                },
                Segment {
                    handle: 6,
                    length: 100,
                    offset: 0x2000,
                },
                Segment {
                    handle: 7,
                    length: 100,
                    offset: 0x3000,
                },
            ],
        }],
        reply_chunk: Some(WriteChunkRepr {
            segments: vec![Segment {
                handle: 9,
                length: 4096,
                offset: 0x9000,
            }],
        }),
    }
}

#[test]
fn rfc8166_s3_4_6_reply_fills_write_chunk_in_order_no_pad() {
    // GET result: header+status+len (32) | data 150 bytes | nothing after.
    let items = [Item::Xdr(32), Item::Ddp(150)];
    let p = plan_reply(1, 16, &items, &offered_get(), 1024).unwrap();
    // The offered Reply chunk holds the rest of the reply, so it is used
    // though the reply would fit inline.
    assert_eq!(p.kind, ReplyKind::Long);
    let c = p.header.chunks().unwrap();
    let w = &c.write_list[0];
    assert_eq!(w.segments.len(), 3, "same segment count");
    assert_eq!(
        seg_lens(w),
        vec![100, 50, 0],
        "actual lengths, filled in order; 150 not rounded up"
    );
    assert_eq!(
        p.writes
            .iter()
            .map(|w| (w.handle, w.remote_offset, w.source))
            .collect::<Vec<_>>(),
        vec![
            (
                5,
                0x1000,
                Span::Item {
                    item: 1,
                    offset: 0,
                    len: 100
                }
            ),
            (
                6,
                0x2000,
                Span::Item {
                    item: 1,
                    offset: 100,
                    len: 50
                }
            ),
            (
                9,
                0x9000,
                Span::Item {
                    item: 0,
                    offset: 0,
                    len: 32
                }
            ),
        ]
    );
    // The rest of the reply goes into the Reply chunk, with its length.
    let rc = c.reply_chunk.as_ref().unwrap();
    assert_eq!(
        rc.segments,
        vec![Segment {
            handle: 9,
            length: 32,
            offset: 0x9000
        }]
    );
    assert!(p.inline.is_empty());

    // Without a Reply chunk the same reply is Short, with the Write chunk
    // filled the same way.
    let offered = OfferedChunks {
        reply_chunk: None,
        ..offered_get()
    };
    let p = plan_reply(1, 16, &items, &offered, 1024).unwrap();
    assert_eq!(p.kind, ReplyKind::Short);
    let c = p.header.chunks().unwrap();
    assert_eq!(seg_lens(&c.write_list[0]), vec![100, 50, 0]);
    assert!(c.reply_chunk.is_none());
    assert_eq!(p.writes.len(), 2);
    assert_eq!(
        p.inline,
        vec![Span::Item {
            item: 0,
            offset: 0,
            len: 32
        }]
    );
}

/// A Reply chunk too small for the reply is echoed unused (zero length,
/// RFC 8166 §4.3.3) in a Short reply when the reply fits inline.
#[test]
fn rfc8166_s4_3_3_reply_chunk_too_small_is_echoed_unused_in_a_short_reply() {
    let offered = OfferedChunks {
        write_list: vec![],
        reply_chunk: Some(WriteChunkRepr {
            segments: vec![Segment {
                handle: 9,
                length: 16,
                offset: 0x9000,
            }],
        }),
    };
    let p = plan_reply(1, 16, &[Item::Xdr(28)], &offered, 1024).unwrap();
    assert_eq!(p.kind, ReplyKind::Short);
    let rc = p.header.chunks().unwrap().reply_chunk.as_ref().unwrap();
    assert_eq!(rc.segments[0].length, 0);
    assert!(p.writes.is_empty());
}

#[test]
fn rfc8166_s4_3_2_unused_write_chunk_keeps_count_with_zero_lengths() {
    // GET failed: union arm without data.
    let offered = OfferedChunks {
        reply_chunk: None,
        ..offered_get()
    };
    let p = plan_reply(1, 16, &[Item::Xdr(28)], &offered, 1024).unwrap();
    let w = &p.header.chunks().unwrap().write_list[0];
    assert_eq!(w.segments.len(), 3);
    assert!(w.is_unused());
    assert!(p.writes.is_empty());
}

/// A Write chunk offered with the draft's §3.6 pad segment (a 4-byte last
/// segment after an unaligned buffer): the result takes the buffer only,
/// the pad comes back empty (RFC 8166 §3.4.6), and a result that would
/// spill into it is too long for the chunk.
#[test]
fn draft_s3_6_responder_never_writes_into_a_pad_segment() {
    let chunk = |lens: &[u32]| WriteChunkRepr {
        segments: lens
            .iter()
            .enumerate()
            .map(|(i, &length)| Segment {
                handle: 10 + i as u32,
                length,
                offset: 0x1000 * (i as u64 + 1),
            })
            .collect(),
    };
    let offered = |c: WriteChunkRepr| OfferedChunks {
        write_list: vec![c],
        reply_chunk: None,
    };
    assert_eq!(result_capacity(&chunk(&[1001, 4])), 1001);
    assert_eq!(result_capacity(&chunk(&[4096, 4096, 1, 3])), 8193);
    // Not a pad segment: aligned data before it, or a single segment.
    assert_eq!(result_capacity(&chunk(&[1000, 4])), 1004);
    assert_eq!(result_capacity(&chunk(&[1001])), 1001);
    assert_eq!(result_capacity(&chunk(&[1001, 8])), 1009);

    let p = plan_reply(
        1,
        16,
        &[Item::Xdr(28), Item::Ddp(1001)],
        &offered(chunk(&[1001, 4])),
        1024,
    )
    .unwrap();
    let c = p.header.chunks().unwrap();
    assert_eq!(seg_lens(&c.write_list[0]), vec![1001, 0]);
    assert!(p.writes.iter().all(|w| w.handle == 10), "{:?}", p.writes);
    for n in [1002, 1004, 1005] {
        assert!(
            matches!(
                plan_reply(
                    1,
                    16,
                    &[Item::Xdr(28), Item::Ddp(n)],
                    &offered(chunk(&[1001, 4])),
                    1024
                ),
                Err(ReplyPlanError::WriteChunkTooSmall { cap: 1001, .. })
            ),
            "{n}"
        );
    }
}

#[test]
fn rfc8166_s4_3_2_empty_write_chunk_forces_inline_and_extra_results_go_inline() {
    let offered = OfferedChunks {
        write_list: vec![
            WriteChunkRepr::default(),
            WriteChunkRepr {
                segments: vec![Segment {
                    handle: 1,
                    length: 64,
                    offset: 0,
                }],
            },
        ],
        reply_chunk: None,
    };
    // GET2-like: a (inline, empty chunk), marker, b (chunk 1), then a third
    // DDP item beyond the offered chunks.
    let items = [
        Item::Xdr(28),
        Item::Ddp(5),
        Item::Xdr(8),
        Item::Ddp(6),
        Item::Xdr(4),
        Item::Ddp(3),
    ];
    let p = plan_reply(1, 16, &items, &offered, 1024).unwrap();
    let c = p.header.chunks().unwrap();
    assert!(c.write_list[0].is_empty());
    assert_eq!(c.write_list[1].segments[0].length, 6);
    assert_eq!(
        p.inline,
        vec![
            Span::Item {
                item: 0,
                offset: 0,
                len: 28
            },
            Span::Item {
                item: 1,
                offset: 0,
                len: 5
            },
            Span::Zeros(3),
            Span::Item {
                item: 2,
                offset: 0,
                len: 8
            },
            Span::Item {
                item: 4,
                offset: 0,
                len: 4
            },
            Span::Item {
                item: 5,
                offset: 0,
                len: 3
            },
            Span::Zeros(1),
        ]
    );
}

#[test]
fn rfc8166_s3_5_3_long_reply_uses_reply_chunk() {
    // ECHO reply of 2000 bytes.
    let items = [Item::Xdr(28), Item::Xdr(2000)];
    let p = plan_reply(1, 16, &items, &offered_get(), 1024).unwrap();
    assert_eq!(p.kind, ReplyKind::Long);
    assert_eq!(p.header.proc_(), rpcrdma_proto::Proc::NoMsg);
    assert!(p.inline.is_empty());
    let c = p.header.chunks().unwrap();
    assert_eq!(c.reply_chunk.as_ref().unwrap().segments[0].length, 2028);
    assert!(
        c.write_list[0].is_unused(),
        "offered Write chunk echoed unused"
    );
    assert_eq!(p.writes.len(), 2);
    assert_eq!(p.writes[0].remote_offset, 0x9000);
    assert_eq!(p.writes[1].remote_offset, 0x9000 + 28);
}

#[test]
fn rfc8166_s4_5_3_reply_that_fits_nowhere_is_err_chunk_not_overrun() {
    let items = [Item::Xdr(28), Item::Xdr(5000)];
    let e = plan_reply(1, 16, &items, &offered_get(), 1024).unwrap_err();
    assert!(matches!(e, ReplyPlanError::ReplyChunkTooSmall { .. }));
    let h = e.error_header(1, 16);
    assert_eq!(h.body, BodyRepr::Error(ErrorBody::Chunk));
    let no_rc = OfferedChunks::default();
    assert!(matches!(
        plan_reply(1, 16, &items, &no_rc, 1024),
        Err(ReplyPlanError::NoReplyChunk { .. })
    ));
    // A result larger than its Write chunk.
    assert!(matches!(
        plan_reply(
            1,
            16,
            &[Item::Xdr(32), Item::Ddp(301)],
            &offered_get(),
            1024
        ),
        Err(ReplyPlanError::WriteChunkTooSmall {
            chunk: 0,
            len: 301,
            cap: 300
        })
    ));
}

/// A returned Write chunk length is the result's (RFC 8166 §3.4.6), or its
/// roundup to a multiple of 4 from a Responder following RFC 5666 §3.7
/// (implementation-experience draft §3.6): only the declared bytes are the
/// result. Anything else is a mismatch.
#[test]
fn rfc5666_rounded_up_write_chunk_length_is_the_declared_result() {
    use rpcrdma_proto::reassemble::{DdpResult, ReplyDdpError, WriteChunkCursor};
    let chunk = |len| WriteChunkRepr {
        segments: vec![Segment {
            handle: 7,
            length: len,
            offset: 0,
        }],
    };
    for (returned, declared, ok) in [
        (5, 5, true),
        (8, 5, true),
        (8, 8, true),
        (8, 4, false),
        (12, 9, true),
        (12, 8, false),
        (7, 5, false),
        (9, 5, false),
    ] {
        let wl = [chunk(returned)];
        let r = WriteChunkCursor::from_repr(&wl).next_result(declared);
        if ok {
            assert_eq!(
                r,
                Ok(DdpResult::Chunk {
                    chunk: 0,
                    len: declared
                })
            );
        } else {
            assert!(
                matches!(r, Err(ReplyDdpError::LengthMismatch { .. })),
                "{returned} returned for {declared}: {r:?}"
            );
        }
    }
}
