//! MOUNT version 3 arguments and results from hostile bytes
//! (`MountArgs::decode_payload`, `MountRes::decode_payload`). Nothing may
//! panic; whatever decodes must re-encode to exactly the input stream.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nfs3::{MountArgs, MountRes, PayloadEncode};

mod common;

fuzz_target!(|data: &[u8]| {
    let Some((p, payload, stream)) = common::split(data) else {
        return;
    };
    let procedure = p % 8;
    if let Ok(args) = MountArgs::decode_payload(procedure, &payload) {
        assert_eq!(args.procedure(), procedure);
        assert_eq!(xdr::encode_to_bytes(&args).unwrap(), stream);
        assert_eq!(args.to_payload().flatten(), stream);
    }
    if let Ok(res) = MountRes::decode_payload(procedure, &payload) {
        assert_eq!(res.procedure(), procedure);
        assert_eq!(xdr::encode_to_bytes(&res).unwrap(), stream);
        assert_eq!(res.to_payload().flatten(), stream);
    }
});
