//! Our requester against Responders that read RFC 5666 the ways the
//! implementation-experience draft (draft-cel-nfsv4-rfc5666-implementation-
//! experience-02) §3.6–§3.7 reports: a Write chunk length
//! rounded up to a multiple of 4, and an unused Write chunk returned with
//! no segments, unmodified, or with zero lengths (RFC 8166 §3.4.6). Each
//! reply must complete its call (not be discarded, which leaves the call to
//! its timeout and leaks its credit), and the connection must serve the
//! next call.
//!
//! The Responder is a raw-verbs stand-in answering RDMATEST GET.

mod common;

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use common::stand_in;
use rdma_verbs::{
    Access, MemoryRegion, MrBuffer, ProtectionDomain, QueuePair, RemoteAddr, SendWr, Sge,
};
use rpcrdma::RdmaConfig;
use rpcrdma_proto::wire::{DecodeLimits, Header};

#[derive(Clone, Copy, Debug)]
enum Mode {
    /// RFC 8166: the data written, its exact length returned.
    Exact,
    /// RFC 5666 §3.7: the returned length includes the XDR roundup.
    Rounded,
    /// The servers of the draft's §3.6: a Write chunk for a result that is
    /// not a multiple of 4 must carry a segment for the XDR pad (else GET
    /// fails, the chunk returned unused), and zeros are written into it and
    /// counted in the returned length.
    PadSegment,
    /// GET fails (status 1); the Write chunk returned with no segments.
    FailZeroCount,
    /// GET fails; the Write chunk returned as offered.
    FailUnmodified,
    /// GET fails; RFC 8166's unused chunk (its segments, zero lengths).
    FailZeroLen,
}

/// Answers an RDMATEST GET call as `mode` says (calls asking for 5 bytes
/// or fewer always succeed, so a second call can check the connection).
fn answer(
    mode: Mode,
    msg: &[u8],
    pd: &stand_in::Pd,
    qp: &stand_in::Qp,
    n: u64,
) -> Option<Vec<stand_in::Mr>> {
    let h = Header::parse(msg, &DecodeLimits::default()).unwrap();
    let xid = h.xid;
    let payload = h.payload().unwrap();
    let word = |i: usize| u32::from_be_bytes(payload[i * 4..i * 4 + 4].try_into().unwrap());
    let (len, seed) = (word(10), word(11)); // get_args
    let chunk = h
        .chunks()
        .unwrap()
        .write_list
        .get(0)
        .expect("a Write chunk");
    let seg = chunk.segments().next().unwrap();
    let pad_seg = chunk.segments().nth(1);
    let mut keep = Vec::new();
    let mut w = vec![xid, 1, 8, 0, 0]; // RDMA_MSG, grant 8, empty Read list
    let mode = if len <= 5 { Mode::Exact } else { mode };
    let pad = (4 - len % 4) % 4;
    let mode = match (mode, pad_seg) {
        (Mode::PadSegment, None) if pad > 0 => Mode::FailZeroLen,
        (m, _) => m,
    };
    let results = match mode {
        Mode::PadSegment => {
            let mut data = rdmatest::pattern::pattern(seed, len as usize).to_vec();
            data.resize((len + pad) as usize, 0);
            let mr = pd
                .register(MrBuffer::Frozen(data.into()), Access::NONE)
                .unwrap();
            write(qp, 2 * n, &mr, 0, len, seg.handle, seg.offset)?;
            w.extend([1, 1 + u32::from(pad > 0)]);
            w.extend(segment(seg.handle, len, seg.offset));
            if let (Some(p), true) = (pad_seg, pad > 0) {
                // The zeros of the XDR pad, into the pad segment.
                write(qp, 2 * n + 1_000_000, &mr, len, pad, p.handle, p.offset)?;
                w.extend(segment(p.handle, pad, p.offset));
            }
            keep.push(mr);
            vec![0, len]
        }
        Mode::Exact | Mode::Rounded => {
            let data = rdmatest::pattern::pattern(seed, len as usize);
            let mr = pd.register(MrBuffer::Frozen(data), Access::NONE).unwrap();
            write(qp, 2 * n, &mr, 0, len, seg.handle, seg.offset)?;
            keep.push(mr);
            let returned = match mode {
                Mode::Exact => len,
                _ => len.next_multiple_of(4),
            };
            w.extend([1, 1]);
            w.extend(segment(seg.handle, returned, seg.offset));
            vec![0, len]
        }
        Mode::FailZeroCount => {
            w.extend([1, 0]);
            vec![1]
        }
        Mode::FailUnmodified | Mode::FailZeroLen => {
            let l = if matches!(mode, Mode::FailZeroLen) {
                0
            } else {
                seg.length
            };
            w.extend([1, 1]);
            w.extend(segment(seg.handle, l, seg.offset));
            vec![1]
        }
    };
    w.extend([0, 0]); // end of the Write list, no Reply chunk
    w.extend([xid, 1, 0, 0, 0, 0]); // RPC reply: accepted, AUTH_NONE, SUCCESS
    w.extend(results);
    keep.push(stand_in::send(pd, qp, 2 * n + 1, stand_in::words(&w))?);
    Some(keep)
}

/// RDMA-Writes `len` bytes of `mr` from `from` to the peer's segment.
fn write(
    qp: &stand_in::Qp,
    wr_id: u64,
    mr: &stand_in::Mr,
    from: u32,
    len: u32,
    rkey: u32,
    offset: u64,
) -> Option<()> {
    qp.post_send(SendWr::write(
        wr_id,
        vec![Sge::new(mr.lkey(), u64::from(from), len)],
        RemoteAddr { rkey, offset },
    ))
    .ok()
}

/// An RDMA segment as XDR words (handle, length, 64-bit offset).
fn segment(handle: u32, len: u32, offset: u64) -> [u32; 4] {
    [handle, len, (offset >> 32) as u32, offset as u32]
}

/// A GET of `len` bytes against a stand-in answering as `mode`, then a GET
/// of 5 bytes on the same connection: the first result (`Ok(len)` or the
/// error's text) and the client's reconnect count.
async fn get_then_get(mode: Mode, len: u32) -> (Result<usize, String>, u64) {
    get_then_get_with(mode, len, false).await
}

/// [`get_then_get`] with [`RdmaConfig::write_pad`] as given.
async fn get_then_get_with(mode: Mode, len: u32, write_pad: bool) -> (Result<usize, String>, u64) {
    let cfg = RdmaConfig {
        call_timeout: Duration::from_secs(2),
        write_pad,
        ..Default::default()
    };
    let c = stand_in::client_of(cfg, move |req, dev, _| {
        let mut n = 0;
        stand_in::serve(req, dev, move |msg, pd, qp| {
            n += 1;
            answer(mode, msg, pd, qp, n)
        })
    })
    .await;
    let t = rdmatest::RdmatestClient::new(c.clone());
    let first = match t.get(len, 3).await {
        Ok(d) => {
            assert_eq!(d, rdmatest::pattern::pattern(3, len as usize), "{mode:?}");
            Ok(d.len())
        }
        Err(e) => Err(e.to_string()),
    };
    let second = t.get(5, 4).await.expect("the next call");
    assert_eq!(second, rdmatest::pattern::pattern(4, 5));
    (first, c.stats().reconnects.load(Relaxed))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_write_chunk_length() {
    assert_eq!(get_then_get(Mode::Exact, 4097).await, (Ok(4097), 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rounded_up_write_chunk_length_is_the_result() {
    assert_eq!(get_then_get(Mode::Rounded, 4097).await, (Ok(4097), 0));
    assert_eq!(get_then_get(Mode::Rounded, 4098).await, (Ok(4098), 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unused_write_chunk_in_every_returned_form_completes_the_call() {
    for mode in [Mode::FailZeroCount, Mode::FailUnmodified, Mode::FailZeroLen] {
        let (first, reconnects) = get_then_get(mode, 4096).await;
        let e = first.expect_err("the GET failed at the server");
        // The service's status, not a timeout.
        assert!(e.contains("status"), "{mode:?}: {e}");
        assert_eq!(reconnects, 0, "{mode:?}");
    }
}

/// The draft's §3.6 servers need the pad segment: with `write_pad` the
/// requester offers it for unaligned results, the zeros written into it are
/// not part of the result (and the returned length that counts them is
/// read as RFC 5666 §3.7's roundup); aligned results need none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_pad_segment_for_servers_that_need_it() {
    for len in [4097, 4098, 4099] {
        assert_eq!(
            get_then_get_with(Mode::PadSegment, len, true).await,
            (Ok(len as usize), 0),
            "{len}"
        );
    }
    assert_eq!(
        get_then_get_with(Mode::PadSegment, 4096, true).await,
        (Ok(4096), 0)
    );
    // Without it (the default) such a server cannot answer an unaligned GET.
    let (first, reconnects) = get_then_get_with(Mode::PadSegment, 4097, false).await;
    assert!(first.expect_err("no pad segment").contains("status"));
    assert_eq!(reconnects, 0);
}
