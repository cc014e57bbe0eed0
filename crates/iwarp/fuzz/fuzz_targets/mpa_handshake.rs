//! The MPA handshake (RFC 5044 §7, RFC 6581) on a hostile peer: the
//! connection-setup reader's framing loop, the responder's
//! `parse_request` → `accept` / `reject`, and the initiator's
//! `process_reply`, on arbitrary bytes. Nothing may panic; the reader never
//! reads past the 532-byte frame buffer; what is negotiated never exceeds
//! the local limits; every frame we send back parses as the Reply it is.
//!
//! Input layout: byte 0 = local configuration (bit 0 CRC, bit 1 revision 2,
//! bit 2 peer-to-peer, bit 3 prepend a Request key, bit 4 prepend a Reply
//! key, bits 5..7 read-size seed); bytes 1..5 = local IRD and ORD (big
//! endian, any 16-bit value); byte 5 = length of our own private data; the
//! rest is what the peer sends. The keys are prepended on request so that
//! the fuzzer explores flags, revision, lengths and the IRD/ORD block
//! instead of guessing 16 bytes.
#![no_main]

use iwarp::handshake::{
    accept, frame_complete, parse_request, process_reply, reject, MpaConfig, MAX_FRAME,
};
use iwarp::wire::mpa::{frame_len_hint, FrameKind, MpaRepr, REP_KEY, REQ_KEY};
use libfuzzer_sys::fuzz_target;

/// The device's frame reader (`read_frame_within`) without the socket: the
/// same buffer, the same `need` bookkeeping, reads of varying sizes.
fn read_frame(stream: &[u8], seed: usize) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; MAX_FRAME];
    let mut have = 0;
    let mut need = 20;
    let mut pos = 0;
    let mut turn = 0;
    loop {
        // `stream.read(&mut buf[have..need])` reads 1..=need-have bytes.
        assert!(have < need && need <= MAX_FRAME, "have {have} need {need}");
        let room = need - have;
        let n = room.min(seed * (1 + turn % 5)).min(stream.len() - pos);
        turn += 1;
        if n == 0 {
            return None; // connection closed
        }
        buf[have..have + n].copy_from_slice(&stream[pos..pos + n]);
        pos += n;
        have += n;
        match frame_complete(&buf[..have]) {
            Ok(Some(len)) => {
                assert!(len <= have);
                buf.truncate(len);
                return Some(buf);
            }
            Ok(None) => {
                if have >= 20 {
                    need = frame_len_hint(&buf[..have])
                        .ok()
                        .flatten()
                        .unwrap_or(MAX_FRAME);
                }
            }
            Err(_) => return None,
        }
    }
}

fn check_reply_frame(frame: &[u8], want_reject: bool) {
    let r = MpaRepr::parse_bytes(frame).expect("we sent an unparsable Reply");
    assert_eq!(r.kind, FrameKind::Reply);
    assert_eq!(r.reject, want_reject);
    assert!(!r.markers);
    assert_eq!(frame_complete(frame).unwrap(), Some(frame.len()));
}

fuzz_target!(|data: &[u8]| {
    let Some((head, rest)) = data.split_first_chunk::<6>() else {
        return;
    };
    let cfg = MpaConfig {
        crc: head[0] & 1 != 0,
        revision: if head[0] & 2 != 0 { 2 } else { 1 },
        peer_to_peer: head[0] & 4 != 0,
    };
    let ird = u16::from_be_bytes([head[1], head[2]]);
    let ord = u16::from_be_bytes([head[3], head[4]]);
    let our_pd: Vec<u8> = (0..head[5]).collect();
    let seed = usize::from(head[0] >> 5) * 3 + 1;
    let mut stream = Vec::with_capacity(rest.len() + 16);
    if head[0] & 8 != 0 {
        stream.extend_from_slice(REQ_KEY);
    } else if head[0] & 16 != 0 {
        stream.extend_from_slice(REP_KEY);
    }
    stream.extend_from_slice(rest);

    let Some(frame) = read_frame(&stream, seed) else {
        return;
    };
    assert!(frame.len() <= MAX_FRAME);

    // Responder.
    if let Ok(req) = parse_request(&frame) {
        assert!(req.private_data.len() <= 512);
        check_reply_frame(&reject(&req, &stream), true);
        match accept(&cfg, &req, ird, ord, &our_pd) {
            Ok((reply, neg)) => {
                assert!(!req.markers);
                check_reply_frame(&reply, false);
                assert_eq!(neg.private_data, req.private_data);
                assert_eq!(neg.crc, cfg.crc || req.crc);
                assert!(neg.ord <= ord && neg.ird <= ird);
                if let Some(io) = req.ird_ord {
                    // Our ORD never exceeds the initiator's IRD (RFC 6581).
                    assert!(neg.ord <= io.ird);
                    let r = MpaRepr::parse_bytes(&reply).unwrap();
                    let rio = r.ird_ord.expect("enhanced Request, plain Reply");
                    assert_eq!((rio.ird, rio.ord), (neg.ird, neg.ord));
                }
            }
            Err((Some(f), _)) => check_reply_frame(&f, true),
            Err((None, _)) => {}
        }
    }

    // Initiator.
    if let Ok(neg) = process_reply(&cfg, ird, ord, &frame) {
        assert!(neg.private_data.len() <= 512);
        assert!(neg.ord <= ord);
        assert_eq!(neg.ird, ird);
        // CRC if either side asks for it (RFC 5044 §7.1).
        assert!(neg.crc || !cfg.crc);
        if cfg.revision == 2 {
            assert_eq!(neg.revision, 2);
            assert_eq!(neg.rtr.is_some(), cfg.peer_to_peer);
        } else {
            assert_eq!(neg.revision, 1);
            assert!(neg.rtr.is_none());
        }
    }
});
