//! `wallet-api`: serve the partner API, migrate, onboard tenants, print the OpenAPI document.
use api::cli::Failure;
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
    /// Recompute every wallet and grant balance from the ledger entries, check every
    /// posting balances, and build every stored balance snapshot again to compare. Exits 1
    /// when anything disagrees.
    Check {
        /// Only this merchant (enterprise id).
        #[arg(long)]
        merchant: Option<uuid::Uuid>,
        /// Print the report as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Drop the daily balance snapshots (docs/accounting.md, "Snapshots") so the workers
    /// build them again from the ledger: after a check found one that disagrees.
    ResetSnapshots {
        /// Only this merchant (enterprise id).
        #[arg(long)]
        merchant: Option<uuid::Uuid>,
    },
    /// Build the sealed hours' snapshots now, as the workers do every
    /// WALLET_SNAPSHOT_INTERVAL_SECS (safe beside them), and say how many pieces (a UTC
    /// day's hours, or fewer) it wrote.
    BuildSnapshots {
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
    /// Disable an operator: its key stops at once and every console session it had ends.
    Disable(OperatorStatusArgs),
    /// Enable a disabled operator again. Sessions from before stay ended: it signs in anew.
    Enable(OperatorStatusArgs),
}

#[derive(clap::Args)]
struct OperatorStatusArgs {
    /// The operator's id (`operator_id`, as `operator create` printed it).
    #[arg(long)]
    id: uuid::Uuid,
    /// Why (kept in the audit log). Required.
    #[arg(long)]
    reason: String,
    /// Print the result as one JSON object.
    #[arg(long)]
    json: bool,
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

/// Exit codes: 0 done, 1 error, 2 usage (a bad flag or value), as `api::cli` documents.
#[tokio::main]
async fn main() -> std::process::ExitCode {
    api::cli::finish("wallet-api", run(Cli::parse()).await)
}

/// What a command prints: `--json`'s one compact object, or a readable table of its fields.
fn print(v: &impl serde::Serialize, json: bool) -> Result<(), Failure> {
    let v = serde_json::to_value(v)?;
    if json {
        api::infra::stdout::line(&v.to_string())?;
    } else {
        api::infra::stdout::line(&api::cli::table::facts(&v))?;
    }
    Ok(())
}

async fn set_operator_status(
    config: &api::config::Config,
    a: OperatorStatusArgs,
    active: bool,
) -> Result<(), Failure> {
    let db = api::cli::service_database(config).await?;
    let changed = api::domain::operators::sessions::set_status(
        &db,
        &api::cli::actor(),
        a.id,
        active,
        &a.reason,
    )
    .await;
    api::store::close(&db).await;
    print(&changed?, a.json)
}

async fn run(cli: Cli) -> Result<(), Failure> {
    if let Some(Command::Openapi) = cli.command {
        api::infra::stdout::line(&api::http::openapi::build().json)?;
        return Ok(());
    }
    let config = api::config::Config::load()?;
    match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => Ok(api::serve_from_config(config).await?),
        Command::Migrate => {
            api::infra::telemetry::init_logging(config.json_logs());
            let migrated = api::migrate(&config).await?;
            eprintln!("{migrated}");
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
            let created = api::domain::platform::tenancy::create(
                &db,
                &api::domain::platform::tenancy::NewTenant {
                    name,
                    is_sandbox: sandbox,
                    currency,
                    branches,
                },
                config.bcrypt_cost,
                config.cell.as_deref(),
            )
            .await?;
            print(&created, json)?;
            if !json {
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
            let created = api::domain::operators::create(&db, &name, config.bcrypt_cost).await?;
            print(&created, json)?;
            if !json {
                eprintln!("Keep operator_key safe: it is shown only now.");
            }
            api::store::close(&db).await;
            Ok(())
        }
        Command::Operator {
            command: OperatorCommand::Disable(a),
        } => set_operator_status(&config, a, false).await,
        Command::Operator {
            command: OperatorCommand::Enable(a),
        } => set_operator_status(&config, a, true).await,
        Command::Ledger {
            command: LedgerCommand::Check { merchant, json },
        } => {
            let db = api::cli::service_database(&config).await?;
            let report =
                api::domain::operators::check_ledger(&db, &api::cli::actor(), merchant, true).await;
            api::store::close(&db).await;
            let report = report?;
            print(&report, json)?;
            if report.is_consistent() {
                Ok(())
            } else {
                Err(Failure::Error(
                    "the ledger and the stored balances disagree".into(),
                ))
            }
        }
        Command::Ledger {
            command: LedgerCommand::ResetSnapshots { merchant },
        } => {
            let db = api::cli::service_database(&config).await?;
            let n =
                api::domain::operators::reset_snapshots(&db, &api::cli::actor(), merchant).await;
            api::store::close(&db).await;
            println!(
                "snapshots dropped for {} merchant(s); the workers build them again",
                n?
            );
            Ok(())
        }
        Command::Ledger {
            command: LedgerCommand::BuildSnapshots { merchant },
        } => {
            let db = api::cli::service_database(&config).await?;
            let started = std::time::Instant::now();
            let pass = api::domain::ledger::snapshots::build_now(&db, merchant).await;
            api::store::close(&db).await;
            let pass = pass?;
            println!(
                "{} piece(s) of at most a UTC day of {} merchant(s) built in {:.1} s",
                pass.pieces,
                pass.merchants,
                started.elapsed().as_secs_f64()
            );
            Ok(())
        }
        Command::Openapi => unreachable!("handled above"),
    }
}
