//! Tenancy (integration, enterprise = merchant, brand, branch, wallet program), API keys,
//! idempotency records, the transactional outbox, job dead letters, sandbox SMS messages and
//! the operator audit log.
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

fn fk(table: &str, col: &str, parent: &str) -> ForeignKeyCreateStatement {
    ForeignKey::create()
        .name(format!("fk_{table}_{col}"))
        .from(Alias::new(table), Alias::new(col))
        .to(Alias::new(parent), Alias::new("id"))
        .to_owned()
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    // All or nothing on SQLite too (sea-orm wraps migrations in a transaction on PostgreSQL only).
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_table(
            Table::create()
                .table("integrations")
                .col(pk_uuid("id"))
                .col(string_len("name", 200))
                .col(string_len("status", 16))
                .col(boolean("is_sandbox"))
                // JSON array of the identify credential types this integration may use.
                .col(json_binary("identify_credential_types"))
                .col(timestamp_with_time_zone("created_at"))
                .col(timestamp_with_time_zone("updated_at"))
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table("enterprises")
                .col(pk_uuid("id"))
                .col(string_len("name", 200))
                .col(timestamp_with_time_zone("created_at"))
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table("brands")
                .col(pk_uuid("id"))
                .col(uuid("enterprise_id"))
                .col(string_len("name", 200))
                .col(timestamp_with_time_zone("created_at"))
                .foreign_key(&mut fk("brands", "enterprise_id", "enterprises"))
                .to_owned(),
        )
        .await?;
        m.create_index(idx("ix_brands_enterprise", "brands", &["enterprise_id"]))
            .await?;

        m.create_table(
            Table::create()
                .table("branches")
                .col(pk_uuid("id"))
                .col(uuid("enterprise_id"))
                .col(uuid("brand_id"))
                .col(string_len("name", 200))
                .col(timestamp_with_time_zone("created_at"))
                .foreign_key(&mut fk("branches", "enterprise_id", "enterprises"))
                .foreign_key(&mut fk("branches", "brand_id", "brands"))
                .to_owned(),
        )
        .await?;
        m.create_index(idx("ix_branches_brand", "branches", &["brand_id"]))
            .await?;

        m.create_table(
            Table::create()
                .table("integration_enterprises")
                .col(uuid("integration_id"))
                .col(uuid("enterprise_id"))
                .col(timestamp_with_time_zone("created_at"))
                .primary_key(
                    Index::create()
                        .col(Alias::new("integration_id"))
                        .col(Alias::new("enterprise_id")),
                )
                .foreign_key(&mut fk(
                    "integration_enterprises",
                    "integration_id",
                    "integrations",
                ))
                .foreign_key(&mut fk(
                    "integration_enterprises",
                    "enterprise_id",
                    "enterprises",
                ))
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table("wallet_programs")
                .col(pk_uuid("id"))
                .col(uuid("enterprise_id"))
                .col(string_len("name", 200))
                .col(string_len("currency", 3))
                .col(string_len("status", 16))
                .col(timestamp_with_time_zone("created_at"))
                .foreign_key(&mut fk("wallet_programs", "enterprise_id", "enterprises"))
                .to_owned(),
        )
        .await?;
        m.create_index(idx(
            "ix_wallet_programs_enterprise",
            "wallet_programs",
            &["enterprise_id"],
        ))
        .await?;

        m.create_table(
            Table::create()
                .table("api_keys")
                .col(pk_uuid("id"))
                .col(uuid("integration_id"))
                // integration | enterprise | brand | branch
                .col(string_len("scope", 16))
                .col(uuid_null("enterprise_id"))
                .col(uuid_null("brand_id"))
                .col(uuid_null("branch_id"))
                .col(string_len("key_prefix", 64))
                .col(string_len("key_hash", 128))
                .col(string_len("key_last_four", 4))
                .col(string_len("label", 120))
                .col(boolean("is_sandbox"))
                // active | inactive | deleted
                .col(string_len("status", 16))
                .col(timestamp_with_time_zone_null("expires_at"))
                .col(uuid_null("previous_key_id"))
                .col(string_len_null("status_reason", 200))
                .col(timestamp_with_time_zone("created_at"))
                .col(timestamp_with_time_zone_null("revoked_at"))
                .col(timestamp_with_time_zone_null("deleted_at"))
                .foreign_key(&mut fk("api_keys", "integration_id", "integrations"))
                .to_owned(),
        )
        .await?;
        m.create_index(idx("ix_api_keys_prefix", "api_keys", &["key_prefix"]))
            .await?;
        m.create_index(idx(
            "ix_api_keys_integration",
            "api_keys",
            &["integration_id", "created_at"],
        ))
        .await?;

        m.create_table(
            Table::create()
                .table("idempotency_records")
                .col(pk_uuid("id"))
                // Who may replay: the integration plus the credential's scope path.
                .col(string_len("owner", 200))
                .col(string_len("idempotency_key", 64))
                .col(string_len("operation", 200))
                .col(string_len("request_fingerprint", 64))
                .col(integer("status_code"))
                // Exact bytes of the first response: a replay is served from here.
                .col(text("response_body"))
                // AEAD-sealed secrets a replay must show again (a created key's raw key).
                .col(text_null("sealed_secret"))
                .col(timestamp_with_time_zone("created_at"))
                .col(timestamp_with_time_zone("expires_at"))
                .to_owned(),
        )
        .await?;
        m.create_index(
            idx(
                "ux_idempotency_owner_key",
                "idempotency_records",
                &["owner", "idempotency_key"],
            )
            .unique()
            .to_owned(),
        )
        .await?;
        m.create_index(idx(
            "ix_idempotency_expires",
            "idempotency_records",
            &["expires_at"],
        ))
        .await?;

        m.create_table(
            Table::create()
                .table("outbox")
                .col(big_pk_auto("id"))
                .col(uuid_uniq("event_id"))
                // event (a catalog event for subscribers) | job (work for a queue)
                .col(string_len("kind", 16))
                .col(string_len("topic", 64))
                .col(uuid_null("merchant_id"))
                .col(string_len("resource_type", 64))
                .col(string_len("resource_id", 64))
                .col(big_integer("sequence_number"))
                .col(json_binary("payload"))
                .col(timestamp_with_time_zone("occurred_at"))
                .col(timestamp_with_time_zone("created_at"))
                .col(timestamp_with_time_zone_null("relayed_at"))
                .to_owned(),
        )
        .await?;
        m.create_index(idx("ix_outbox_pending", "outbox", &["relayed_at", "id"]))
            .await?;

        m.create_table(
            Table::create()
                .table("resource_sequences")
                .col(string_len("resource_type", 64))
                .col(string_len("resource_id", 64))
                .col(big_integer("last_value"))
                .primary_key(
                    Index::create()
                        .col(Alias::new("resource_type"))
                        .col(Alias::new("resource_id")),
                )
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table("dead_letters")
                .col(pk_uuid("id"))
                .col(uuid_uniq("job_id"))
                .col(string_len("queue", 64))
                .col(string_len("job_type", 64))
                .col(uuid_null("merchant_id"))
                .col(json_binary("payload"))
                .col(integer("attempts"))
                .col(json_binary("error_history"))
                .col(text("last_error"))
                // dead | replayed | purged
                .col(string_len("status", 16))
                .col(timestamp_with_time_zone("first_enqueued_at"))
                .col(timestamp_with_time_zone("dead_at"))
                .col(integer("replay_count"))
                .col(timestamp_with_time_zone_null("replayed_at"))
                .col(timestamp_with_time_zone_null("purged_at"))
                .col(string_len_null("purge_reason", 500))
                .to_owned(),
        )
        .await?;
        m.create_index(idx(
            "ix_dead_letters_status",
            "dead_letters",
            &["status", "dead_at"],
        ))
        .await?;

        m.create_table(
            Table::create()
                .table("sandbox_messages")
                .col(pk_uuid("id"))
                // The job that sent it: a redelivered job stores one message, not two.
                .col(uuid_uniq("job_id"))
                .col(uuid("integration_id"))
                .col(uuid_null("merchant_id"))
                .col(string_len("phone", 20))
                .col(string_len("kind", 32))
                .col(string_len_null("code", 16))
                .col(text_null("verification_token"))
                .col(text("body"))
                .col(timestamp_with_time_zone("sent_at"))
                .to_owned(),
        )
        .await?;
        m.create_index(idx(
            "ix_sandbox_messages_phone",
            "sandbox_messages",
            &["integration_id", "phone", "sent_at"],
        ))
        .await?;

        m.create_table(
            Table::create()
                .table("operator_audit_log")
                .col(pk_uuid("id"))
                .col(string_len("actor", 200))
                .col(string_len("action", 64))
                .col(string_len("target_type", 64))
                .col(string_len_null("target_id", 64))
                .col(string_len_null("reason", 500))
                .col(json_binary("details"))
                .col(timestamp_with_time_zone("created_at"))
                .to_owned(),
        )
        .await?;
        Ok(())
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        for t in [
            "operator_audit_log",
            "sandbox_messages",
            "dead_letters",
            "resource_sequences",
            "outbox",
            "idempotency_records",
            "api_keys",
            "wallet_programs",
            "integration_enterprises",
            "branches",
            "brands",
            "enterprises",
            "integrations",
        ] {
            m.drop_table(Table::drop().table(Alias::new(t)).to_owned())
                .await?;
        }
        Ok(())
    }
}
