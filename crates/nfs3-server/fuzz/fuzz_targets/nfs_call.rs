//! Any NFSv3 call with hostile arguments and credential against a small
//! export in a temporary directory: never panics, and nothing outside the
//! export changes (a file beside it keeps its content).
//!
//! Layout: [procedure][flags][uid u32][args...]. When flag bit 0 is set the
//! arguments start with the root handle, so the fuzzer reaches past handle
//! resolution quickly.
#![no_main]

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use nfs3::procs::Nfs3Args;
use nfs3_server::cred::Caller;
use nfs3_server::{Export, ExportOptions};
use oncrpc::{AuthSys, Credential, Payload};

struct World {
    _tmp: PathBuf,
    outside: PathBuf,
    export: Arc<Export>,
}

fn world() -> &'static World {
    static W: OnceLock<World> = OnceLock::new();
    W.get_or_init(|| {
        let tmp = std::env::temp_dir().join(format!("nfs3-server-fuzz-{}", std::process::id()));
        let root = tmp.join("export");
        std::fs::create_dir_all(root.join("d/e")).unwrap();
        std::fs::write(root.join("f"), b"file").unwrap();
        std::fs::write(root.join("d/g"), vec![1u8; 10_000]).unwrap();
        let _ = std::os::unix::fs::symlink("../outside", root.join("l"));
        let outside = tmp.join("outside");
        std::fs::write(&outside, b"outside").unwrap();
        let export = Export::open(
            &root,
            ExportOptions {
                root_squash: false,
                max_io: 65536,
                ..Default::default()
            },
        )
        .unwrap();
        World {
            _tmp: tmp,
            outside,
            export,
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let w = world();
    let [procedure, flags, u0, u1, u2, u3, rest @ ..] = data else {
        return;
    };
    let uid = u32::from_be_bytes([*u0, *u1, *u2, *u3]) % 2048;
    let mut args = Vec::new();
    if flags & 1 != 0 {
        let fh = w.export.root_handle();
        args.extend_from_slice(&(fh.len() as u32).to_be_bytes());
        args.extend_from_slice(&fh);
    }
    args.extend_from_slice(rest);
    let Ok(call) = Nfs3Args::decode_payload(
        u32::from(*procedure % 23),
        &Payload::from(Bytes::from(args)),
    ) else {
        return;
    };
    let cred = if flags & 2 != 0 {
        Credential::None
    } else {
        Credential::Sys(AuthSys::new(0, "fuzz", uid, uid, vec![uid / 2]).unwrap())
    };
    let who = Caller::map(&cred, w.export.options());
    let _ = nfs3_server::nfs::execute(&w.export, &who, call);
    assert_eq!(std::fs::read(&w.outside).unwrap(), b"outside");
});
