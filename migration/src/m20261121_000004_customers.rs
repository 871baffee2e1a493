//! Customers at the till: enrollments (phone proof), identity links (card fingerprints),
//! checkout sessions, and the link from a payment to the session it ran in.
use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

fn idx(name: &str, table: &str, cols: &[&str]) -> IndexCreateStatement {
    let mut i = Index::create();
    i.name(name).table(Alias::new(table));
    for c in cols {
        i.col(Alias::new(*c));
    }
    i.to_owned()
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        // One pending-proof window of one identity. Every PENDING_PROOF identity has exactly
        // one `pending` enrollment; it carries the deadline the expiry job works from.
        m.create_table(
            Table::create()
                .table("enrollments")
                .col(pk_uuid("id"))
                .col(uuid("merchant_id"))
                .col(uuid("wallet_user_id"))
                .col(uuid("wallet_program_id"))
                // Who started it; null when a credit or an operator opened the window.
                .col(uuid_null("integration_id"))
                .col(boolean("is_sandbox"))
                // pending | verified | expired
                .col(string_len("status", 16))
                // initiate | credit | operator
                .col(string_len("origin", 16))
                .col(string_len_null("language", 16))
                // Bound to the identity at verify, not before.
                .col(string_len_null("provider_customer_id", 128))
                .col(string_len_null("card_fingerprint_hash", 64))
                .col(uuid_null("service_session_id"))
                // HMAC of the current code; null until the first SMS.
                .col(string_len_null("code_hash", 128))
                .col(timestamp_with_time_zone_null("code_expires_at"))
                .col(integer("code_failed_attempts"))
                .col(integer("sends"))
                .col(timestamp_with_time_zone_null("last_sent_at"))
                .col(timestamp_with_time_zone("expires_at"))
                .col(timestamp_with_time_zone("created_at"))
                .col(timestamp_with_time_zone("updated_at"))
                .col(timestamp_with_time_zone_null("verified_at"))
                .col(timestamp_with_time_zone_null("expired_at"))
                .to_owned(),
        )
        .await?;
        m.create_index(idx(
            "ix_enrollments_identity",
            "enrollments",
            &["wallet_user_id", "status"],
        ))
        .await?;
        m.create_index(idx(
            "ix_enrollments_due",
            "enrollments",
            &["status", "expires_at"],
        ))
        .await?;

        // Further ways to recognise a verified customer (card fingerprints), stored as an
        // HMAC of the value so a leaked table names no card.
        m.create_table(
            Table::create()
                .table("identity_links")
                .col(pk_uuid("id"))
                .col(uuid("merchant_id"))
                .col(uuid("wallet_user_id"))
                // card_fingerprint
                .col(string_len("kind", 32))
                .col(string_len("value_hash", 64))
                .col(timestamp_with_time_zone("created_at"))
                .to_owned(),
        )
        .await?;
        m.create_index(
            idx(
                "ux_identity_links_value",
                "identity_links",
                &["merchant_id", "kind", "value_hash"],
            )
            .unique()
            .to_owned(),
        )
        .await?;

        // NULLs are distinct in a unique index on both backends: identities without a
        // provider link do not collide.
        m.create_index(
            idx(
                "ux_wallet_users_provider",
                "wallet_users",
                &["merchant_id", "provider_customer_id"],
            )
            .unique()
            .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table("checkout_sessions")
                .col(pk_uuid("id"))
                .col(uuid("merchant_id"))
                .col(uuid("integration_id"))
                .col(uuid_null("brand_id"))
                .col(uuid_null("branch_id"))
                .col(string_len_null("terminal_id", 64))
                .col(string_len_null("cashier_id", 64))
                .col(string_len_null("partner_session_id", 128))
                // OPEN | IDENTIFIED | COMPLETED | CANCELLED | EXPIRED
                .col(string_len("state", 16))
                .col(uuid_null("wallet_user_id"))
                .col(uuid_null("wallet_id"))
                .col(uuid_null("wallet_program_id"))
                .col(string_len_null("resolution_state", 16))
                .col(json_binary_null("basket"))
                .col(uuid_null("payment_id"))
                .col(string_len_null("close_reason", 200))
                .col(timestamp_with_time_zone("expires_at"))
                .col(timestamp_with_time_zone("created_at"))
                .col(timestamp_with_time_zone("updated_at"))
                .col(timestamp_with_time_zone_null("closed_at"))
                .to_owned(),
        )
        .await?;
        m.create_index(idx(
            "ix_checkout_sessions_due",
            "checkout_sessions",
            &["state", "expires_at"],
        ))
        .await?;

        m.alter_table(
            Table::alter()
                .table("payments")
                .add_column(uuid_null("service_session_id"))
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.alter_table(
            Table::alter()
                .table("payments")
                .drop_column(Alias::new("service_session_id"))
                .to_owned(),
        )
        .await?;
        m.drop_index(
            Index::drop()
                .name("ux_wallet_users_provider")
                .table(Alias::new("wallet_users"))
                .to_owned(),
        )
        .await?;
        for t in ["checkout_sessions", "identity_links", "enrollments"] {
            m.drop_table(Table::drop().table(Alias::new(t)).to_owned())
                .await?;
        }
        Ok(())
    }
}
