//! How `rpcrdma nfs` shows attributes: `ls -l` lines, `stat` blocks,
//! modes and times.

use nfs3::types::{Fattr3, Ftype3, Nfstime3};

/// `drwxr-xr-x` and the like (with setuid, setgid and sticky bits).
pub fn mode_string(ftype: Ftype3, mode: u32) -> String {
    let t = match ftype {
        Ftype3::Reg => '-',
        Ftype3::Dir => 'd',
        Ftype3::Blk => 'b',
        Ftype3::Chr => 'c',
        Ftype3::Lnk => 'l',
        Ftype3::Sock => 's',
        Ftype3::Fifo => 'p',
    };
    let mut s = String::with_capacity(10);
    s.push(t);
    let bit = |m: u32, c: char| if mode & m != 0 { c } else { '-' };
    let special =
        |x: u32, special: u32, lower: char, upper: char| match (mode & x != 0, mode & special != 0)
        {
            (true, true) => lower,
            (false, true) => upper,
            (true, false) => 'x',
            (false, false) => '-',
        };
    s.push(bit(0o400, 'r'));
    s.push(bit(0o200, 'w'));
    s.push(special(0o100, 0o4000, 's', 'S'));
    s.push(bit(0o040, 'r'));
    s.push(bit(0o020, 'w'));
    s.push(special(0o010, 0o2000, 's', 'S'));
    s.push(bit(0o004, 'r'));
    s.push(bit(0o002, 'w'));
    s.push(special(0o001, 0o1000, 't', 'T'));
    s
}

/// "regular file", "directory", ...
pub fn type_name(ftype: Ftype3) -> &'static str {
    match ftype {
        Ftype3::Reg => "regular file",
        Ftype3::Dir => "directory",
        Ftype3::Blk => "block device",
        Ftype3::Chr => "character device",
        Ftype3::Lnk => "symbolic link",
        Ftype3::Sock => "socket",
        Ftype3::Fifo => "fifo",
    }
}

/// `2026-11-28 12:34:56.123456789 UTC`.
pub fn time_string(t: Nfstime3) -> String {
    let secs = i64::from(t.seconds);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{:09} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        t.nseconds
    )
}

/// `2026-11-28 12:34` (for `ls -l`).
pub fn short_time(t: Nfstime3) -> String {
    time_string(t)[..16].to_string()
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (the
/// well-known era-based conversion).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// One `ls -l` line: mode, links, owner, group, size, mtime, name (and
/// `-> target` for a symbolic link whose target is known).
pub fn long_line(a: &Fattr3, name: &str, target: Option<&str>) -> String {
    let mut line = format!(
        "{} {:>3} {:>6} {:>6} {:>12} {} {name}",
        mode_string(a.ftype, a.mode),
        a.nlink,
        a.uid,
        a.gid,
        a.size,
        short_time(a.mtime)
    );
    if let Some(t) = target {
        line.push_str(" -> ");
        line.push_str(t);
    }
    line
}

/// The `stat` block of `path`.
pub fn stat_block(path: &str, a: &Fattr3) -> String {
    format!(
        "  File: {path}\n  Type: {}\n  Size: {}  Used: {}\n  Mode: {:04o} ({})  Links: {}\n   Uid: {}  Gid: {}\nFileid: {}  Fsid: {:#x}  Rdev: {},{}\nAccess: {}\nModify: {}\nChange: {}",
        type_name(a.ftype),
        a.size,
        a.used,
        a.mode & 0o7777,
        mode_string(a.ftype, a.mode),
        a.nlink,
        a.uid,
        a.gid,
        a.fileid,
        a.fsid,
        a.rdev.specdata1,
        a.rdev.specdata2,
        time_string(a.atime),
        time_string(a.mtime),
        time_string(a.ctime),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes() {
        assert_eq!(mode_string(Ftype3::Dir, 0o755), "drwxr-xr-x");
        assert_eq!(mode_string(Ftype3::Reg, 0o4644), "-rwSr--r--");
        assert_eq!(mode_string(Ftype3::Dir, 0o1777), "drwxrwxrwt");
        assert_eq!(mode_string(Ftype3::Lnk, 0o777), "lrwxrwxrwx");
    }

    #[test]
    fn times() {
        let t = Nfstime3 {
            seconds: 0,
            nseconds: 5,
        };
        assert_eq!(time_string(t), "1970-01-01 00:00:00.000000005 UTC");
        let t = Nfstime3 {
            seconds: 1_709_210_096, // 2024-02-29 12:34:56 UTC
            nseconds: 0,
        };
        assert_eq!(short_time(t), "2024-02-29 12:34");
    }
}
