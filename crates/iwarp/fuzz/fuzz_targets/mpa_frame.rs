//! MPA Request/Reply parser: never panics; what parses re-emits to bytes
//! that parse to the same value.
#![no_main]

use iwarp::wire::mpa::{frame_len_hint, Frame, MpaRepr};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let hint = frame_len_hint(data);
    match MpaRepr::parse_bytes(data) {
        Ok(r) => {
            // A parsed frame has a consistent length hint.
            let total = Frame::new_checked(data).unwrap().frame_len();
            assert_eq!(hint, Ok(Some(total)));
            assert!(r.private_data.len() <= 512);
            let v = r.to_vec().expect("re-emit");
            assert_eq!(MpaRepr::parse_bytes(&v).expect("re-parse"), r);
        }
        Err(_) => {
            if let Ok(Some(n)) = hint {
                assert!(n <= 20 + 512);
            }
        }
    }
});
