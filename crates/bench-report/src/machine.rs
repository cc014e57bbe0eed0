//! The machine a run happens on, as the page states it.

use std::process::Command;

/// What the page says about the machine.
#[derive(Debug, Clone, PartialEq)]
pub struct Machine {
    /// CPU model (`model name` in /proc/cpuinfo).
    pub cpu: String,
    /// Logical CPUs this process may use.
    pub cores: usize,
    /// Kernel release (`uname -r`).
    pub kernel: String,
    /// Load averages over 1, 5 and 15 minutes.
    pub load: String,
    /// UTC time of the probe.
    pub time: String,
    /// The commit checked out, if this is a git work tree.
    pub commit: Option<String>,
}

fn first_line(cmd: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(cmd).args(args).output().ok()?;
    out.status.success().then(|| {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or("")
            .trim()
            .to_owned()
    })
}

/// The `model name` of the first CPU in `/proc/cpuinfo` text.
pub fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_owned())
}

impl Machine {
    /// Reads the facts from /proc, `uname` and `git`.
    pub fn probe() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let load = std::fs::read_to_string("/proc/loadavg")
            .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
            .unwrap_or_else(|_| "unknown".into());
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_owned())
            .ok()
            .or_else(|| first_line("uname", &["-r"]))
            .unwrap_or_else(|| "unknown".into());
        Machine {
            cpu: cpu_model(&cpuinfo).unwrap_or_else(|| "unknown".into()),
            cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
            kernel,
            load,
            time: first_line("date", &["-u", "+%Y-%m-%d %H:%M UTC"])
                .unwrap_or_else(|| "unknown".into()),
            commit: first_line("git", &["rev-parse", "--short", "HEAD"]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_model_is_read_from_cpuinfo() {
        let text =
            "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7R13 Processor\n";
        assert_eq!(cpu_model(text).as_deref(), Some("AMD EPYC 7R13 Processor"));
        assert_eq!(cpu_model("processor : 0\n"), None);
    }
}
