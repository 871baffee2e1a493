//! The reconciliation feed: every movement of an integration's money (a wallet payment's
//! sale, each of its refunds and its void, each credited top-up) once, in one list ordered by
//! the movement's id (UUIDv7: the order they happened), so a window of activity time holds
//! exactly what moved in it: a refund today of yesterday's sale is in today's window, the
//! sale in yesterday's. The detail read gives a transaction whole. Scoped to the integration in the path
//! and the key; another integration's transaction is FORBIDDEN (the spec's rule for these
//! reads), an unknown one NOT_FOUND.
pub mod corrections;
pub mod disputes;
pub mod read;
use chrono::{DateTime, Utc};
use entities::{outbox, payment, topup};
use sea_orm::ConnectionTrait;
use uuid::Uuid;

use crate::domain::credentials::{Principal, Scope};
use crate::domain::payments::{Payment, Refund};
use crate::domain::topups::{Topup, TopupReversal};
use crate::domain::transactions::read::Dispute;
use crate::{
    error::ApiError,
    store::{
        self,
        payments::{FeedStatus, TransactionFilter},
    },
};

/// The kinds of movement the report lists (`type`).
pub const KINDS: &[&str] = &["payment", "topup"];

pub const STATUSES: &[&str] = &[
    "completed",
    "partially_refunded",
    "refunded",
    "voided",
    "reversed",
];

fn other_integration() -> ApiError {
    ApiError::forbidden("The transactions of another integration are not readable with this key.")
}

/// The path's integration must be the key's.
pub fn check_integration(p: &Principal, integration_id: Uuid) -> Result<(), ApiError> {
    if p.integration_id == integration_id {
        Ok(())
    } else {
        Err(other_integration())
    }
}

/// Narrows the filter to what the key may see (its merchant, brand or branch).
pub async fn bound<C: ConnectionTrait>(
    c: &C,
    p: &Principal,
    f: &mut TransactionFilter,
) -> Result<(), ApiError> {
    match p.scope {
        Scope::Integration => {}
        Scope::Enterprise { enterprise_id } => f.merchant_id = Some(enterprise_id),
        Scope::Brand {
            enterprise_id,
            brand_id,
        } => {
            f.merchant_id = Some(enterprise_id);
            f.branch_ids = Some(store::tenancy::branch_ids_of_brand(c, brand_id).await?);
        }
        Scope::Branch {
            enterprise_id,
            branch_id,
            ..
        } => {
            f.merchant_id = Some(enterprise_id);
            f.branch_ids = Some(vec![branch_id]);
        }
    }
    Ok(())
}

/// One line of the feed: one movement.
#[derive(Clone, Debug)]
pub enum Transaction {
    /// The sale: the wallet debit.
    Payment(Payment),
    /// A refund or the void of a payment: money back to the wallet.
    Reversal(Refund, Payment),
    Topup(Topup),
    /// A top-up's credit taken back (chargeback or unattach).
    TopupReversal(TopupReversal, Topup),
}

impl Transaction {
    /// The movement's id: the cursor's position.
    pub fn id(&self) -> Uuid {
        match self {
            Transaction::Payment(p) => p.id,
            Transaction::Reversal(r, _) => r.id,
            Transaction::Topup(t) => t.id,
            Transaction::TopupReversal(r, _) => r.id,
        }
    }
}

/// A page of the movements merged newest first: each kind's own page of `limit + 1`, then
/// the first `limit` of the merge (the rest proves there is more).
pub async fn page<C: ConnectionTrait>(
    c: &C,
    f: &TransactionFilter,
    after: Option<Uuid>,
    limit: u64,
) -> Result<(Vec<Transaction>, bool), ApiError> {
    let mut rows: Vec<Transaction> = Vec::new();
    // Only a top-up is ever `reversed`.
    if f.kind.as_deref() != Some("topup") && f.status != Some(FeedStatus::Reversed) {
        rows.extend(
            store::payments::transactions_page(c, f, after, limit + 1)
                .await?
                .into_iter()
                .map(|p| Transaction::Payment(p.into())),
        );
        rows.extend(
            store::payments::reversals_page(c, f, after, limit + 1)
                .await?
                .into_iter()
                .map(|(r, p)| Transaction::Reversal(r.into(), p.into())),
        );
    }
    if f.kind.as_deref() != Some("payment") {
        rows.extend(
            store::topups::transactions_page(c, f, after, limit + 1)
                .await?
                .into_iter()
                .map(|t| Transaction::Topup(t.into())),
        );
        rows.extend(
            store::disputes::reversals_page(c, f, after, limit + 1)
                .await?
                .into_iter()
                .map(|(r, t)| Transaction::TopupReversal(r.into(), t.into())),
        );
    }
    rows.sort_by_key(|t| std::cmp::Reverse(t.id()));
    let more = rows.len() as u64 > limit;
    rows.truncate(limit as usize);
    Ok((rows, more))
}

/// A transaction the key may act on: found in the path's integration and within the key's
/// bounds.
#[derive(Clone, Debug)]
pub enum Located {
    Payment(payment::Model),
    Topup(topup::Model),
}

impl Located {
    pub fn id(&self) -> Uuid {
        match self {
            Located::Payment(p) => p.id,
            Located::Topup(t) => t.id,
        }
    }

    pub fn merchant_id(&self) -> Uuid {
        match self {
            Located::Payment(p) => p.merchant_id,
            Located::Topup(t) => t.merchant_id,
        }
    }

    /// `payment` or `topup`: the feed's `type` and the resource its events are ordered in.
    pub fn kind(&self) -> &'static str {
        match self {
            Located::Payment(_) => "payment",
            Located::Topup(_) => "topup",
        }
    }
}

/// Finds transaction `id` of `integration_id` as `p` may see it: another integration's (or
/// one outside the key's merchant, brand or branch) is FORBIDDEN, an unknown one NOT_FOUND.
pub async fn locate<C: ConnectionTrait>(
    c: &C,
    p: &Principal,
    integration_id: Uuid,
    id: Uuid,
) -> Result<Located, ApiError> {
    check_integration(p, integration_id)?;
    if let Some(payment) = store::payments::find(c, id).await? {
        if payment.integration_id != integration_id
            || !crate::domain::payments::visible(c, p, &payment).await?
        {
            return Err(other_integration());
        }
        return Ok(Located::Payment(payment));
    }
    let topup = store::topups::find(c, id)
        .await?
        .filter(|t| t.wallet_id != Uuid::nil())
        .ok_or_else(|| ApiError::not_found("Transaction"))?;
    let mut bounds = TransactionFilter::default();
    bound(c, p, &mut bounds).await?;
    let in_scope = topup.integration_id == integration_id
        && bounds.merchant_id.is_none_or(|m| m == topup.merchant_id)
        && bounds
            .branch_ids
            .as_ref()
            .is_none_or(|b| topup.branch_id.is_some_and(|x| b.contains(&x)));
    if !in_scope {
        return Err(other_integration());
    }
    Ok(Located::Topup(topup))
}

/// An event a transaction caused, as its detail lists it.
#[derive(Clone, Debug)]
pub struct RelatedEvent {
    pub event_id: Uuid,
    pub event_type: String,
    pub sequence_number: i64,
    pub occurred_at: DateTime<Utc>,
}

impl From<outbox::Model> for RelatedEvent {
    fn from(e: outbox::Model) -> Self {
        RelatedEvent {
            event_id: e.event_id,
            event_type: e.topic,
            sequence_number: e.sequence_number,
            occurred_at: e.occurred_at,
        }
    }
}

/// A transaction whole, as its detail read gives it.
pub enum Detail {
    Payment {
        payment: Payment,
        refunds: Vec<Refund>,
        events: Vec<RelatedEvent>,
        disputes: Vec<Dispute>,
    },
    Topup {
        topup: Topup,
        events: Vec<RelatedEvent>,
        disputes: Vec<Dispute>,
        reversal: Option<TopupReversal>,
    },
}

fn read<M, R: From<M>>(rows: Vec<M>) -> Vec<R> {
    rows.into_iter().map(R::from).collect()
}

pub async fn detail<C: ConnectionTrait>(
    c: &C,
    p: &Principal,
    integration_id: Uuid,
    id: Uuid,
) -> Result<Detail, ApiError> {
    let located = locate(c, p, integration_id, id).await?;
    let disputes = store::disputes::of_transaction(c, id).await?;
    let topup = match located {
        Located::Payment(payment) => {
            let refunds = store::payments::refunds_of(c, payment.id).await?;
            let events = store::outbox::events_of(c, "payment", &payment.id.to_string()).await?;
            return Ok(Detail::Payment {
                payment: payment.into(),
                refunds: read(refunds),
                events: read(events),
                disputes: read(disputes),
            });
        }
        Located::Topup(t) => t,
    };
    let mut events = store::outbox::events_of(c, "topup", &topup.id.to_string()).await?;
    if topup.kind == "settlement"
        && let Some(s) = store::incentives::find_settlement(
            c,
            topup.integration_id,
            topup.merchant_id,
            &topup.order_ref,
        )
        .await?
    {
        events.extend(store::outbox::events_of(c, "settlement", &s.id.to_string()).await?);
    }
    // Two resources' events, in the order they were written (the outbox id).
    events.sort_by_key(|e| e.id);
    let reversal = store::disputes::reversal_of(c, topup.id).await?;
    Ok(Detail::Topup {
        topup: topup.into(),
        events: read(events),
        disputes: read(disputes),
        reversal: reversal.map(TopupReversal::from),
    })
}
