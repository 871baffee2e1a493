//! What a run carries from phase to phase: the API client and the tenant, the terminal
//! token (renewed before it expires), the watched processes, the CPU and instruction counts
//! of the payment windows, and how a phase's tally becomes its `PhaseResult`.
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use reqwest::header::HeaderValue;

use crate::{
    PhaseResult, Tenant, callgrind,
    client::{self, Api, Tally},
    log,
    procfs::{self, Watched},
    report,
};

/// The terminal JWT, exchanged again when older than 8 minutes (it is valid for 10).
pub(crate) struct Token {
    pub(crate) bearer: HeaderValue,
    pub(crate) at: Instant,
}

pub(crate) struct Ctx {
    pub(crate) api: Api,
    pub(crate) tenant: Tenant,
    pub(crate) operator_key: String,
    pub(crate) token: Option<Token>,
    pub(crate) api_proc: Option<Watched>,
    pub(crate) worker_proc: Option<Watched>,
    pub(crate) clk_tck: u64,
    pub(crate) callgrind: Option<callgrind::Callgrind>,
    /// Whether the service's database is this machine's PostgreSQL (whose CPU is counted).
    pub(crate) postgres: bool,
}

impl Ctx {
    pub(crate) async fn bearer(&mut self) -> Result<HeaderValue> {
        if let Some(t) = &self.token
            && t.at.elapsed() < Duration::from_secs(480)
        {
            return Ok(t.bearer.clone());
        }
        let tok = self
            .api
            .token(&self.tenant.platform_key, &self.tenant.merchant_id)
            .await?;
        let bearer = client::bearer(&tok)?;
        self.token = Some(Token {
            bearer: bearer.clone(),
            at: Instant::now(),
        });
        Ok(bearer)
    }

    /// CPU ticks so far of (wallet-api, this process, PostgreSQL's processes).
    pub(crate) fn cpu(&self) -> Cpu {
        Cpu {
            api: self.api_proc.and_then(|p| procfs::cpu_ticks(p.pid)),
            client: procfs::cpu_ticks(std::process::id()),
            postgres: if self.postgres {
                procfs::cpu_ticks_of_all("postgres")
            } else {
                None
            },
        }
    }

    pub(crate) fn phase_start(&mut self) {
        if let Some(p) = &mut self.api_proc {
            p.phase_start();
        }
        if let Some(p) = &mut self.worker_proc {
            p.phase_start();
        }
    }

    pub(crate) fn phase_peak(&mut self) -> Option<u64> {
        if let Some(p) = &mut self.worker_proc {
            p.phase_peak();
        }
        self.api_proc.as_mut().and_then(Watched::phase_peak)
    }

    /// Callgrind runs: instructions counted from here to `count(false)`.
    pub(crate) fn count(&self, on: bool) -> Result<()> {
        match &self.callgrind {
            Some(c) => c.set(on),
            None => Ok(()),
        }
    }

    /// Callgrind runs: the phase's instructions per payment (the counters restart at zero).
    pub(crate) fn instructions(&mut self, mut r: PhaseResult) -> Result<PhaseResult> {
        if let Some(c) = &mut self.callgrind {
            let ir = c.dump()?;
            r.api_instructions_per_payment =
                (r.payments > 0).then(|| ir as f64 / r.payments as f64);
        }
        Ok(r)
    }

    pub(crate) fn check_alive(&self) -> Result<()> {
        if let Some(p) = &self.api_proc
            && !p.alive()
        {
            bail!("wallet-api (pid {}) is gone", p.pid);
        }
        Ok(())
    }
}

/// CPU ticks of the API and of the load generator, summed over the payment windows.
#[derive(Clone, Copy, Default)]
pub(crate) struct Cpu {
    pub(crate) api: Option<u64>,
    pub(crate) client: Option<u64>,
    pub(crate) postgres: Option<u64>,
}

impl Cpu {
    pub(crate) fn zero() -> Cpu {
        Cpu {
            api: Some(0),
            client: Some(0),
            postgres: Some(0),
        }
    }

    /// `self` plus the ticks from `a` to `b`; unknown once any reading is missing.
    pub(crate) fn add(self, a: Cpu, b: Cpu) -> Cpu {
        let f =
            |acc: Option<u64>, x: Option<u64>, y: Option<u64>| Some(acc? + y?.saturating_sub(x?));
        Cpu {
            api: f(self.api, a.api, b.api),
            client: f(self.client, a.client, b.client),
            postgres: f(self.postgres, a.postgres, b.postgres),
        }
    }
}

impl Ctx {
    /// The result of the phase that has just ended: its tally over the timed `window`, the API's
    /// peak RSS since `phase_start` and the CPU time per payment.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn finish(
        &mut self,
        phase: &str,
        credential: &str,
        conc: usize,
        wallets: usize,
        rounds: usize,
        window: Duration,
        mut t: Tally,
        prep: Duration,
        cpu: Cpu,
    ) -> PhaseResult {
        let api_peak_kib = self.phase_peak();
        let clk_tck = self.clk_tck;
        let per_payment = |ticks: Option<u64>| {
            ticks
                .filter(|_| t.ok > 0)
                .map(|ticks| ticks as f64 / clk_tck as f64 * 1e6 / t.ok as f64)
        };
        let api_cpu_us_per_payment = per_payment(cpu.api);
        let client_cpu_us_per_payment = per_payment(cpu.client);
        let postgres_cpu_us_per_payment = per_payment(cpu.postgres);
        t.lat_us.sort_unstable();
        let secs = window.as_secs_f64();
        let errors = t.error_count();
        PhaseResult {
            phase: phase.into(),
            credential: credential.into(),
            concurrency: conc,
            wallets,
            rounds,
            secs,
            requests: t.lat_us.len() as u64,
            payments: t.ok,
            payments_per_sec: if secs > 0.0 { t.ok as f64 / secs } else { 0.0 },
            p50_ms: percentile_ms(&t.lat_us, 0.50),
            p90_ms: percentile_ms(&t.lat_us, 0.90),
            p99_ms: percentile_ms(&t.lat_us, 0.99),
            max_ms: t.lat_us.last().map(|&u| u as f64 / 1000.0).unwrap_or(0.0),
            errors,
            error_codes: t.errors,
            error_samples: t.samples,
            prep_secs: prep.as_secs_f64(),
            api_peak_kib,
            api_cpu_us_per_payment,
            client_cpu_us_per_payment,
            postgres_cpu_us_per_payment,
            api_instructions_per_payment: None,
        }
    }
}

pub(crate) fn percentile_ms(sorted_us: &[u32], q: f64) -> f64 {
    if sorted_us.is_empty() {
        return 0.0;
    }
    let i = ((sorted_us.len() as f64 * q) as usize).min(sorted_us.len() - 1);
    sorted_us[i] as f64 / 1000.0
}

pub(crate) fn print_phase(mode: &str, p: &PhaseResult) {
    log(format!(
        "{mode}: {} c={}: {} payments in {:.2} s = {:.1}/s, p50 {:.2} ms, p99 {:.2} ms, max {:.1} ms, errors {}{}, api peak RSS {}, CPU µs/payment api {} client {} postgres {}, prep {:.1} s{}",
        p.phase,
        p.concurrency,
        p.payments,
        p.secs,
        p.payments_per_sec,
        p.p50_ms,
        p.p99_ms,
        p.max_ms,
        p.errors,
        if p.errors > 0 {
            format!(" {:?}", p.error_codes)
        } else {
            String::new()
        },
        p.api_peak_kib
            .map(|k| format!("{:.1} MiB", k as f64 / 1024.0))
            .unwrap_or_else(|| "-".into()),
        report::cpu(p.api_cpu_us_per_payment),
        report::cpu(p.client_cpu_us_per_payment),
        report::cpu(p.postgres_cpu_us_per_payment),
        p.prep_secs,
        p.api_instructions_per_payment
            .map(|i| format!(", API instructions/payment {i:.0}"))
            .unwrap_or_default(),
    ));
}
