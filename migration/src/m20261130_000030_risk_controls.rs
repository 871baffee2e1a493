//! Risk controls at the till (docs/risk.md):
//! - `risk_blocks`: one row per thing (a terminal, branch, merchant or wallet) and rule that
//!   has crossed a threshold, with its latest crossing: when, until when, the counts, and
//!   whether an operator cleared it. A new crossing while one is active changes no row's
//!   crossing time, so its `risk.limit_reached` event fires once.
//! - `risk_limits`: the velocity limits a merchant sets, separately for sandbox and live.
//! - `risk_terminal_usage`: a terminal's payments of the last hour by minute, one row per
//!   terminal, locked by a payment that checks the terminal's hourly limit (so concurrent
//!   payments of one terminal are counted one after another).
//! - `qr_nonces.checkout_session_id`: a code minted in a checkout session pays only there.
//!
//! Keys that hold `settlements` (the back-office permission over the same money: every
//! key made before permissions existed holds it, a till's default set does not) get `risk`,
//! the permission the limits need. The name is written out here: a landed migration never
//! changes.
use sea_orm_migration::{prelude::*, schema::*};

use crate::{add_column, drop_column, idx};

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
                .table("risk_blocks")
                .col(pk_uuid("id"))
                .col(uuid("merchant_id"))
                .col(boolean("is_sandbox"))
                // terminal | branch | merchant | wallet
                .col(string_len("scope", 16))
                // What in the scope: `terminal:<id>` or `key:<id>`, a branch, merchant or
                // wallet id.
                .col(string_len("subject", 160))
                .col(string_len("rule", 48))
                .col(big_integer("threshold"))
                .col(big_integer("window_secs"))
                // What was counted at the latest crossing, and since.
                .col(big_integer("observed"))
                .col(timestamp_with_time_zone("crossed_at"))
                .col(timestamp_with_time_zone("until"))
                .col(timestamp_with_time_zone("last_seen_at"))
                .col(big_integer("crossings"))
                .col(timestamp_with_time_zone_null("cleared_at"))
                .col(string_len_null("cleared_by", 64))
                .col(string_len_null("clear_reason", 200))
                .to_owned(),
        )
        .await?;
        let mut one = idx(
            "ux_risk_blocks_subject_rule",
            "risk_blocks",
            &["merchant_id", "is_sandbox", "scope", "subject", "rule"],
        );
        m.create_index(one.unique().to_owned()).await?;
        m.create_index(idx("ix_risk_blocks_until", "risk_blocks", &["until"]))
            .await?;

        m.create_table(
            Table::create()
                .table("risk_limits")
                .col(uuid("merchant_id"))
                .col(boolean("is_sandbox"))
                .col(big_integer_null("wallet_payments_24h_count"))
                .col(big_integer_null("wallet_payments_24h_minor"))
                .col(big_integer_null("wallet_payments_7d_count"))
                .col(big_integer_null("wallet_payments_7d_minor"))
                .col(big_integer_null("terminal_payments_1h_minor"))
                .col(big_integer_null("payment_max_minor"))
                .col(big_integer_null("wallet_topups_24h_minor"))
                .col(timestamp_with_time_zone("updated_at"))
                // Who set them: `key:<id>` (also in the audit log).
                .col(string_len("updated_by", 64))
                .primary_key(Index::create().col("merchant_id").col("is_sandbox"))
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table("risk_terminal_usage")
                .col(uuid("merchant_id"))
                .col(boolean("is_sandbox"))
                .col(string_len("terminal", 160))
                // {"<unix minute>": minor, ...}: the last hour's payments by minute.
                .col(text("minutes"))
                .col(timestamp_with_time_zone("updated_at"))
                .primary_key(
                    Index::create()
                        .col("merchant_id")
                        .col("is_sandbox")
                        .col("terminal"),
                )
                .to_owned(),
        )
        .await?;

        add_column(m, "qr_nonces", uuid_null("checkout_session_id")).await?;
        m.get_connection()
            .execute_unprepared(
                "UPDATE api_keys SET permissions = permissions || ' risk' \
                 WHERE (' ' || permissions || ' ') LIKE '% settlements %'",
            )
            .await
            .map(|_| ())
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.get_connection()
            .execute_unprepared(
                "UPDATE api_keys SET permissions = \
                 TRIM(REPLACE(' ' || permissions || ' ', ' risk ', ' '))",
            )
            .await?;
        drop_column(m, "qr_nonces", "checkout_session_id").await?;
        for t in ["risk_terminal_usage", "risk_limits", "risk_blocks"] {
            m.drop_table(Table::drop().table(Alias::new(t)).to_owned())
                .await?;
        }
        Ok(())
    }
}
