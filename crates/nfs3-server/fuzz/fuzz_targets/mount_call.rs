//! Any MOUNT call with hostile arguments: never panics; MNT answers the
//! root handle only for "/" and the export path.
#![no_main]

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use nfs3::mount::Mountres3;
use nfs3_server::{Export, ExportOptions, MountService};
use oncrpc::{Call, Credential, OpaqueAuth, Payload, Service};

fn service() -> &'static (Arc<Export>, MountService) {
    static S: OnceLock<(Arc<Export>, MountService)> = OnceLock::new();
    S.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("nfs3-server-fuzz-mnt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let e = Export::open(&dir, ExportOptions::default()).unwrap();
        (e.clone(), MountService::new(e))
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&procedure, rest)) = data.split_first() else {
        return;
    };
    let (export, svc) = service();
    let call = Call {
        xid: 1,
        prog: 100_005,
        vers: 3,
        procedure: u32::from(procedure % 8),
        cred: Credential::None,
        verf: OpaqueAuth::none(),
        args: Payload::from(Bytes::copy_from_slice(rest)),
    };
    let rt = tokio_free_block_on(svc.handle(call));
    if let (Ok(reply), 1) = (rt, procedure % 8) {
        if let Ok(Mountres3::Ok(ok)) = nfs3::decode_payload::<Mountres3>(&reply) {
            assert_eq!(ok.fhandle.as_bytes(), &export.root_handle()[..]);
        }
    }
});

/// The MOUNT service never awaits anything: poll its future once.
fn tokio_free_block_on<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    match f.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(v) => v,
        std::task::Poll::Pending => panic!("MOUNT procedure did not complete in one poll"),
    }
}
