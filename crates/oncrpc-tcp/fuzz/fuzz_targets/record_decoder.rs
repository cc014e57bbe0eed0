//! Fuzzes the record-marking decoder (RFC 5531 §11) with hostile streams.
//!
//! The first two input bytes choose small limits and the chunk size in
//! which the rest is fed; the decoder must never panic, never return a
//! record over the limit, and must decode a well-formed re-encoding of the
//! records it returned identically.
#![no_main]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use oncrpc_tcp::record::{RecordDecoder, RecordEncoder, RecordLimits};

fuzz_target!(|data: &[u8]| {
    let Some((&[a, b], rest)) = data.split_first_chunk::<2>() else {
        return;
    };
    let limits = RecordLimits {
        max_record_size: usize::from(a) * 64,
        max_fragments: usize::from(a % 16),
    };
    let chunk = usize::from(b).max(1);
    let mut decoder = RecordDecoder::new(limits);
    let mut buf = BytesMut::new();
    let mut records = Vec::new();
    'feed: for piece in rest.chunks(chunk) {
        buf.extend_from_slice(piece);
        loop {
            match decoder.decode(&mut buf) {
                Ok(Some(record)) => {
                    assert!(record.len() <= limits.max_record_size);
                    records.push(record.into_contiguous());
                }
                Ok(None) => break,
                Err(_) => break 'feed,
            }
        }
    }
    let _ = decoder.finish(&buf);

    // Round trip what was accepted through the encoder and a fresh decoder.
    let encoder = RecordEncoder::new(usize::from(b % 7) + 1);
    let mut wire = Vec::new();
    for r in &records {
        wire.extend(encoder.encode_to_vec(std::slice::from_ref(r)));
    }
    let mut again = RecordDecoder::default();
    let mut buf = BytesMut::from(&wire[..]);
    for r in &records {
        let got = again
            .decode(&mut buf)
            .expect("re-encoded stream")
            .expect("record");
        assert_eq!(got.into_contiguous(), Bytes::clone(r));
    }
    assert!(buf.is_empty());
});
