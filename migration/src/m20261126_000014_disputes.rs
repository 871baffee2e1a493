//! Disputes of a payment or a top-up, and top-up reversals: a top-up's credit taken back
//! from the wallet (a chargeback the customer won, or the top-up detached from a customer
//! it was wrongly attached to). Keys get the `corrections` permission these need.
//!
//! Which keys get it: those that hold `settlements`, the back-office permission over the
//! same money (every key made before permissions existed holds it; a till's default set
//! does not). The name is written out here, not read from the service, because a landed
//! migration never changes.
use sea_orm_migration::{prelude::*, schema::*};

use crate::{drop_idx, idx};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_table(
            Table::create()
                .table("disputes")
                .col(pk_uuid("id"))
                .col(uuid("merchant_id"))
                .col(uuid("integration_id"))
                .col(uuid("transaction_id"))
                // payment | topup
                .col(string_len("transaction_kind", 16))
                .col(big_integer("amount_minor"))
                .col(string_len("currency", 3))
                .col(string_len("reason", 500))
                // open | merchant_won | customer_won
                .col(string_len("status", 16))
                .col(big_integer("recovered_minor"))
                .col(big_integer("unrecovered_minor"))
                .col(uuid_null("movement_id"))
                .col(string_len_null("resolution_note", 500))
                .col(uuid_null("opened_by_key_id"))
                .col(uuid_null("resolved_by_key_id"))
                .col(timestamp_with_time_zone("created_at"))
                .col(timestamp_with_time_zone_null("resolved_at"))
                .to_owned(),
        )
        .await?;
        m.create_index(idx(
            "ix_disputes_transaction",
            "disputes",
            &["transaction_id"],
        ))
        .await?;
        // At most one open dispute per transaction, whatever races: the same statement on
        // SQLite and PostgreSQL.
        m.get_connection()
            .execute_unprepared(
                "CREATE UNIQUE INDEX ux_disputes_open ON disputes (transaction_id) \
                 WHERE status = 'open'",
            )
            .await?;

        m.create_table(
            Table::create()
                .table("topup_reversals")
                .col(pk_uuid("id"))
                .col(uuid_uniq("topup_id"))
                .col(uuid("integration_id"))
                .col(uuid("merchant_id"))
                .col(uuid("wallet_id"))
                // chargeback | unattach
                .col(string_len("kind", 16))
                .col(big_integer("amount_minor"))
                .col(big_integer("unrecovered_minor"))
                .col(big_integer("bonus_clawed_back_minor"))
                .col(string_len_null("reason", 500))
                .col(uuid_null("posting_id"))
                .col(timestamp_with_time_zone("created_at"))
                .to_owned(),
        )
        .await?;
        // The transactions feed reads an integration's reversals newest first.
        m.create_index(idx(
            "ix_topup_reversals_integration",
            "topup_reversals",
            &["integration_id", "id"],
        ))
        .await?;
        m.get_connection()
            .execute_unprepared(
                "UPDATE api_keys SET permissions = permissions || ' corrections' \
                 WHERE (' ' || permissions || ' ') LIKE '% settlements %'",
            )
            .await
            .map(|_| ())
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.get_connection()
            .execute_unprepared(
                "UPDATE api_keys SET permissions = \
                 TRIM(REPLACE(' ' || permissions || ' ', ' corrections ', ' '))",
            )
            .await?;
        m.drop_index(drop_idx(
            "ix_topup_reversals_integration",
            "topup_reversals",
        ))
        .await?;
        m.drop_index(drop_idx("ix_disputes_transaction", "disputes"))
            .await?;
        m.get_connection()
            .execute_unprepared("DROP INDEX ux_disputes_open")
            .await?;
        for t in ["topup_reversals", "disputes"] {
            m.drop_table(Table::drop().table(Alias::new(t)).to_owned())
                .await?;
        }
        Ok(())
    }
}
