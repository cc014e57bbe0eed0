//! Our client against an independent server: the RDMATEST program built
//! from `rpcgen` server stubs over libtirpc (tests/interop/rdmatest_server.c),
//! called through `TcpChannel` and the verifying `RdmatestClient`.
//!
//! Needs rpcgen (rpcsvc-proto), a C compiler and libtirpc-dev; fails with
//! the install command when they are missing (`scripts/test.sh` installs
//! them).

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use oncrpc::{Channel, Payload, Request, RpcError};
use oncrpc_tcp::{ClientConfig, TcpChannel};
use rdmatest::{pattern, ClientError, RdmatestClient};

const MAX_DATA: u32 = 4 << 20;

fn find_tool(tool: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs: Vec<PathBuf> = std::env::split_paths(&path).collect();
    dirs.extend(["/usr/sbin", "/usr/bin", "/bin"].map(PathBuf::from));
    dirs.into_iter()
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
        .unwrap_or_else(|| missing(tool))
}

fn missing(what: &str) -> ! {
    panic!(
        "interop test prerequisite {what:?} is missing: install it with \
         `apt-get install -y rpcsvc-proto libtirpc-dev gcc` (scripts/test.sh does this)"
    )
}

/// Generates the stubs and compiles the C server into `dir`.
fn build_c_server(dir: &Path) -> PathBuf {
    let rpcgen = find_tool("rpcgen");
    let cc = find_tool("cc");
    if !Path::new("/usr/include/tirpc/rpc/rpc.h").is_file() {
        missing("/usr/include/tirpc/rpc/rpc.h (libtirpc-dev)");
    }
    let interop = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/interop");
    for f in ["rdmatest.x", "rdmatest_server.c"] {
        std::fs::copy(interop.join(f), dir.join(f)).expect("copy interop sources");
    }
    for (flag, out) in [
        ("-h", "rdmatest.h"),
        ("-c", "rdmatest_xdr.c"),
        ("-m", "rdmatest_svc.c"),
    ] {
        let status = Command::new(&rpcgen)
            .args([flag, "-o", out, "rdmatest.x"])
            .current_dir(dir)
            .status()
            .expect("run rpcgen");
        assert!(status.success(), "rpcgen {flag} failed");
    }
    let exe = dir.join("rdmatest_server");
    let out = Command::new(cc)
        .args(["-O2", "-I/usr/include/tirpc", "-o"])
        .arg(&exe)
        .args([
            "rdmatest_server.c",
            "rdmatest_svc.c",
            "rdmatest_xdr.c",
            "-ltirpc",
        ])
        .current_dir(dir)
        .output()
        .expect("run cc");
    assert!(
        out.status.success(),
        "compiling the C server failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// The running C server; killed on drop.
struct CServer {
    child: Child,
    addr: SocketAddr,
}

impl CServer {
    fn start(exe: &Path, sendsz: u32) -> CServer {
        let mut child = Command::new(exe)
            .args([MAX_DATA.to_string(), sendsz.to_string()])
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the C server");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("unexpected C server output {line:?}"));
        CServer { child, addr }
    }
}

impl Drop for CServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn exercise(addr: SocketAddr, max_fragment: usize) {
    let channel = TcpChannel::connect_with(
        addr,
        ClientConfig {
            max_fragment_size: max_fragment,
            default_timeout: Some(Duration::from_secs(30)),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let client = Arc::new(RdmatestClient::new(channel));
    client.null().await.unwrap();
    for (i, len) in [0usize, 1, 5, 4096, 100_003, MAX_DATA as usize]
        .into_iter()
        .enumerate()
    {
        let seed = i as u32 * 40;
        client.echo(pattern::pattern(seed, len)).await.unwrap();
        client.put(pattern::pattern(seed + 1, len)).await.unwrap();
        client.get(len as u32, seed + 2).await.unwrap();
    }
    client.get2(1000, 3001, 9).await.unwrap();
    client.get2(0, 70_000, 250).await.unwrap();
    client.sleep(5).await.unwrap();
    // GET above the maximum: status 1.
    let r = client.get(MAX_DATA + 1, 0).await;
    assert!(matches!(r, Err(ClientError::GetStatus(1))), "{r:?}");
    // Errors libtirpc produces, as our client types them.
    let ch = client.channel();
    let r = ch
        .call(Request::new(rdmatest::PROGRAM, 1, 42, Payload::new()))
        .await;
    assert!(matches!(r, Err(RpcError::ProcUnavail)), "{r:?}");
    let r = ch
        .call(Request::new(rdmatest::PROGRAM, 2, 0, Payload::new()))
        .await;
    assert!(
        matches!(r, Err(RpcError::ProgMismatch { low: 1, high: 1 })),
        "{r:?}"
    );
    // Many outstanding calls on the one connection (libtirpc answers them
    // one at a time, in order).
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..50u32 {
        let client = client.clone();
        calls.spawn(async move {
            match i % 3 {
                0 => client.get(i * 1000, i).await.map(|_| ()),
                1 => client
                    .put(pattern::pattern(i, (i * 777) as usize))
                    .await
                    .map(|_| ()),
                _ => client.get2(i * 10, i * 20, i).await.map(|_| ()),
            }
        });
    }
    while let Some(r) = calls.join_next().await {
        r.unwrap().unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_client_against_a_libtirpc_server() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_c_server(dir.path());
    tokio::time::timeout(Duration::from_secs(120), async {
        // One fragment per record both ways; then small fragments both ways
        // (libtirpc's SENDSZ bounds its reply fragments).
        let server = CServer::start(&exe, 0);
        exercise(server.addr, oncrpc_tcp::record::DEFAULT_MAX_FRAGMENT_SIZE).await;
        let server = CServer::start(&exe, 4000);
        exercise(server.addr, 4000).await;
    })
    .await
    .expect("interop test did not finish within 120 s");
}
