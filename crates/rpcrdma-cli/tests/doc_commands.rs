//! The shell commands shown in the user documentation run here, against the
//! `rpcrdma` binary this package builds, and their output is checked.
//!
//! Every fenced block tagged `sh` or `console` in the pages of [`DOCS`] is
//! picked up automatically (add a page to the list to cover its commands):
//!
//! - `sh` blocks: each line is a command (a trailing `# comment` is dropped,
//!   a trailing `\` joins lines); it must exit 0.
//! - `console` blocks: lines starting with `$ ` are commands; the lines after
//!   one, up to the next `$ `, are its expected stdout (then stderr). A line
//!   `...` stands for any number of lines and `[..]` for any text within a
//!   line. A command ending in `# exit N` must exit with status N.
//! - A block whose info string says `checked-by=NAME` is run by the test
//!   `NAME` instead (for commands that need root or a Linux kernel client);
//!   this test only checks that a `fn NAME` exists under `crates/` or a
//!   shell function `NAME()` (a kernel scenario) under `scripts/`.
//! - Blocks of any other tag are not run, and in these pages a line of such
//!   a block may not look like a shell prompt (`$ `): a command shown must be
//!   a command run.
//!
//! How commands run: through `bash -c` in the workspace root, with `rpcrdma`
//! on `PATH` meaning the binary under test. Every loopback port written in a
//! page (`127.0.0.1:20049`, `[::1]:20050`, `--mount-port 20048`) is replaced, in commands and
//! expected output alike, by a free port picked for this run. A command
//! ending in `&` runs in the background until `kill %N` (SIGTERM to job N,
//! numbered as a shell numbers them), which must make it exit 0; jobs still
//! running at the end of the page are stopped the same way. A background command's
//! expected output is matched against its first lines (a server's ready
//! line). `cargo` is not run from here: `cargo run … -p rpcrdma-cli -- ARGS`
//! runs `rpcrdma ARGS`, `cargo run … -p P --example E` runs that example's
//! binary (built by `cargo test`, or built here if missing), and
//! `cargo build`/`cargo install` must name a workspace package with a
//! binary. A measurement (`rpcrdma bench`, `rpcrdma nfs URL bench`, the
//! demo's benchmark) runs with a call bound added (`--calls`,
//! `--bench-calls`, [`LOAD_CALLS`]) unless the page gives one: the traffic
//! of the test run is then bounded by counts, not by how fast the machine
//! is, so the wire capture of the whole run (scripts/test.sh) holds it. `scripts/test.sh` is not run (it is the whole suite, this test
//! included): `.ci/run` must run exactly it, and every `VAR=value` before it
//! must be a variable the script reads.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The pages whose commands run here.
const DOCS: &[&str] = &["README.md", "docs/cli.md"];

/// The binary under test.
const BIN: &str = env!("CARGO_BIN_EXE_rpcrdma");

/// Calls per measurement of a documented benchmark command (see the module
/// doc): 16 calls of 1 MiB are 16 MiB on the wire.
const LOAD_CALLS: &str = "16";

/// Longest time one foreground command may take.
const COMMAND_LIMIT: Duration = Duration::from_secs(240);

/// Longest wait for a background command's first lines of output.
const READY_LIMIT: Duration = Duration::from_secs(60);

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

/// One fenced block of a page.
#[derive(Debug)]
struct Block {
    /// 1-based line of the opening fence.
    line: usize,
    /// The info string after the fence (`sh`, `console`, `text`, ...).
    info: String,
    body: Vec<String>,
}

fn blocks(text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<Block> = None;
    for (i, l) in text.lines().enumerate() {
        let t = l.trim_start();
        if let Some(rest) = t.strip_prefix("```") {
            match open.take() {
                Some(b) => out.push(b),
                None => {
                    open = Some(Block {
                        line: i + 1,
                        info: rest.trim().to_owned(),
                        body: Vec::new(),
                    })
                }
            }
        } else if let Some(b) = open.as_mut() {
            b.body.push(l.to_owned());
        }
    }
    assert!(open.is_none(), "unclosed code fence");
    out
}

impl Block {
    fn lang(&self) -> &str {
        self.info.split_whitespace().next().unwrap_or("")
    }

    fn runs(&self) -> bool {
        matches!(self.lang(), "sh" | "console")
    }

    fn checked_by(&self) -> Option<&str> {
        self.info
            .split_whitespace()
            .find_map(|w| w.strip_prefix("checked-by="))
    }
}

/// A command of a block with what it must print and how it must exit.
#[derive(Debug)]
struct Step {
    line: usize,
    command: String,
    /// Expected output lines (`console` blocks), `None` when unchecked.
    expect: Option<Vec<String>>,
    exit: i32,
}

/// Drops a trailing ` # comment` outside quotes.
fn strip_comment(line: &str) -> (&str, Option<&str>) {
    let (mut single, mut double) = (false, false);
    let b = line.as_bytes();
    for (i, &c) in b.iter().enumerate() {
        match c {
            b'\'' if !double => single = !single,
            b'"' if !single => double = !double,
            b'#' if !single && !double && (i == 0 || b[i - 1].is_ascii_whitespace()) => {
                return (line[..i].trim_end(), Some(line[i + 1..].trim()));
            }
            _ => {}
        }
    }
    (line.trim_end(), None)
}

fn exit_of(comment: Option<&str>) -> i32 {
    comment
        .and_then(|c| c.strip_prefix("exit "))
        .map(|n| n.trim().parse().expect("`# exit N` with a number"))
        .unwrap_or(0)
}

fn steps(block: &Block) -> Vec<Step> {
    let mut out: Vec<Step> = Vec::new();
    let console = block.lang() == "console";
    let mut pending = String::new();
    for (i, raw) in block.body.iter().enumerate() {
        let line = block.line + 1 + i;
        let cmd_text = if console {
            match raw.strip_prefix("$ ") {
                Some(c) => Some(c),
                None if !pending.is_empty() => Some(raw.as_str()),
                None => {
                    let s = out.last_mut().expect("output before the first `$ ` line");
                    s.expect.as_mut().unwrap().push(raw.trim_end().to_owned());
                    continue;
                }
            }
        } else {
            Some(raw.as_str())
        };
        let Some(c) = cmd_text else { continue };
        let (c, comment) = strip_comment(c);
        let c = if pending.is_empty() {
            c
        } else {
            c.trim_start()
        };
        if let Some(head) = c.strip_suffix('\\') {
            pending.push_str(head.trim_end());
            pending.push(' ');
            continue;
        }
        let command = format!("{pending}{c}").trim().to_owned();
        pending.clear();
        if command.is_empty() {
            continue;
        }
        out.push(Step {
            line,
            command,
            expect: console.then(Vec::new),
            exit: exit_of(comment),
        });
    }
    assert!(pending.is_empty(), "a `\\` continues past the block");
    for s in &mut out {
        if let Some(e) = &mut s.expect {
            while e.last().is_some_and(|l| l.is_empty()) {
                e.pop();
            }
        }
    }
    out
}

/// Whether `line` matches `pattern`, where `[..]` stands for any text.
fn line_matches(pattern: &str, line: &str) -> bool {
    let parts: Vec<&str> = pattern.split("[..]").collect();
    if parts.len() == 1 {
        return pattern == line;
    }
    let Some(mut rest) = line.strip_prefix(parts[0]) else {
        return false;
    };
    let last = parts.len() - 1;
    for (k, p) in parts.iter().enumerate().skip(1) {
        if k == last {
            return rest.ends_with(p);
        }
        match rest.find(p) {
            Some(at) => rest = &rest[at + p.len()..],
            None => return false,
        }
    }
    unreachable!()
}

/// Whether `lines` match `pattern`, where a `...` line stands for any lines.
fn lines_match(pattern: &[String], lines: &[&str]) -> bool {
    match pattern.split_first() {
        None => lines.is_empty(),
        Some((p, rest)) if p == "..." => (0..=lines.len()).any(|k| lines_match(rest, &lines[k..])),
        Some((p, rest)) => {
            !lines.is_empty() && line_matches(p, lines[0]) && lines_match(rest, &lines[1..])
        }
    }
}

/// A listener on a free loopback port below the kernel's ephemeral range.
/// The page's servers bind the port only after it is released: an
/// ephemeral port could meanwhile become the local end of some other
/// process's outgoing connection, a port below the range cannot.
fn free_port_below_ephemeral() -> TcpListener {
    let low: u16 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768);
    let (first, last) = (10_000u16, low.saturating_sub(1).max(10_001));
    // Start at a place that differs between runs and processes.
    let seed = std::process::id() as u64
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
    let span = u64::from(last - first);
    for k in 0..span {
        let port = first + ((seed.wrapping_mul(2_654_435_761) + k) % span) as u16;
        if let Ok(l) = TcpListener::bind(("127.0.0.1", port)) {
            return l;
        }
    }
    TcpListener::bind("127.0.0.1:0").expect("a free port")
}

/// Loopback ports written in a page, each mapped to a free port.
#[derive(Default)]
struct Ports {
    map: HashMap<String, String>,
    /// Held until the page is done, so that no port is handed out twice.
    held: Vec<TcpListener>,
}

impl Ports {
    fn rewrite(&mut self, text: &str) -> String {
        let mut out = String::new();
        let mut rest = text;
        loop {
            let hit = ["127.0.0.1:", "[::1]:", "localhost:", "--mount-port "]
                .iter()
                .filter_map(|h| rest.find(h).map(|at| (at, h.len())))
                .min();
            let Some((at, hl)) = hit else { break };
            let digits_at = at + hl;
            let n = rest[digits_at..]
                .bytes()
                .take_while(u8::is_ascii_digit)
                .count();
            out.push_str(&rest[..digits_at]);
            let port = &rest[digits_at..digits_at + n];
            if n == 0 || port == "0" || port == "111" {
                out.push_str(port);
            } else {
                let held = &mut self.held;
                let new = self.map.entry(port.to_owned()).or_insert_with(|| {
                    let l = free_port_below_ephemeral();
                    let p = l.local_addr().unwrap().port().to_string();
                    held.push(l);
                    p
                });
                out.push_str(new);
            }
            rest = &rest[digits_at + n..];
        }
        out.push_str(rest);
        out
    }

    /// Frees the ports so that the page's servers can bind them.
    fn release(&mut self) {
        self.held.clear();
    }
}

/// A command running in the background (`&`).
struct Job {
    line: usize,
    command: String,
    child: Child,
    stdout: mpsc::Receiver<String>,
}

/// Runs the commands of one page.
struct Page {
    name: String,
    bin_dir: tempfile::TempDir,
    jobs: Vec<Option<Job>>,
    ports: Ports,
    failures: Vec<String>,
    ran: usize,
}

fn shell(bin_dir: &Path, command: &str) -> Command {
    let mut c = Command::new("bash");
    c.arg("-c").arg(command).current_dir(root());
    let path = std::env::var("PATH").unwrap_or_default();
    c.env("PATH", format!("{}:{path}", bin_dir.display()));
    // No colour codes and no progress bars in what is compared.
    c.env("NO_COLOR", "1").env_remove("RUST_LOG");
    c
}

fn wait_limited(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(s) = child.try_wait().expect("wait") {
            return Some(s);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn spawn_reader<R: Read + Send + 'static>(r: R) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(r).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// The `cargo` package named by `-p NAME`, and whether it exists in the
/// workspace with a binary (`[[bin]]` or `src/main.rs`) or examples.
fn package_dir(name: &str) -> Option<PathBuf> {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).ok()?;
    let dir = root().join("crates").join(name);
    let member = format!("\"crates/{name}\"");
    (manifest.contains(&member) && dir.join("Cargo.toml").is_file()).then_some(dir)
}

fn has_binary(dir: &Path) -> bool {
    let toml = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap_or_default();
    toml.contains("[[bin]]") || dir.join("src/main.rs").is_file()
}

/// The directory `cargo test` builds into (`target/debug`), from this
/// test's own path (`target/debug/deps/doc_commands-…`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test path");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>")
        .to_owned()
}

/// The binary of example `example` of package `package`, built if missing.
fn example_binary(package: &str, example: &str) -> Result<PathBuf, String> {
    let path = profile_dir().join("examples").join(example);
    if path.is_file() {
        return Ok(path);
    }
    let target_dir = profile_dir().parent().unwrap().to_owned();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let st = Command::new(cargo)
        .args(["build", "-q", "-p", package, "--example", example])
        .env("CARGO_TARGET_DIR", &target_dir)
        .current_dir(root())
        .status()
        .map_err(|e| format!("cargo build --example {example}: {e}"))?;
    if !st.success() || !path.is_file() {
        return Err(format!(
            "cannot build example {example} of {package} ({st})"
        ));
    }
    Ok(path)
}

/// Splits leading `VAR=value` words from a command.
fn env_prefix(words: &[String]) -> (Vec<(String, String)>, &[String]) {
    let n = words
        .iter()
        .take_while(|w| {
            w.split_once('=').is_some_and(|(k, _)| {
                !k.is_empty() && k.bytes().all(|b| b.is_ascii_uppercase() || b == b'_')
            })
        })
        .count();
    let env = words[..n]
        .iter()
        .map(|w| {
            let (k, v) = w.split_once('=').unwrap();
            (k.to_owned(), v.to_owned())
        })
        .collect();
    (env, &words[n..])
}

/// What a `cargo` command stands for here.
enum Cargo {
    /// Run this command line instead.
    Run(String),
    /// Checked, nothing to run.
    Checked,
}

fn shell_quote(s: &str) -> String {
    if s.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_./:=@%+,".contains(&b))
    {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

fn cargo_command(words: &[String]) -> Result<Cargo, String> {
    let sub = words.get(1).map(String::as_str).unwrap_or("");
    let (args, after) = match words.iter().position(|w| w == "--") {
        Some(i) => (&words[2..i], &words[i + 1..]),
        None => (&words[2..], &words[words.len()..]),
    };
    let value_of = |flag: &str| {
        args.iter()
            .position(|w| w == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let known = |w: &String| matches!(w.as_str(), "--release" | "-q" | "--locked");
    match sub {
        "run" | "build" => {
            let pkg = value_of("-p").ok_or("`cargo run`/`cargo build` without `-p PACKAGE`")?;
            let dir = package_dir(&pkg).ok_or(format!("no workspace package {pkg}"))?;
            let example = value_of("--example");
            for (i, w) in args.iter().enumerate() {
                let is_value = i > 0 && matches!(args[i - 1].as_str(), "-p" | "--example");
                if !(known(w) || is_value || w == "-p" || w == "--example") {
                    return Err(format!("unsupported cargo argument {w}"));
                }
            }
            if let Some(e) = example {
                if !dir.join("examples").join(format!("{e}.rs")).is_file() {
                    return Err(format!("package {pkg} has no example {e}"));
                }
                if sub == "build" {
                    return Ok(Cargo::Checked);
                }
                let exe = example_binary(&pkg, &e)?;
                let rest: Vec<String> = after.iter().map(|w| shell_quote(w)).collect();
                return Ok(Cargo::Run(format!("{} {}", exe.display(), rest.join(" "))));
            }
            if !has_binary(&dir) {
                return Err(format!("package {pkg} has no binary"));
            }
            if sub == "build" {
                return Ok(Cargo::Checked);
            }
            if pkg != "rpcrdma-cli" {
                return Err(format!("no runner for the binary of {pkg}"));
            }
            let rest: Vec<String> = after.iter().map(|w| shell_quote(w)).collect();
            Ok(Cargo::Run(format!("rpcrdma {}", rest.join(" "))))
        }
        "install" => {
            let path = value_of("--path").ok_or("`cargo install` without `--path`")?;
            let name = path.trim_end_matches('/').rsplit('/').next().unwrap_or("");
            let dir = package_dir(name).ok_or(format!("no workspace package at {path}"))?;
            if !has_binary(&dir) {
                return Err(format!("{path} has no binary"));
            }
            Ok(Cargo::Checked)
        }
        _ => Err(format!(
            "`cargo {sub}` is not run by this test; show it in a page outside {DOCS:?}"
        )),
    }
}

/// Checks a `scripts/test.sh` command: `.ci/run` runs exactly it, and the
/// variables set before it are ones the script reads.
fn check_suite_command(env: &[(String, String)], words: &[String]) -> Result<(), String> {
    if words.len() != 1 {
        return Err(format!(
            "`scripts/test.sh` takes no arguments, got {words:?}"
        ));
    }
    let ci =
        std::fs::read_to_string(root().join(".ci/run")).map_err(|e| format!(".ci/run: {e}"))?;
    let runs: Vec<&str> = ci
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter(|l| l.contains("scripts/"))
        .collect();
    if runs != ["exec scripts/test.sh"] {
        return Err(format!(
            ".ci/run does not run exactly `scripts/test.sh`: {runs:?}"
        ));
    }
    let script = std::fs::read_to_string(root().join("scripts/test.sh"))
        .map_err(|e| format!("scripts/test.sh: {e}"))?;
    for (k, _) in env {
        if !script.contains(&format!("${{{k}")) && !script.contains(&format!("${k}")) {
            return Err(format!("scripts/test.sh does not read {k}"));
        }
    }
    Ok(())
}

/// Splits a command line into words (quotes respected; enough for the
/// commands the pages show).
/// `command` with a call bound added when it runs a measurement without one
/// (see the module doc). Only a plain command is changed (no pipe, list or
/// redirection), with the bound placed before a trailing `&`.
fn bound_load(command: &str) -> String {
    let (body, background) = match command.trim_end().strip_suffix('&') {
        Some(b) => (b.trim_end(), " &"),
        None => (command.trim_end(), ""),
    };
    if body.contains(['|', ';', '&', '<', '>']) {
        return command.to_owned();
    }
    let w = words(body);
    let (_, rest) = env_prefix(&w);
    let Some(at) = rest.iter().position(|x| x == "rpcrdma") else {
        return command.to_owned();
    };
    let args = &rest[at + 1..];
    let has = |flag: &str| args.iter().any(|a| a == flag);
    let sub = args.first().map(String::as_str);
    let flag = match sub {
        Some("bench") => "--calls",
        Some("nfs") if args.get(2).map(String::as_str) == Some("bench") => "--calls",
        Some("demo") if !has("--no-bench") => "--bench-calls",
        _ => return command.to_owned(),
    };
    if has(flag) {
        return command.to_owned();
    }
    format!("{body} {flag} {LOAD_CALLS}{background}")
}

fn words(command: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut any = false;
    for c in command.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                any = true
            }
            (None, c) if c.is_whitespace() => {
                if any || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
                any = false;
            }
            (None, c) => cur.push(c),
        }
    }
    if any || !cur.is_empty() {
        out.push(cur);
    }
    out
}

impl Page {
    fn new(name: &str) -> Page {
        let bin_dir = tempfile::tempdir().expect("tempdir");
        std::os::unix::fs::symlink(BIN, bin_dir.path().join("rpcrdma")).expect("symlink");
        Page {
            name: name.to_owned(),
            bin_dir,
            jobs: Vec::new(),
            ports: Ports::default(),
            failures: Vec::new(),
            ran: 0,
        }
    }

    fn fail(&mut self, line: usize, command: &str, why: String) {
        self.failures
            .push(format!("{}:{line}: `{command}`: {why}", self.name));
    }

    fn run_page(&mut self, text: &str) {
        // Map the page's ports first, then free them for its servers.
        let text = self.ports.rewrite(text);
        self.ports.release();
        for block in blocks(&text) {
            if !block.runs() {
                if let Some(l) = block.body.iter().find(|l| l.starts_with("$ ")) {
                    let msg = "a shell prompt in a block that is not run: tag it `console`";
                    self.fail(block.line, l, msg.into());
                }
                continue;
            }
            if let Some(name) = block.checked_by() {
                self.check_checked_by(block.line, name);
                continue;
            }
            for step in steps(&block) {
                self.run_step(&step);
            }
        }
        let open: Vec<usize> = (0..self.jobs.len())
            .filter(|&i| self.jobs[i].is_some())
            .collect();
        for i in open {
            self.stop_job(i + 1, 0, "end of page");
        }
    }

    fn check_checked_by(&mut self, line: usize, name: &str) {
        let grep = |needle: &str, include: &str, dir: &str| {
            Command::new("grep")
                .args(["-rqF", include, needle, dir])
                .current_dir(root())
                .status()
                .is_ok_and(|s| s.success())
        };
        let test_fn = format!("fn {name}(");
        let scenario_fn = format!("{name}() {{");
        if !grep(&test_fn, "--include=*.rs", "crates")
            && !grep(&scenario_fn, "--include=*.sh", "scripts")
        {
            self.fail(
                line,
                name,
                format!("checked-by names no test `{test_fn}` and no scenario `{scenario_fn}`"),
            );
        }
    }

    fn run_step(&mut self, step: &Step) {
        self.ran += 1;
        eprintln!("{}:{}: {}", self.name, step.line, step.command);
        let w = words(&step.command);
        let (env, rest) = env_prefix(&w);
        let head = rest.first().map(String::as_str).unwrap_or("");
        // Shell job control, done here.
        if head == "kill" && rest.len() == 2 && rest[1].starts_with('%') {
            match rest[1][1..].parse::<usize>() {
                Ok(n) => self.stop_job(n, step.line, &step.command),
                Err(_) => self.fail(step.line, &step.command, "use `kill %N`".into()),
            }
            return;
        }
        if head == "scripts/test.sh" {
            if let Err(e) = check_suite_command(&env, rest) {
                self.fail(step.line, &step.command, e);
            }
            return;
        }
        let mut command = step.command.clone();
        if head == "cargo" {
            if !env.is_empty() {
                self.fail(step.line, &step.command, "variables before cargo".into());
                return;
            }
            match cargo_command(rest) {
                Ok(Cargo::Checked) => return,
                Ok(Cargo::Run(c)) => command = c,
                Err(e) => {
                    self.fail(step.line, &step.command, e);
                    return;
                }
            }
        }
        let command = bound_load(&command);
        match command.strip_suffix('&') {
            Some(bg) => self.start_job(step, bg.trim()),
            None => self.run_foreground(step, &command),
        }
    }

    fn run_foreground(&mut self, step: &Step, command: &str) {
        let mut child = match shell(self.bin_dir.path(), command)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
        {
            Ok(c) => c,
            Err(e) => return self.fail(step.line, &step.command, format!("spawn: {e}")),
        };
        let out = spawn_reader(child.stdout.take().unwrap());
        let err = spawn_reader(child.stderr.take().unwrap());
        let Some(status) = wait_limited(&mut child, COMMAND_LIMIT) else {
            return self.fail(
                step.line,
                &step.command,
                format!("still running after {COMMAND_LIMIT:?}"),
            );
        };
        let stdout: Vec<String> = out.iter().collect();
        let stderr: Vec<String> = err.iter().collect();
        let code = status.code().unwrap_or(-1);
        if code != step.exit {
            return self.fail(
                step.line,
                &step.command,
                format!(
                    "exit {code}, the page says {}\nstdout:\n{}\nstderr:\n{}",
                    step.exit,
                    stdout.join("\n"),
                    stderr.join("\n")
                ),
            );
        }
        if let Some(expect) = &step.expect {
            let all: Vec<&str> = stdout
                .iter()
                .chain(stderr.iter())
                .map(|s| s.trim_end())
                .collect();
            if !lines_match(expect, &all) {
                self.fail(
                    step.line,
                    &step.command,
                    format!(
                        "output differs from the page\n--- page:\n{}\n--- actual:\n{}",
                        expect.join("\n"),
                        all.join("\n")
                    ),
                );
            }
        }
    }

    fn start_job(&mut self, step: &Step, command: &str) {
        // `exec`: the job's pid is the command's, so `kill %N` reaches it.
        let mut child = match shell(self.bin_dir.path(), &format!("exec {command}"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
        {
            Ok(c) => c,
            Err(e) => return self.fail(step.line, &step.command, format!("spawn: {e}")),
        };
        let stdout = spawn_reader(child.stdout.take().unwrap());
        // Wait for its first lines: as many as the page shows, at least one.
        let want = step
            .expect
            .as_ref()
            .map(|e| e.iter().filter(|l| *l != "...").count())
            .unwrap_or(0)
            .max(1);
        let deadline = Instant::now() + READY_LIMIT;
        let mut first = Vec::new();
        while first.len() < want {
            let left = deadline.saturating_duration_since(Instant::now());
            match stdout.recv_timeout(left) {
                Ok(l) => first.push(l),
                Err(_) => break,
            }
        }
        if first.len() < want {
            let _ = child.kill();
            let _ = child.wait();
            return self.fail(
                step.line,
                &step.command,
                format!("printed {first:?} and no more within {READY_LIMIT:?}"),
            );
        }
        if let Some(expect) = &step.expect {
            let got: Vec<&str> = first.iter().map(|s| s.trim_end()).collect();
            if !lines_match(expect, &got) {
                self.fail(
                    step.line,
                    &step.command,
                    format!(
                        "first output differs from the page\n--- page:\n{}\n--- actual:\n{}",
                        expect.join("\n"),
                        got.join("\n")
                    ),
                );
            }
        }
        // Numbered as a shell does: one above the highest job still running.
        let n = self
            .jobs
            .iter()
            .rposition(Option::is_some)
            .map_or(0, |i| i + 1);
        self.jobs.truncate(n);
        self.jobs.push(Some(Job {
            line: step.line,
            command: step.command.clone(),
            child,
            stdout,
        }));
    }

    /// `kill %n`: SIGTERM to job `n`, which must exit 0 within 20 s.
    fn stop_job(&mut self, n: usize, line: usize, why: &str) {
        let Some(mut job) = n
            .checked_sub(1)
            .and_then(|i| self.jobs.get_mut(i))
            .and_then(Option::take)
        else {
            return self.fail(line, why, format!("no running job %{n}"));
        };
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(job.child.id().to_string())
            .status();
        match wait_limited(&mut job.child, Duration::from_secs(20)) {
            Some(s) if s.success() => {}
            Some(s) => {
                let rest: Vec<String> = job.stdout.try_iter().collect();
                self.fail(
                    job.line,
                    &job.command,
                    format!("exited {s} after SIGTERM ({why}); stdout: {rest:?}"),
                )
            }
            None => self.fail(
                job.line,
                &job.command,
                format!("did not stop within 20 s of SIGTERM ({why})"),
            ),
        }
    }
}

fn run_doc(name: &str) {
    let text = std::fs::read_to_string(root().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut page = Page::new(name);
    page.run_page(&text);
    assert!(page.ran > 0, "{name} shows no command");
    assert!(
        page.failures.is_empty(),
        "{} of {} commands of {name} failed:\n\n{}",
        page.failures.len(),
        page.ran,
        page.failures.join("\n\n")
    );
}

/// The commands of every page in [`DOCS`], one page after the other (their
/// servers would otherwise compete for the machine and time out).
#[test]
fn documented_commands_run_as_shown() {
    for doc in DOCS {
        run_doc(doc);
    }
}

/// Every subcommand and option in `rpcrdma --help` is documented in docs/,
/// and every option row of docs/cli.md's tables names a real option.
#[test]
fn every_cli_option_is_documented() {
    let help = |args: &[&str]| {
        let out = Command::new(BIN)
            .args(args)
            .output()
            .expect("rpcrdma --help");
        assert!(out.status.success(), "rpcrdma {args:?} failed");
        String::from_utf8(out.stdout).unwrap()
    };
    let docs: String = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .filter_map(|e| {
            let p = e.ok()?.path();
            (p.extension()? == "md")
                .then(|| std::fs::read_to_string(p).ok())
                .flatten()
        })
        .collect();
    let top = help(&["--help"]);
    let subs: Vec<String> = top
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .filter(|s| s != "help")
        .collect();
    assert!(subs.len() >= 4, "no subcommands in {top}");
    let mut missing = Vec::new();
    let mut options = vec!["--help".to_owned(), "--version".to_owned()];
    for sub in &subs {
        if !docs.contains(&format!("## `rpcrdma {sub}`")) {
            missing.push(format!("no `## `rpcrdma {sub}`` section"));
        }
        for l in help(&[sub, "--help"]).lines() {
            let t = l.trim_start();
            let t = t
                .strip_prefix('-')
                .filter(|r| r.len() > 1 && r.as_bytes()[1] == b',')
                .map(|r| r[2..].trim_start())
                .unwrap_or(t);
            if let Some(opt) = t.strip_prefix("--") {
                let name: String = opt
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                    .collect();
                let flag = format!("--{name}");
                if !matches!(flag.as_str(), "--help" | "--version")
                    && !docs.contains(&format!("`{flag}"))
                {
                    missing.push(format!("rpcrdma {sub} {flag}"));
                }
                options.push(flag);
            }
        }
    }
    // Option rows of cli.md's tables name real options.
    let cli = std::fs::read_to_string(root().join("docs/cli.md")).unwrap();
    for l in cli.lines().filter(|l| l.starts_with("| `--")) {
        let name: String = l[3..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        if !options.contains(&name) {
            missing.push(format!("documented but not in any --help: {name}"));
        }
    }
    assert!(missing.is_empty(), "docs and --help disagree: {missing:#?}");
}

/// The README's library example is a verbatim excerpt of the example program
/// that `cargo test` compiles, so it cannot drift from the API.
#[test]
fn readme_quickstart_is_the_compiled_example() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let example =
        std::fs::read_to_string(root().join("crates/rpcrdma/examples/quickstart.rs")).unwrap();
    // Blank lines and `//` comments may differ; the code may not.
    let norm = |s: &str| s.trim().to_owned();
    let code = |l: &String| !l.is_empty() && !l.starts_with("//");
    let ex: Vec<String> = example.lines().map(norm).filter(code).collect();
    let rust: Vec<Block> = blocks(&readme)
        .into_iter()
        .filter(|b| b.lang() == "rust")
        .collect();
    assert!(!rust.is_empty(), "README.md shows no Rust example");
    for b in rust {
        let lines: Vec<String> = b.body.iter().map(|l| norm(l)).filter(code).collect();
        let found = ex.windows(lines.len()).any(|w| w == lines.as_slice());
        assert!(
            found,
            "README.md:{}: the Rust block is not an excerpt of crates/rpcrdma/examples/quickstart.rs",
            b.line
        );
    }
}

/// The front page stays short: the reference lives in docs/.
#[test]
fn readme_is_at_most_250_lines() {
    let n = std::fs::read_to_string(root().join("README.md"))
        .unwrap()
        .lines()
        .count();
    assert!(n <= 250, "README.md has {n} lines");
}

#[test]
fn measurements_get_a_call_bound() {
    let b = |c: &str| bound_load(c);
    assert_eq!(
        b("rpcrdma bench rdma://127.0.0.1:1 --size 1MiB --seconds 2"),
        "rpcrdma bench rdma://127.0.0.1:1 --size 1MiB --seconds 2 --calls 16"
    );
    assert_eq!(
        b("rpcrdma nfs tcp://h:1/x bench read --file f &"),
        "rpcrdma nfs tcp://h:1/x bench read --file f --calls 16 &"
    );
    assert_eq!(b("rpcrdma demo"), "rpcrdma demo --bench-calls 16");
    assert_eq!(
        b("RUST_LOG=info rpcrdma demo --inline 1024"),
        "RUST_LOG=info rpcrdma demo --inline 1024 --bench-calls 16"
    );
    // Left alone: a bound already given, no benchmark, a non-plain command.
    for c in [
        "rpcrdma bench rdma://127.0.0.1:1 --calls 5",
        "rpcrdma demo --no-bench",
        "rpcrdma demo --bench-calls 3",
        "rpcrdma nfs tcp://h:1/x ls",
        "rpcrdma call rdma://127.0.0.1:1 null",
        "rpcrdma bench rdma://127.0.0.1:1 --json | head -1",
    ] {
        assert_eq!(b(c), c);
    }
}

#[test]
fn patterns_match_as_documented() {
    assert!(line_matches("a [..] c", "a b c"));
    assert!(line_matches("[..]x", "yyx"));
    assert!(!line_matches("a [..] c", "a b d"));
    let p: Vec<String> = ["x", "...", "z"].iter().map(|s| s.to_string()).collect();
    assert!(lines_match(&p, &["x", "z"]));
    assert!(lines_match(&p, &["x", "y", "y", "z"]));
    assert!(!lines_match(&p, &["x", "y"]));
    let mut ports = Ports::default();
    let r = ports.rewrite("--listen 127.0.0.1:20049 rdma://127.0.0.1:20049 [::1]:0");
    assert!(!r.contains("20049"), "{r}");
    assert!(r.ends_with("[::1]:0"));
    assert_eq!(words(r#"a 'b c' "d" e"#), vec!["a", "b c", "d", "e"]);
    let b = &blocks("```console\n$ rpcrdma x \\\n  --y # exit 1\nout\n```\n")[0];
    let s = steps(b);
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].command, "rpcrdma x --y");
    assert_eq!(s[0].exit, 1);
    assert_eq!(s[0].expect.as_deref(), Some(&["out".to_owned()][..]));
}

/// A page whose command fails, or prints something else than it shows,
/// fails this test: the runner is not blind.
#[test]
fn a_broken_page_is_caught() {
    let mut page = Page::new("broken.md");
    page.run_page(concat!(
        "```sh\n",
        "rpcrdma call tcp://127.0.0.1:1 null\n",
        "```\n",
        "```console\n",
        "$ rpcrdma --version\n",
        "rpcrdma 0.0.0-not-this-version\n",
        "$ rpcrdma --version   # exit 2\n",
        "rpcrdma [..]\n",
        "```\n",
        "```text\n",
        "$ rpcrdma demo\n",
        "```\n",
        "```sh\n",
        "cargo test -p rpcrdma\n",
        "kill %1\n",
        "```\n",
    ));
    assert_eq!(page.ran, 5);
    let f = page.failures.join("\n");
    assert_eq!(page.failures.len(), 6, "{f}");
    assert!(f.contains("broken.md:2: `rpcrdma call"), "{f}");
    assert!(f.contains("output differs"), "{f}");
    assert!(f.contains("exit 0, the page says 2"), "{f}");
    assert!(f.contains("shell prompt in a block that is not run"), "{f}");
    assert!(f.contains("`cargo test` is not run"), "{f}");
    assert!(f.contains("no running job %1"), "{f}");
}

/// The `pub NAME:` fields of `pub struct TYPE { ... }` in a source file.
fn struct_fields(path: &str, ty: &str) -> Vec<String> {
    let text = std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
    let start = text
        .find(&format!("pub struct {ty} {{"))
        .unwrap_or_else(|| panic!("no `pub struct {ty}` in {path}"));
    let body = &text[start..];
    let body = &body[..body.find("\n}").expect("end of struct")];
    body.lines()
        .filter_map(|l| l.trim().strip_prefix("pub "))
        .filter_map(|l| l.split_once(':').map(|(n, _)| n.trim().to_owned()))
        .collect()
}

/// The reference pages name every counter the transport exposes and every
/// setting of `RdmaConfig`, so a new one cannot go undocumented.
#[test]
fn reference_pages_name_every_counter_and_setting() {
    let read = |p: &str| std::fs::read_to_string(root().join(p)).unwrap();
    let counters_md = read("docs/counters.md");
    let config_md = read("docs/configuration.md");
    let mut missing = Vec::new();
    let proto = read("crates/rpcrdma-proto/src/counters.rs");
    let macro_body = &proto[proto.find("counters! {").expect("counters! macro")..];
    let macro_body = &macro_body[..macro_body.find("\n}").unwrap()];
    let mut counters: Vec<String> = macro_body
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with("//") && l.ends_with(','))
        .map(|l| l.trim_end_matches(',').to_owned())
        .collect();
    assert!(counters.len() >= 10, "no counters found: {counters:?}");
    counters.extend(struct_fields("crates/rpcrdma/src/server.rs", "ServerStats"));
    counters.extend(struct_fields("crates/rpcrdma/src/client.rs", "ClientStats"));
    counters.extend(struct_fields("crates/rpcrdma/src/report.rs", "CallReport"));
    for c in counters {
        if !counters_md.contains(&format!("`{c}`")) {
            missing.push(format!("docs/counters.md: `{c}`"));
        }
    }
    let settings = [
        ("crates/rpcrdma/src/config.rs", "RdmaConfig"),
        ("crates/iwarp/src/device.rs", "Config"),
        ("crates/oncrpc-tcp/src/server.rs", "ServerConfig"),
        ("crates/oncrpc-tcp/src/client.rs", "ClientConfig"),
        ("crates/rpcrdma-proto/src/wire.rs", "DecodeLimits"),
    ];
    for (path, ty) in settings {
        for f in struct_fields(path, ty) {
            if !config_md.contains(&format!("`{f}")) && !config_md.contains(&format!("{ty}::{f}")) {
                missing.push(format!("docs/configuration.md: {ty}::{f}"));
            }
        }
    }
    assert!(missing.is_empty(), "undocumented: {missing:#?}");
}
