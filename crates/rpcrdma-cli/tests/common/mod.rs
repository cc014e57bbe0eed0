//! Shared test support: run the real `rpcrdma` binary as a server and a client.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

/// Path of the binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_rpcrdma");

/// A running `rpcrdma serve`; killed on drop.
pub struct Server {
    child: Child,
    /// The TCP address it announced (the RDMA one if it serves RDMA only).
    pub addr: SocketAddr,
    /// The RDMA listener's address, if any.
    pub rdma: Option<SocketAddr>,
    /// The TCP listener's address, if any.
    pub tcp: Option<SocketAddr>,
    /// The whole "listening" line.
    pub line: String,
}

impl Server {
    /// Starts `rpcrdma serve --tcp-listen 127.0.0.1:0 EXTRA...` and waits
    /// for its "listening" line.
    pub fn start(extra: &[&str]) -> Server {
        Self::start_on("127.0.0.1:0", extra)
    }

    /// Starts `rpcrdma serve --tcp-listen LISTEN EXTRA...`.
    pub fn start_on(listen: &str, extra: &[&str]) -> Server {
        let mut args = vec!["--tcp-listen", listen];
        args.extend_from_slice(extra);
        Self::serve(&args)
    }

    /// Starts `rpcrdma serve --listen 127.0.0.1:0 EXTRA...` (RPC-over-RDMA).
    pub fn start_rdma(extra: &[&str]) -> Server {
        let mut args = vec!["--listen", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        Self::serve(&args)
    }

    /// Starts `rpcrdma serve ARGS...` and waits for its one "listening"
    /// line, which names each listener as `rdma ADDR` or `tcp ADDR`.
    pub fn serve(args: &[&str]) -> Server {
        let mut child = Command::new(BIN)
            .arg("serve")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn rpcrdma serve");
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read the listening line");
        assert!(line.contains("listening"), "unexpected first line {line:?}");
        let words: Vec<&str> = line.split_whitespace().collect();
        let after = |transport: &str| {
            words
                .windows(2)
                .find(|w| w[0] == transport)
                .and_then(|w| w[1].trim_end_matches([',', ')']).parse::<SocketAddr>().ok())
        };
        let (rdma, tcp) = (after("rdma"), after("tcp"));
        let addr = tcp
            .or(rdma)
            .unwrap_or_else(|| panic!("no address in {line:?}"));
        Server {
            child,
            addr,
            rdma,
            tcp,
            line,
        }
    }

    /// `tcp://ADDR` (or `rdma://ADDR` for an RDMA-only server).
    pub fn url(&self) -> String {
        match self.tcp {
            Some(a) => format!("tcp://{a}"),
            None => self.rdma_url(),
        }
    }

    /// `rdma://ADDR`.
    pub fn rdma_url(&self) -> String {
        format!("rdma://{}", self.rdma.expect("an RDMA listener"))
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` (e.g. "TERM") and waits up to 10 s for the exit.
    pub fn stop(mut self, signal: &str) -> ExitStatus {
        let ok = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("run kill");
        assert!(ok.success(), "kill -{signal} failed");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "server did not exit after SIG{signal}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits up to `limit` for the process to exit; `None` if it has not.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `rpcrdma ARGS...` to completion.
pub fn rpcrdma(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run rpcrdma")
}

/// Runs `rpcrdma call URL ARGS...`, asserts success and "verified OK";
/// returns stdout.
pub fn call_ok(url: &str, args: &[&str]) -> String {
    let mut all = vec!["call", url];
    all.extend_from_slice(args);
    let out = rpcrdma(&all);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "rpcrdma {all:?} failed ({}):\nstdout: {stdout}\nstderr: {stderr}",
        out.status
    );
    assert!(
        stdout.contains("verified OK"),
        "no verification in {stdout:?}"
    );
    stdout
}
