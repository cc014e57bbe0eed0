//! Byte-exact encodings from RFC 8166 §4.7 ("XDR Examples"), built word by
//! word from the RFC's HLOO / PHLOO notation and compared with our encoder
//! and decoder.

mod common;
use common::Words;
use rpcrdma_proto::wire::*;

const H: [u32; 5] = [
    0x1111_1111,
    0x2222_2222,
    0x3333_3333,
    0x4444_4444,
    0x5555_5555,
];
const L: [u32; 5] = [0x100, 0x200, 0x300, 0x400, 0x500];
const O: [u64; 5] = [
    0x0101_0101_0101_0101,
    0x0202_0202_0202_0202,
    0x0303_0303_0303_0303,
    0x0404_0404_0404_0404,
    0x0505_0505_0505_0505,
];

fn seg(i: usize) -> Segment {
    Segment {
        handle: H[i],
        length: L[i],
        offset: O[i],
    }
}

fn fixed(proc_: u32) -> Words {
    Words::new().ws(&[0xdead_beef, 1, 32, proc_])
}

fn msg(chunks: ChunkListsRepr) -> HeaderRepr {
    HeaderRepr {
        xid: 0xdead_beef,
        vers: 1,
        credit: 32,
        body: BodyRepr::Msg(chunks),
    }
}

fn check(repr: &HeaderRepr, expect: &[u8]) {
    assert_eq!(
        repr.buffer_len(),
        expect.len(),
        "encoded size known up front"
    );
    assert_eq!(repr.to_vec(), expect, "encoding");
    let h = Header::parse(expect, &DecodeLimits::default()).expect("decodes");
    assert_eq!(h.header_len, expect.len());
    assert_eq!(h.to_repr().as_ref(), Some(repr), "decoding");
}

/// §4.7: "after the four fixed fields ... simply three 32-bit fields that
/// contain zero".
#[test]
fn rfc8166_s4_7_no_chunks() {
    let expect = fixed(0).ws(&[0, 0, 0]).done();
    assert_eq!(expect.len(), MIN_HEADER_LEN);
    check(&msg(ChunkListsRepr::default()), &expect);
}

/// §4.7: a Read chunk of three read segments is
/// `1PHLOO 1PHLOO 1PHLOO 0`, same P in each.
#[test]
fn rfc8166_s4_7_read_chunk() {
    let p = 0x80;
    let mut w = fixed(0);
    for i in 0..3 {
        w = w.w(1).w(p).hloo(H[i], L[i], O[i]);
    }
    let expect = w.w(0).ws(&[0, 0]).done();
    let repr = msg(ChunkListsRepr {
        read_list: (0..3)
            .map(|i| ReadSegment {
                position: p,
                segment: seg(i),
            })
            .collect(),
        ..Default::default()
    });
    check(&repr, &expect);
    let h = Header::parse(&expect, &DecodeLimits::default()).unwrap();
    let chunks: Vec<_> = h.chunks().unwrap().read_list.chunks().collect();
    assert_eq!(chunks.len(), 1, "one Read chunk: segments share Position");
    assert_eq!(chunks[0].segment_count(), 3);
    assert_eq!(chunks[0].total_len(), 0x600);
}

/// §4.7: a Write chunk with three elements is `3 HLOO HLOO HLOO`; a Write
/// list with a three-segment and a two-segment chunk is
/// `1 3 HLOO HLOO HLOO 1 2 HLOO HLOO 0`.
#[test]
fn rfc8166_s4_7_write_list() {
    let mut w = fixed(0).w(0).w(1).w(3);
    for i in 0..3 {
        w = w.hloo(H[i], L[i], O[i]);
    }
    w = w.w(1).w(2);
    for i in 3..5 {
        w = w.hloo(H[i], L[i], O[i]);
    }
    let expect = w.w(0).w(0).done();
    let repr = msg(ChunkListsRepr {
        write_list: vec![
            WriteChunkRepr {
                segments: (0..3).map(seg).collect(),
            },
            WriteChunkRepr {
                segments: (3..5).map(seg).collect(),
            },
        ],
        ..Default::default()
    });
    check(&repr, &expect);
}

/// §4.7: a Reply chunk with two segments is `1 2 HLOO HLOO`.
#[test]
fn rfc8166_s4_7_reply_chunk() {
    let expect = fixed(1)
        .ws(&[0, 0, 1, 2])
        .hloo(H[0], L[0], O[0])
        .hloo(H[1], L[1], O[1])
        .done();
    let repr = HeaderRepr {
        xid: 0xdead_beef,
        vers: 1,
        credit: 32,
        body: BodyRepr::NoMsg(ChunkListsRepr {
            reply_chunk: Some(WriteChunkRepr {
                segments: (0..2).map(seg).collect(),
            }),
            ..Default::default()
        }),
    };
    check(&repr, &expect);
}

/// §4.7: empty Read list and empty Write list are each "a single 32-bit
/// zero"; an empty Write chunk (count 0) differs from an absent one, and an
/// unused chunk keeps its count (§3.4.6).
#[test]
fn rfc8166_s3_4_6_empty_and_unused_write_chunks() {
    let expect = fixed(0)
        .w(0)
        .ws(&[1, 0]) // empty Write chunk
        .ws(&[1, 1])
        .hloo(H[0], 0, O[0]) // unused Write chunk
        .ws(&[0, 0])
        .done();
    let repr = msg(ChunkListsRepr {
        write_list: vec![
            WriteChunkRepr::default(),
            WriteChunkRepr {
                segments: vec![Segment {
                    length: 0,
                    ..seg(0)
                }],
            },
        ],
        ..Default::default()
    });
    check(&repr, &expect);
    let h = Header::parse(&expect, &DecodeLimits::default()).unwrap();
    let c: Vec<_> = h.chunks().unwrap().write_list.chunks().collect();
    assert!(c[0].is_empty() && !c[0].is_unused());
    assert!(c[1].is_unused() && !c[1].is_empty());
}

/// §4.1.2 / §4.5.1: RDMA_ERROR bodies.
#[test]
fn rfc8166_s4_5_error_bodies() {
    let vers = fixed(4).ws(&[1, 1, 1]).done();
    check(
        &HeaderRepr::error(0xdead_beef, 1, 32, ErrorBody::Vers { low: 1, high: 1 }),
        &vers,
    );
    let chunk = fixed(4).w(2).done();
    assert_eq!(
        HeaderRepr::error(0xdead_beef, 1, 32, ErrorBody::Chunk).to_vec(),
        chunk
    );
    // ERR_CHUNK is 20 bytes, below the 28-byte minimum: accepted all the
    // same, as its own encoding requires.
    let h = Header::parse(&chunk, &DecodeLimits::default()).unwrap();
    assert_eq!(h.header_len, 20);
    assert!(matches!(h.body, Body::Error(ErrorBody::Chunk)));
}

/// The payload of RDMA_MSG is exactly what follows the header.
#[test]
fn rfc8166_s4_2_4_msg_payload_follows_header() {
    let mut b = fixed(0).ws(&[0, 0, 0]).done();
    b.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
    let h = Header::parse(&b, &DecodeLimits::default()).unwrap();
    assert_eq!(h.payload(), Some(&[1u8, 2, 3, 4, 5, 6, 7, 8][..]));
    assert_eq!(h.proc_(), Proc::Msg);
}
