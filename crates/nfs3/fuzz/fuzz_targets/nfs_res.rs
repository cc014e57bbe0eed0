//! NFS version 3 results of every procedure from hostile bytes, as a
//! client decodes a reply: `Nfs3Res::decode_payload` over a payload of one
//! or several pieces, a DDP piece among them (see `common::split`).
//! Nothing may panic; whatever decodes must re-encode to exactly the input
//! stream.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nfs3::{Nfs3Res, PayloadEncode};

mod common;

fuzz_target!(|data: &[u8]| {
    let Some((p, payload, stream)) = common::split(data) else {
        return;
    };
    let procedure = p % 24;
    let Ok(res) = Nfs3Res::decode_payload(procedure, &payload) else {
        return;
    };
    assert_eq!(res.procedure(), procedure);
    let flat = xdr::encode_to_bytes(&res).expect("encode");
    assert_eq!(flat, stream, "{res:?}");
    assert_eq!(res.to_payload().flatten(), stream);
});
