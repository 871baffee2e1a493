//! Instructions per payment, counted by valgrind's callgrind in the API process.
//!
//! Payments per second on a shared 2-core machine swing by 25-40% between runs of one
//! binary, so they cannot show whether a change to the hot path costs 3%. An instruction
//! count does not depend on what else the machine is doing: it compares a change with its
//! base to within a fraction of a percent. run.sh starts wallet-api under
//! `valgrind --tool=callgrind --instr-atstart=no` (CALLGRIND=1); this module switches the
//! instrumentation on for each payment window only (QR mints, OTP sends and setup are not
//! counted), and dumps the counters at the end of each phase.
use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result, bail};

pub struct Callgrind {
    pid: u32,
    /// valgrind's `--callgrind-out-file`: dump N is written to `<out>.N`.
    out: PathBuf,
    dumps: u32,
}

impl Callgrind {
    pub fn new(pid: u32, out: PathBuf) -> Self {
        Callgrind { pid, out, dumps: 0 }
    }

    /// Instrumentation on (counting) or off. callgrind_control returns once valgrind has
    /// acted on the command, so nothing sent after `set(true)` returns goes uncounted.
    pub fn set(&self, on: bool) -> Result<()> {
        control(&["-i", if on { "on" } else { "off" }], self.pid)
    }

    /// Writes the counters collected since the last dump and zeroes them: the instructions
    /// executed while the instrumentation was on.
    pub fn dump(&mut self) -> Result<u64> {
        control(&["-d"], self.pid)?;
        self.dumps += 1;
        let file = PathBuf::from(format!("{}.{}", self.out.display(), self.dumps));
        totals(&file)
    }
}

fn control(args: &[&str], pid: u32) -> Result<()> {
    let out = Command::new("callgrind_control")
        .args(args)
        .arg(pid.to_string())
        .output()
        .context("running callgrind_control (Debian's valgrind)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || text.contains("No active callgrind runs") {
        bail!("callgrind_control {args:?} {pid}: {text}");
    }
    Ok(())
}

/// The `totals:` line of a callgrind dump (instructions, the first event).
fn totals(file: &Path) -> Result<u64> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    text.lines()
        .find_map(|l| l.strip_prefix("totals:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .with_context(|| format!("no totals line in {}", file.display()))
}
