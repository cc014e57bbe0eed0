//! Running tshark with the project's options.

use crate::judge::{judge, Verdict};
use crate::parse::{group, parse_fields_line, parse_verbose, FrameMeta, ParseError, AGGREGATOR};
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
    "_ws.expert.group",
];

/// Options of the TCP-analysis pass on the original capture: every TCP
/// payload is plain data (no dissector above TCP, no heuristics) and not
/// reassembled; only TCP's own expert items are wanted there.
pub const TCP_ONLY_OPTIONS: &[&str] = &[
    "-d",
    "tcp.port==1-65535,data",
    "-o",
    "tcp.desegment_tcp_streams:FALSE",
    "-Y",
    "_ws.expert",
];

/// Which expert items a fields pass keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpertItems {
    /// All of them.
    All,
    /// All but TCP's sequence analysis, which is switched off
    /// ([`RESEGMENTED_OPTIONS`]): for a re-packetized capture.
    NotTcpSequence,
    /// Only TCP's sequence analysis ([`TCP_ONLY_OPTIONS`]): the
    /// TCP-analysis pass on the original capture.
    TcpOnly,
}

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

/// Options added for a re-packetized capture: its TCP segmentation is not
/// the original's (ACKs may precede the bytes they acknowledge), so TCP's
/// sequence analysis would take delayed bytes for retransmissions and
/// withhold them from the dissectors; that analysis is done on the
/// original capture instead.
pub const RESEGMENTED_OPTIONS: &[&str] = &["-o", "tcp.analyze_sequence_numbers:FALSE"];

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
pub fn verbose(
    file: &Path,
    resegmented: bool,
    sink: impl FnMut(crate::parse::Frame),
) -> Result<u64, Error> {
    let mut extra = vec![
        "-V".to_string(),
        "-O".to_string(),
        VERBOSE_LAYERS.to_string(),
    ];
    if resegmented {
        extra.extend(RESEGMENTED_OPTIONS.iter().map(|s| s.to_string()));
    }
    run(file, &extra, |r| Ok(parse_verbose(r, sink)?))
}

/// The fields pass: TCP stream, RST and expert items of every frame.
pub fn fields(file: &Path, which: ExpertItems) -> Result<HashMap<u64, FrameMeta>, Error> {
    let mut extra: Vec<String> = vec![
        "-T".into(),
        "fields".into(),
        "-E".into(),
        "occurrence=a".into(),
        "-E".into(),
        format!("aggregator={AGGREGATOR}"),
    ];
    if which == ExpertItems::NotTcpSequence {
        extra.extend(RESEGMENTED_OPTIONS.iter().map(|s| s.to_string()));
    }
    if which == ExpertItems::TcpOnly {
        extra.extend(TCP_ONLY_OPTIONS.iter().map(|s| s.to_string()));
    }
    for f in FIELDS {
        extra.push("-e".into());
        extra.push((*f).into());
    }
    run(file, &extra, |r| {
        let mut map = HashMap::new();
        for line in std::io::BufRead::lines(r) {
            let line = line.map_err(ParseError::from)?;
            if let Some(mut m) = parse_fields_line(&line) {
                if which != ExpertItems::All {
                    // TCP's sequence analysis comes from the original
                    // capture only; what other dissectors on top of TCP
                    // make of iWARP bytes there is not wanted.
                    let tcp_only = which == ExpertItems::TcpOnly;
                    let keep: Vec<bool> = m
                        .groups
                        .iter()
                        .map(|g| (*g == group::SEQUENCE) == tcp_only)
                        .collect();
                    let mut k = keep.iter();
                    m.expert.retain(|_| *k.next().unwrap_or(&true));
                    let mut k = keep.iter();
                    m.groups.retain(|_| *k.next().unwrap_or(&true));
                }
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
    let meta = std::thread::spawn(move || fields(&owned, ExpertItems::All));
    let mut frames = Vec::new();
    let verbose = verbose(file, false, |f| {
        // Keep only frames that carry something the judge looks at.
        if !f.items.is_empty() {
            frames.push(f)
        }
    });
    let meta = meta.join().expect("fields pass thread panicked")?;
    verbose?;
    Ok(judge(&frames, &meta))
}

/// Judges the capture `file`: re-packetizes it one MPA frame per TCP
/// segment (see [`crate::resegment`]) into `<file>.fpdu.pcap` (in
/// `$WIRE_CHECK_WORK_DIR` when set; removed afterwards unless
/// `$WIRE_CHECK_KEEP` is set), has tshark
/// decode that, takes TCP's own analysis (lost, out-of-order and
/// retransmitted segments, windows, resets) from `file` itself, and reports
/// failures with the frame numbers of `file`.
pub fn check_file(file: &Path) -> Result<Verdict, Error> {
    // Next to the capture, or in $WIRE_CHECK_WORK_DIR (e.g. a disk when
    // the capture sits in a tmpfs that should not hold a second copy).
    let mut name = file.file_name().unwrap_or_default().to_owned();
    name.push(".fpdu.pcap");
    let seg = match std::env::var_os("WIRE_CHECK_WORK_DIR") {
        Some(d) => std::path::PathBuf::from(d).join(name),
        None => file.with_file_name(name),
    };
    let r = crate::resegment::resegment(file, &seg)?;
    let orig = file.to_path_buf();
    let tcp = std::thread::spawn(move || fields(&orig, ExpertItems::TcpOnly));
    let owned = seg.clone();
    let meta = std::thread::spawn(move || fields(&owned, ExpertItems::NotTcpSequence));
    let mut frames = Vec::new();
    let verbose = verbose(&seg, true, |f| {
        if !f.items.is_empty() {
            frames.push(f)
        }
    });
    let meta = meta.join().expect("fields pass thread panicked");
    let tcp = tcp.join().expect("TCP pass thread panicked");
    if std::env::var_os("WIRE_CHECK_KEEP").is_none() {
        let _ = std::fs::remove_file(&seg);
    }
    verbose?;
    let mut meta = meta?;
    // TCP's items of original frame n go to the first output frame
    // written for it (or after it).
    let last = r.stats.frames_out.max(1);
    for (n, m) in tcp? {
        let Some(&to) = usize::try_from(n)
            .ok()
            .and_then(|i| i.checked_sub(1))
            .and_then(|i| r.to_output.get(i))
        else {
            continue;
        };
        let to = to.min(last);
        let e = meta.entry(to).or_insert_with(|| FrameMeta {
            number: to,
            stream: m.stream,
            ..FrameMeta::default()
        });
        e.stream = e.stream.or(m.stream);
        e.reset |= m.reset;
        e.expert.extend(m.expert);
        e.groups.extend(m.groups);
    }
    let mut v = judge(&frames, &meta);
    if r.stats.incomplete_directions.is_empty() {
        v.streams_complete();
    }
    v.remap(&r.to_input);
    v.resegment = r.stats;
    Ok(v)
}
