//! `rpcrdma nfsd` and `rpcrdma nfs`: the real binary as server and client
//! on free loopback ports, every client command over rdma:// and tcp://,
//! checked against the files on disk, with exit statuses 0, 1 and 2.

mod common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::BIN;

/// A running `rpcrdma nfsd`; killed on drop.
struct Nfsd {
    child: Child,
    rdma: SocketAddr,
    tcp: SocketAddr,
    mount: SocketAddr,
    line: String,
}

/// The address after `word` in the ready line.
fn addr_after(line: &str, word: &str) -> Option<SocketAddr> {
    let words: Vec<&str> = line.split_whitespace().collect();
    words
        .windows(2)
        .find(|w| w[0] == word)
        .and_then(|w| w[1].trim_end_matches([',', ')']).parse().ok())
}

impl Nfsd {
    fn start(export: &Path, extra: &[&str]) -> Nfsd {
        let mut child = Command::new(BIN)
            .args(["nfsd", "--export"])
            .arg(export)
            .args([
                "--listen",
                "127.0.0.1:0",
                "--tcp-listen",
                "127.0.0.1:0",
                "--mount-listen",
                "127.0.0.1:0",
            ])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn rpcrdma nfsd");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .expect("read the listening line");
        assert!(line.contains("listening"), "unexpected first line {line:?}");
        Nfsd {
            rdma: addr_after(&line, "rdma").expect("rdma listener"),
            tcp: addr_after(&line, "tcp").expect("tcp listener"),
            mount: addr_after(&line, "mount").expect("mount listener"),
            child,
            line,
        }
    }

    fn urls(&self) -> [(String, String); 2] {
        [
            (
                format!("rdma://{}/", self.rdma),
                self.mount.port().to_string(),
            ),
            (
                format!("tcp://{}/", self.tcp),
                self.mount.port().to_string(),
            ),
        ]
    }

    /// SIGTERM, then the exit status (within 10 s).
    fn stop(mut self) -> std::process::ExitStatus {
        let ok = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        assert!(ok.success());
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            assert!(Instant::now() < deadline, "nfsd did not exit after SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Nfsd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `rpcrdma nfs URL --mount-port M ARGS...`.
fn nfs(url: &str, mount_port: &str, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(["nfs", url, "--mount-port", mount_port])
        .args(args)
        .output()
        .expect("run rpcrdma nfs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs and asserts exit status 0; returns stdout.
fn ok(url: &str, m: &str, args: &[&str]) -> String {
    let out = nfs(url, m, args);
    assert!(
        out.status.success(),
        "rpcrdma nfs {url} {args:?}: {}\nstdout: {}\nstderr: {}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// Runs and asserts exit status `code`; returns stderr.
fn fails(url: &str, m: &str, args: &[&str], code: i32) -> String {
    let out = nfs(url, m, args);
    assert_eq!(
        out.status.code(),
        Some(code),
        "rpcrdma nfs {url} {args:?}\nstdout: {}\nstderr: {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stderr)
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_be_bytes()[2])
        .collect()
}

struct Dirs {
    _tmp: tempfile::TempDir,
    export: PathBuf,
    local: PathBuf,
}

fn dirs() -> Dirs {
    let tmp = tempfile::tempdir().unwrap();
    let export = tmp.path().join("export");
    let local = tmp.path().join("local");
    std::fs::create_dir(&export).unwrap();
    std::fs::create_dir(&local).unwrap();
    Dirs {
        _tmp: tmp,
        export,
        local,
    }
}

#[test]
fn every_command_over_rdma_and_tcp() {
    let d = dirs();
    // The tests may run as root: serve without squashing root, as the
    // files are checked as the test's user.
    let server = Nfsd::start(&d.export, &["--no-root-squash"]);
    assert!(server.line.contains("export "), "{}", server.line);
    std::fs::write(d.export.join("hello.txt"), b"hello, nfs\n").unwrap();
    for (i, (url, m)) in server.urls().iter().enumerate() {
        let (url, m) = (url.as_str(), m.as_str());
        let dir = format!("dir{i}");

        // mkdir, ls, stat.
        ok(url, m, &["mkdir", &dir]);
        assert!(d.export.join(&dir).is_dir());
        let ls = ok(url, m, &["ls", "/"]);
        assert!(ls.lines().any(|l| l == dir), "{ls}");
        assert!(ls.lines().any(|l| l == "hello.txt"), "{ls}");
        let long = ok(url, m, &["ls", "-l", "/"]);
        let line = long.lines().find(|l| l.ends_with(" hello.txt")).unwrap();
        assert!(line.starts_with("-rw"), "{line}");
        assert!(line.contains(" 11 "), "size in {line}");
        let stat = ok(url, m, &["stat", "hello.txt"]);
        assert!(stat.contains("Type: regular file"), "{stat}");
        assert!(stat.contains("Size: 11 "), "{stat}");

        // cat.
        assert_eq!(ok(url, m, &["cat", "hello.txt"]), "hello, nfs\n");

        // put and get, several calls in flight, odd size.
        let size = 3 * 1024 * 1024 + 12_345;
        let data = pattern(size);
        let src = d.local.join(format!("src{i}"));
        std::fs::write(&src, &data).unwrap();
        let remote = format!("{dir}/big");
        let put = ok(url, m, &["put", src.to_str().unwrap(), &remote]);
        assert!(put.contains("MiB/s") && put.contains("committed"), "{put}");
        assert_eq!(std::fs::read(d.export.join(&remote)).unwrap(), data);
        let dst = d.local.join(format!("dst{i}"));
        let get = ok(url, m, &["get", &remote, dst.to_str().unwrap()]);
        assert!(get.contains("MiB/s"), "{get}");
        assert_eq!(std::fs::read(&dst).unwrap(), data);

        // put over an existing, longer file truncates it.
        std::fs::write(&src, b"short").unwrap();
        ok(url, m, &["put", src.to_str().unwrap(), &remote]);
        assert_eq!(std::fs::read(d.export.join(&remote)).unwrap(), b"short");

        // ln -s, readlink, mv, rm, rmdir.
        let link = format!("{dir}/link");
        ok(url, m, &["ln", "-s", "../hello.txt", &link]);
        assert_eq!(
            std::fs::read_link(d.export.join(&link)).unwrap(),
            Path::new("../hello.txt")
        );
        assert_eq!(ok(url, m, &["readlink", &link]), "../hello.txt\n");
        let long = ok(url, m, &["ls", "-l", &dir]);
        assert!(long.contains("link -> ../hello.txt"), "{long}");
        let moved = format!("{dir}/moved");
        ok(url, m, &["mv", &remote, &moved]);
        assert!(!d.export.join(&remote).exists());
        assert_eq!(std::fs::read(d.export.join(&moved)).unwrap(), b"short");
        let err = fails(url, m, &["rmdir", &dir], 1);
        assert!(err.contains("NFS3ERR_NOTEMPTY"), "{err}");
        ok(url, m, &["rm", &moved]);
        ok(url, m, &["rm", &link]);
        ok(url, m, &["rmdir", &dir]);
        assert!(!d.export.join(&dir).exists());

        // df.
        let df = ok(url, m, &["df"]);
        assert!(df.contains("rtmax 1048576"), "{df}");

        // Errors name the NFS status: exit 1.
        let err = fails(url, m, &["stat", "missing"], 1);
        assert!(err.contains("NFS3ERR_NOENT"), "{err}");
        let err = fails(url, m, &["cat", "missing/x"], 1);
        assert!(err.contains("NFS3ERR_NOENT"), "{err}");
        let err = fails(url, m, &["mkdir", "hello.txt"], 1);
        assert!(err.contains("NFS3ERR_EXIST"), "{err}");
        let err = fails(url, m, &["rm", "hello.txt/x"], 1);
        assert!(err.contains("NFS3ERR_NOTDIR"), "{err}");

        // Usage errors: exit 2.
        fails(url, m, &["ln", "target", "path"], 2);
        fails(url, m, &["frobnicate"], 2);
        fails(url, m, &["get", "only-one"], 2);
    }
    assert!(server.stop().success(), "nfsd exits 0 on SIGTERM");
}

#[test]
fn report_shows_chunks_over_rdma() {
    let d = dirs();
    let server = Nfsd::start(&d.export, &["--no-root-squash"]);
    std::fs::write(d.export.join("f"), pattern(1 << 20)).unwrap();
    let (url, m) = &server.urls()[0];
    let dst = d.local.join("f");
    let out = nfs(url, m, &["--report", "get", "f", dst.to_str().unwrap()]);
    assert!(out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.lines()
            .any(|l| l.contains("NFS READ") && l.contains("Write chunk 0: 1 MiB")),
        "{err}"
    );
    let src = d.local.join("f");
    let out = nfs(url, m, &["--report", "put", src.to_str().unwrap(), "g"]);
    assert!(out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.lines()
            .any(|l| l.contains("NFS WRITE") && l.contains("1 Read chunk 1 MiB")),
        "{err}"
    );
    assert!(err.lines().any(|l| l.contains("NFS COMMIT")), "{err}");
    let out = nfs(url, m, &["--report", "ls", "/"]);
    let err = text(&out.stderr);
    assert!(
        err.lines()
            .any(|l| l.contains("NFS READDIRPLUS") && l.contains("Reply chunk offered")),
        "{err}"
    );
    assert!(
        err.lines()
            .any(|l| l.contains("NFS FSINFO") && l.contains("Short Call (RDMA_MSG, Send")),
        "{err}"
    );
}

#[test]
fn usage_errors_exit_2() {
    let out = common::rpcrdma(&["nfs", "udp://127.0.0.1:1/x", "ls"]);
    assert_eq!(out.status.code(), Some(2));
    let out = common::rpcrdma(&["nfs", "tcp://127.0.0.1/x", "ls"]);
    assert_eq!(out.status.code(), Some(2));
    let out = common::rpcrdma(&["nfsd", "--listen", "127.0.0.1:0"]);
    assert_eq!(out.status.code(), Some(2), "--export is required");
    let out = common::rpcrdma(&["nfsd", "--export", "/tmp"]);
    assert_eq!(out.status.code(), Some(2), "--listen is required");
}

#[test]
fn tcp_url_finds_mount_on_the_nfs_port_without_rpcbind() {
    let d = dirs();
    let server = Nfsd::start(&d.export, &["--no-root-squash"]);
    std::fs::write(d.export.join("a"), b"via the nfs port").unwrap();
    // No --mount-port: rpcbind on 127.0.0.1 may or may not run, and may
    // not know this server; either way MOUNT is found (rpcbind does not
    // have it, so the NFS port, which also serves MOUNT, is tried).
    let out = Command::new(BIN)
        .args(["nfs", &format!("tcp://{}/", server.tcp), "cat", "a"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(out.stdout, b"via the nfs port");
}

#[test]
fn read_only_and_root_squash_are_refused() {
    let d = dirs();
    std::fs::write(d.export.join("f"), b"data").unwrap();
    let server = Nfsd::start(&d.export, &["--read-only", "--no-root-squash"]);
    for (url, m) in server.urls() {
        let err = fails(&url, &m, &["mkdir", "x"], 1);
        assert!(err.contains("NFS3ERR_ROFS"), "{err}");
        let err = fails(&url, &m, &["rm", "f"], 1);
        assert!(err.contains("NFS3ERR_ROFS"), "{err}");
        assert_eq!(ok(&url, &m, &["cat", "f"]), "data");
    }
    assert!(d.export.join("f").exists() && !d.export.join("x").exists());
    drop(server);

    // Root squashed (the default): uid 0 becomes 65534, which may not
    // write in a directory owned by someone else with mode 0755.
    let server = Nfsd::start(&d.export, &[]);
    let (url, m) = &server.urls()[1];
    let out = nfs(url, m, &["--uid", "0", "--gid", "0", "mkdir", "x"]);
    if anon_may_write(&d.export) {
        // The export belongs to uid 65534 or is world-writable: nothing
        // to deny here.
        return;
    }
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("NFS3ERR_ACCES"));
    assert!(!d.export.join("x").exists());
}

/// Whether the anonymous uid 65534 may write in `dir` by its mode bits.
fn anon_may_write(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(dir).unwrap();
    m.uid() == 65534 || m.mode() & 0o002 != 0
}

#[test]
fn bench_read_and_write_json() {
    let d = dirs();
    let server = Nfsd::start(&d.export, &["--no-root-squash"]);
    std::fs::write(d.export.join("f"), pattern(1 << 20)).unwrap();
    for (url, m) in server.urls() {
        for op in ["read", "write"] {
            let out = nfs(
                &url,
                &m,
                &[
                    "bench",
                    op,
                    "--file",
                    "f",
                    "--size",
                    "4k",
                    "--random",
                    "--depth",
                    "4",
                    "--seconds",
                    "0.5",
                    "--json",
                ],
            );
            assert!(out.status.success(), "{}", text(&out.stderr));
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(v["proc"], op.to_uppercase());
            assert_eq!(v["size"], 4096);
            assert_eq!(v["depth"], 4);
            assert_eq!(v["errors"], 0);
            assert!(v["ops"].as_u64().unwrap() > 0, "{v}");
            assert_eq!(
                v["bytes"].as_u64().unwrap(),
                4096 * v["ops"].as_u64().unwrap()
            );
            for key in [
                "ops_per_sec",
                "mb_per_sec",
                "latency_us",
                "cpu_seconds",
                "transport",
            ] {
                assert!(v.get(key).is_some(), "{key} in {v}");
            }
        }
        // A size over the file: exit 1 and one JSON object.
        let out = nfs(
            &url,
            &m,
            &[
                "bench",
                "read",
                "--file",
                "f",
                "--size",
                "2MiB",
                "--seconds",
                "1",
                "--json",
            ],
        );
        assert_eq!(out.status.code(), Some(1));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["errors"], 1);
    }
}

#[test]
fn a_read_that_fits_inline_has_no_write_chunk() {
    let d = dirs();
    std::fs::write(d.export.join("f"), pattern(64 * 1024)).unwrap();
    let server = Nfsd::start(&d.export, &["--no-root-squash", "--inline", "8192"]);
    let (url, m) = &server.urls()[0];
    let run = |extra: &[&str]| {
        let mut args = vec!["--report"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&[
            "bench",
            "read",
            "--file",
            "f",
            "--size",
            "4k",
            "--calls",
            "2",
            "--seconds",
            "5",
        ]);
        let out = nfs(url, m, &args);
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stderr)
            .lines()
            .filter(|l| l.contains("NFS READ"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    // Inline threshold 8192 both ways: a 4 KiB READ reply fits.
    let reads = run(&["--inline", "8192"]);
    assert_eq!(reads.len(), 2, "{reads:?}");
    for l in &reads {
        assert!(!l.contains("Write chunk"), "{l}");
        assert!(l.contains("Short Reply (RDMA_MSG, Send 4.15 KiB"), "{l}");
    }
    // Threshold 4096 (the client's default): it does not; Write chunk.
    let reads = run(&[]);
    assert_eq!(reads.len(), 2, "{reads:?}");
    for l in &reads {
        assert!(l.contains("Write chunk 0: 4 KiB"), "{l}");
    }
}
