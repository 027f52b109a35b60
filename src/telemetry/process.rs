//! The process's own resource use, read from `/proc/self` (Linux), for the
//! `process_*` metrics every Prometheus client library exports. Any reading
//! that cannot be made (another OS, a restricted `/proc`) is `None` and its
//! metric is left out.

/// Linux reports CPU times in clock ticks of `USER_HZ`, which is 100 on
/// every architecture Linux supports for user space (`sysconf(_SC_CLK_TCK)`
/// would need `unsafe`, which this crate forbids).
const USER_HZ: f64 = 100.0;

/// One reading.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Reading {
    pub resident_bytes: Option<u64>,
    pub cpu_seconds: Option<f64>,
    pub open_fds: Option<u64>,
}

/// Reads `/proc/self`.
pub fn read() -> Reading {
    Reading {
        resident_bytes: std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| resident_bytes(&s)),
        cpu_seconds: std::fs::read_to_string("/proc/self/stat")
            .ok()
            .and_then(|s| cpu_seconds(&s)),
        open_fds: std::fs::read_dir("/proc/self/fd")
            .ok()
            .map(|d| d.count() as u64),
    }
}

/// `VmRSS:  12345 kB` of `/proc/self/status`, in bytes.
fn resident_bytes(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kb.checked_mul(1024)
}

/// utime + stime (fields 14 and 15) of `/proc/self/stat`, in seconds. The
/// command name (field 2) may hold spaces and parentheses: count from the
/// last `)`.
fn cpu_seconds(stat: &str) -> Option<f64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    // After ")": state is field 3, so utime (14) is the 12th from here.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) as f64 / USER_HZ)
}

#[cfg(test)]
mod tests;
