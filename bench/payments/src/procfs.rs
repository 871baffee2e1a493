//! Memory and CPU of the service's processes, read from /proc (Linux only). Every reader
//! returns None when the process is gone or the file cannot be read: the benchmark then
//! reports "-" instead of failing.
use std::fs;

/// A field of /proc/PID/status in KiB (`VmRSS`, `VmHWM`).
pub fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let text = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(field)?.strip_prefix(':')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// Resets VmHWM to the current VmRSS (`echo 5 > /proc/PID/clear_refs`), so that the next
/// VmHWM read is the peak since now. Returns the peak before the reset.
pub fn take_hwm(pid: u32) -> Option<u64> {
    let before = status_kib(pid, "VmHWM");
    // Not fatal: without permission the peak covers a longer span, which only overstates it.
    let _ = fs::write(format!("/proc/{pid}/clear_refs"), "5");
    before
}

/// User + system CPU time of the process (all threads), in clock ticks.
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Field 2 (comm) may contain spaces and parentheses: count from the last ')'.
    let after = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // After ')' the first field is field 3 (state); utime is field 14, stime field 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// User + system CPU time of every process named `comm` (`postgres`: the server and its
/// backends), in clock ticks. A process that exits between two readings takes its ticks
/// with it, so this is for servers whose processes outlive the window (a pool's backends).
pub fn cpu_ticks_of_all(comm: &str) -> Option<u64> {
    let mut total = 0;
    for entry in fs::read_dir("/proc").ok()?.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let is =
            fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim_end() == comm);
        if is {
            total += cpu_ticks(pid).unwrap_or(0);
        }
    }
    Some(total)
}

/// Tracks one process: the run's peak RSS across the per-phase resets, and CPU time.
#[derive(Clone, Copy, Debug)]
pub struct Watched {
    pub pid: u32,
    pub run_peak_kib: u64,
}

impl Watched {
    pub fn new(pid: u32) -> Watched {
        Watched {
            pid,
            run_peak_kib: status_kib(pid, "VmHWM").unwrap_or(0),
        }
    }

    /// Starts a phase: folds the peak so far into the run's peak, then resets VmHWM.
    pub fn phase_start(&mut self) {
        if let Some(k) = take_hwm(self.pid) {
            self.run_peak_kib = self.run_peak_kib.max(k);
        }
    }

    /// The peak since `phase_start` (also folded into the run's peak).
    pub fn phase_peak(&mut self) -> Option<u64> {
        let k = status_kib(self.pid, "VmHWM")?;
        self.run_peak_kib = self.run_peak_kib.max(k);
        Some(k)
    }

    pub fn alive(&self) -> bool {
        std::path::Path::new(&format!("/proc/{}/status", self.pid)).exists()
    }
}
