//! `payments-bench`: the load generator of bench/payments (run it through
//! bench/payments/run.sh, which starts the service and writes the summary; see README.md).
//!
//! `payments-bench run` against one running service: registers and funds W wallets (untimed),
//! then for each concurrency drives POST /v1/payments, each payment with its own freshly
//! minted QR credential and its own Idempotency-Key, in rounds (mint one QR per wallet,
//! untimed; then pay them all, timed) until the phase's timed seconds are reached; then the
//! hot-wallet phase: one wallet, OTP credentials sent and harvested from the sandbox SMS
//! inbox beforehand, paid at concurrency 32. Writes one JSON result.
//!
//! `payments-bench report` turns the JSON results and the pg-ceiling.sh lines into the
//! Markdown tables of results/latest.md, with PASS/MISS against the targets.
mod callgrind;
mod client;
mod load;
mod procfs;
mod report;
mod webhooks;

use std::{
    collections::HashMap,
    path::PathBuf,
    sync::atomic::{AtomicUsize, Ordering},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use futures::{StreamExt, TryStreamExt, stream};
use reqwest::{Url, header::HeaderValue};
use serde::{Deserialize, Serialize};
use serde_json::json;

use client::{Api, Prepared, Tally};
use procfs::Watched;

#[derive(Parser)]
#[command(
    name = "payments-bench",
    about = "Load generator for POST /v1/payments"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Set up wallets and run the timed payment phases against a running service.
    Run(RunArgs),
    /// Print the Markdown summary of one or more results, with the ceiling and the targets.
    Report(report::ReportArgs),
    /// Webhook delivery throughput and commit-to-delivery latency against a running service.
    Webhooks(webhooks::WebhookArgs),
    /// Overload and soak: open-loop sales at multiples of the measured capacity.
    Load(load::LoadArgs),
}

#[derive(Args)]
struct RunArgs {
    #[command(flatten)]
    target: client::Target,
    /// Wallets paid from in the concurrency phases: one QR each per round.
    #[arg(long, default_value_t = 1024)]
    wallets: usize,
    /// Timed seconds per concurrency phase (the sum of the rounds' payment windows).
    #[arg(long, default_value_t = 10.0)]
    secs: f64,
    /// The concurrency phases, in order.
    #[arg(long, value_delimiter = ',', default_value = "16,64")]
    concurrency: Vec<usize>,
    /// Concurrent operator calls while registering and funding wallets (each one bcrypt).
    #[arg(long, default_value_t = 4)]
    setup_concurrency: usize,
    /// Concurrent QR mints before each round.
    #[arg(long, default_value_t = 32)]
    mint_concurrency: usize,
    /// Concurrency of the hot-wallet phase; 0 skips it.
    #[arg(long, default_value_t = 32)]
    hot_concurrency: usize,
    /// OTPs sent (and harvested) for the hot wallet before its timed phase.
    #[arg(long, default_value_t = 3000)]
    hot_otps: usize,
    /// Upper bound on the hot-wallet phase's seconds (it ends earlier when the OTPs run out).
    #[arg(long, default_value_t = 10.0)]
    hot_secs: f64,
    /// OTPs per send batch; the sandbox inbox lists only the newest 200 per phone.
    #[arg(long, default_value_t = 150)]
    otp_batch: usize,
    /// The wallet-api process, for its RSS and CPU time.
    #[arg(long)]
    api_pid: Option<u32>,
    /// The wallet-worker process (production mode), for its RSS.
    #[arg(long)]
    worker_pid: Option<u32>,
    /// Clock ticks per second of /proc/PID/stat (`getconf CLK_TCK`).
    #[arg(long, default_value_t = 100)]
    clk_tck: u64,
    /// Where to write the JSON result.
    #[arg(long)]
    out: PathBuf,
    /// The API runs under `valgrind --tool=callgrind --instr-atstart=no` with this
    /// `--callgrind-out-file`: count its instructions in the payment windows (needs --api-pid).
    #[arg(long, requires = "api_pid")]
    callgrind_out: Option<PathBuf>,
}

#[derive(Deserialize)]
struct Tenant {
    merchant_id: String,
    platform_key: String,
    #[serde(default = "eur")]
    currency: String,
}

fn eur() -> String {
    "EUR".into()
}

#[derive(Deserialize)]
struct OperatorCreated {
    operator_key: String,
}

/// One timed phase.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct PhaseResult {
    /// `payments` (many wallets, QR) or `hot wallet` (one wallet, OTP).
    pub phase: String,
    pub credential: String,
    pub concurrency: usize,
    pub wallets: usize,
    /// Payment windows in the phase (mint, then pay, per round).
    pub rounds: usize,
    /// Sum of the payment windows, seconds.
    pub secs: f64,
    /// Responses received (any status).
    pub requests: u64,
    /// 2xx with a payment_id.
    pub payments: u64,
    pub payments_per_sec: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub errors: u64,
    pub error_codes: std::collections::BTreeMap<String, u64>,
    pub error_samples: Vec<String>,
    /// Untimed preparation of the phase (QR mints, or OTP sends and harvest), seconds.
    pub prep_secs: f64,
    /// VmHWM of the API over the phase (its preparation included), KiB.
    pub api_peak_kib: Option<u64>,
    /// API CPU time (user + system) inside the payment windows ÷ payments, microseconds.
    pub api_cpu_us_per_payment: Option<f64>,
    /// The same for payments-bench itself (the load generator shares the machine's cores).
    #[serde(default)]
    pub client_cpu_us_per_payment: Option<f64>,
    /// API instructions inside the payment windows ÷ payments (callgrind runs only).
    #[serde(default)]
    pub api_instructions_per_payment: Option<f64>,
}

#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct RunResult {
    pub mode: String,
    pub wallets: usize,
    /// Wallet registration + funding (2 operator calls per wallet), seconds.
    pub setup_secs: f64,
    pub api_idle_kib: Option<u64>,
    /// VmHWM of the API over the whole run (setup included), KiB.
    pub api_run_peak_kib: Option<u64>,
    pub worker_run_peak_kib: Option<u64>,
    pub phases: Vec<PhaseResult>,
    pub notes: Vec<String>,
}

fn log(msg: impl AsRef<str>) {
    eprintln!("[payments-bench] {}", msg.as_ref());
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = Cli::parse();
    let res = match cli.command {
        Command::Run(a) => run(a).await,
        Command::Report(a) => report::report(a),
        Command::Webhooks(a) => webhooks::run(a).await,
        Command::Load(a) => load::run(a).await,
    };
    match res {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("payments-bench: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn percentile_ms(sorted_us: &[u32], q: f64) -> f64 {
    if sorted_us.is_empty() {
        return 0.0;
    }
    let i = ((sorted_us.len() as f64 * q) as usize).min(sorted_us.len() - 1);
    sorted_us[i] as f64 / 1000.0
}

/// The terminal JWT, exchanged again when older than 8 minutes (it is valid for 10).
struct Token {
    bearer: HeaderValue,
    at: Instant,
}

struct Ctx {
    api: Api,
    tenant: Tenant,
    operator_key: String,
    token: Option<Token>,
    api_proc: Option<Watched>,
    worker_proc: Option<Watched>,
    clk_tck: u64,
    callgrind: Option<callgrind::Callgrind>,
}

impl Ctx {
    async fn bearer(&mut self) -> Result<HeaderValue> {
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

    /// CPU ticks so far of (wallet-api, this process).
    fn cpu(&self) -> Cpu {
        Cpu {
            api: self.api_proc.and_then(|p| procfs::cpu_ticks(p.pid)),
            client: procfs::cpu_ticks(std::process::id()),
        }
    }

    fn phase_start(&mut self) {
        if let Some(p) = &mut self.api_proc {
            p.phase_start();
        }
        if let Some(p) = &mut self.worker_proc {
            p.phase_start();
        }
    }

    fn phase_peak(&mut self) -> Option<u64> {
        if let Some(p) = &mut self.worker_proc {
            p.phase_peak();
        }
        self.api_proc.as_mut().and_then(Watched::phase_peak)
    }

    /// Callgrind runs: instructions counted from here to `count(false)`.
    fn count(&self, on: bool) -> Result<()> {
        match &self.callgrind {
            Some(c) => c.set(on),
            None => Ok(()),
        }
    }

    /// Callgrind runs: the phase's instructions per payment (the counters restart at zero).
    fn instructions(&mut self, mut r: PhaseResult) -> Result<PhaseResult> {
        if let Some(c) = &mut self.callgrind {
            let ir = c.dump()?;
            r.api_instructions_per_payment =
                (r.payments > 0).then(|| ir as f64 / r.payments as f64);
        }
        Ok(r)
    }

    fn check_alive(&self) -> Result<()> {
        if let Some(p) = &self.api_proc
            && !p.alive()
        {
            bail!("wallet-api (pid {}) is gone", p.pid);
        }
        Ok(())
    }
}

struct Wallet {
    user_id: String,
}

/// CPU ticks of the API and of the load generator, summed over the payment windows.
#[derive(Clone, Copy, Default)]
struct Cpu {
    api: Option<u64>,
    client: Option<u64>,
}

impl Cpu {
    fn zero() -> Cpu {
        Cpu {
            api: Some(0),
            client: Some(0),
        }
    }

    /// `self` plus the ticks from `a` to `b`; unknown once any reading is missing.
    fn add(self, a: Cpu, b: Cpu) -> Cpu {
        let f =
            |acc: Option<u64>, x: Option<u64>, y: Option<u64>| Some(acc? + y?.saturating_sub(x?));
        Cpu {
            api: f(self.api, a.api, b.api),
            client: f(self.client, a.client, b.client),
        }
    }
}

/// A phone number unique to this run: `+49151` and 8 digits.
fn phone(run_tag: u32, i: usize) -> String {
    format!("+49151{:02}{:06}", run_tag % 100, i)
}

async fn run(a: RunArgs) -> Result<()> {
    if a.concurrency.contains(&0) || a.wallets == 0 {
        bail!("--concurrency and --wallets must be positive");
    }
    let tenant: Tenant = serde_json::from_slice(
        &std::fs::read(&a.target.tenant)
            .with_context(|| format!("reading {}", a.target.tenant.display()))?,
    )
    .context("tenant json")?;
    let op: OperatorCreated = serde_json::from_slice(
        &std::fs::read(&a.target.operator)
            .with_context(|| format!("reading {}", a.target.operator.display()))?,
    )
    .context("operator json")?;
    let max_conc = a
        .concurrency
        .iter()
        .copied()
        .chain([a.hot_concurrency, a.mint_concurrency, a.setup_concurrency])
        .max()
        .unwrap_or(64);
    let http = client::client(max_conc)?;
    let mut ctx = Ctx {
        api: Api::new(http, &a.target.base),
        tenant,
        operator_key: op.operator_key,
        token: None,
        api_proc: a.api_pid.map(Watched::new),
        worker_proc: a.worker_pid.map(Watched::new),
        clk_tck: a.clk_tck.max(1),
        callgrind: a
            .api_pid
            .zip(a.callgrind_out.clone())
            .map(|(pid, out)| callgrind::Callgrind::new(pid, out)),
    };
    let api_idle_kib = a.api_pid.and_then(|p| procfs::status_kib(p, "VmRSS"));
    let run_tag = uuid::Uuid::new_v4().as_u128() as u32;
    let mut notes = Vec::new();

    // ---- setup: register and fund the wallets (untimed; operator calls each pay a bcrypt)
    let hot = a.hot_concurrency > 0;
    let n_setup = a.wallets + usize::from(hot);
    log(format!(
        "{}: registering and funding {n_setup} wallets ({} operator calls at concurrency {})",
        a.target.mode,
        2 * n_setup,
        a.setup_concurrency
    ));
    let t_setup = Instant::now();
    let done = AtomicUsize::new(0);
    let step = (n_setup / 10).max(1);
    let wallets: Vec<Wallet> = stream::iter(0..n_setup)
        .map(|i| {
            let (api, key, merchant, cur) = (
                &ctx.api,
                &ctx.operator_key,
                &ctx.tenant.merchant_id,
                &ctx.tenant.currency,
            );
            let done = &done;
            async move {
                // Index a.wallets is the hot wallet: enough for every OTP payment.
                let amount = if i == a.wallets { 100_000_000 } else { 100_000 };
                let (wallet_id, user_id) =
                    api.import_wallet(key, merchant, &phone(run_tag, i)).await?;
                api.credit(key, &wallet_id, amount, cur).await?;
                let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                if n.is_multiple_of(step) {
                    log(format!(
                        "  {n}/{n_setup} wallets ({:.0} s)",
                        t_setup.elapsed().as_secs_f64()
                    ));
                }
                anyhow::Ok(Wallet { user_id })
            }
        })
        .buffered(a.setup_concurrency.max(1))
        .try_collect()
        .await?;
    let setup_secs = t_setup.elapsed().as_secs_f64();
    log(format!(
        "{}: setup done in {setup_secs:.1} s ({:.1} operator calls/s)",
        a.target.mode,
        2.0 * n_setup as f64 / setup_secs
    ));
    let (pool, hot_wallet) = if hot {
        (&wallets[..a.wallets], Some(phone(run_tag, a.wallets)))
    } else {
        (&wallets[..], None)
    };

    let mut phases = Vec::new();
    for &c in &a.concurrency {
        let r = qr_phase(&mut ctx, &a, pool, c).await?;
        print_phase(&a.target.mode, &r);
        phases.push(r);
    }
    if let Some(hot_phone) = hot_wallet {
        let r = hot_phase(&mut ctx, &a, &hot_phone, run_tag).await?;
        print_phase(&a.target.mode, &r);
        phases.push(r);
    }
    for p in &phases {
        if p.errors > 0 {
            notes.push(format!(
                "{} at concurrency {}: {} errors: {:?}; e.g. {}",
                p.phase,
                p.concurrency,
                p.errors,
                p.error_codes,
                p.error_samples.first().map(String::as_str).unwrap_or("")
            ));
        }
    }
    if let Some(p) = &mut ctx.api_proc {
        p.phase_peak();
    }
    if let Some(p) = &mut ctx.worker_proc {
        p.phase_peak();
    }
    let result = RunResult {
        mode: a.target.mode.clone(),
        wallets: a.wallets,
        setup_secs,
        api_idle_kib,
        api_run_peak_kib: ctx.api_proc.map(|p| p.run_peak_kib),
        worker_run_peak_kib: ctx.worker_proc.map(|p| p.run_peak_kib),
        phases,
        notes,
    };
    std::fs::write(&a.out, serde_json::to_vec_pretty(&result)?)
        .with_context(|| format!("writing {}", a.out.display()))?;
    Ok(())
}

fn print_phase(mode: &str, p: &PhaseResult) {
    log(format!(
        "{mode}: {} c={}: {} payments in {:.2} s = {:.1}/s, p50 {:.2} ms, p99 {:.2} ms, max {:.1} ms, errors {}{}, api peak RSS {}, CPU µs/payment api {} client {}, prep {:.1} s{}",
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
        p.api_cpu_us_per_payment
            .map(|u| format!("{u:.0}"))
            .unwrap_or_else(|| "-".into()),
        p.client_cpu_us_per_payment
            .map(|u| format!("{u:.0}"))
            .unwrap_or_else(|| "-".into()),
        p.prep_secs,
        p.api_instructions_per_payment
            .map(|i| format!(", API instructions/payment {i:.0}"))
            .unwrap_or_default(),
    ));
}

fn payment_body(
    merchant: &str,
    credential: serde_json::Value,
    currency: &str,
    order_ref: &str,
) -> String {
    json!({
        "meta": client::meta(),
        "context": {"merchant_id": merchant},
        "credential": credential,
        "amount_minor": 1,
        "currency": currency,
        "order_ref": order_ref,
    })
    .to_string()
}

impl Ctx {
    /// The result of the phase that has just ended: its tally over the timed `window`, the API's
    /// peak RSS since `phase_start` and the CPU time per payment.
    #[allow(clippy::too_many_arguments)]
    fn finish(
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
            api_instructions_per_payment: None,
        }
    }
}

/// Many wallets, QR credentials: rounds of (mint one QR per wallet, untimed) then (pay with
/// all of them at concurrency `conc`, timed), until the timed seconds reach `--secs`.
async fn qr_phase(ctx: &mut Ctx, a: &RunArgs, pool: &[Wallet], conc: usize) -> Result<PhaseResult> {
    log(format!(
        "{}: payments phase, concurrency {conc}, {:.0} s in rounds of {} (QR minted per round)",
        a.target.mode,
        a.secs,
        pool.len()
    ));
    let url = Url::parse(&ctx.api.url("/payments"))?;
    let target = Duration::from_secs_f64(a.secs.max(0.1));
    ctx.phase_start();
    let (mut window, mut prep) = (Duration::ZERO, Duration::ZERO);
    let mut tally = Tally::default();
    let mut rounds = 0;
    let mut cpu = Cpu::zero();
    while window < target {
        ctx.check_alive()?;
        let bearer = ctx.bearer().await?;
        let t_prep = Instant::now();
        let merchant = &ctx.tenant.merchant_id;
        let currency = &ctx.tenant.currency;
        let api = &ctx.api;
        let bearer_ref = &bearer;
        let items: Vec<Prepared> = stream::iter(pool.iter().enumerate())
            .map(|(i, w)| async move {
                let qr = api.mint_qr(bearer_ref, merchant, &w.user_id).await?;
                let order = format!("bench-c{conc}-r{rounds}-{i}");
                anyhow::Ok(Prepared::new(payment_body(
                    merchant,
                    json!({"type": "qr", "qr_payload": qr}),
                    currency,
                    &order,
                )))
            })
            .buffer_unordered(a.mint_concurrency.max(1))
            .try_collect()
            .await?;
        prep += t_prep.elapsed();
        ctx.count(true)?;
        let cpu0 = ctx.cpu();
        let (t, w) =
            client::drive(&ctx.api.http, &url, &bearer, items, conc, target - window).await;
        let cpu1 = ctx.cpu();
        ctx.count(false)?;
        cpu = cpu.add(cpu0, cpu1);
        window += w;
        tally.merge(t);
        rounds += 1;
    }
    let r = ctx.finish(
        "payments",
        "qr",
        conc,
        pool.len(),
        rounds,
        window,
        tally,
        prep,
        cpu,
    );
    ctx.instructions(r)
}

/// The code and order of a sandbox OTP message: "... for order <order_ref>. Valid ...".
fn otp_of(m: &serde_json::Value) -> Option<(String, String)> {
    if m.get("kind")?.as_str()? != "otp" {
        return None;
    }
    let code = m.get("code")?.as_str()?.to_string();
    let body = m.get("body")?.as_str()?;
    let rest = &body[body.find(" for order ")? + " for order ".len()..];
    let order = rest.split(". Valid").next()?.trim_end_matches('.');
    Some((order.to_string(), code))
}

/// One wallet, OTP credentials: sends `--hot-otps` OTPs in batches (each batch's codes
/// harvested from the sandbox inbox before the next), then pays with them at
/// `--hot-concurrency` (timed) until they run out or `--hot-secs` passes.
async fn hot_phase(ctx: &mut Ctx, a: &RunArgs, phone: &str, run_tag: u32) -> Result<PhaseResult> {
    let conc = a.hot_concurrency;
    log(format!(
        "{}: hot wallet: sending {} OTPs in batches of {} and reading their codes",
        a.target.mode, a.hot_otps, a.otp_batch
    ));
    ctx.phase_start();
    let t_prep = Instant::now();
    let batch = a.otp_batch.clamp(1, 190);
    let mut creds: Vec<(String, String, String)> = Vec::with_capacity(a.hot_otps); // order, session, code
    let mut start = 0;
    while start < a.hot_otps {
        let end = (start + batch).min(a.hot_otps);
        let bearer = ctx.bearer().await?;
        let (api, merchant, cur) = (&ctx.api, &ctx.tenant.merchant_id, &ctx.tenant.currency);
        let bearer_ref = &bearer;
        let sent: Vec<(String, String)> = stream::iter(start..end)
            .map(|i| async move {
                let order = format!("hot-{run_tag:08x}-{i}");
                let session = api
                    .otp_send(bearer_ref, merchant, phone, 1, cur, &order)
                    .await?;
                anyhow::Ok((order, session))
            })
            .buffered(16)
            .try_collect()
            .await?;
        let mut want: HashMap<String, String> = sent.into_iter().collect();
        let mut codes: HashMap<String, String> = HashMap::with_capacity(want.len());
        let t_wait = Instant::now();
        loop {
            for m in ctx
                .api
                .sandbox_messages(&ctx.tenant.platform_key, phone)
                .await?
            {
                if let Some((order, code)) = otp_of(&m)
                    && want.contains_key(&order)
                {
                    codes.insert(order, code);
                }
            }
            if codes.len() == want.len() {
                break;
            }
            if t_wait.elapsed() > Duration::from_secs(120) {
                bail!(
                    "hot wallet: only {} of {} OTP messages arrived in the sandbox inbox within 120 s (is the job worker running?)",
                    codes.len(),
                    want.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for i in start..end {
            let order = format!("hot-{run_tag:08x}-{i}");
            let session = want.remove(&order).expect("sent");
            let code = codes.remove(&order).expect("harvested");
            creds.push((order, session, code));
        }
        start = end;
    }
    let prep = t_prep.elapsed();
    let prep_peak = ctx
        .api_proc
        .and_then(|p| procfs::status_kib(p.pid, "VmHWM"))
        .map(|k| format!("{:.1} MiB", k as f64 / 1024.0))
        .unwrap_or_else(|| "-".into());
    log(format!(
        "{}: hot wallet: {} OTPs ready in {:.1} s (API peak RSS so far in this phase: {prep_peak})",
        a.target.mode,
        creds.len(),
        prep.as_secs_f64()
    ));
    if prep > Duration::from_secs(240) {
        bail!(
            "hot wallet: sending the OTPs took {prep:?}; the first ones expire after 300 s (lower --hot-otps)"
        );
    }
    let merchant = ctx.tenant.merchant_id.clone();
    let currency = ctx.tenant.currency.clone();
    let items: Vec<Prepared> = creds
        .iter()
        .map(|(order, session, code)| {
            Prepared::new(payment_body(
                &merchant,
                json!({"type": "otp", "phone": phone, "otp_code": code, "otp_session_id": session}),
                &currency,
                order,
            ))
        })
        .collect();
    let bearer = ctx.bearer().await?;
    let url = Url::parse(&ctx.api.url("/payments"))?;
    ctx.count(true)?;
    let cpu0 = ctx.cpu();
    let (tally, window) = client::drive(
        &ctx.api.http,
        &url,
        &bearer,
        items,
        conc,
        Duration::from_secs_f64(a.hot_secs.max(0.1)),
    )
    .await;
    let cpu = Cpu::zero().add(cpu0, ctx.cpu());
    ctx.count(false)?;
    let r = ctx.finish("hot wallet", "otp", conc, 1, 1, window, tally, prep, cpu);
    ctx.instructions(r)
}
