//! The audit after a fault, read from the database directly: every acknowledged payment
//! once and nothing else, balances, the ledger check, every committed event delivered.
use std::{
    collections::{HashMap, HashSet},
    time::{Duration, Instant},
};

use sea_orm::{ConnectionTrait, Database, DbBackend, Statement};
use serde_json::{Value, json};

use super::{FUNDING, Merchant, Outcome, cli, set_env};
use crate::webhooks::Receiver;

pub async fn rows(db: &sea_orm::DatabaseConnection, sql: &str) -> Vec<sea_orm::QueryResult> {
    db.query_all_raw(Statement::from_string(DbBackend::Postgres, sql))
        .await
        .expect("query")
}

/// A merchant's payments as stored: the ids under each order ref (the client's
/// Idempotency-Key), and what each wallet was debited in all.
pub struct Stored {
    pub by_key: HashMap<String, Vec<String>>,
    pub debited: HashMap<String, i64>,
}

impl Stored {
    pub async fn read(db: &sea_orm::DatabaseConnection, merchant_id: &str) -> Stored {
        let stored = rows(
            db,
            &format!(
                "SELECT order_ref, id::text AS id, wallet_id::text AS wallet, amount_minor \
                 FROM payments WHERE merchant_id = '{merchant_id}'"
            ),
        )
        .await;
        let mut by_key: HashMap<String, Vec<String>> = HashMap::new();
        let mut debited: HashMap<String, i64> = HashMap::new();
        for r in &stored {
            let key: String = r.try_get("", "order_ref").unwrap();
            by_key
                .entry(key)
                .or_default()
                .push(r.try_get("", "id").unwrap());
            *debited.entry(r.try_get("", "wallet").unwrap()).or_default() +=
                r.try_get::<i64>("", "amount_minor").unwrap();
        }
        Stored { by_key, debited }
    }
}

/// The merchant's wallets whose stored balance is not [`FUNDING`] minus `debited(wallet)`:
/// (wallet, stored, expected).
pub async fn wrong_balances(
    db: &sea_orm::DatabaseConnection,
    merchant: &Merchant,
    debited: impl Fn(&str) -> i64,
) -> Vec<(String, i64, i64)> {
    let mut wrong = Vec::new();
    for (_, wallet) in &merchant.customers {
        let r = rows(
            db,
            &format!("SELECT actual_minor FROM wallets WHERE id = '{wallet}'"),
        )
        .await;
        let actual: i64 = r[0].try_get("", "actual_minor").unwrap();
        let expected = FUNDING - debited(wallet);
        if actual != expected {
            wrong.push((wallet.clone(), actual, expected));
        }
    }
    wrong
}

/// What the audit found.
#[derive(Debug)]
pub struct Audit {
    pub acknowledged: usize,
    /// Payments whose definitive answer was not 200.
    pub refused: Vec<u16>,
    /// Order refs stored more than once.
    pub duplicates: usize,
    /// Acknowledged payments not stored exactly once under their acknowledged id.
    pub lost: Vec<String>,
    /// Stored payments no client saw acknowledged.
    pub phantoms: usize,
    /// (wallet, stored balance, funding minus acknowledged debits) where they differ.
    pub wrong_balances: Vec<(String, i64, i64)>,
    /// `wallet-api ledger check`'s exit status and output.
    pub ledger_ok: bool,
    pub ledger_output: String,
    pub committed_events: usize,
    /// Committed events the receiver had not accepted when the wait ended.
    pub undelivered: usize,
    pub longest_delivery_ms: i64,
    pub longest_payment: Duration,
    pub longest_payment_after_a_lost_connection: Duration,
}

impl Audit {
    /// Reads the database at `direct_url` (not through any proxy) and runs `wallet-api
    /// ledger check` against it with `env`; waits up to `delivery_wait` for the receiver to
    /// have accepted every committed event.
    pub async fn run(
        direct_url: &str,
        env: &[(String, String)],
        merchant: &Merchant,
        outcomes: &[Outcome],
        receiver: &Receiver,
        delivery_wait: Duration,
    ) -> Audit {
        let db = Database::connect(direct_url)
            .await
            .expect("direct connection");
        let stored = Stored::read(&db, &merchant.merchant_id).await;
        let by_key = &stored.by_key;
        let acked: Vec<&Outcome> = outcomes.iter().filter(|o| o.status == 200).collect();
        let lost = acked
            .iter()
            .filter(|o| {
                by_key.get(&o.key).map(|ids| ids.as_slice())
                    != Some(&[o.payment_id.clone().unwrap()][..])
            })
            .map(|o| o.key.clone())
            .collect();
        let acked_keys: HashSet<&str> = acked.iter().map(|o| o.key.as_str()).collect();
        let phantoms = by_key
            .keys()
            .filter(|k| !acked_keys.contains(k.as_str()))
            .count();
        let wrong_balances = wrong_balances(&db, merchant, |wallet| {
            acked
                .iter()
                .filter(|o| o.wallet == wallet)
                .map(|o| o.amount)
                .sum()
        })
        .await;
        let mut direct_env = env.to_vec();
        set_env(
            &mut direct_env,
            "WALLET_DATABASE_URL",
            direct_url.to_string(),
        );
        let ledger = cli(
            &["ledger", "check", "--merchant", &merchant.merchant_id],
            &direct_env,
        );
        let events = rows(
            &db,
            &format!(
                "SELECT event_id::text AS id, created_at FROM outbox WHERE kind = 'event' \
                 AND topic IN ('payment.completed', 'wallet.balance_changed') AND merchant_id = '{}'",
                merchant.merchant_id
            ),
        )
        .await;
        let committed: HashMap<String, chrono::DateTime<chrono::Utc>> = events
            .iter()
            .map(|r| {
                (
                    r.try_get("", "id").unwrap(),
                    r.try_get("", "created_at").unwrap(),
                )
            })
            .collect();
        let waiting = Instant::now();
        let undelivered = loop {
            let got = receiver.accepted_event_ids();
            let missing = committed.keys().filter(|id| !got.contains(*id)).count();
            if missing == 0 || waiting.elapsed() > delivery_wait {
                break missing;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        let mut first_seen: HashMap<String, chrono::DateTime<chrono::Utc>> = HashMap::new();
        for r in receiver.received().iter().filter(|r| r.answered == 200) {
            first_seen.entry(r.event_id()).or_insert(r.at);
        }
        let longest_delivery_ms = committed
            .iter()
            .filter_map(|(id, created)| {
                first_seen
                    .get(id)
                    .map(|at| (*at - *created).num_milliseconds())
            })
            .max()
            .unwrap_or(0);
        let longest = |f: &dyn Fn(&&Outcome) -> bool| {
            outcomes
                .iter()
                .filter(f)
                .map(Outcome::took)
                .max()
                .unwrap_or_default()
        };
        Audit {
            acknowledged: acked.len(),
            refused: outcomes
                .iter()
                .filter(|o| o.status != 200)
                .map(|o| o.status)
                .collect(),
            duplicates: by_key.values().filter(|ids| ids.len() > 1).count(),
            lost,
            phantoms,
            wrong_balances,
            ledger_ok: ledger.status.success(),
            ledger_output: format!(
                "{}{}",
                String::from_utf8_lossy(&ledger.stdout),
                String::from_utf8_lossy(&ledger.stderr)
            ),
            committed_events: committed.len(),
            undelivered,
            longest_delivery_ms,
            longest_payment: longest(&|_| true),
            longest_payment_after_a_lost_connection: longest(&|o| o.saw_transport_error),
        }
    }

    /// The figures, as JSON (the reports the suites write).
    pub fn figures(&self) -> Value {
        json!({
            "acknowledged_payments": self.acknowledged,
            "refused_payments": self.refused.len(),
            "duplicates": self.duplicates,
            "lost": self.lost.len(),
            "phantoms": self.phantoms,
            "wrong_balances": self.wrong_balances.len(),
            "ledger_check_passed": self.ledger_ok,
            "committed_events": self.committed_events,
            "undelivered_events": self.undelivered,
            "longest_payment_ms": self.longest_payment.as_millis() as u64,
            "longest_payment_after_a_lost_connection_ms": self.longest_payment_after_a_lost_connection.as_millis() as u64,
            "longest_event_delivery_ms": self.longest_delivery_ms,
        })
    }

    /// `extra` (a JSON object: what the suite did) with the audit's figures added.
    pub fn report(&self, mut extra: Value) -> Value {
        for (k, v) in self.figures().as_object().unwrap() {
            extra[k] = v.clone();
        }
        extra
    }

    /// Fails the test unless money held: enough load got through (`at_least` payments),
    /// nothing refused, lost, duplicated or invented, every balance right, the ledger check
    /// passed and every committed event delivered.
    pub fn assert_money_held(&self, at_least: usize) {
        let report = self.figures();
        assert!(
            self.acknowledged >= at_least,
            "too little load got through: {report}"
        );
        assert!(
            self.refused.is_empty(),
            "payments refused: {:?}",
            self.refused
        );
        assert_eq!(self.duplicates, 0, "{report}");
        assert!(
            self.lost.is_empty(),
            "acknowledged but not stored once: {:?} ({report})",
            self.lost
        );
        assert_eq!(self.phantoms, 0, "stored but never acknowledged: {report}");
        assert!(self.wrong_balances.is_empty(), "{:?}", self.wrong_balances);
        assert!(self.ledger_ok, "ledger check: {}", self.ledger_output);
        assert_eq!(
            self.undelivered, 0,
            "committed events never reached the receiver: {report}"
        );
    }
}
