//! Operator routes over any tenant's webhook endpoints: re-enable one (an endpoint the
//! worker disabled after sustained failure, say) and recover what failed or was held back
//! since a time, with a dry run. The console's endpoint page calls the same domain
//! functions.
use chrono::{DateTime, Utc};
use poem_openapi::{Object, OpenApi, param::Path};
use serde::{Deserialize, Serialize};

use crate::http::{
    openapi::tags::Tag,
    operator::OperatorAuth,
    pipeline::body::{JsonBody, Validate},
    pipeline::common::path_uuid,
    pipeline::fields::{Text, UuidText},
    pipeline::mutation::OptionalKey,
    pipeline::reply::Reply,
};
use crate::{
    domain::{
        validate::{self, Errors},
        webhooks,
    },
    idempotency::Outcome,
};

/// Re-enable an endpoint.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct OperatorEnableRequest {
    /// Why (kept in the audit log).
    #[serde(default)]
    pub reason: Text<1, 500>,
    /// True: deliveries held while it was disabled are sent now, in order per resource.
    #[oai(nullable)]
    pub replay_missed: Option<bool>,
}

impl Validate for OperatorEnableRequest {
    fn validate(&self, e: &mut Errors) {
        self.reason.check(e, "/reason");
    }
}

#[derive(Object, Serialize)]
pub struct OperatorEnableResult {
    pub subscription_id: String,
    /// `ACTIVE`.
    pub state: String,
    /// Deliveries held while it was disabled.
    pub missed: u64,
    /// Of those, sent again now.
    pub replayed: u64,
}

/// Recover an endpoint's deliveries since a time.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct OperatorRecoverRequest {
    /// RFC 3339: deliveries created at or after it that are DEAD (retries ran out) or
    /// SUSPENDED (held while the endpoint was disabled) are sent again.
    #[serde(default)]
    pub since: crate::http::pipeline::fields::DateTimeText,
    /// Why (kept in the audit log).
    #[serde(default)]
    pub reason: Text<1, 500>,
    /// True: only count what would be sent again.
    #[oai(nullable)]
    pub dry_run: Option<bool>,
}

impl Validate for OperatorRecoverRequest {
    fn validate(&self, e: &mut Errors) {
        validate::rfc3339(e, "/since", &self.since);
        self.reason.check(e, "/reason");
    }
}

#[derive(Object, Serialize)]
pub struct OperatorRecoverResult {
    pub subscription_id: String,
    pub dry_run: bool,
    /// Deliveries sent again (each as a new series of attempts), or in a dry run, that
    /// would be.
    pub deliveries: u64,
}

pub struct OperatorWebhooksApi;

#[OpenApi(tag = "Tag::Platform")]
impl OperatorWebhooksApi {
    /// Re-enable a webhook endpoint (operators)
    ///
    /// Any tenant's endpoint, whether a partner or the worker (after sustained failure)
    /// disabled it: its failure streak restarts. Audited.
    #[oai(
        path = "/operator/webhook-endpoints/:subscription_id/enable",
        method = "post",
        operation_id = "operatorEnableWebhookEndpoint"
    )]
    async fn enable(
        &self,
        auth: OperatorAuth,
        subscription_id: Path<UuidText>,
        /// Optional (UUID): a retry with the same key replays the first answer.
        #[oai(name = "Idempotency-Key")]
        key: OptionalKey<'_>,
        body: JsonBody<OperatorEnableRequest>,
    ) -> poem::Result<Reply<OperatorEnableResult>> {
        let id = path_uuid("path:subscriptionId", &subscription_id.0)?;
        let b = &body.value;
        let actor = auth.0.actor();
        key.run_as_operator(&auth.0, &body.json, async move |txn| {
            let replay_missed = b.replay_missed.unwrap_or(false);
            let (s, missed, replayed) =
                webhooks::operator_enable(txn, &actor, id, replay_missed, &b.reason).await?;
            Ok(Outcome::new(OperatorEnableResult {
                subscription_id: s.id.to_string(),
                state: s.state.as_str().to_string(),
                missed,
                replayed,
            }))
        })
        .await
    }

    /// Recover a webhook endpoint's deliveries (operators)
    ///
    /// Sends again every delivery to the endpoint created since `since` that failed for
    /// good or was held while it was disabled, in order per resource. With `dry_run`, only
    /// counts them. Audited.
    #[oai(
        path = "/operator/webhook-endpoints/:subscription_id/recover",
        method = "post",
        operation_id = "operatorRecoverWebhookEndpoint"
    )]
    async fn recover(
        &self,
        auth: OperatorAuth,
        subscription_id: Path<UuidText>,
        /// Optional (UUID): a retry with the same key replays the first answer instead of
        /// sending the deliveries again.
        #[oai(name = "Idempotency-Key")]
        key: OptionalKey<'_>,
        body: JsonBody<OperatorRecoverRequest>,
    ) -> poem::Result<Reply<OperatorRecoverResult>> {
        let id = path_uuid("path:subscriptionId", &subscription_id.0)?;
        let b = &body.value;
        let since: DateTime<Utc> = DateTime::parse_from_rfc3339(&b.since)
            .map_err(crate::error::ApiError::internal)?
            .with_timezone(&Utc);
        let dry_run = b.dry_run.unwrap_or(false);
        let actor = auth.0.actor();
        key.run_as_operator(&auth.0, &body.json, async move |txn| {
            let deliveries = if dry_run {
                webhooks::recoverable(txn, id, since).await?.1
            } else {
                webhooks::operator_recover(txn, &actor, id, since, &b.reason).await?
            };
            Ok(Outcome::new(OperatorRecoverResult {
                subscription_id: id.to_string(),
                dry_run,
                deliveries,
            }))
        })
        .await
    }
}
