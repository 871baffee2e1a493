//! `wallet-worker`: runs the job queues and the outbox relay, as many processes as needed.
use clap::{Parser, Subcommand};

// glibc's allocator spent a fifth of a request's CPU under load (arena locking and
// consolidation across the runtime's threads); mimalloc's thread-local heaps do not.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "wallet-worker",
    version,
    about = "Wallet & Loyalty Partner Service job worker"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run every job queue and the outbox relay (the default).
    Run,
    /// Drain the dead-letter store. Every replay and purge is audited.
    Dlq {
        #[command(subcommand)]
        command: Dlq,
    },
}

#[derive(clap::Args, Clone, Default)]
struct Filter {
    #[arg(long)]
    queue: Option<String>,
    #[arg(long)]
    job_type: Option<String>,
    #[arg(long)]
    merchant: Option<uuid::Uuid>,
    /// Only letters dead for at least this many seconds.
    #[arg(long)]
    older_than_secs: Option<i64>,
    /// Only letters whose last error contains this text.
    #[arg(long)]
    error: Option<String>,
}

#[derive(Subcommand)]
enum Dlq {
    /// List dead letters (newest first), one JSON object per line.
    List {
        #[command(flatten)]
        filter: Filter,
        /// dead (default), replayed or purged.
        #[arg(long, default_value = "dead")]
        status: String,
        #[arg(long, default_value_t = 100)]
        limit: u64,
    },
    /// Show one dead letter with its full error history.
    Show { id: uuid::Uuid },
    /// Re-enqueue one dead letter, or every dead one matching the filter (`--all`).
    Replay {
        id: Option<uuid::Uuid>,
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        filter: Filter,
    },
    /// Drop one dead letter, or every dead one matching the filter (`--all`), with a reason.
    Purge {
        id: Option<uuid::Uuid>,
        #[arg(long)]
        all: bool,
        #[arg(long)]
        reason: String,
        #[command(flatten)]
        filter: Filter,
    },
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run(Cli::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wallet-worker: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let config = api::config::Config::load()?;
    if let Some(Command::Dlq { command }) = cli.command {
        return dlq(config, command).await;
    }
    match cli.command.unwrap_or(Command::Run) {
        Command::Run => {
            api::infra::telemetry::init_logging(config.json_logs());
            if config.mode() == api::config::Mode::Embedded {
                api::migrate(&config).await?;
            }
            let probe_addr = config.metrics_listen_addr.clone();
            let state = api::build_state(config).await?;
            let runtime = api::jobs::Runtime::start(state.clone())?;
            let probe =
                api::serve_endpoint(api::http::worker_routes(state.clone()), &probe_addr).await?;
            tracing::info!(metrics = %probe.addr, "wallet-worker running");
            wait_for_signal().await;
            tracing::info!("wallet-worker stopping: finishing running jobs");
            runtime.stop().await;
            probe.stop().await;
            api::store::close(&state.db).await;
            Ok(())
        }
        Command::Dlq { .. } => unreachable!("handled above"),
    }
}

fn store_filter(f: &Filter, status: &str) -> api::store::dead_letters::Filter {
    api::store::dead_letters::Filter {
        status: Some(status.to_string()),
        queue: f.queue.clone(),
        job_type: f.job_type.clone(),
        merchant_id: f.merchant,
        dead_before: f
            .older_than_secs
            .map(|s| chrono::Utc::now() - chrono::Duration::seconds(s)),
        error_contains: f.error.clone(),
    }
}

fn view(d: &entities::dead_letter::Model) -> serde_json::Value {
    serde_json::json!({
        "id": d.id, "job_id": d.job_id, "queue": d.queue, "job_type": d.job_type,
        "merchant_id": d.merchant_id, "status": d.status, "attempts": d.attempts,
        "last_error": d.last_error, "first_enqueued_at": d.first_enqueued_at, "dead_at": d.dead_at,
        "replay_count": d.replay_count, "replayed_at": d.replayed_at,
        "purged_at": d.purged_at, "purge_reason": d.purge_reason,
    })
}

fn actor() -> String {
    format!(
        "cli:{}",
        std::env::var("USER").unwrap_or_else(|_| "operator".into())
    )
}

fn api_err(e: api::error::ApiError) -> anyhow::Error {
    anyhow::anyhow!("{}", e.to_body()["message"].as_str().unwrap_or("failed"))
}

/// The ids a replay or purge acts on: the one named, or every dead letter matching.
async fn targets(
    db: &sea_orm::DatabaseConnection,
    id: Option<uuid::Uuid>,
    all: bool,
    f: &Filter,
) -> anyhow::Result<Vec<uuid::Uuid>> {
    match (id, all) {
        (Some(id), false) => Ok(vec![id]),
        (None, true) => {
            Ok(
                api::store::dead_letters::list(db, &store_filter(f, "dead"), None, 10_000)
                    .await?
                    .into_iter()
                    .map(|d| d.id)
                    .collect(),
            )
        }
        _ => anyhow::bail!("name one dead letter id, or --all with optional filters"),
    }
}

async fn dlq(config: api::config::Config, cmd: Dlq) -> anyhow::Result<()> {
    let db = api::store::connect(&config).await?;
    let done = dlq_on(&db, cmd).await;
    api::store::close(&db).await;
    done
}

async fn dlq_on(db: &sea_orm::DatabaseConnection, cmd: Dlq) -> anyhow::Result<()> {
    match cmd {
        Dlq::List {
            filter,
            status,
            limit,
        } => {
            for d in
                api::store::dead_letters::list(db, &store_filter(&filter, &status), None, limit)
                    .await?
            {
                api::infra::stdout::line(&view(&d).to_string())?;
            }
        }
        Dlq::Show { id } => {
            let d = api::store::dead_letters::find(db, id)
                .await?
                .ok_or_else(|| anyhow::anyhow!("no dead letter {id}"))?;
            let mut v = view(&d);
            v["error_history"] = d.error_history.clone();
            v["payload"] = d.payload.clone();
            api::infra::stdout::line(&serde_json::to_string_pretty(&v)?)?;
        }
        Dlq::Replay { id, all, filter } => {
            for id in targets(db, id, all, &filter).await? {
                let out = api::domain::dead_letters::replay(db, id, &actor())
                    .await
                    .map_err(api_err)?;
                api::infra::stdout::line(
                    &serde_json::json!({"id": id, "outcome": format!("{out:?}")}).to_string(),
                )?;
            }
        }
        Dlq::Purge {
            id,
            all,
            reason,
            filter,
        } => {
            for id in targets(db, id, all, &filter).await? {
                let out = api::domain::dead_letters::purge(db, id, &actor(), &reason)
                    .await
                    .map_err(api_err)?;
                api::infra::stdout::line(
                    &serde_json::json!({"id": id, "outcome": format!("{out:?}")}).to_string(),
                )?;
            }
        }
    }
    Ok(())
}

async fn wait_for_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("installing a SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
