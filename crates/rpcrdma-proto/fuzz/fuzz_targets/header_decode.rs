//! Fuzz the transport header decoder and every receive path built on it:
//! none may panic, and whatever decodes must re-encode to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rpcrdma_proto::binding::rdmatest::RdmatestBinding;
use rpcrdma_proto::marshal::OfferedChunks;
use rpcrdma_proto::reassemble::{DdpResult, WriteChunkCursor};
use rpcrdma_proto::validate::{check_call, check_reply, CallVerdict, ReplyVerdict};
use rpcrdma_proto::wire::{DecodeLimits, Header, Segment, WriteChunkRepr};

fuzz_target!(|data: &[u8]| {
    let limits = DecodeLimits::default();
    if let Ok(h) = Header::parse(data, &limits) {
        if let Some(c) = h.chunks() {
            let _ = c.read_list.chunks().map(|c| c.total_len()).sum::<u64>();
            let _ = c.write_list.chunks().filter(|c| c.is_unused()).count();
        }
        if let Some(r) = h.to_repr() {
            // Decoding then encoding reproduces the transport header.
            assert_eq!(r.buffer_len(), h.header_len);
            assert_eq!(&r.to_vec()[..], &data[..h.header_len]);
        }
    }
    if let CallVerdict::Deliver(mut c) = check_call(data, &limits, &RdmatestBinding, 8) {
        let _ = c.check_payload(data, &RdmatestBinding, 8);
        if c.reassembly.unreduced_len < 1 << 20 {
            let _ = c.reassembly.to_contiguous(data, &[data, data]);
        }
    }
    // Offered lengths that are not multiples of 4, so that the accepted
    // RFC 5666 forms of a returned Write chunk (no segments, fewer, a
    // rounded-up last length) are reached too.
    let seg = |length| Segment {
        length,
        ..Segment::default()
    };
    let offered = OfferedChunks {
        write_list: vec![WriteChunkRepr {
            segments: vec![seg(4093), seg(5)],
        }],
        reply_chunk: Some(WriteChunkRepr {
            segments: vec![seg(0)],
        }),
    };
    if let ReplyVerdict::Deliver(h) = check_reply(data, &limits, |_| Some(&offered)) {
        // Whatever was accepted, a result is never longer than offered.
        if let Some(c) = h.chunks() {
            let wl: Vec<_> = c.write_list.chunks().map(|w| w.to_repr()).collect();
            let total = wl.first().map_or(0, |w| w.total_len());
            assert!(total <= 4093 + 8);
            let mut cur = WriteChunkCursor::from_repr(&wl);
            for declared in [0, 5, 4093, 4098, 4100] {
                if let Ok(DdpResult::Chunk { len, .. }) = cur.next_result(declared) {
                    assert!(u64::from(len) <= total);
                }
            }
        }
    }
    // RFC 8797 private data may be searched for in any received bytes.
    if let Some(p) = rpcrdma_proto::private_data::PrivateData::find(data) {
        assert_eq!(
            rpcrdma_proto::private_data::PrivateData::find(&p.encode()),
            Some(p)
        );
    }
});
