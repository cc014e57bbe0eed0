//! Interoperability with an independent client: libnfs's `nfs-ls`,
//! `nfs-cp` and `nfs-cat` (Debian `libnfs-utils`) against the services
//! served over `oncrpc_tcp::TcpServer` on 127.0.0.1, MOUNT and NFS on the
//! same port (`nfs://127.0.0.1/<export>?nfsport=P&mountport=P&version=3`).
//!
//! Fails with the install command when the tools are missing
//! (`scripts/test.sh` installs them), as the project's other interop tests
//! do.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use nfs3_server::{Export, ExportOptions, MountService, NfsService};
use oncrpc::Dispatcher;
use oncrpc_tcp::{ServerConfig, TcpServer};

fn find_tool(tool: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs: Vec<PathBuf> = std::env::split_paths(&path).collect();
    dirs.extend(["/usr/bin", "/bin"].map(PathBuf::from));
    dirs.into_iter()
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "interop test prerequisite {tool:?} is missing: install it with \
                 `apt-get install -y libnfs-utils` (scripts/test.sh does this)"
            )
        })
}

fn url(addr: SocketAddr, export: &Path, rel: &str) -> String {
    let port = addr.port();
    format!(
        "nfs://127.0.0.1{}{rel}?nfsport={port}&mountport={port}&version=3",
        export.display()
    )
}

/// Run a tool off the async threads; its stdout, or a panic with stderr.
async fn run(tool: PathBuf, args: Vec<String>) -> Vec<u8> {
    let shown = format!("{} {}", tool.display(), args.join(" "));
    let out = tokio::task::spawn_blocking(move || Command::new(tool).args(args).output())
        .await
        .unwrap()
        .expect("run the tool");
    assert!(
        out.status.success(),
        "{shown} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nfs_ls_cp_cat_against_the_server() {
    let (ls, cp, cat) = (
        find_tool("nfs-ls"),
        find_tool("nfs-cp"),
        find_tool("nfs-cat"),
    );
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("export");
    std::fs::create_dir(&dir).unwrap();
    let big: Vec<u8> = (0..3_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    std::fs::write(dir.join("big.bin"), &big).unwrap();
    std::fs::write(dir.join("hello.txt"), b"hello over NFSv3\n").unwrap();
    std::fs::create_dir(dir.join("sub")).unwrap();
    std::fs::write(dir.join("sub/inner"), b"inner").unwrap();
    // Root squash is on (the default): the client's uid 0 writes as 65534.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();

    let export = Export::open(&dir, ExportOptions::default()).unwrap();
    let dispatcher = Dispatcher::builder()
        .service(NfsService::new(export.clone()))
        .service(MountService::new(export.clone()))
        .build();
    let server = TcpServer::bind("127.0.0.1:0", Arc::new(dispatcher), ServerConfig::default())
        .await
        .unwrap();
    let addr = server.local_addr().unwrap();
    let stop = server.shutdown_handle();
    let task = tokio::spawn(server.run());

    // nfs-ls lists the export.
    let listing = String::from_utf8(run(ls.clone(), vec![url(addr, &dir, "/")]).await).unwrap();
    for n in ["big.bin", "hello.txt", "sub"] {
        assert!(listing.contains(n), "nfs-ls output lacks {n}:\n{listing}");
    }
    let listing =
        String::from_utf8(run(ls, vec!["-R".into(), url(addr, &dir, "/")]).await).unwrap();
    assert!(listing.contains("inner"), "recursive listing:\n{listing}");

    // nfs-cat reads a file.
    let out = run(cat.clone(), vec![url(addr, &dir, "/hello.txt")]).await;
    assert_eq!(out, b"hello over NFSv3\n");
    // (libnfs mounts the URL's directory part: only top-level files here,
    // since MNT grants the export itself and not its subdirectories.)
    let out = run(cat, vec![url(addr, &dir, "/big.bin")]).await;
    assert!(out == big, "nfs-cat of big.bin differs");

    // nfs-cp from the server to a local file.
    let local = tmp.path().join("copy.bin");
    run(
        cp.clone(),
        vec![url(addr, &dir, "/big.bin"), local.display().to_string()],
    )
    .await;
    assert_eq!(std::fs::read(&local).unwrap(), big);

    // nfs-cp from a local file to the server.
    let up: Vec<u8> = big.iter().rev().copied().collect();
    let src = tmp.path().join("up.bin");
    std::fs::write(&src, &up).unwrap();
    run(
        cp,
        vec![src.display().to_string(), url(addr, &dir, "/uploaded.bin")],
    )
    .await;
    assert_eq!(std::fs::read(dir.join("uploaded.bin")).unwrap(), up);
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        std::fs::metadata(dir.join("uploaded.bin")).unwrap().uid(),
        65534
    );

    export.sync_all().unwrap();
    stop.shutdown();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), task).await;
}
