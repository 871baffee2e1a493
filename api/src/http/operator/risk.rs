//! Operator routes over risk blocks (docs/risk.md): the terminals, branches, merchants and
//! wallets that crossed a threshold and are blocked now, and clearing a failure block. The
//! console's Risk page calls the same domain functions.
use poem::web::Data;
use poem_openapi::{Object, OpenApi, param::Path};
use serde::{Deserialize, Serialize};

use crate::domain::risk::blocks::{self, Block};
use crate::domain::risk::crossings;
use crate::domain::validate::Errors;
use crate::http::pipeline::query_group::{Grouped, query_group};
use crate::http::{
    openapi::tags::Tag,
    operator::OperatorAuth,
    pipeline::body::{JsonBody, Validate},
    pipeline::common::{optional_uuid, path_uuid, ts},
    pipeline::fields::{PageLimit, Text, UuidText},
    pipeline::mutation::OptionalKey,
    pipeline::reply::Reply,
};
use crate::{idempotency::Outcome, state::AppState};

/// One failed credential in a block's window.
#[derive(Object, Serialize)]
pub struct RiskAttempt {
    pub at: String,
    /// `short_code`, `qr`, `otp` or `balance_check`, with the request id after a colon
    /// (search the logs for it).
    pub what: String,
}

/// A terminal, branch, merchant or wallet past a threshold.
#[derive(Object, Serialize)]
pub struct RiskBlock {
    pub block_id: String,
    pub merchant_id: String,
    pub sandbox: bool,
    /// `terminal`, `branch`, `merchant` or `wallet`.
    pub scope: String,
    /// What in the scope: `terminal_id` (or `api_key_id` for a caller whose token names no
    /// terminal), `branch_id`, `merchant_id` or `wallet_id`.
    pub subject: serde_json::Value,
    /// `credential_failures`, or the velocity limit's name (`wallet_payments_24h_count` ...).
    pub rule: String,
    pub threshold: i64,
    pub window_seconds: i64,
    /// What was counted when it crossed (failures, payments or minor units).
    pub observed: i64,
    /// Since when (the latest crossing).
    pub since: String,
    /// When it ends unless cleared.
    pub until: String,
    pub last_seen_at: String,
    /// How often this subject has crossed this rule.
    pub crossings: i64,
    /// Only a failure block can be cleared; a velocity limit's ends with its window.
    pub clearable: bool,
    /// The latest failed credentials in its window, newest first (failure blocks).
    pub last_attempts: Vec<RiskAttempt>,
    #[oai(nullable)]
    pub cleared_at: Option<String>,
    #[oai(nullable)]
    pub cleared_by: Option<String>,
}

pub fn block_view(b: &Block) -> RiskBlock {
    let r = &b.row;
    RiskBlock {
        block_id: r.id.to_string(),
        merchant_id: r.merchant_id.to_string(),
        sandbox: r.is_sandbox,
        scope: r.scope.clone(),
        subject: crossings::subject_view(&r.scope, &r.subject),
        rule: r.rule.clone(),
        threshold: r.threshold,
        window_seconds: r.window_secs,
        observed: r.observed,
        since: ts(r.crossed_at),
        until: ts(r.until),
        last_seen_at: ts(r.last_seen_at),
        crossings: r.crossings,
        clearable: r.rule == crate::domain::risk::failures::RULE,
        last_attempts: b
            .last_attempts
            .iter()
            .map(|f| RiskAttempt {
                at: ts(f.at),
                what: f.note.clone(),
            })
            .collect(),
        cleared_at: r.cleared_at.map(ts),
        cleared_by: r.cleared_by.clone(),
    }
}

#[derive(Object, Serialize)]
pub struct RiskBlockList {
    pub data: Vec<RiskBlock>,
}

query_group! {
    /// Which blocks.
    pub struct BlocksQuery {
        /// One merchant's (default: every merchant's).
        merchant_id: Option<UuidText> = "merchant_id",
        /// At most this many, newest first (1-200, default 50).
        limit: Option<PageLimit> = "limit",
    }
}

/// Clear a block.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct ClearBlockRequest {
    /// Why (kept in the audit log).
    #[serde(default)]
    pub reason: Text<1, 200>,
}

impl Validate for ClearBlockRequest {
    fn validate(&self, e: &mut Errors) {
        self.reason.check(e, "/reason");
    }
}

pub struct OperatorRiskApi;

#[OpenApi(tag = "Tag::Platform")]
impl OperatorRiskApi {
    /// List risk blocks in force (operators)
    ///
    /// Terminals, branches and merchants past their failed-credential threshold, and
    /// wallets and terminals at a velocity limit, newest crossing first, with the latest
    /// failed attempts of each failure block.
    #[oai(
        path = "/operator/risk/blocks",
        method = "get",
        operation_id = "operatorListRiskBlocks"
    )]
    async fn list(
        &self,
        state: Data<&AppState>,
        _auth: OperatorAuth,
        query: Grouped<BlocksQuery>,
    ) -> poem::Result<Reply<RiskBlockList>> {
        let q = query.0;
        let mut e = Errors::default();
        let merchant = optional_uuid(&mut e, "query:merchant_id", &q.merchant_id);
        let limit = PageLimit::resolve(q.limit, &mut e);
        e.finish()?;
        let st = state.0;
        let guard = st.guard();
        let found = blocks::active(&guard.failures(), merchant, limit).await?;
        Ok(Reply::ok(&RiskBlockList {
            data: found.iter().map(block_view).collect(),
        }))
    }

    /// Clear a risk block (operators)
    ///
    /// A failure block's window is emptied: the terminal (branch, merchant) may enter
    /// credentials again at once. A velocity limit's block is CONFLICT: it ends as its window
    /// moves on, or when the merchant changes its limits. Audited with the reason.
    #[oai(
        path = "/operator/risk/blocks/:block_id/clear",
        method = "post",
        operation_id = "operatorClearRiskBlock"
    )]
    async fn clear(
        &self,
        state: Data<&AppState>,
        auth: OperatorAuth,
        block_id: Path<UuidText>,
        /// Optional (UUID): a retry with the same key replays the first answer.
        #[oai(name = "Idempotency-Key")]
        key: OptionalKey<'_>,
        body: JsonBody<ClearBlockRequest>,
    ) -> poem::Result<Reply<RiskBlock>> {
        let id = path_uuid("path:blockId", &block_id.0)?;
        let b = &body.value;
        let actor = auth.0.actor();
        let st = state.0;
        key.run_as_operator(&auth.0, &body.json, async move |txn| {
            let guard = st.guard();
            let row = blocks::clear(txn, &guard.failures(), id, &actor, &b.reason).await?;
            Ok(Outcome::new(block_view(&Block {
                row,
                last_attempts: vec![],
            })))
        })
        .await
    }
}
