//! Top-ups: SKUs partners register (their credit and bonus terms, versioned so a change
//! never rewrites a past sale) and the top-ups credited from them.
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
        // The current terms of a SKU; every change bumps `version`. A top-up copies the
        // terms it used, so later changes never touch it.
        m.create_table(
            Table::create()
                .table("skus")
                .col(pk_uuid("id"))
                .col(uuid("merchant_id"))
                .col(uuid("integration_id"))
                // The partner's own SKU code, unique per merchant.
                .col(string_len("sku_id", 64))
                .col(string_len("name", 200))
                .col(string_len("currency", 3))
                .col(big_integer("wallet_credits_minor"))
                // At most one of the two: a fixed bonus per unit, or basis points of the credit.
                .col(big_integer_null("bonus_minor"))
                .col(integer_null("bonus_percent_bps"))
                .col(integer_null("bonus_expiry_days"))
                .col(boolean("active"))
                .col(integer("version"))
                .col(timestamp_with_time_zone("created_at"))
                .col(timestamp_with_time_zone("updated_at"))
                .to_owned(),
        )
        .await?;
        m.create_index(
            idx("ux_skus_merchant_sku", "skus", &["merchant_id", "sku_id"])
                .unique()
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table("topups")
                .col(pk_uuid("id"))
                .col(uuid("merchant_id"))
                .col(uuid("integration_id"))
                // sku | settlement
                .col(string_len("kind", 16))
                // The POS order (sku) or the settlement reference: one credit each.
                .col(string_len("order_ref", 128))
                .col(string_len_null("sku_id", 64))
                .col(integer_null("sku_version"))
                .col(big_integer_null("quantity"))
                .col(uuid("wallet_id"))
                .col(uuid("wallet_user_id"))
                .col(big_integer("credited_actual_minor"))
                .col(big_integer("bonus_minor"))
                .col(uuid_null("bonus_grant_id"))
                .col(string_len("currency", 3))
                // What the sale was (SKU, quantity, customer): a second report of the same
                // order must be the same sale.
                .col(string_len("fingerprint", 64))
                // The first report's result, returned to every later report of the order.
                .col(json_binary("result"))
                .col(uuid_null("branch_id"))
                .col(string_len_null("terminal_id", 64))
                .col(string_len_null("cashier_id", 64))
                .col(uuid_null("service_session_id"))
                .col(uuid("posting_id"))
                .col(timestamp_with_time_zone("created_at"))
                .to_owned(),
        )
        .await?;
        m.create_index(
            idx(
                "ux_topups_order",
                "topups",
                &["merchant_id", "kind", "order_ref"],
            )
            .unique()
            .to_owned(),
        )
        .await?;
        m.create_index(idx("ix_topups_wallet", "topups", &["wallet_id"]))
            .await?;
        m.create_index(idx(
            "ix_promo_grants_due",
            "promo_grants",
            &["state", "expires_at"],
        ))
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_index(
            Index::drop()
                .name("ix_promo_grants_due")
                .table(Alias::new("promo_grants"))
                .to_owned(),
        )
        .await?;
        for t in ["topups", "skus"] {
            m.drop_table(Table::drop().table(Alias::new(t)).to_owned())
                .await?;
        }
        Ok(())
    }
}
