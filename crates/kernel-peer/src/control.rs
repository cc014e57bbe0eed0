//! The host end of the guest's control channel (the guest's
//! `/kernel-harness/agent.sh` on its second serial port). One request at a
//! time, line by line:
//!
//! - host: `X <token> <base64 of a shell script>`
//! - guest: `O <token>`, the script's output in base64 lines, then
//!   `R <token> <exit status>`.
//!
//! Lines before the guest's `O` for this token (an earlier request's
//! leftovers after a timeout) are skipped.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use base64::Engine;

/// Runs `script` in the guest, copies its output to stdout, and returns its
/// exit status.
pub fn run(socket: &Path, script: &str, timeout: Duration) -> anyhow::Result<u8> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut s = connect(socket)?;
    let token = format!(
        "{:x}{:x}",
        std::process::id(),
        Instant::now().elapsed().as_nanos() ^ u128::from(nanos())
    );
    let mut line = format!("X {token} {}\n", b64.encode(script));
    s.write_all(line.as_bytes())?;
    let deadline = Instant::now() + timeout;
    let mut r = BufReader::new(s.try_clone()?);
    let mut out = Vec::new();
    let mut inside = false;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            std::io::stdout().write_all(&out)?;
            bail!("no answer from the guest within {timeout:?}");
        }
        s.set_read_timeout(Some(left))?;
        line.clear();
        let n = match r.read_line(&mut line) {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(e) => return Err(e).context("reading the control channel"),
        };
        if n == 0 {
            bail!("the guest closed the control channel");
        }
        let l = line.trim_end_matches(['\r', '\n']);
        let mut w = l.splitn(3, ' ');
        match (w.next(), w.next(), w.next()) {
            (Some("O"), Some(t), None) if t == token => inside = true,
            (Some("R"), Some(t), Some(rc)) if t == token && inside => {
                std::io::stdout().write_all(&out)?;
                let rc: u32 = rc.trim().parse().context("exit status")?;
                return Ok(rc.min(255) as u8);
            }
            _ if inside => {
                let d = b64
                    .decode(l.trim())
                    .with_context(|| format!("bad output line from the guest: {l:?}"))?;
                out.extend_from_slice(&d);
            }
            _ => {}
        }
    }
}

fn nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// Connects, retrying briefly (qemu creates the socket as it starts).
fn connect(socket: &Path) -> anyhow::Result<UnixStream> {
    let mut last = None;
    for _ in 0..50 {
        match UnixStream::connect(socket) {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(last.expect("tried")).with_context(|| format!("connecting to {}", socket.display()))
}
