//! Wallet identities, wallets, promotional grants, the double-entry ledger, payments and
//! their refunds, OTP sessions and QR nonces.
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

const TABLES: &[&str] = &[
    "qr_nonces",
    "otp_sessions",
    "payment_refunds",
    "payments",
    "ledger_entries",
    "ledger_postings",
    "promo_grants",
    "wallets",
    "wallet_users",
];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        // A customer's identity at one merchant: (merchant, normalized phone).
        m.create_table(
            Table::create()
                .table("wallet_users")
                .col(pk_uuid("id"))
                .col(uuid("merchant_id"))
                .col(string_len("phone", 20))
                // PENDING_PROOF | VERIFIED
                .col(string_len("state", 16))
                .col(string_len_null("provider_customer_id", 128))
                .col(timestamp_with_time_zone("created_at"))
                .col(timestamp_with_time_zone("updated_at"))
                .col(timestamp_with_time_zone_null("verified_at"))
                .to_owned(),
        )
        .await?;
        m.create_index(
            idx(
                "ux_wallet_users_phone",
                "wallet_users",
                &["merchant_id", "phone"],
            )
            .unique()
            .to_owned(),
        )
        .await?;

        // One wallet per identity and program. Balance columns are maintained by the same
        // transaction that posts the ledger entries they summarise.
        m.create_table(
            Table::create()
                .table("wallets")
                .col(pk_uuid("id"))
                .col(uuid("wallet_user_id"))
                .col(uuid("merchant_id"))
                .col(uuid("wallet_program_id"))
                .col(string_len("currency", 3))
                .col(big_integer("actual_minor"))
                .col(big_integer("pending_topups_minor"))
                .col(timestamp_with_time_zone("created_at"))
                .col(timestamp_with_time_zone("updated_at"))
                .to_owned(),
        )
        .await?;
        m.create_index(
            idx(
                "ux_wallets_user_program",
                "wallets",
                &["wallet_user_id", "wallet_program_id"],
            )
            .unique()
            .to_owned(),
        )
        .await?;
        m.create_index(idx("ix_wallets_merchant", "wallets", &["merchant_id"]))
            .await?;

        m.create_table(
            Table::create()
                .table("promo_grants")
                .col(pk_uuid("id"))
                .col(uuid("wallet_id"))
                .col(uuid("merchant_id"))
                // CASHBACK | RELOAD_BONUS | SKU_TOPUP_BONUS
                .col(string_len("source", 32))
                // LOCKED | RELEASED | CONSUMED | EXPIRED | CLAWED_BACK
                .col(string_len("state", 16))
                .col(string_len("currency", 3))
                .col(big_integer("original_minor"))
                .col(big_integer("remaining_minor"))
                .col(timestamp_with_time_zone("expires_at"))
                .col(timestamp_with_time_zone("created_at"))
                .col(timestamp_with_time_zone("updated_at"))
                .to_owned(),
        )
        .await?;
        m.create_index(idx(
            "ix_promo_grants_wallet",
            "promo_grants",
            &["wallet_id"],
        ))
        .await?;

        // One business event; its entries sum to zero per currency.
        m.create_table(
            Table::create()
                .table("ledger_postings")
                .col(pk_uuid("id"))
                .col(uuid("merchant_id"))
                // payment | refund | void | adjustment | ...
                .col(string_len("kind", 32))
                .col(string_len("reference_type", 32))
                .col(uuid("reference_id"))
                .col(string_len_null("memo", 500))
                .col(timestamp_with_time_zone("created_at"))
                .to_owned(),
        )
        .await?;
        m.create_index(idx(
            "ix_ledger_postings_ref",
            "ledger_postings",
            &["reference_type", "reference_id"],
        ))
        .await?;

        // Append-only. `amount_minor` is signed: positive raises the account's balance.
        m.create_table(
            Table::create()
                .table("ledger_entries")
                .col(big_pk_auto("id"))
                .col(uuid("posting_id"))
                .col(uuid("merchant_id"))
                // wallet_actual | promo_grant | merchant_clearing | merchant_promo_funding |
                // merchant_promo_forfeit | merchant_adjustment
                .col(string_len("account_kind", 32))
                .col(uuid("account_id"))
                .col(string_len("currency", 3))
                .col(big_integer("amount_minor"))
                .col(timestamp_with_time_zone("created_at"))
                .to_owned(),
        )
        .await?;
        m.create_index(idx(
            "ix_ledger_entries_posting",
            "ledger_entries",
            &["posting_id"],
        ))
        .await?;
        m.create_index(idx(
            "ix_ledger_entries_account",
            "ledger_entries",
            &["account_kind", "account_id"],
        ))
        .await?;
        m.create_index(idx(
            "ix_ledger_entries_merchant",
            "ledger_entries",
            &["merchant_id"],
        ))
        .await?;

        m.create_table(
            Table::create()
                .table("payments")
                .col(pk_uuid("id"))
                .col(uuid("merchant_id"))
                .col(uuid("integration_id"))
                .col(uuid_null("branch_id"))
                .col(string_len_null("terminal_id", 64))
                .col(string_len_null("cashier_id", 64))
                .col(uuid("wallet_id"))
                // completed | voided
                .col(string_len("status", 16))
                .col(string_len("credential_type", 16))
                .col(big_integer("amount_minor"))
                .col(string_len("currency", 3))
                .col(big_integer("debited_promo_minor"))
                .col(big_integer("debited_actual_minor"))
                // JSON [[grant_id, amount], ...] in the order spent.
                .col(json_binary("promo_split"))
                .col(big_integer("refunded_minor"))
                .col(string_len_null("order_ref", 128))
                .col(json_binary_null("basket"))
                .col(big_integer_null("basket_total_minor"))
                .col(boolean("needs_reconciliation"))
                .col(integer("data_completeness_score"))
                .col(uuid("posting_id"))
                .col(timestamp_with_time_zone("created_at"))
                .col(timestamp_with_time_zone("completed_at"))
                .col(timestamp_with_time_zone_null("voided_at"))
                .col(timestamp_with_time_zone("updated_at"))
                .to_owned(),
        )
        .await?;
        m.create_index(idx(
            "ix_payments_merchant_created",
            "payments",
            &["merchant_id", "created_at"],
        ))
        .await?;
        m.create_index(idx("ix_payments_wallet", "payments", &["wallet_id"]))
            .await?;

        // A refund or a void: what went back where.
        m.create_table(
            Table::create()
                .table("payment_refunds")
                .col(pk_uuid("id"))
                .col(uuid("payment_id"))
                .col(uuid("merchant_id"))
                // refund | void
                .col(string_len("kind", 16))
                .col(big_integer("amount_minor"))
                .col(big_integer("to_actual_minor"))
                // JSON [[grant_id, amount], ...] returned to grants.
                .col(json_binary("to_grants"))
                // Promo parts whose grant could no longer hold credit.
                .col(big_integer("forfeited_promo_minor"))
                .col(string_len_null("reason", 200))
                .col(uuid("posting_id"))
                .col(timestamp_with_time_zone("created_at"))
                .to_owned(),
        )
        .await?;
        m.create_index(idx(
            "ix_payment_refunds_payment",
            "payment_refunds",
            &["payment_id"],
        ))
        .await?;

        m.create_table(
            Table::create()
                .table("otp_sessions")
                .col(pk_uuid("id"))
                .col(uuid("merchant_id"))
                .col(uuid("wallet_id"))
                .col(string_len("order_ref", 128))
                .col(big_integer("amount_minor"))
                .col(string_len("currency", 3))
                // HMAC of the code under the server secret; the code itself is never stored.
                .col(string_len("code_hash", 128))
                .col(integer("failed_attempts"))
                // active | consumed | locked
                .col(string_len("status", 16))
                .col(uuid_null("payment_id"))
                .col(timestamp_with_time_zone("expires_at"))
                .col(timestamp_with_time_zone("created_at"))
                .col(timestamp_with_time_zone_null("consumed_at"))
                .to_owned(),
        )
        .await?;
        m.create_index(idx(
            "ix_otp_sessions_order",
            "otp_sessions",
            &["merchant_id", "order_ref", "created_at"],
        ))
        .await?;

        m.create_table(
            Table::create()
                .table("qr_nonces")
                .col(pk_uuid("id"))
                .col(uuid("merchant_id"))
                .col(uuid("wallet_id"))
                // SHA-256 of the nonce; the nonce itself is never stored.
                .col(string_len("nonce_hash", 64))
                // HMAC of the short code under the server secret, like the OTP code.
                .col(string_len_null("short_code_hash", 64))
                .col(timestamp_with_time_zone("expires_at"))
                // When a re-mint replaced it: payments received before then still pass.
                .col(timestamp_with_time_zone_null("superseded_at"))
                .col(timestamp_with_time_zone_null("consumed_at"))
                .col(uuid_null("payment_id"))
                .col(timestamp_with_time_zone("created_at"))
                .to_owned(),
        )
        .await?;
        m.create_index(
            idx("ux_qr_nonces_hash", "qr_nonces", &["nonce_hash"])
                .unique()
                .to_owned(),
        )
        .await?;
        m.create_index(idx(
            "ix_qr_nonces_short_code",
            "qr_nonces",
            &["merchant_id", "short_code_hash"],
        ))
        .await?;
        m.create_index(idx("ix_qr_nonces_wallet", "qr_nonces", &["wallet_id"]))
            .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        for t in TABLES {
            m.drop_table(Table::drop().table(Alias::new(*t)).to_owned())
                .await?;
        }
        Ok(())
    }
}
