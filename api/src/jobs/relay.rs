//! Moves committed outbox rows onto the queues. Runs in the worker process (any number of
//! them: PostgreSQL's SKIP LOCKED shares the backlog) and inside the API in embedded mode.
use std::time::Duration;

use tokio::sync::watch;

use super::{JobEnvelope, Queue};
use crate::{state::AppState, store};

const BATCH: i64 = 200;

/// Relays one batch; returns how many rows it took.
pub async fn run_once(state: &AppState) -> anyhow::Result<usize> {
    let rows = store::relay::relay_batch(&state.db, BATCH, |row| {
        (row.kind == "job").then(|| {
            let env = JobEnvelope::first(
                row.event_id,
                &row.topic,
                row.merchant_id,
                row.payload.clone(),
                row.created_at,
            );
            (row.topic.clone(), Queue::task(&env, Duration::ZERO))
        })
        // Catalog events are marked relayed; their webhook fan-out arrives with issue #7.
    })
    .await?;
    if !rows.is_empty() {
        metrics::counter!("outbox_relayed_total").increment(rows.len() as u64);
    }
    Ok(rows.len())
}

pub async fn run_loop(state: AppState, mut stop: watch::Receiver<bool>) {
    let poll = Duration::from_millis(state.config.outbox_poll_ms);
    loop {
        let wait = match run_once(&state).await {
            // A full batch means more is waiting: go again at once.
            Ok(n) if n as i64 == BATCH => Duration::ZERO,
            Ok(_) => poll,
            Err(e) => {
                tracing::warn!(error = %e, "outbox relay failed; retrying");
                poll.max(Duration::from_secs(1))
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.changed() => return,
        }
    }
}
