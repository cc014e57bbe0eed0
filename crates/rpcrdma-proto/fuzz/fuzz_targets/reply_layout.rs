//! The Requester's reply layout on hostile replies: the reduced results of
//! a reply (peer bytes after the RPC reply header) and the Write list the
//! Responder returned, walked by the RDMATEST `ReplyLayout` with a
//! `WriteChunkCursor`, as the client does before it splices Write-chunk
//! data back into the results. Nothing may panic; every placement lies
//! inside the results, right after the length word that declares it, in
//! stream order, in a returned chunk that holds its data.
//!
//! Input layout: byte 0 = procedure (mod 6), byte 1 = Write chunk count
//! (mod 4); per chunk one byte of segment count (mod 4), then a 4-byte
//! length per segment; the rest are the reduced results.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rpcrdma_proto::binding::rdmatest::RdmatestBinding;
use rpcrdma_proto::binding::ReplyLayout;
use rpcrdma_proto::reassemble::WriteChunkCursor;
use rpcrdma_proto::wire::{Segment, WriteChunkRepr};

fuzz_target!(|data: &[u8]| {
    let Some((&[p, n], mut rest)) = data.split_first_chunk::<2>() else {
        return;
    };
    let proc_ = u32::from(p % 6);
    let mut write_list = Vec::new();
    for i in 0..n % 4 {
        let Some((&c, r)) = rest.split_first() else {
            return;
        };
        rest = r;
        let mut segments = Vec::new();
        for _ in 0..c % 4 {
            let Some((len, r)) = rest.split_first_chunk::<4>() else {
                return;
            };
            rest = r;
            segments.push(Segment {
                handle: u32::from(i) + 1,
                length: u32::from_be_bytes(*len),
                offset: 0,
            });
        }
        write_list.push(WriteChunkRepr { segments });
    }
    let results = rest;
    let mut cursor = WriteChunkCursor::from_repr(&write_list);
    let Ok(placements) = RdmatestBinding.locate(proc_, results, &mut cursor) else {
        return;
    };
    let mut at = 0usize;
    let mut last_chunk = None;
    for pl in &placements {
        // The client's own checks (`build_result`) would turn these into a
        // BadReply; a layout must never produce them.
        assert!(
            pl.offset >= at && pl.offset <= results.len(),
            "{pl:?} at {at}"
        );
        assert!(pl.offset >= 4);
        let word = u32::from_be_bytes(results[pl.offset - 4..pl.offset].try_into().unwrap());
        assert_eq!(word, pl.len);
        let chunk = write_list
            .get(pl.chunk)
            .expect("placement in an unreturned chunk");
        assert!(u64::from(pl.len) <= chunk.total_len());
        assert!(last_chunk < Some(pl.chunk));
        last_chunk = Some(pl.chunk);
        at = pl.offset;
    }
});
