//! Interoperability with independent ONC RPC implementations (Debian
//! packages rpcbind, rpcsvc-proto and libtirpc-dev): `rpcinfo` probes our
//! server, and a C client built from `rpcgen` stubs over libtirpc calls it.
//!
//! These tests fail, with the install command in the message, when a tool is
//! missing: `scripts/test.sh` installs them.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::Server;

/// Finds `tool` on PATH or in the sbin directories (rpcinfo lives in
/// /usr/sbin, which is not always on a user's PATH).
fn find_tool(tool: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs: Vec<PathBuf> = std::env::split_paths(&path).collect();
    dirs.extend(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from));
    dirs.into_iter()
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
        .unwrap_or_else(|| missing(tool))
}

fn missing(what: &str) -> ! {
    panic!(
        "interop test prerequisite {what:?} is missing: install it with \
         `apt-get install -y rpcbind rpcsvc-proto libtirpc-dev gcc` \
         (scripts/test.sh does this)"
    )
}

fn interop_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/interop")
}

/// `h1.h2.h3.h4.p1.p2` (RFC 5665 universal address) of a server.
fn uaddr(server: &Server) -> String {
    let port = server.addr.port();
    format!("{}.{}.{}", server.addr.ip(), port >> 8, port & 0xff)
}

fn rpcinfo(server: &Server, prog: u32, vers: u32) -> (bool, String, String) {
    let out = Command::new(find_tool("rpcinfo"))
        .args(["-a", &uaddr(server), "-T", "tcp"])
        .args([prog.to_string(), vers.to_string()])
        .output()
        .expect("run rpcinfo");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn rpcinfo_sees_rdmatest_ready_and_waiting() {
    let server = Server::start(&[]);
    // NULL procedure of program 536891972 version 1, no rpcbind involved.
    let (ok, stdout, stderr) = rpcinfo(&server, 536_891_972, 1);
    assert!(ok, "rpcinfo failed:\n{stdout}\n{stderr}");
    assert!(
        stdout.contains("program 536891972 version 1 ready and waiting"),
        "{stdout}"
    );
    // A version we do not serve: PROG_MISMATCH with our range, as rpcinfo
    // understands it.
    let (ok, stdout, stderr) = rpcinfo(&server, 536_891_972, 2);
    assert!(!ok, "{stdout}");
    assert!(
        stderr.contains("low version = 1, high version = 1"),
        "{stdout}\n{stderr}"
    );
    // A program we do not serve: PROG_UNAVAIL.
    let (ok, stdout, stderr) = rpcinfo(&server, 536_891_973, 1);
    assert!(!ok, "{stdout}");
    assert!(stderr.contains("Program unavailable"), "{stdout}\n{stderr}");
}

/// Generates the stubs with rpcgen and compiles the C client; returns the
/// executable (inside `dir`).
fn build_c_client(dir: &Path) -> PathBuf {
    let rpcgen = find_tool("rpcgen");
    let cc = find_tool("cc");
    if !Path::new("/usr/include/tirpc/rpc/rpc.h").is_file() {
        missing("/usr/include/tirpc/rpc/rpc.h (libtirpc-dev)");
    }
    for f in ["rdmatest.x", "rdmatest_client.c"] {
        std::fs::copy(interop_dir().join(f), dir.join(f)).expect("copy interop sources");
    }
    let status = Command::new(rpcgen)
        .arg("rdmatest.x")
        .current_dir(dir)
        .status()
        .expect("run rpcgen");
    assert!(status.success(), "rpcgen failed");
    let exe = dir.join("rdmatest_client");
    let out = Command::new(cc)
        .args(["-O2", "-I/usr/include/tirpc", "-o"])
        .arg(&exe)
        .args([
            "rdmatest_client.c",
            "rdmatest_clnt.c",
            "rdmatest_xdr.c",
            "-ltirpc",
        ])
        .current_dir(dir)
        .output()
        .expect("run cc");
    assert!(
        out.status.success(),
        "compiling the C client failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

#[test]
fn libtirpc_client_from_rpcgen_stubs() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_c_client(dir.path());
    // Single-fragment records both ways; then many small fragments both
    // ways (libtirpc's SENDSZ bounds its fragments, --max-fragment ours).
    for (server_fragment, sendsz) in [(None, "0"), (Some("4000"), "4000")] {
        let mut args = vec!["--max-data", "4MiB"];
        if let Some(f) = server_fragment {
            args.extend(["--max-fragment", f]);
        }
        let server = Server::start(&args);
        let ip = server.addr.ip().to_string();
        let port = server.addr.port().to_string();
        let out = Command::new(&exe)
            .args([&ip, &port, &(4u32 << 20).to_string(), sendsz])
            .output()
            .expect("run the C client");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "C client (server fragments {server_fragment:?}, sendsz {sendsz}) failed ({}):\n{stdout}\n{stderr}",
            out.status
        );
        assert!(stdout.contains("all checks passed"), "{stdout}");
        for needle in [
            "ECHO 4194304 ok",
            "PUT 4194304 ok",
            "GET 4194304 ok",
            "GET 4194305 ok (status 1)",
            "GET2 1000 3001 ok",
        ] {
            assert!(stdout.contains(needle), "missing {needle:?} in\n{stdout}");
        }
    }
}
