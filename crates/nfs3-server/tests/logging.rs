//! Refused attacks are logged at warn level with the procedure and the
//! caller's credential (as sent and as squashed).

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use common::*;
use nfs3::types::*;
use nfs3_server::ExportOptions;

#[derive(Clone, Default)]
struct Buf(Arc<Mutex<Vec<u8>>>);

impl Write for Buf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn refusals_name_the_procedure_and_the_credential() {
    let buf = Buf::default();
    let w = buf.clone();
    tracing_subscriber::fmt()
        .with_writer(move || w.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .init();
    let fx = Fx::with(ExportOptions::default());
    std::fs::write(fx.path("private"), b"x").unwrap();
    chown(&fx.path("private"), 1000, 1000);
    chmod(&fx.path("private"), 0o600);
    let r = fx.root_fh();
    let p = fx.fh(&sys(1000, 1000, &[]), &r, "private").await;
    // Permission denial for another user.
    assert_eq!(
        st(&fx.read(&sys(1001, 1002, &[]), &p, 0, 10).await),
        Nfsstat3::Acces
    );
    // Squashed root.
    assert_eq!(st(&fx.read(&root(), &p, 0, 10).await), Nfsstat3::Acces);
    // A forged handle.
    let forged = NfsFh3::new(Bytes::from_static(&[7u8; 20])).unwrap();
    assert_eq!(
        st(&fx.getattr(&sys(1003, 1003, &[]), &forged).await),
        Nfsstat3::Badhandle
    );
    // An escape attempt by name.
    assert_eq!(
        st(&fx.lookup(&sys(1004, 1004, &[]), &r, "../outside").await),
        Nfsstat3::Acces
    );
    let log = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    let line = |needle: &str| {
        log.lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no log line with {needle:?} in:\n{log}"))
            .to_string()
    };
    let l = line("sys:1001/1002");
    assert!(
        l.contains("WARN") && l.contains("READ") && l.contains("NFS3ERR_ACCES"),
        "{l}"
    );
    let l = line("sys:0/0 as 65534/65534");
    assert!(l.contains("WARN") && l.contains("READ"), "{l}");
    let l = line("sys:1003/1003");
    assert!(
        l.contains("GETATTR") && l.contains("NFS3ERR_BADHANDLE"),
        "{l}"
    );
    let l = line("sys:1004/1004");
    assert!(l.contains("LOOKUP") && l.contains("'/'"), "{l}");
}
