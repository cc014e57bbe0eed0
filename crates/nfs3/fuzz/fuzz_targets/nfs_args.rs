//! NFS version 3 arguments of every procedure from hostile bytes, as a
//! server decodes a call: `Nfs3Args::decode_payload` over a payload of one
//! or several pieces (see `common::split`). Nothing may panic; whatever
//! decodes must re-encode to exactly the input stream (the decoders are
//! strict: zero padding, booleans 0/1, known discriminants), both through
//! `XdrEncode` and through `PayloadEncode`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nfs3::{Nfs3Args, PayloadEncode};

mod common;

fuzz_target!(|data: &[u8]| {
    let Some((p, payload, stream)) = common::split(data) else {
        return;
    };
    let procedure = p % 24;
    let Ok(args) = Nfs3Args::decode_payload(procedure, &payload) else {
        return;
    };
    assert_eq!(args.procedure(), procedure);
    let flat = xdr::encode_to_bytes(&args).expect("encode");
    // Mknoddata3 of a type without an arm re-encodes as decoded.
    assert_eq!(flat, stream, "{args:?}");
    assert_eq!(args.to_payload().flatten(), stream);
});
