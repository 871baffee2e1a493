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
mod ctx;
mod load;
mod phases;
mod procfs;
mod report;
mod webhooks;

use std::{
    path::PathBuf,
    sync::atomic::{AtomicUsize, Ordering},
    time::Instant,
};

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use futures::{StreamExt, TryStreamExt, stream};
use serde::{Deserialize, Serialize};

use client::Api;
use ctx::{Ctx, print_phase};
use phases::{hot_phase, qr_phase};
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
    /// The same for every `postgres` process of the machine (production modes): the
    /// database's share of a payment, index upkeep included.
    #[serde(default)]
    pub postgres_cpu_us_per_payment: Option<f64>,
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

struct Wallet {
    user_id: String,
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
        postgres: a.target.mode != "embedded",
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
