//! The NFS version 3 reply layout on hostile replies: reduced results
//! (peer bytes after the RPC reply header) and the Write list the
//! Responder returned, walked by `Nfs3Binding::locate` as the `rpcrdma`
//! client does before it splices Write-chunk data back. Nothing may panic;
//! every placement lies inside the results, right after the length word
//! that declares it, in a returned chunk that holds its data. The same
//! bytes are also given to `reply_estimate` as call arguments: it may
//! refuse them but never panic, and never estimates beyond the limits.
//!
//! Input layout: byte 0 = procedure (mod 24), byte 1 = Write chunk count
//! (mod 3); per chunk one byte of segment count (mod 4), then a 4-byte
//! length per segment; the rest are the reduced results.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nfs3::binding::{MountBinding, Nfs3Binding, MAX_DIR_REPLY};
use rpcrdma_proto::binding::{ArgsView, ReplyLayout, UpperLayerBinding};
use rpcrdma_proto::reassemble::WriteChunkCursor;
use rpcrdma_proto::wire::{Segment, WriteChunkRepr};

fuzz_target!(|data: &[u8]| {
    let Some((&[p, n], mut rest)) = data.split_first_chunk::<2>() else {
        return;
    };
    let proc_ = u32::from(p % 24);
    let mut write_list = Vec::new();
    for i in 0..n % 3 {
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

    let view = ArgsView {
        head: results,
        len: results.len() as u64,
    };
    if let Some(est) = Nfs3Binding.reply_estimate(proc_, view) {
        assert!(est.max_reduced_results <= 4 + u64::from(MAX_DIR_REPLY));
        assert!(est.ddp_results.len() <= 1);
        assert!(est.ddp_results.iter().all(|&l| l <= nfs3::types::MAX_IO_SIZE));
    }
    let _ = MountBinding.reply_estimate(proc_, view);

    let mut cursor = WriteChunkCursor::from_repr(&write_list);
    let Ok(placements) = Nfs3Binding.locate(proc_, results, &mut cursor) else {
        return;
    };
    assert!(placements.len() <= 1);
    for pl in &placements {
        assert!(pl.offset >= 4 && pl.offset <= results.len(), "{pl:?}");
        let word = u32::from_be_bytes(results[pl.offset - 4..pl.offset].try_into().unwrap());
        assert_eq!(word, pl.len);
        let chunk = write_list
            .get(pl.chunk)
            .expect("placement in an unreturned chunk");
        assert!(u64::from(pl.len) <= chunk.total_len());
    }
});
