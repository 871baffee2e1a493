//! `wallet-api`: serve the partner API, migrate, onboard tenants, print the OpenAPI document.
use clap::{Parser, Subcommand};

// glibc's allocator spent a fifth of a request's CPU under load (arena locking and
// consolidation across the runtime's threads); mimalloc's thread-local heaps do not.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "wallet-api",
    version,
    about = "Wallet & Loyalty Partner Service API"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the partner API (the default).
    Serve,
    /// Apply database migrations and exit.
    Migrate,
    /// Operator onboarding.
    Tenant {
        #[command(subcommand)]
        command: TenantCommand,
    },
    /// Print the OpenAPI 3.1 document served at GET /v1/openapi.
    Openapi,
    /// The service's own staff.
    Operator {
        #[command(subcommand)]
        command: OperatorCommand,
    },
    /// The wallet ledger.
    Ledger {
        #[command(subcommand)]
        command: LedgerCommand,
    },
}

#[derive(Subcommand)]
enum LedgerCommand {
    /// Recompute every wallet and grant balance from the ledger entries and check every
    /// posting balances. Exits 1 when anything disagrees.
    Check {
        /// Only this merchant (enterprise id).
        #[arg(long)]
        merchant: Option<uuid::Uuid>,
    },
}

#[derive(Subcommand)]
enum OperatorCommand {
    /// Create an operator credential (printed once) for the operator routes.
    Create {
        #[arg(long)]
        name: String,
        /// Print the result as one JSON object.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum TenantCommand {
    /// Create an integration with its merchant, brand, branches, wallet program and platform key.
    Create {
        #[arg(long)]
        name: String,
        /// A sandbox tenant: mock providers, never real money.
        #[arg(long)]
        sandbox: bool,
        #[arg(long, default_value = "EUR")]
        currency: String,
        #[arg(long, default_value_t = 1)]
        branches: u32,
        /// Print the result as one JSON object (the platform key is shown only here).
        #[arg(long)]
        json: bool,
    },
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run(Cli::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wallet-api: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    if let Some(Command::Openapi) = cli.command {
        api::infra::stdout::line(&api::http::openapi::build().json)?;
        return Ok(());
    }
    let config = api::config::Config::load()?;
    match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => api::serve_from_config(config).await,
        Command::Migrate => {
            api::infra::telemetry::init_logging(config.json_logs());
            api::migrate(&config).await?;
            eprintln!("migrations applied");
            Ok(())
        }
        Command::Tenant {
            command:
                TenantCommand::Create {
                    name,
                    sandbox,
                    currency,
                    branches,
                    json,
                },
        } => {
            let db = api::store::connect(&config).await?;
            if config.mode() == api::config::Mode::Embedded {
                api::migrate(&config).await?;
            }
            let created = api::domain::tenancy::create(
                &db,
                &api::domain::tenancy::NewTenant {
                    name,
                    is_sandbox: sandbox,
                    currency,
                    branches,
                },
                config.bcrypt_cost,
            )
            .await?;
            if json {
                api::infra::stdout::line(&serde_json::to_string(&created)?)?;
            } else {
                api::infra::stdout::line(&serde_json::to_string_pretty(&created)?)?;
                eprintln!("Keep platform_key safe: it is shown only now.");
            }
            api::store::close(&db).await;
            Ok(())
        }
        Command::Operator {
            command: OperatorCommand::Create { name, json },
        } => {
            let db = api::store::connect(&config).await?;
            if config.mode() == api::config::Mode::Embedded {
                api::migrate(&config).await?;
            }
            let created = api::domain::operators::create(&db, &name, config.bcrypt_cost)
                .await
                .map_err(|e| {
                    anyhow::anyhow!("{}", e.to_body()["message"].as_str().unwrap_or("failed"))
                })?;
            if json {
                api::infra::stdout::line(&serde_json::to_string(&created)?)?;
            } else {
                api::infra::stdout::line(&serde_json::to_string_pretty(&created)?)?;
                eprintln!("Keep operator_key safe: it is shown only now.");
            }
            api::store::close(&db).await;
            Ok(())
        }
        Command::Ledger {
            command: LedgerCommand::Check { merchant },
        } => {
            let db = api::store::connect(&config).await?;
            let report = api::store::ledger::check(&db, merchant).await?;
            api::store::close(&db).await;
            api::infra::stdout::line(&serde_json::to_string_pretty(&report)?)?;
            if report.is_consistent() {
                Ok(())
            } else {
                anyhow::bail!("the ledger and the stored balances disagree")
            }
        }
        Command::Openapi => unreachable!("handled above"),
    }
}
