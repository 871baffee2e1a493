//! `wallet-worker`: runs the job queues and the outbox relay, as many processes as needed.
use clap::{Parser, Subcommand};

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
    match cli.command.unwrap_or(Command::Run) {
        Command::Run => {
            api::telemetry::init_logging(config.json_logs());
            if config.mode() == api::config::Mode::Embedded {
                api::migrate(&config).await?;
            }
            let probe_addr = config.metrics_listen_addr.clone();
            let state = api::build_state(config).await?;
            let runtime = api::jobs::Runtime::start(state.clone())?;
            let probe = api::serve_endpoint(api::http::worker_routes(state), &probe_addr).await?;
            tracing::info!(metrics = %probe.addr, "wallet-worker running");
            wait_for_signal().await;
            tracing::info!("wallet-worker stopping: finishing running jobs");
            runtime.stop().await;
            probe.stop().await;
            Ok(())
        }
    }
}

async fn wait_for_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("installing a SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
