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
    /// Drain the dead-letter store. Every replay and purge is audited. Exit codes: 0 done,
    /// 1 error, 2 usage, 3 partial (a bulk action failed for some letters).
    Dlq {
        #[command(subcommand)]
        command: api::cli::dlq::Dlq,
    },
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    if let Some(Command::Dlq { command }) = cli.command {
        return api::cli::finish("wallet-worker", dlq(command).await);
    }
    api::cli::finish("wallet-worker", run().await.map_err(Into::into))
}

async fn dlq(command: api::cli::dlq::Dlq) -> Result<(), api::cli::Failure> {
    let config = api::config::Config::load()?;
    let db = api::cli::service_database(&config).await?;
    let done = api::cli::dlq::run(&db, command).await;
    api::store::close(&db).await;
    done
}

/// `wallet-worker run`: every job queue and the outbox relay, until SIGTERM or Ctrl-C.
async fn run() -> anyhow::Result<()> {
    let config = api::config::Config::load()?;
    api::infra::telemetry::init_service(config.json_logs(), "wallet-worker");
    if config.mode() == api::config::Mode::Embedded {
        api::migrate(&config).await?;
    }
    let state = api::build_state(config).await?;
    let runtime = api::jobs::Runtime::start(state.clone())?;
    let probe = api::serve_metrics(&state, api::config::ServiceProcess::Worker).await?;
    tracing::info!(metrics = %probe.addr, "wallet-worker running");
    wait_for_signal().await;
    tracing::info!("wallet-worker stopping: finishing running jobs");
    runtime.stop().await;
    probe.stop().await;
    api::store::close(&state.db).await;
    api::infra::telemetry::shutdown().await;
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
