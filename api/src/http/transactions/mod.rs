//! The reconciliation feed (x-api-key): `GET /{integrationId}/transactions[/{id}]`.
pub mod disputes;
use crate::http::pipeline::fields::{
    Cursor, DateTimeText, Field, OneOf, PageLimit, TransactionKinds, TransactionStatuses, UuidText,
};
use crate::http::pipeline::query_group::{Grouped, query_group};
use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use chrono::{DateTime, Utc};
use poem::web::Data;
use poem_openapi::{Object, OpenApi, param::Path};
use serde::{Deserialize, Serialize};

use crate::domain::credentials::Permission;
use crate::http::{
    openapi::tags::Tag,
    payments::{PaymentDetail, detail},
    pipeline::auth::ApiKeyAuth,
    pipeline::common::{optional_uuid, path_uuid, ts},
    pipeline::reply::Reply,
    transactions::disputes::{DisputeView, TopupReversalView, dispute_view, reversal_view},
};
use crate::{
    domain::{
        payments::{Payment, Refund},
        topups::{Topup, TopupReversal},
        transactions::{self, Detail, Transaction},
        validate::{self, Errors},
    },
    envelope::Page,
    error::ApiError,
    state::AppState,
    store::payments::{FeedStatus, TransactionFilter},
};

query_group! {
    /// The feed's filters and page.
    pub struct FeedQuery {
        status: Option<Field<OneOf<TransactionStatuses>>> = "status",
        kind: Option<Field<OneOf<TransactionKinds>>> = "type",
        from: Option<DateTimeText> = "from",
        to: Option<DateTimeText> = "to",
        branch_id: Option<UuidText> = "branch_id",
        limit: Option<PageLimit> = "limit",
        cursor: Option<Cursor> = "cursor",
    }
}

/// One line of the feed: one movement of money, with the transaction it belongs to.
#[derive(Object, Serialize)]
pub struct TransactionItem {
    /// This line's id (the sale's is the payment's, a top-up's the top-up's; a refund or void
    /// has its own). Each movement appears once in the feed.
    pub movement_id: String,
    /// `sale` (a wallet payment's debit), `refund` or `void` (money back to the wallet),
    /// `topup` (a credit of actual money), or `chargeback` or `unattach` (a top-up's credit
    /// taken back from the wallet). Further values may be added.
    pub movement: String,
    /// What this movement moved (a refund's amount, not its sale's).
    pub movement_amount_minor: i64,
    /// When this movement happened: the time `from` and `to` filter on.
    pub occurred_at: String,
    /// The payment or top-up this movement belongs to (`GET .../transactions/{id}`).
    pub transaction_id: String,
    /// `payment` (a wallet debit) or `topup` (a credit of actual money; further types may be
    /// added).
    #[oai(rename = "type")]
    #[serde(rename = "type")]
    pub kind: String,
    /// The transaction's status now: completed, partially_refunded, refunded or voided (a
    /// payment); completed or reversed (a top-up whose credit was taken back).
    pub status: String,
    pub merchant_id: String,
    pub wallet_id: String,
    /// The transaction's amount: a payment's debit, or a top-up's credit.
    pub amount_minor: i64,
    pub debited_promo_minor: i64,
    pub debited_actual_minor: i64,
    pub refunded_minor: i64,
    pub currency: String,
    #[oai(nullable)]
    pub order_ref: Option<String>,
    #[oai(nullable)]
    pub branch_id: Option<String>,
    #[oai(nullable)]
    pub terminal_id: Option<String>,
    #[oai(nullable)]
    pub cashier_id: Option<String>,
    /// True when the basket disagreed with the amount (flagged, never adjusted).
    pub needs_reconciliation: bool,
    /// Top-ups: `sku` or `settlement`.
    #[oai(nullable)]
    pub topup_kind: Option<String>,
    /// Top-ups: the promotional bonus that accrued with it.
    #[oai(nullable)]
    pub bonus_minor: Option<i64>,
    /// Refunds, voids and top-up reversals: the reason given.
    #[oai(nullable)]
    pub reason: Option<String>,
    /// When the transaction was created (a sale's or top-up's `occurred_at`).
    pub created_at: String,
}

fn topup_item(t: &Topup) -> TransactionItem {
    TransactionItem {
        movement_id: t.id.to_string(),
        movement: "topup".into(),
        movement_amount_minor: t.credited_actual_minor,
        occurred_at: ts(t.created_at),
        transaction_id: t.id.to_string(),
        kind: "topup".into(),
        status: t.feed_status.into(),
        merchant_id: t.merchant_id.to_string(),
        wallet_id: t.wallet_id.to_string(),
        amount_minor: t.credited_actual_minor,
        debited_promo_minor: 0,
        debited_actual_minor: 0,
        refunded_minor: 0,
        currency: t.currency.clone(),
        order_ref: Some(t.order_ref.clone()),
        branch_id: t.branch_id.map(|b| b.to_string()),
        terminal_id: t.terminal_id.clone(),
        cashier_id: t.cashier_id.clone(),
        needs_reconciliation: false,
        topup_kind: Some(t.kind.clone()),
        bonus_minor: Some(t.bonus_minor),
        reason: None,
        created_at: ts(t.created_at),
    }
}

/// A top-up's credit taken back: its top-up's line, as this movement.
fn topup_reversal_item(r: &TopupReversal, t: &Topup) -> TransactionItem {
    TransactionItem {
        movement_id: r.id.to_string(),
        movement: r.kind.clone(),
        movement_amount_minor: r.taken_back_minor,
        occurred_at: ts(r.created_at),
        reason: r.reason.clone(),
        ..topup_item(t)
    }
}

/// A refund or void: its payment's line, as this movement.
fn reversal_item(r: &Refund, p: &Payment) -> TransactionItem {
    TransactionItem {
        movement_id: r.id.to_string(),
        movement: r.kind.clone(),
        movement_amount_minor: r.amount_minor,
        occurred_at: ts(r.created_at),
        reason: r.reason.clone(),
        ..item(p)
    }
}

fn item(p: &Payment) -> TransactionItem {
    TransactionItem {
        movement_id: p.id.to_string(),
        movement: "sale".into(),
        movement_amount_minor: p.amount_minor,
        occurred_at: ts(p.created_at),
        transaction_id: p.id.to_string(),
        kind: "payment".into(),
        status: p.feed_status.into(),
        merchant_id: p.merchant_id.to_string(),
        wallet_id: p.wallet_id.to_string(),
        amount_minor: p.amount_minor,
        debited_promo_minor: p.debited_promo_minor,
        debited_actual_minor: p.debited_actual_minor,
        refunded_minor: p.refunded_minor,
        currency: p.currency.clone(),
        order_ref: p.order_ref.clone(),
        branch_id: p.branch_id.map(|b| b.to_string()),
        terminal_id: p.terminal_id.clone(),
        cashier_id: p.cashier_id.clone(),
        needs_reconciliation: p.needs_reconciliation,
        topup_kind: None,
        bonus_minor: None,
        reason: None,
        created_at: ts(p.created_at),
    }
}

/// An event the transaction caused.
#[derive(Object, Serialize)]
pub struct RelatedEvent {
    pub event_id: String,
    pub event_type: String,
    pub sequence_number: i64,
    pub occurred_at: String,
}

/// A promotional grant's part of the debit.
#[derive(Object, Serialize)]
pub struct PromoPart {
    pub grant_id: String,
    pub amount_minor: i64,
}

/// Everything about one transaction.
#[derive(Object, Serialize)]
pub struct TransactionDetail {
    pub transaction_id: String,
    #[oai(rename = "type")]
    #[serde(rename = "type")]
    pub kind: String,
    /// completed, partially_refunded, refunded or voided; a top-up requested against a
    /// settlement still PENDING is pending, and failed if that settlement failed; a top-up
    /// whose credit was taken back is reversed.
    pub status: String,
    pub merchant_id: String,
    pub integration_id: String,
    /// Payments: money classes, branch, terminal, cashier, order ref, reconciliation
    /// flags, refunds.
    #[oai(nullable)]
    pub payment: Option<PaymentDetail>,
    /// Top-ups: what was credited and its bonus.
    #[oai(nullable)]
    pub topup: Option<TopupDetail>,
    /// Which grants paid the promotional part, in spend order.
    pub promo_split: Vec<PromoPart>,
    /// The basket as sent (null when none was).
    #[oai(nullable)]
    pub basket: Option<serde_json::Value>,
    /// The events it caused, in sequence.
    pub events: Vec<RelatedEvent>,
    /// Its disputes, oldest first.
    pub disputes: Vec<DisputeView>,
    /// Top-ups: the reversal that took its credit back (chargeback or unattach), if any.
    #[oai(nullable)]
    pub topup_reversal: Option<TopupReversalView>,
}

/// A credited top-up.
#[derive(Object, Serialize)]
pub struct TopupDetail {
    /// `sku` or `settlement`.
    pub kind: String,
    /// The POS order (SKU top-ups) or the settlement reference.
    pub order_ref: String,
    pub wallet_id: String,
    pub wallet_user_id: String,
    pub credited_actual_minor: i64,
    pub bonus_minor: i64,
    #[oai(nullable)]
    pub bonus_grant_id: Option<String>,
    pub currency: String,
    #[oai(nullable)]
    pub sku_id: Option<String>,
    #[oai(nullable)]
    pub sku_version: Option<i32>,
    #[oai(nullable)]
    pub quantity: Option<i64>,
    /// The reload-bonus config version a settlement top-up accrued under.
    #[oai(nullable)]
    pub bonus_config_version: Option<i32>,
    #[oai(nullable)]
    pub branch_id: Option<String>,
    #[oai(nullable)]
    pub terminal_id: Option<String>,
    #[oai(nullable)]
    pub cashier_id: Option<String>,
    pub created_at: String,
}

/// Filters a cursor carries, so the next page is the same list.
#[derive(Serialize, Deserialize, PartialEq, Debug, Default)]
struct Carried {
    status: Option<String>,
    #[serde(default)]
    kind: Option<String>,
    from: Option<DateTime<Utc>>,
    to: Option<DateTime<Utc>>,
    branch_id: Option<uuid::Uuid>,
    after: uuid::Uuid,
}

fn encode(c: &Carried) -> String {
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(c).expect("cursor serialises"))
}

fn decode(raw: &str) -> Result<Carried, ApiError> {
    URL_SAFE_NO_PAD
        .decode(raw)
        .ok()
        .and_then(|b| serde_json::from_slice::<Carried>(&b).ok())
        // A status the list does not know was never in a cursor it returned.
        .filter(|c| c.status.as_deref().is_none_or(|s| FeedStatus::parse(s).is_some()))
        .ok_or_else(|| {
            ApiError::field(
                "query:cursor",
                "invalid_cursor",
                "is not a cursor this list returned",
            )
        })
}

pub struct TransactionsApi;

#[OpenApi(tag = "Tag::Transactions")]
impl TransactionsApi {
    /// List transactions (reconciliation feed)
    ///
    /// Every movement of the integration's money, once each and newest first (a stable
    /// order: ids grow with time), within the key's merchant, brand or branch: a wallet
    /// payment's sale, each refund and its void, each credited top-up and each top-up
    /// credit taken back (chargeback, unattach). Filters: `type` (payment: sales, refunds
    /// and voids; topup: credits and their reversals), `status` (the transaction's status
    /// now: completed, partially_refunded, refunded, voided, reversed), `from`
    /// (inclusive) and `to` (exclusive) on the activity time (`occurred_at`: a refund today
    /// of yesterday's sale is in today's window, the sale in yesterday's), `branch_id`.
    /// Cursor-paginated (`limit` 1–200, default 50); the cursor keeps its filters: pass it
    /// alone for the next page (filters sent with it must be the same). Another integration
    /// in the path is FORBIDDEN.
    ///
    /// Permission: `reporting`.
    #[oai(
        path = "/:integration_id/transactions",
        method = "get",
        operation_id = "listTransactions"
    )]
    async fn list(
        &self,
        state: Data<&AppState>,
        auth: ApiKeyAuth,
        integration_id: Path<UuidText>,
        query: Grouped<FeedQuery>,
    ) -> poem::Result<Reply<Vec<TransactionItem>>> {
        auth.0.require(Permission::Reporting)?;
        let st = state.0;
        let integration = path_uuid("path:integrationId", &integration_id.0)?;
        transactions::check_integration(&auth.0, integration)?;
        let mut e = Errors::default();
        let FeedQuery {
            status,
            kind,
            from,
            to,
            branch_id,
            limit,
            cursor,
        } = query.0;
        if let Some(s) = &status {
            s.check(&mut e, "query:status");
        }
        if let Some(k) = &kind {
            k.check(&mut e, "query:type");
        }
        let from = from
            .as_deref()
            .and_then(|v| validate::rfc3339(&mut e, "query:from", v));
        let to = to
            .as_deref()
            .and_then(|v| validate::rfc3339(&mut e, "query:to", v));
        let branch = optional_uuid(&mut e, "query:branch_id", &branch_id);
        let limit = PageLimit::resolve(limit, &mut e);
        e.finish()?;
        let asked = Carried {
            status: status.map(String::from),
            kind: kind.map(String::from),
            from,
            to,
            branch_id: branch,
            after: uuid::Uuid::nil(),
        };
        let (carried, after) = match cursor.as_deref() {
            Some(raw) => {
                let c = decode(raw)?;
                let given = asked.status.is_some()
                    || asked.kind.is_some()
                    || asked.from.is_some()
                    || asked.to.is_some()
                    || asked.branch_id.is_some();
                let same = c.status == asked.status
                    && c.kind == asked.kind
                    && c.from == asked.from
                    && c.to == asked.to
                    && c.branch_id == asked.branch_id;
                if given && !same {
                    return Err(ApiError::field(
                        "query:cursor",
                        "filters_differ",
                        "was made for other filters; send it alone or with the same filters",
                    )
                    .into());
                }
                let after = c.after;
                (c, Some(after))
            }
            None => (asked, None),
        };
        let mut f = TransactionFilter {
            integration_id: integration,
            status: carried.status.as_deref().and_then(FeedStatus::parse),
            kind: carried.kind.clone(),
            from: carried.from,
            to: carried.to,
            branch_id: carried.branch_id,
            ..Default::default()
        };
        let read = st.lagging().await;
        transactions::bound(&read.db, &auth.0, &mut f).await?;
        let (rows, more) = transactions::page(&read.db, &f, after, limit).await?;
        let page = Page {
            next_cursor: if more {
                rows.last().map(|p| {
                    encode(&Carried {
                        after: p.id(),
                        status: carried.status.clone(),
                        kind: carried.kind.clone(),
                        from: carried.from,
                        to: carried.to,
                        branch_id: carried.branch_id,
                    })
                })
            } else {
                None
            },
            has_more: more,
        };
        Ok(Reply::lagging_page(
            &rows
                .iter()
                .map(|t| match t {
                    Transaction::Payment(p) => item(p),
                    Transaction::Reversal(r, p) => reversal_item(r, p),
                    Transaction::Topup(t) => topup_item(t),
                    Transaction::TopupReversal(r, t) => topup_reversal_item(r, t),
                })
                .collect::<Vec<_>>(),
            &page,
            read.served,
        ))
    }

    /// Get a transaction
    ///
    /// Full detail. A payment: money classes and the grants that paid, basket and
    /// reconciliation flags, branch, terminal, cashier, order refs, refunds. A top-up: what
    /// was credited, its bonus and its SKU or settlement, and the reversal that took it back.
    /// Both: the events it caused and its disputes.
    /// Another integration's transaction is FORBIDDEN; an unknown id NOT_FOUND.
    ///
    /// Permission: `reporting`.
    #[oai(
        path = "/:integration_id/transactions/:transaction_id",
        method = "get",
        operation_id = "getTransaction"
    )]
    async fn get(
        &self,
        state: Data<&AppState>,
        auth: ApiKeyAuth,
        integration_id: Path<UuidText>,
        transaction_id: Path<UuidText>,
    ) -> poem::Result<Reply<TransactionDetail>> {
        auth.0.require(Permission::Reporting)?;
        let integration = path_uuid("path:integrationId", &integration_id.0)?;
        let id = path_uuid("path:transactionId", &transaction_id.0)?;
        let read = state.0.lagging().await;
        let (d, served) = match transactions::detail(&read.db, &auth.0, integration, id).await {
            Err(e) if read.ask_primary_after(&e) => (
                transactions::detail(&state.0.db, &auth.0, integration, id).await?,
                crate::store::db::replica::Served::Primary,
            ),
            found => (found?, read.served),
        };
        let related = |events: &[transactions::RelatedEvent]| -> Vec<RelatedEvent> {
            events
                .iter()
                .map(|e| RelatedEvent {
                    event_id: e.event_id.to_string(),
                    event_type: e.event_type.clone(),
                    sequence_number: e.sequence_number,
                    occurred_at: ts(e.occurred_at),
                })
                .collect()
        };
        let out = match d {
            Detail::Payment {
                payment: p,
                refunds,
                events,
                disputes,
            } => {
                let split = p
                    .promo_split()
                    .into_iter()
                    .map(|x| PromoPart {
                        grant_id: x.grant_id,
                        amount_minor: x.amount_minor,
                    })
                    .collect();
                TransactionDetail {
                    transaction_id: p.id.to_string(),
                    kind: "payment".into(),
                    status: p.feed_status.into(),
                    merchant_id: p.merchant_id.to_string(),
                    integration_id: p.integration_id.to_string(),
                    payment: Some(detail(&p, &refunds)),
                    topup: None,
                    promo_split: split,
                    basket: p.basket.clone(),
                    events: related(&events),
                    disputes: disputes.iter().map(dispute_view).collect(),
                    topup_reversal: None,
                }
            }
            Detail::Topup {
                topup: t,
                events,
                disputes,
                reversal,
            } => TransactionDetail {
                transaction_id: t.id.to_string(),
                kind: "topup".into(),
                status: t.feed_status.into(),
                merchant_id: t.merchant_id.to_string(),
                integration_id: t.integration_id.to_string(),
                payment: None,
                topup: Some(TopupDetail {
                    kind: t.kind.clone(),
                    order_ref: t.order_ref.clone(),
                    wallet_id: t.wallet_id.to_string(),
                    wallet_user_id: t.wallet_user_id.to_string(),
                    credited_actual_minor: t.credited_actual_minor,
                    bonus_minor: t.bonus_minor,
                    bonus_grant_id: t.bonus_grant_id.map(|g| g.to_string()),
                    currency: t.currency.clone(),
                    sku_id: t.sku_id.clone(),
                    sku_version: t.sku_version,
                    quantity: t.quantity,
                    bonus_config_version: t.bonus_config_version,
                    branch_id: t.branch_id.map(|b| b.to_string()),
                    terminal_id: t.terminal_id.clone(),
                    cashier_id: t.cashier_id.clone(),
                    created_at: ts(t.created_at),
                }),
                promo_split: Vec::new(),
                basket: None,
                events: related(&events),
                disputes: disputes.iter().map(dispute_view).collect(),
                topup_reversal: reversal.as_ref().map(reversal_view),
            },
        };
        Ok(Reply::lagging(&out, served))
    }
}
