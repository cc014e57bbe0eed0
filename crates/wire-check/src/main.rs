//! `wire-check <capture.pcapng>`: has tshark decode the capture and judges
//! every iWARP connection in it; exits non-zero on any failure.

use anyhow::{bail, Context};
use std::time::Instant;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [file] = args.as_slice() else {
        bail!("usage: wire-check <capture.pcap[ng]>");
    };
    let t0 = Instant::now();
    let v = wire_check::check_file(file.as_ref()).with_context(|| format!("judging {file}"))?;
    print!("{}", wire_check::report::summary(&v));
    // Every failure, for digging: next to the capture.
    let list = format!("{file}.failures.txt");
    let mut all = String::new();
    for (c, f) in v.failures() {
        all.push_str(&format!(
            "stream {} frame {}: {}\n",
            c.stream, f.frame, f.what
        ));
    }
    for c in &v.connections {
        for f in &c.excused {
            all.push_str(&format!(
                "stream {} frame {}: EXCUSED, {}\n",
                c.stream, f.frame, f.what
            ));
        }
    }
    std::fs::write(&list, all).with_context(|| format!("writing {list}"))?;
    println!("all failures and excused faults: {list}");
    println!(
        "(tshark passes and judgement took {:.1} s)",
        t0.elapsed().as_secs_f64()
    );
    println!("{}", wire_check::report::one_line(&v));
    if v.connections.is_empty() {
        bail!("no iWARP connection in {file}: nothing was judged");
    }
    if !v.passed() {
        bail!("the captured RDMA traffic failed the wire oracle");
    }
    Ok(())
}
