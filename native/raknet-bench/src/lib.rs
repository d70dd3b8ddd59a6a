//! What the benchmark binaries share.

/// Clock ticks per second of `/proc/<pid>/stat`'s CPU times (USER_HZ, 100 on Linux).
pub const USER_HZ: f64 = 100.0;

/// utime + stime of `pid` (all its threads), in clock ticks ([`USER_HZ`]); `None` where
/// `/proc` is missing.
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name, in parentheses, may hold spaces: the fields count from its end.
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}
