//! The schema's seams for cells and for distribution by tenant (docs/scaling.md, section 6):
//! every table that holds one tenant's data carries the tenant (`merchant_id`, or
//! `enterprise_id` on the tables of the tenant's own structure), and every unique key of
//! such a table names it, but for the cases listed here. The lists are the doc's "not yet
//! so": a new table or unique key that leaves the tenant out fails this test until it is
//! added to them, and to the doc, with its reason.
use std::collections::BTreeSet;

use migration::{Migrator, MigratorTrait};
use sea_orm::{ConnectionTrait, Database, DbBackend, Statement};

const TENANT_COLUMNS: [&str; 2] = ["merchant_id", "enterprise_id"];

/// Tables that hold no one tenant's rows, or hold them without the tenant column.
const WITHOUT_TENANT: [&str; 11] = [
    // The tenant itself: its id is the tenant.
    "enterprises",
    // A platform's integration spans the enterprises it is linked to (a reference table).
    "integrations",
    // The operations staff and what they did: across tenants by design.
    "operators",
    "operator_audit_log",
    "operator_sessions",
    // Keyed by the caller (integration and scope), not the merchant. Not yet so.
    "idempotency_records",
    // Keyed by resource; a resource's tenant is on the resource. Not yet so.
    "resource_sequences",
    // Keyed by delivery; the delivery carries the tenant. Not yet so.
    "webhook_attempts",
    // Pieces of a report run's file; the run carries the tenant and every read goes
    // through it (`store::ledger::reports`).
    "report_chunks",
    // Schema bookkeeping.
    "seaql_migrations",
    "_sqlx_migrations",
];

/// Unique keys of tenant tables that do not name the tenant (primary keys aside: every
/// primary key is a UUIDv7 `id` alone, see the doc). Each is unique across tenants today
/// because its columns are ids of one tenant's rows.
const UNIQUE_WITHOUT_TENANT: [&str; 12] = [
    "cashback_rules(wallet_program_id,version)",
    "dead_letters(job_id)",
    "disputes(transaction_id)",
    "offers(payment_id)",
    "outbox(event_id)",
    "payment_rewards(payment_id,kind)",
    "qr_nonces(nonce_hash)",
    "reload_bonus_configs(wallet_program_id,version)",
    "sandbox_messages(job_id)",
    "topup_reversals(topup_id)",
    "wallets(wallet_user_id,wallet_program_id)",
    "webhook_deliveries(subscription_id,event_id)",
];

async fn names(db: &sea_orm::DatabaseConnection, sql: String, column: &str) -> Vec<String> {
    db.query_all_raw(Statement::from_string(DbBackend::Sqlite, sql))
        .await
        .unwrap()
        .iter()
        .map(|r| r.try_get::<String>("", column).unwrap())
        .collect()
}

#[tokio::test]
async fn every_tenant_table_and_its_unique_keys_name_the_tenant_but_the_listed_ones() {
    let db = Database::connect("sqlite::memory:").await.unwrap();
    Migrator::up(&db, None).await.unwrap();
    let tables = names(
        &db,
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' \
         ORDER BY name"
            .into(),
        "name",
    )
    .await;
    let mut without_tenant = BTreeSet::new();
    let mut unique_without = BTreeSet::new();
    for t in &tables {
        let columns = names(
            &db,
            format!("SELECT name FROM pragma_table_info('{t}')"),
            "name",
        )
        .await;
        if !columns.iter().any(|c| TENANT_COLUMNS.contains(&c.as_str())) {
            without_tenant.insert(t.clone());
            continue;
        }
        let uniques = names(
            &db,
            format!(
                "SELECT name FROM pragma_index_list('{t}') WHERE \"unique\" = 1 AND origin <> 'pk'"
            ),
            "name",
        )
        .await;
        for index in uniques {
            let cols = names(
                &db,
                format!("SELECT name FROM pragma_index_info('{index}') ORDER BY seqno"),
                "name",
            )
            .await;
            // A UUID primary key declared inline shows as a unique index on `id`.
            if cols == ["id"] || cols.iter().any(|c| TENANT_COLUMNS.contains(&c.as_str())) {
                continue;
            }
            unique_without.insert(format!("{t}({})", cols.join(",")));
        }
    }
    let expected: BTreeSet<String> = WITHOUT_TENANT
        .iter()
        .map(|s| s.to_string())
        .filter(|t| tables.contains(t))
        .collect();
    assert_eq!(without_tenant, expected, "tables without the tenant");
    let expected: BTreeSet<String> = UNIQUE_WITHOUT_TENANT
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(unique_without, expected, "unique keys without the tenant");
}
