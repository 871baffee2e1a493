//! Payments of one wallet take turns in this process, first come first served, before
//! they open a database transaction.
//!
//! The database's row lock on the wallet is what keeps a balance right; this queue only
//! decides who waits where. Without it every payment of a busy wallet holds a pooled
//! connection while it waits on the row lock, and the lock is not handed out in arrival
//! order (a newcomer that finds the row free between two commits goes first), so a few
//! callers waited many times longer than the rest. In turn, at most two payments of the
//! wallet hold a connection on this replica (one holds the row lock, the next prepares and
//! then waits for it alone; a payment gives up its turn once it holds the lock), and the
//! others wait in memory, in order. The queue is bounded:
//! past `MAX_WAITING` callers, or after the configured wait, a caller gets the same
//! retryable error as a row lock that timed out.
use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::sync::{Mutex as Turn, OwnedMutexGuard};
use uuid::Uuid;

use crate::error::{ApiError, Subsystem};

/// Callers of one wallet waiting on this replica, beyond which a new one is refused at once.
pub const MAX_WAITING: usize = 64;

struct Line {
    turn: Arc<Turn<()>>,
    /// Callers holding or waiting for the turn.
    callers: usize,
}

#[derive(Default)]
pub struct WalletQueue {
    lines: Mutex<HashMap<Uuid, Line>>,
}

/// A wallet's turn; the next caller's comes when it is dropped.
pub struct MyTurn {
    queue: Arc<WalletQueue>,
    wallet: Uuid,
    guard: Option<OwnedMutexGuard<()>>,
}

impl Drop for MyTurn {
    fn drop(&mut self) {
        self.guard.take();
        self.queue.leave(self.wallet);
    }
}

fn busy(cause: &str) -> ApiError {
    ApiError::Unavailable {
        subsystem: Subsystem::Database,
        cause: cause.to_string(),
    }
}

impl WalletQueue {
    /// Waits for `wallet`'s turn, at most `wait`.
    pub async fn take(self: &Arc<Self>, wallet: Uuid, wait: Duration) -> Result<MyTurn, ApiError> {
        let turn = {
            let mut lines = self.lines.lock().unwrap_or_else(|p| p.into_inner());
            let line = lines.entry(wallet).or_insert_with(|| Line {
                turn: Arc::new(Turn::new(())),
                callers: 0,
            });
            if line.callers > MAX_WAITING {
                return Err(busy("too many payments waiting for this wallet"));
            }
            line.callers += 1;
            line.turn.clone()
        };
        // Counted in from here on: every way out below leaves the line.
        let mut mine = MyTurn {
            queue: self.clone(),
            wallet,
            guard: None,
        };
        // tokio's mutex hands the turn out in the order callers asked for it.
        match tokio::time::timeout(wait, turn.lock_owned()).await {
            Ok(guard) => {
                mine.guard = Some(guard);
                Ok(mine)
            }
            Err(_) => Err(busy("waited too long for this wallet's turn")),
        }
    }

    fn leave(&self, wallet: Uuid) {
        let mut lines = self.lines.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(line) = lines.get_mut(&wallet) {
            line.callers -= 1;
            if line.callers == 0 {
                lines.remove(&wallet);
            }
        }
    }

    /// Wallets with callers holding or waiting for a turn (for tests and metrics).
    pub fn busy_wallets(&self) -> usize {
        self.lines.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn callers_of_one_wallet_get_their_turns_in_arrival_order_and_the_line_is_cleared() {
        let q = Arc::new(WalletQueue::default());
        let w = Uuid::now_v7();
        let first = q.take(w, Duration::from_secs(1)).await.unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut waiting = Vec::new();
        for i in 0..5 {
            let (q, order) = (q.clone(), order.clone());
            waiting.push(tokio::spawn(async move {
                let _t = q.take(w, Duration::from_secs(5)).await.unwrap();
                order.lock().unwrap().push(i);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }));
            // Let each one join the line before the next.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // Another wallet is not held up by this one.
        let other = q.take(Uuid::now_v7(), Duration::from_millis(50)).await;
        assert!(other.is_ok());
        drop(other);
        drop(first);
        for t in waiting {
            t.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
        assert_eq!(q.busy_wallets(), 0, "no line is left behind");
    }

    #[tokio::test]
    async fn a_caller_waits_only_so_long_and_a_full_line_refuses_at_once() {
        let q = Arc::new(WalletQueue::default());
        let w = Uuid::now_v7();
        let held = q.take(w, Duration::from_secs(1)).await.unwrap();
        let started = std::time::Instant::now();
        let late = q.take(w, Duration::from_millis(50)).await;
        assert!(matches!(late, Err(ApiError::Unavailable { .. })));
        assert!(started.elapsed() < Duration::from_secs(1));

        let mut line = Vec::new();
        for _ in 0..MAX_WAITING {
            let q = q.clone();
            line.push(tokio::spawn(async move {
                q.take(w, Duration::from_secs(5)).await.map(drop)
            }));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let started = std::time::Instant::now();
        let refused = q.take(w, Duration::from_secs(5)).await;
        assert!(matches!(refused, Err(ApiError::Unavailable { .. })));
        assert!(started.elapsed() < Duration::from_millis(500), "at once");
        drop(held);
        for t in line {
            assert!(t.await.unwrap().is_ok(), "the waiting line is served");
        }
        assert_eq!(q.busy_wallets(), 0);
    }
}
