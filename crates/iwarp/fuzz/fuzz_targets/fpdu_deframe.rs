//! FPDU deframer: arbitrary bytes cut into arbitrary chunks never panic and
//! decode exactly like the contiguous parser; headers and control payloads
//! (Read Request, Terminate) go through their parsers.
#![no_main]

use iwarp::wire::fpdu::{parse_fpdu, Deframer, Event};
use iwarp::wire::rdmap::{RdmapRepr, ReadRequestRepr};
use iwarp::wire::terminate::TerminateRepr;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let crc = data[0] & 1 != 0;
    let chunk = (data[1] as usize % 64) + 1;
    let max = if data[0] & 2 != 0 {
        65535
    } else {
        1 + (data[0] as usize) * 8
    };
    let stream = &data[2..];

    // Incremental.
    let mut d = Deframer::new(crc, max);
    let mut got: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    let mut ended = 0;
    let mut failed = false;
    'outer: for c in stream.chunks(chunk) {
        let mut input = c;
        loop {
            match d.feed(input) {
                Err(_) => {
                    failed = true;
                    break 'outer;
                }
                Ok((n, ev)) => {
                    input = &input[n..];
                    match ev {
                        Some(Event::Header(h)) => {
                            assert!(h.ulpdu_len() <= max);
                            let _ = h.ddp();
                            let _ = h.rdmap();
                            got.push((h.raw().to_vec(), Vec::new()));
                        }
                        Some(Event::Payload { offset, data }) => {
                            let p = &mut got.last_mut().unwrap().1;
                            assert_eq!(offset, p.len());
                            p.extend_from_slice(data);
                        }
                        Some(Event::End) => ended = got.len(),
                        None => break,
                    }
                }
            }
        }
    }
    got.truncate(ended);

    // Contiguous.
    let mut off = 0;
    let mut want = Vec::new();
    let mut cfailed = false;
    loop {
        match parse_fpdu(&stream[off..], crc, max) {
            Ok(Some(f)) => {
                let hl = f.header_len();
                let mut raw = stream[off..off + 2].to_vec();
                raw.extend_from_slice(&f.ulpdu[..hl]);
                if let Ok(r) = RdmapRepr::parse_ulpdu(f.ulpdu) {
                    match r {
                        RdmapRepr::RdmaReadRequest { .. } => {
                            let _ = ReadRequestRepr::parse(f.payload());
                        }
                        RdmapRepr::Terminate { .. } => {
                            let _ = TerminateRepr::parse(f.payload());
                        }
                        _ => {}
                    }
                }
                want.push((raw, f.payload().to_vec()));
                off += f.wire_len;
            }
            Ok(None) => break,
            Err(_) => {
                cfailed = true;
                break;
            }
        }
    }
    assert_eq!(got, want);
    assert_eq!(failed, cfailed);
});
