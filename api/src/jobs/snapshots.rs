//! The snapshot builder: on every worker, every `WALLET_SNAPSHOT_INTERVAL_SECS`, each
//! merchant's sealed hours become balance snapshots (`domain::ledger::snapshots`). Safe on
//! any number of workers at once: each hour is written by whichever builder moves the
//! merchant's mark first, and the others skip it.
use std::time::Duration;

use tokio::sync::watch;

use crate::{domain::ledger::snapshots, state::AppState};

pub async fn run_loop(state: AppState, mut stop: watch::Receiver<bool>) {
    let every = Duration::from_secs(state.config.snapshot_interval_secs);
    loop {
        match snapshots::build_all(&state.db).await {
            Ok(p) if p.pieces > 0 => tracing::info!(
                merchants = p.merchants,
                pieces = p.pieces,
                "ledger snapshots built"
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = ?e, "building ledger snapshots failed"),
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.changed() => return,
        }
    }
}
