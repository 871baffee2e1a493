//! Webhooks: partner subscriptions (endpoint, event filter, sealed signing secrets), one
//! delivery per (subscription, event) with the exact body every attempt sends, and every
//! attempt made.
use sea_orm_migration::{prelude::*, schema::*};

use crate::idx;

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
                .table("webhook_subscriptions")
                .col(pk_uuid("id"))
                .col(uuid("integration_id"))
                // Null: every merchant linked to the integration.
                .col(uuid_null("merchant_id"))
                .col(string_len("url", 2048))
                .col(string_len_null("description", 200))
                // Null: every event type.
                .col(json_binary_null("event_types"))
                // Sealed (AEAD) signing secrets: the service signs with them, so they
                // cannot be hashes. The previous one signs beside the new one until
                // `previous_secret_until`.
                .col(text("secret_sealed"))
                .col(text_null("previous_secret_sealed"))
                .col(timestamp_with_time_zone_null("previous_secret_until"))
                // ACTIVE | DISABLED
                .col(string_len("state", 16))
                // manual | failing
                .col(string_len_null("disabled_reason", 16))
                .col(timestamp_with_time_zone_null("disabled_at"))
                .col(integer("failure_streak"))
                .col(timestamp_with_time_zone_null("failing_since"))
                .col(boolean("is_sandbox"))
                .col(timestamp_with_time_zone("created_at"))
                .col(timestamp_with_time_zone("updated_at"))
                .to_owned(),
        )
        .await?;
        m.create_index(idx(
            "ix_webhook_subscriptions_integration",
            "webhook_subscriptions",
            &["integration_id"],
        ))
        .await?;

        m.create_table(
            Table::create()
                .table("webhook_deliveries")
                .col(pk_uuid("id"))
                .col(uuid("subscription_id"))
                .col(uuid("integration_id"))
                .col(uuid("merchant_id"))
                .col(uuid("event_id"))
                .col(string_len("event_type", 64))
                // `<resource_type>:<resource_id>`: ordering is per resource.
                .col(string_len("resource_key", 200))
                .col(big_integer("sequence_number"))
                // The envelope exactly as every attempt sends it.
                .col(text("body"))
                // PENDING | DELIVERED | DEAD | SUSPENDED
                .col(string_len("state", 16))
                .col(integer("attempts"))
                // Bumped by each redelivery or dead-letter replay (a new job series).
                .col(integer("replays"))
                .col(integer_null("last_status_code"))
                .col(string_len_null("last_error", 500))
                .col(timestamp_with_time_zone_null("next_attempt_at"))
                .col(timestamp_with_time_zone_null("delivered_at"))
                .col(timestamp_with_time_zone("created_at"))
                .col(timestamp_with_time_zone("updated_at"))
                .to_owned(),
        )
        .await?;
        m.create_index(
            idx(
                "ux_webhook_deliveries_event",
                "webhook_deliveries",
                &["subscription_id", "event_id"],
            )
            .unique()
            .to_owned(),
        )
        .await?;
        m.create_index(idx(
            "ix_webhook_deliveries_resource",
            "webhook_deliveries",
            &["subscription_id", "resource_key", "sequence_number"],
        ))
        .await?;
        m.create_index(idx(
            "ix_webhook_deliveries_state",
            "webhook_deliveries",
            &["subscription_id", "state"],
        ))
        .await?;
        // The sweep's look for deliveries whose job went missing.
        m.create_index(idx(
            "ix_webhook_deliveries_due",
            "webhook_deliveries",
            &["state", "next_attempt_at"],
        ))
        .await?;

        m.create_table(
            Table::create()
                .table("webhook_attempts")
                .col(pk_uuid("id"))
                .col(uuid("delivery_id"))
                .col(uuid("subscription_id"))
                .col(integer("attempt"))
                .col(timestamp_with_time_zone("started_at"))
                .col(integer_null("status_code"))
                .col(big_integer("latency_ms"))
                .col(string_len_null("error", 500))
                .col(boolean("succeeded"))
                .col(timestamp_with_time_zone_null("next_retry_at"))
                .to_owned(),
        )
        .await?;
        m.create_index(idx(
            "ix_webhook_attempts_delivery",
            "webhook_attempts",
            &["delivery_id"],
        ))
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        for t in [
            "webhook_attempts",
            "webhook_deliveries",
            "webhook_subscriptions",
        ] {
            m.drop_table(Table::drop().table(Alias::new(t)).to_owned())
                .await?;
        }
        Ok(())
    }
}
