//! Running tshark with the project's options.

use crate::judge::{judge, Verdict};
use crate::parse::{parse_fields_line, parse_verbose, FrameMeta, ParseError, AGGREGATOR};
use std::collections::HashMap;
use std::io::BufReader;
use std::path::Path;
use std::process::{Command, Stdio};

/// The project's rule for running tshark on iWARP captures.
pub const OPTIONS: &[&str] = &[
    "-2",
    "-o",
    "iwarp_ddp_rdmap.reassemble_iwarp_rdma_send:FALSE",
    "-o",
    "tcp.try_heuristic_first:TRUE",
    "-o",
    "rpc.dissect_unknown_programs:TRUE",
];

/// Layers printed in full by the verbose pass (the others as one line).
pub const VERBOSE_LAYERS: &str = "iwarp_mpa,iwarp_ddp_rdmap,rpcordma,rpc";

/// Fields of the per-frame pass, in [`parse_fields_line`]'s order.
pub const FIELDS: &[&str] = &[
    "frame.number",
    "tcp.stream",
    "tcp.flags.reset",
    "_ws.expert.severity",
    "_ws.expert.message",
    "_ws.malformed",
];

/// Failures of running tshark or reading its output.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// tshark could not be started.
    #[error("cannot run {0}: {1}")]
    Spawn(String, std::io::Error),
    /// tshark exited with an error.
    #[error("tshark failed ({status}): {stderr}")]
    Failed {
        /// Exit status.
        status: std::process::ExitStatus,
        /// Its standard error.
        stderr: String,
    },
    /// Its output did not parse.
    #[error(transparent)]
    Parse(#[from] ParseError),
    /// The capture could not be re-segmented.
    #[error(transparent)]
    Resegment(#[from] crate::resegment::ResegmentError),
}

/// The tshark binary: `$WIRE_CHECK_TSHARK` or `tshark`.
pub fn program() -> String {
    std::env::var("WIRE_CHECK_TSHARK").unwrap_or_else(|_| "tshark".into())
}

fn run<T>(
    file: &Path,
    extra: &[String],
    consume: impl FnOnce(BufReader<std::process::ChildStdout>) -> Result<T, Error>,
) -> Result<T, Error> {
    let prog = program();
    let mut child = Command::new(&prog)
        .args(OPTIONS)
        .args(extra)
        .arg("-r")
        .arg(file)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::Spawn(prog.clone(), e))?;
    let stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    // Drain stderr on a thread so a chatty tshark cannot block.
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut s);
        s
    });
    let out = consume(BufReader::with_capacity(1 << 20, stdout));
    if out.is_err() {
        // Our parse failed first; tshark's exit status (a broken pipe) is
        // not the story.
        let _ = child.kill();
        let _ = child.wait();
        return out;
    }
    let status = child.wait().map_err(|e| Error::Spawn(prog, e))?;
    let stderr = err.join().unwrap_or_default();
    if !status.success() {
        return Err(Error::Failed { status, stderr });
    }
    out
}

/// The verbose pass: frames with their iWARP/RPC layers, streamed to `sink`.
pub fn verbose(file: &Path, sink: impl FnMut(crate::parse::Frame)) -> Result<u64, Error> {
    let extra = vec![
        "-V".to_string(),
        "-O".to_string(),
        VERBOSE_LAYERS.to_string(),
    ];
    run(file, &extra, |r| Ok(parse_verbose(r, sink)?))
}

/// The fields pass: TCP stream, RST and expert items of every frame.
pub fn fields(file: &Path) -> Result<HashMap<u64, FrameMeta>, Error> {
    let mut extra: Vec<String> = vec![
        "-T".into(),
        "fields".into(),
        "-E".into(),
        "occurrence=a".into(),
        "-E".into(),
        format!("aggregator={AGGREGATOR}"),
    ];
    for f in FIELDS {
        extra.push("-e".into());
        extra.push((*f).into());
    }
    run(file, &extra, |r| {
        let mut map = HashMap::new();
        for line in std::io::BufRead::lines(r) {
            let line = line.map_err(ParseError::from)?;
            if let Some(m) = parse_fields_line(&line) {
                // Frames without stream or expert items need no entry.
                if m.stream.is_some() || !m.expert.is_empty() {
                    map.insert(m.number, m);
                }
            }
        }
        Ok(map)
    })
}

/// Runs both passes on `file` as it is and judges it (frame numbers are
/// those of `file`).
pub fn judge_file(file: &Path) -> Result<Verdict, Error> {
    // The two passes are independent: run them side by side.
    let owned = file.to_path_buf();
    let meta = std::thread::spawn(move || fields(&owned));
    let mut frames = Vec::new();
    let verbose = verbose(file, |f| {
        // Keep only frames that carry something the judge looks at.
        if !f.items.is_empty() {
            frames.push(f)
        }
    });
    let meta = meta.join().expect("fields pass thread panicked")?;
    verbose?;
    Ok(judge(&frames, &meta))
}

/// Judges the capture `file`: re-segments it one MPA frame end per TCP
/// segment (see [`crate::resegment`]) into `<file>.fpdu.pcap`, has tshark
/// decode that, and reports failures with the frame numbers of `file`.
pub fn check_file(file: &Path) -> Result<Verdict, Error> {
    let mut seg = file.as_os_str().to_owned();
    seg.push(".fpdu.pcap");
    let seg = std::path::PathBuf::from(seg);
    let (map, stats) = crate::resegment::resegment(file, &seg)?;
    let v = judge_file(&seg);
    if std::env::var_os("WIRE_CHECK_KEEP").is_none() {
        let _ = std::fs::remove_file(&seg);
    }
    let mut v = v?;
    v.remap(&map);
    v.resegment = stats;
    Ok(v)
}
