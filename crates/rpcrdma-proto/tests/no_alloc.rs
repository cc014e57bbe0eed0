//! Decoding never touches the heap: a counting global allocator (in its own
//! test binary) sees zero allocations while headers are decoded and walked.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static ALLOCS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; the
// only addition is a relaxed counter increment.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

use rpcrdma_proto::wire::*;

fn headers() -> Vec<Vec<u8>> {
    let seg = |i: u32| Segment {
        handle: i,
        length: 4096,
        offset: i as u64 * 4096,
    };
    let msg = |c| {
        let mut v = HeaderRepr {
            xid: 1,
            vers: 1,
            credit: 8,
            body: BodyRepr::Msg(c),
        }
        .to_vec();
        v.extend_from_slice(&[0; 40]);
        v
    };
    vec![
        msg(ChunkListsRepr::default()),
        msg(ChunkListsRepr {
            read_list: (0..4)
                .map(|i| ReadSegment {
                    position: 40,
                    segment: seg(i),
                })
                .collect(),
            ..Default::default()
        }),
        msg(ChunkListsRepr {
            write_list: (0..2)
                .map(|c| WriteChunkRepr {
                    segments: (0..16).map(|s| seg(c * 16 + s)).collect(),
                })
                .collect(),
            reply_chunk: Some(WriteChunkRepr {
                segments: vec![seg(99)],
            }),
            ..Default::default()
        }),
        HeaderRepr::error(1, 1, 1, ErrorBody::Vers { low: 1, high: 1 }).to_vec(),
        vec![0xff; 12],
    ]
}

#[test]
fn decode_does_not_allocate() {
    let hs = headers();
    let limits = DecodeLimits::default();
    let before = ALLOCS.load(Ordering::Relaxed);
    let mut total = 0u64;
    for h in &hs {
        match Header::parse(h, &limits) {
            Ok(d) => {
                total += d.header_len as u64;
                if let Some(c) = d.chunks() {
                    for r in c.read_list.chunks() {
                        total += r.total_len() + r.position() as u64;
                    }
                    for s in c.read_list.segments() {
                        total += s.segment.offset;
                    }
                    for w in c.write_list.chunks() {
                        total += w.total_len() + w.is_unused() as u64;
                    }
                    if let Some(r) = c.reply_chunk {
                        total += r.total_len();
                    }
                }
                total += d.payload().map_or(0, |p| p.len() as u64);
            }
            Err(e) => total += e.fixed.is_some() as u64,
        }
    }
    let after = ALLOCS.load(Ordering::Relaxed);
    assert!(total > 0);
    assert_eq!(
        after - before,
        0,
        "decoding allocated {} times",
        after - before
    );

    // The counter works: an owned copy allocates.
    let before = ALLOCS.load(Ordering::Relaxed);
    let r = Header::parse(&hs[2], &limits).unwrap().to_repr();
    assert!(r.is_some());
    assert!(ALLOCS.load(Ordering::Relaxed) > before);
}
