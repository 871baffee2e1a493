//! The Markdown summary: the phases of each mode beside the PostgreSQL ceiling at the same
//! concurrency, memory, and PASS/MISS against the targets of the payments issue.
use std::{collections::BTreeMap, path::PathBuf};

use anyhow::{Context, Result};
use clap::Args;

use crate::{PhaseResult, RunResult};

#[derive(Args)]
pub struct ReportArgs {
    /// A `payments-bench run --out` file; repeat for several modes.
    #[arg(long = "result")]
    results: Vec<PathBuf>,
    /// A line printed by pg-ceiling.sh (`pg_ceiling clients=16 tps=... p50_ms=... p99_ms=...`);
    /// repeat for each concurrency.
    #[arg(long = "ceiling")]
    ceilings: Vec<String>,
    /// Payments/s target of every many-wallet phase.
    #[arg(long, default_value_t = 1000.0)]
    target_pps: f64,
    /// Target share of the ceiling's tps at the same concurrency (0.5 = 50 %).
    #[arg(long, default_value_t = 0.5)]
    target_ratio: f64,
    /// p99 targets as CONCURRENCY=MS; repeatable.
    #[arg(long = "target-p99", default_value = "16=50")]
    target_p99: Vec<String>,
    /// API RSS target in MB (10^6 bytes), against the peak over the whole run.
    #[arg(long, default_value_t = 150.0)]
    target_rss_mb: f64,
    #[arg(long, default_value_t = 250.0)]
    hot_target_pps: f64,
    #[arg(long, default_value_t = 250.0)]
    hot_target_p99_ms: f64,
}

#[derive(Clone, Debug)]
struct Ceiling {
    clients: usize,
    tps: f64,
    p50_ms: f64,
    p99_ms: f64,
}

fn parse_ceiling(line: &str) -> Option<Ceiling> {
    let mut kv = BTreeMap::new();
    for part in line.split_whitespace().skip(1) {
        let (k, v) = part.split_once('=')?;
        kv.insert(k, v);
    }
    Some(Ceiling {
        clients: kv.get("clients")?.parse().ok()?,
        tps: kv.get("tps")?.parse().ok()?,
        p50_ms: kv.get("p50_ms")?.parse().ok()?,
        p99_ms: kv.get("p99_ms")?.parse().ok()?,
    })
}

fn mib(k: Option<u64>) -> String {
    k.map(|k| format!("{:.1}", k as f64 / 1024.0))
        .unwrap_or_else(|| "-".into())
}

/// Microseconds of CPU per payment as the tables and the log print them (`-` if unknown).
pub(crate) fn cpu(us: Option<f64>) -> String {
    us.map(|u| format!("{u:.0}")).unwrap_or_else(|| "-".into())
}

fn verdict(pass: bool) -> &'static str {
    if pass { "PASS" } else { "**MISS**" }
}

struct Target {
    mode: String,
    what: String,
    measured: String,
    pass: Option<bool>,
}

pub fn report(a: ReportArgs) -> Result<()> {
    let mut runs = Vec::new();
    for p in &a.results {
        let r: RunResult = serde_json::from_slice(
            &std::fs::read(p).with_context(|| format!("reading {}", p.display()))?,
        )
        .with_context(|| format!("parsing {}", p.display()))?;
        runs.push(r);
    }
    let ceilings: BTreeMap<usize, Ceiling> = a
        .ceilings
        .iter()
        .filter_map(|l| parse_ceiling(l))
        .map(|c| (c.clients, c))
        .collect();
    let p99_targets: BTreeMap<usize, f64> = a
        .target_p99
        .iter()
        .filter_map(|s| {
            let (c, ms) = s.split_once('=')?;
            Some((c.trim().parse().ok()?, ms.trim().parse().ok()?))
        })
        .collect();
    let ratio_of = |p: &PhaseResult| -> Option<f64> {
        let c = ceilings.get(&p.concurrency)?;
        (c.tps > 0.0 && p.phase == "payments").then(|| p.payments_per_sec / c.tps)
    };

    let mut out = String::new();
    let mut w = |s: String| {
        out.push_str(&s);
        out.push('\n');
    };
    w("## Payment phases".into());
    w(String::new());
    w("| mode | phase | credential | conc | wallets | rounds | secs | payments | payments/s | p50 ms | p99 ms | max ms | errors | pg ceiling tps (same clients) | ÷ ceiling | API peak RSS MiB (phase) | API CPU µs/payment | bench client CPU µs/payment | PostgreSQL CPU µs/payment | untimed prep s |".into());
    w(
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"
            .into(),
    );
    for r in &runs {
        for p in &r.phases {
            let ceiling = ceilings
                .get(&p.concurrency)
                .filter(|_| p.phase == "payments")
                .map(|c| format!("{:.1}", c.tps))
                .unwrap_or_else(|| "-".into());
            let ratio = ratio_of(p)
                .map(|x| format!("{:.0}%", 100.0 * x))
                .unwrap_or_else(|| "-".into());
            let errors = if p.errors == 0 {
                "0".to_string()
            } else {
                let codes: Vec<String> = p
                    .error_codes
                    .iter()
                    .map(|(k, n)| format!("{k}: {n}"))
                    .collect();
                format!("{} ({})", p.errors, codes.join("; "))
            };
            w(format!(
                "| {} | {} | {} | {} | {} | {} | {:.2} | {} | {:.1} | {:.2} | {:.2} | {:.1} | {} | {} | {} | {} | {} | {} | {} | {:.1} |",
                r.mode,
                p.phase,
                p.credential,
                p.concurrency,
                p.wallets,
                p.rounds,
                p.secs,
                p.payments,
                p.payments_per_sec,
                p.p50_ms,
                p.p99_ms,
                p.max_ms,
                errors,
                ceiling,
                ratio,
                mib(p.api_peak_kib),
                cpu(p.api_cpu_us_per_payment),
                cpu(p.client_cpu_us_per_payment),
                cpu(p.postgres_cpu_us_per_payment),
                p.prep_secs,
            ));
        }
    }
    if runs
        .iter()
        .flat_map(|r| &r.phases)
        .any(|p| p.api_instructions_per_payment.is_some())
    {
        w(String::new());
        w("## API instructions per payment (callgrind)".into());
        w(String::new());
        w("Counted by valgrind in the payment windows only; under valgrind the service runs many times slower, so the payments/s above are not the service's.".into());
        w(String::new());
        w("| mode | phase | credential | conc | payments | instructions/payment |".into());
        w("|---|---|---|---:|---:|---:|".into());
        for r in &runs {
            for p in &r.phases {
                if let Some(i) = p.api_instructions_per_payment {
                    w(format!(
                        "| {} | {} | {} | {} | {} | {:.0} |",
                        r.mode, p.phase, p.credential, p.concurrency, p.payments, i
                    ));
                }
            }
        }
    }
    w(String::new());
    w("## Memory and setup".into());
    w(String::new());
    w("| mode | API idle RSS MiB (before setup) | API peak RSS MiB (whole run, setup included) | worker peak RSS MiB | wallets | setup s (register + fund, 2 operator calls each) |".into());
    w("|---|---:|---:|---:|---:|---:|".into());
    for r in &runs {
        w(format!(
            "| {} | {} | {} | {} | {} | {:.1} |",
            r.mode,
            mib(r.api_idle_kib),
            mib(r.api_run_peak_kib),
            mib(r.worker_run_peak_kib),
            r.wallets + 1,
            r.setup_secs
        ));
    }

    // ---- targets
    let mut targets = Vec::new();
    for r in &runs {
        for p in r.phases.iter().filter(|p| p.phase == "payments") {
            let c = p.concurrency;
            targets.push(Target {
                mode: r.mode.clone(),
                what: format!("c{c}: ≥ {:.0} payments/s", a.target_pps),
                measured: format!("{:.1}/s", p.payments_per_sec),
                pass: Some(p.payments_per_sec >= a.target_pps),
            });
            targets.push(Target {
                mode: r.mode.clone(),
                what: format!(
                    "c{c}: ≥ {:.0}% of the pg ceiling at {c} clients",
                    100.0 * a.target_ratio
                ),
                measured: match (ratio_of(p), ceilings.get(&c)) {
                    (Some(x), Some(cl)) => format!(
                        "{:.0}% ({:.1} ÷ {:.1})",
                        100.0 * x,
                        p.payments_per_sec,
                        cl.tps
                    ),
                    _ => "no ceiling at this concurrency".into(),
                },
                pass: ratio_of(p).map(|x| x >= a.target_ratio),
            });
            targets.push(Target {
                mode: r.mode.clone(),
                what: format!("c{c}: zero errors"),
                measured: format!("{} of {}", p.errors, p.requests),
                pass: Some(p.errors == 0 && p.payments > 0),
            });
            if let Some(&ms) = p99_targets.get(&c) {
                targets.push(Target {
                    mode: r.mode.clone(),
                    what: format!("c{c}: p99 < {ms:.0} ms"),
                    measured: format!("{:.2} ms", p.p99_ms),
                    pass: Some(p.p99_ms < ms && p.payments > 0),
                });
            }
        }
        let limit_kib = a.target_rss_mb * 1e6 / 1024.0;
        targets.push(Target {
            mode: r.mode.clone(),
            what: format!(
                "API peak RSS < {:.0} MB ({:.1} MiB), whole run",
                a.target_rss_mb,
                limit_kib / 1024.0
            ),
            measured: r
                .api_run_peak_kib
                .map(|k| format!("{:.1} MiB", k as f64 / 1024.0))
                .unwrap_or_else(|| "not measured".into()),
            pass: r.api_run_peak_kib.map(|k| (k as f64) < limit_kib),
        });
        for p in r.phases.iter().filter(|p| p.phase == "hot wallet") {
            targets.push(Target {
                mode: r.mode.clone(),
                what: format!(
                    "hot wallet c{}: ≥ {:.0} payments/s",
                    p.concurrency, a.hot_target_pps
                ),
                measured: format!("{:.1}/s ({} errors)", p.payments_per_sec, p.errors),
                pass: Some(p.payments_per_sec >= a.hot_target_pps),
            });
            targets.push(Target {
                mode: r.mode.clone(),
                what: format!(
                    "hot wallet c{}: p99 < {:.0} ms",
                    p.concurrency, a.hot_target_p99_ms
                ),
                measured: format!("{:.2} ms", p.p99_ms),
                pass: Some(p.p99_ms < a.hot_target_p99_ms && p.payments > 0),
            });
        }
    }
    w(String::new());
    w("## Targets".into());
    w(String::new());
    w("| mode | target | measured | result |".into());
    w("|---|---|---|---|".into());
    for t in &targets {
        w(format!(
            "| {} | {} | {} | {} |",
            t.mode,
            t.what,
            t.measured,
            t.pass.map(verdict).unwrap_or("n/a")
        ));
    }
    let passed = targets.iter().filter(|t| t.pass == Some(true)).count();
    let missed = targets.iter().filter(|t| t.pass == Some(false)).count();
    w(String::new());
    w(format!(
        "{passed} targets met, {missed} missed, {} not measurable.",
        targets.len() - passed - missed
    ));

    w(String::new());
    w("## PostgreSQL ceiling (pg-ceiling.sh: the payment-shaped transaction straight against PostgreSQL, pgbench)".into());
    w(String::new());
    if ceilings.is_empty() {
        w("not run".into());
    } else {
        w("| clients | tps | p50 ms | p99 ms |".into());
        w("|---:|---:|---:|---:|".into());
        for c in ceilings.values() {
            w(format!(
                "| {} | {:.1} | {:.1} | {:.1} |",
                c.clients, c.tps, c.p50_ms, c.p99_ms
            ));
        }
    }
    let notes: Vec<String> = runs
        .iter()
        .flat_map(|r| r.notes.iter().map(move |n| format!("{}: {n}", r.mode)))
        .collect();
    if !notes.is_empty() {
        w(String::new());
        w("## Errors seen".into());
        w(String::new());
        for n in notes {
            w(format!("- {n}"));
        }
    }
    print!("{out}");
    Ok(())
}
