//! Key lifecycle: minting per-merchant keys.
use crate::http::pipeline::fields::{PageLimit, UuidText};
use poem::web::Data;
use poem_openapi::{OpenApi, param::Path};

use crate::http::{
    openapi::tags::Tag,
    pipeline::auth::ApiKeyAuth,
    pipeline::body::JsonBody,
    pipeline::common::{path_uuid, ts},
    pipeline::mutation::Idempotent,
    pipeline::query_group::Grouped,
    pipeline::reply::Reply,
};
use crate::{
    domain::{
        credentials::keys::{self, Key},
        validate::{self, Errors},
    },
    idempotency::Outcome,
    state::AppState,
    store::WriteTxn,
};

mod bodies;
pub use bodies::*;

pub struct KeysApi;

#[OpenApi(tag = "Tag::Auth")]
impl KeysApi {
    /// Create an API key
    ///
    /// Mints an enterprise, brand or branch key within the caller's own scope, with
    /// permissions the caller holds (default: `terminal` and `reporting`). The raw key is
    /// returned once; only its bcrypt hash is stored. Retrying with the same
    /// Idempotency-Key and body returns the same key. Permission: `integrations:create`.
    #[oai(path = "/auth/keys", method = "post", operation_id = "createApiKey")]
    async fn create(
        &self,
        auth: ApiKeyAuth,
        /// A UUID; retries with the same key replay the first response.
        #[oai(name = "Idempotency-Key")]
        key: Idempotent<'_>,
        body: JsonBody<CreateKeyRequest>,
    ) -> poem::Result<Reply<ApiKeyCreated>> {
        let principal = auth.0.clone();
        let req = body.value.to_domain();
        with_new_key(key, &auth.0, &body, None, async move |txn, minted| {
            keys::create(txn, &principal, req, minted).await
        })
        .await
    }

    /// List API keys
    ///
    /// Key metadata (never the raw key) of the calling integration, within the caller's
    /// scope, oldest first, with each key's permissions and the key that minted it.
    /// `created_by` lists the keys one key minted. Cursor-paginated: pass
    /// `meta.next_cursor` as `cursor`. Permission: `integrations:read`.
    #[oai(path = "/auth/keys", method = "get", operation_id = "listApiKeys")]
    async fn list(
        &self,
        state: Data<&AppState>,
        auth: ApiKeyAuth,
        query: Grouped<KeyQuery>,
    ) -> poem::Result<Reply<Vec<ApiKeyItem>>> {
        let KeyQuery {
            status,
            branch_id,
            created_by,
            limit,
            cursor,
        } = query.0;
        let mut e = Errors::default();
        if let Some(s) = &status {
            s.check(&mut e, "query:status");
        }
        let branch = branch_id
            .as_deref()
            .and_then(|b| validate::uuid(&mut e, "query:branch_id", b));
        let creator = created_by
            .as_deref()
            .and_then(|k| validate::uuid(&mut e, "query:created_by", k));
        let limit = PageLimit::resolve(limit, &mut e);
        e.finish()?;
        let after = crate::http::pipeline::cursor::after("key", &cursor)?;
        let (rows, more) = keys::list(
            &state.0.db,
            &auth.0,
            status.map(String::from),
            branch,
            creator,
            after,
            limit,
        )
        .await?;
        let page = crate::http::pipeline::cursor::page("key", &rows, more, |k| k.id);
        let items: Vec<ApiKeyItem> = rows
            .iter()
            .map(|m| ApiKeyItem {
                key_id: m.id.to_string(),
                key: view(m),
            })
            .collect();
        Ok(Reply::page(&items, &page))
    }

    /// Revoke an API key
    ///
    /// The key stops working at once on every replica (no grace window). Revoking an
    /// inactive key again is a no-op success. Terminal JWTs already minted from it stay
    /// valid for their remaining TTL. The keys it minted keep working unless `cascade` is
    /// true, which revokes its whole tree (list it first with `GET /auth/keys?created_by=`).
    /// A key holding a permission the caller lacks is FORBIDDEN. Permission:
    /// `integrations:update`.
    #[oai(
        path = "/auth/keys/:key_id/revoke",
        method = "post",
        operation_id = "revokeApiKey"
    )]
    async fn revoke(
        &self,
        state: Data<&AppState>,
        auth: ApiKeyAuth,
        key_id: Path<UuidText>,
        #[oai(name = "Idempotency-Key")] key: Idempotent<'_>,
        body: JsonBody<RevokeKeyRequest>,
    ) -> poem::Result<Reply<KeyStatusResult>> {
        let cascade = body.value.cascade.unwrap_or(false);
        let reason = body.value.reason.clone().map(String::from);
        change_status(
            state.0,
            &auth.0,
            &key_id.0,
            key,
            &body,
            StatusChange::Revoke { cascade },
            reason,
        )
        .await
    }

    /// Regenerate an API key
    ///
    /// Issues a new key with the same scope and permissions (its raw key shown once) and
    /// makes the old one fail at once; `previous_key_id` names it. The keys the old one
    /// minted stay in the new one's tree. A key holding a permission the caller lacks is
    /// FORBIDDEN. Permission: `integrations:update`.
    #[oai(
        path = "/auth/keys/:key_id/regenerate",
        method = "post",
        operation_id = "regenerateApiKey"
    )]
    async fn regenerate(
        &self,
        auth: ApiKeyAuth,
        key_id: Path<UuidText>,
        #[oai(name = "Idempotency-Key")] key: Idempotent<'_>,
        body: JsonBody<KeyActionRequest>,
    ) -> poem::Result<Reply<ApiKeyCreated>> {
        let id = path_uuid("path:keyId", &key_id.0)?;
        let principal = auth.0.clone();
        let reason = body.value.reason.clone().map(String::from);
        with_new_key(key, &auth.0, &body, Some(id), async move |txn, minted| {
            keys::regenerate(txn, &principal, id, reason, minted).await
        })
        .await
    }

    /// Delete an API key
    ///
    /// An active or inactive key becomes deleted: it no longer works or lists. A key
    /// holding a permission the caller lacks is FORBIDDEN. Permission:
    /// `integrations:delete`.
    #[oai(
        path = "/auth/keys/:key_id/delete",
        method = "post",
        operation_id = "deleteApiKey"
    )]
    async fn delete(
        &self,
        state: Data<&AppState>,
        auth: ApiKeyAuth,
        key_id: Path<UuidText>,
        #[oai(name = "Idempotency-Key")] key: Idempotent<'_>,
        body: JsonBody<KeyActionRequest>,
    ) -> poem::Result<Reply<KeyStatusResult>> {
        let reason = body.value.reason.clone().map(String::from);
        change_status(
            state.0,
            &auth.0,
            &key_id.0,
            key,
            &body,
            StatusChange::Delete,
            reason,
        )
        .await
    }
}

/// A mutation that makes a key: the key is minted (and hashed, the slow part) only when the
/// work will run, never for a replay, and its raw value is the response's secret, sealed
/// in the stored response. A key it `replaces` leaves the caches before the transaction and
/// again after its commit (`keys::uncache_before`), never inside it.
async fn with_new_key<B>(
    key: Idempotent<'_>,
    principal: &crate::domain::credentials::Principal,
    body: &JsonBody<B>,
    replaces: Option<uuid::Uuid>,
    work: impl AsyncFnOnce(&WriteTxn, keys::Minted) -> Result<Key, crate::error::ApiError>,
) -> poem::Result<Reply<ApiKeyCreated>> {
    let st = key.state();
    let config = &st.config;
    let (sandbox, cell, cost) = (
        principal.is_sandbox,
        config.cell.clone(),
        config.bcrypt_cost,
    );
    let auth = st.key_auth();
    let reply = key
        .run_prepared(
            principal,
            body,
            async |_| {
                if let Some(old) = replaces {
                    keys::uncache_before(&st.db, &auth, principal, old, false).await?;
                }
                keys::mint(sandbox, cell, cost).await
            },
            async move |txn, _acting, minted| {
                let raw = minted.key.raw.clone();
                let m = work(txn, minted).await?;
                Ok(Outcome::new(created(&m, raw.clone())).with_secret(raw))
            },
        )
        .await?;
    if let Some(old) = replaces.filter(|_| !reply.replayed()) {
        keys::uncache(&auth, &[old]).await?;
    }
    Ok(reply)
}

#[derive(Clone, Copy)]
enum StatusChange {
    Revoke { cascade: bool },
    Delete,
}

/// Revoke and delete: the same mutation with a different transition.
async fn change_status<B: Sync>(
    st: &AppState,
    principal: &crate::domain::credentials::Principal,
    raw_id: &str,
    key: Idempotent<'_>,
    body: &JsonBody<B>,
    change: StatusChange,
    reason: Option<String>,
) -> poem::Result<Reply<KeyStatusResult>> {
    let id = path_uuid("path:keyId", raw_id)?;
    let caller = principal.clone();
    let auth = st.key_auth();
    let cascade = matches!(change, StatusChange::Revoke { cascade: true });
    // The keys this request changed (none for a replay): they leave the caches again after
    // the commit, as they did before the transaction.
    let mut changed = Vec::new();
    let changed_slot = &mut changed;
    let reply = key
        .run_prepared(
            principal,
            body,
            async |_| keys::uncache_before(&st.db, &auth, principal, id, cascade).await,
            async move |txn, _acting, ()| {
                let (m, cascaded) = match change {
                    StatusChange::Revoke { cascade } => {
                        let r = keys::revoke(txn, &caller, id, reason, cascade).await?;
                        changed_slot.extend(r.cascaded.iter().map(|k| k.id));
                        let ids = r.cascaded.iter().map(|k| k.id.to_string()).collect();
                        (r.key, cascade.then_some(ids))
                    }
                    StatusChange::Delete => (keys::delete(txn, &caller, id, reason).await?, None),
                };
                changed_slot.push(m.id);
                Ok(Outcome::new(KeyStatusResult {
                    cascaded_key_ids: cascaded,
                    key_id: m.id.to_string(),
                    status: m.status.as_str().to_string(),
                    revoked_at: matches!(change, StatusChange::Revoke { .. })
                        .then_some(m.revoked_at)
                        .flatten()
                        .map(ts),
                    deleted_at: m.deleted_at.map(ts),
                }))
            },
        )
        .await?;
    keys::uncache(&auth, &changed).await?;
    Ok(reply)
}
