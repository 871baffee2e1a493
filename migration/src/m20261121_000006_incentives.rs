//! Incentives: settlement references behind confirmed top-ups, reload-bonus tiers and
//! cashback rules (both versioned: a change never rewrites an earlier accrual), campaign
//! budgets (a version for compare-and-swap) and offers armed for a customer.
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
        // A payment the provider settled (or is settling, or failed), reported on the
        // control plane. A confirmed top-up uses it once.
        m.create_table(
            Table::create()
                .table("settlements")
                .col(pk_uuid("id"))
                .col(uuid("merchant_id"))
                .col(uuid("integration_id"))
                .col(string_len("reference", 128))
                .col(big_integer("amount_minor"))
                .col(string_len("currency", 3))
                // PENDING | SETTLED | FAILED
                .col(string_len("state", 16))
                .col(string_len_null("provider", 64))
                .col(string_len_null("failure_reason", 200))
                // Sandbox references are made by the sandbox caller; a production key
                // never confirms against one.
                .col(boolean("is_sandbox"))
                .col(uuid_null("topup_id"))
                .col(timestamp_with_time_zone("created_at"))
                .col(timestamp_with_time_zone("updated_at"))
                .to_owned(),
        )
        .await?;
        m.create_index(
            // A reference belongs to the integration that reported it.
            idx(
                "ux_settlements_reference",
                "settlements",
                &["integration_id", "merchant_id", "reference"],
            )
            .unique()
            .to_owned(),
        )
        .await?;

        // Every change is a new row with the next version; a top-up records the version
        // it accrued under.
        m.create_table(
            Table::create()
                .table("reload_bonus_configs")
                .col(pk_uuid("id"))
                .col(uuid("merchant_id"))
                .col(uuid("integration_id"))
                .col(uuid("wallet_program_id"))
                .col(integer("version"))
                .col(string_len("currency", 3))
                .col(json_binary("tiers"))
                .col(integer_null("expiry_days"))
                .col(uuid_null("budget_id"))
                .col(timestamp_with_time_zone("created_at"))
                .to_owned(),
        )
        .await?;
        m.create_index(
            idx(
                "ux_reload_bonus_configs_version",
                "reload_bonus_configs",
                &["wallet_program_id", "version"],
            )
            .unique()
            .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table("cashback_rules")
                .col(pk_uuid("id"))
                .col(uuid("merchant_id"))
                .col(uuid("integration_id"))
                .col(uuid("wallet_program_id"))
                .col(integer("version"))
                .col(string_len("currency", 3))
                .col(integer("rate_bps"))
                .col(big_integer("min_payment_minor"))
                .col(big_integer_null("max_cashback_minor"))
                .col(integer("expiry_days"))
                .col(boolean("active"))
                .col(uuid_null("budget_id"))
                .col(timestamp_with_time_zone("created_at"))
                .to_owned(),
        )
        .await?;
        m.create_index(
            idx(
                "ux_cashback_rules_version",
                "cashback_rules",
                &["wallet_program_id", "version"],
            )
            .unique()
            .to_owned(),
        )
        .await?;

        // A reward a payment earned (its cashback, an offer redeemed against it), and how
        // much refunds and voids took back of it. `base_minor` is what the reward was
        // worked out on and `base_refunded_minor` what was already refunded then: later
        // refunds take back the same share of the reward as of that base.
        m.create_table(
            Table::create()
                .table("payment_rewards")
                .col(pk_uuid("id"))
                .col(uuid("payment_id"))
                // cashback | offer
                .col(string_len("kind", 16))
                // The cashback rule version or the offer.
                .col(uuid("source_id"))
                .col(uuid("merchant_id"))
                .col(uuid("grant_id"))
                .col(uuid_null("budget_id"))
                .col(big_integer("amount_minor"))
                .col(big_integer("base_minor"))
                .col(big_integer("base_refunded_minor"))
                .col(big_integer("reversed_minor"))
                // Due back but already spent by the customer: never taken from actual
                // money; recovered if the spent credit comes back to the grant.
                .col(big_integer("unrecovered_minor"))
                .col(timestamp_with_time_zone("created_at"))
                .col(timestamp_with_time_zone("updated_at"))
                .to_owned(),
        )
        .await?;
        m.create_index(
            idx(
                "ux_payment_rewards_kind",
                "payment_rewards",
                &["payment_id", "kind"],
            )
            .unique()
            .to_owned(),
        )
        .await?;
        m.create_index(idx(
            "ix_payment_rewards_grant",
            "payment_rewards",
            &["grant_id"],
        ))
        .await?;

        m.create_table(
            Table::create()
                .table("budgets")
                .col(pk_uuid("id"))
                .col(uuid("merchant_id"))
                .col(uuid("integration_id"))
                .col(string_len("name", 120))
                .col(string_len("currency", 3))
                .col(big_integer("limit_minor"))
                .col(big_integer("spent_minor"))
                .col(boolean("active"))
                // Bumped by every change (accruals included): the compare-and-swap token.
                .col(integer("version"))
                .col(timestamp_with_time_zone("created_at"))
                .col(timestamp_with_time_zone("updated_at"))
                .to_owned(),
        )
        .await?;
        m.create_index(idx("ix_budgets_merchant", "budgets", &["merchant_id"]))
            .await?;

        m.create_table(
            Table::create()
                .table("offers")
                .col(pk_uuid("id"))
                .col(uuid("merchant_id"))
                .col(uuid("integration_id"))
                .col(uuid("wallet_user_id"))
                .col(uuid("wallet_program_id"))
                .col(string_len("name", 120))
                .col(string_len("currency", 3))
                .col(big_integer_null("reward_minor"))
                .col(integer_null("reward_bps"))
                .col(big_integer_null("max_reward_minor"))
                .col(big_integer("min_amount_minor"))
                .col(integer("grant_expiry_days"))
                .col(uuid_null("budget_id"))
                // ARMED | REDEEMED | EXPIRED | CANCELLED
                .col(string_len("state", 16))
                .col(timestamp_with_time_zone("expires_at"))
                .col(uuid_null("payment_id"))
                .col(uuid_null("grant_id"))
                .col(big_integer_null("rewarded_minor"))
                .col(timestamp_with_time_zone_null("redeemed_at"))
                .col(timestamp_with_time_zone("created_at"))
                .col(timestamp_with_time_zone("updated_at"))
                .to_owned(),
        )
        .await?;
        m.create_index(idx(
            "ix_offers_customer",
            "offers",
            &["merchant_id", "wallet_user_id"],
        ))
        .await?;
        m.create_index(idx("ix_offers_due", "offers", &["state", "expires_at"]))
            .await?;
        // One offer per payment: offers never stack on one sale.
        m.create_index(
            idx("ux_offers_payment", "offers", &["payment_id"])
                .unique()
                .to_owned(),
        )
        .await?;

        m.alter_table(
            Table::alter()
                .table("topups")
                .add_column(integer_null("bonus_config_version"))
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.alter_table(
            Table::alter()
                .table("topups")
                .drop_column(Alias::new("bonus_config_version"))
                .to_owned(),
        )
        .await?;
        for t in [
            "offers",
            "budgets",
            "payment_rewards",
            "cashback_rules",
            "reload_bonus_configs",
            "settlements",
        ] {
            m.drop_table(Table::drop().table(Alias::new(t)).to_owned())
                .await?;
        }
        Ok(())
    }
}
