//! MPA Request/Reply parser: never panics; what parses re-emits to bytes
//! that parse to the same value. Inputs whose first byte has bit 0 set get
//! a valid key prepended (byte 0 bit 1 picks Request or Reply), so the
//! fuzzer explores the flags, revision, length and IRD/ORD paths instead
//! of spending its time guessing the 16-byte key.
#![no_main]

use iwarp::wire::mpa::{frame_len_hint, Frame, MpaRepr, REP_KEY, REQ_KEY};
use libfuzzer_sys::fuzz_target;

fn check(data: &[u8]) {
    let hint = frame_len_hint(data);
    match MpaRepr::parse_bytes(data) {
        Ok(r) => {
            // A parsed frame has a consistent length hint.
            let total = Frame::new_checked(data).unwrap().frame_len();
            assert_eq!(hint, Ok(Some(total)));
            assert!(r.private_data.len() <= 512);
            let v = r.to_vec().expect("re-emit");
            assert_eq!(v.len(), total);
            assert_eq!(MpaRepr::parse_bytes(&v).expect("re-parse"), r);
        }
        Err(_) => {
            if let Ok(Some(n)) = hint {
                assert!(n <= 20 + 512);
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    match data.first() {
        Some(&b) if b & 1 != 0 => {
            let mut v = if b & 2 != 0 {
                REQ_KEY.to_vec()
            } else {
                REP_KEY.to_vec()
            };
            v.extend_from_slice(&data[1..]);
            check(&v);
        }
        _ => check(data),
    }
});
