//! Console sessions, kept on the server so that they can end there: signing out ends one,
//! and disabling or enabling an operator ends every session they had (a re-enabled
//! operator signs in again; a cookie copied before never works again). The cookie carries
//! the session's id under the server's MAC (`console::session`).
use chrono::{DateTime, Utc};
use entities::operator::OperatorStatus;
use serde::Serialize;
use serde_json::json;
use uuid::Uuid;

use crate::domain::operators::{Operator, audit};
use crate::{
    error::ApiError,
    store::{self, Db},
};

/// A session opened at sign-in.
pub struct Opened {
    pub id: Uuid,
    pub expires_at: DateTime<Utc>,
}

/// Opens a console session for `op`, lasting `ttl`, audited as a sign-in in the same
/// transaction.
pub async fn open(
    db: &Db,
    op: &Operator,
    ttl: chrono::Duration,
    client: &str,
) -> Result<Opened, ApiError> {
    let now = Utc::now();
    let opened = Opened {
        id: Uuid::now_v7(),
        expires_at: now + ttl,
    };
    let txn = store::begin(db).await?;
    store::credentials::operators::insert_session(&txn, opened.id, op.id, now, opened.expires_at)
        .await?;
    audit(
        &txn,
        &op.actor(),
        "console.sign_in",
        "operator",
        Some(op.id.to_string()),
        None,
        json!({"session_id": opened.id, "client": client}),
    )
    .await?;
    txn.commit().await?;
    Ok(opened)
}

/// The operator of a live session: not signed out, not expired, its operator still active.
pub async fn live(db: &Db, session: Uuid, operator: Uuid) -> Result<Option<Operator>, ApiError> {
    Ok(
        store::credentials::operators::live_session(db, session, operator, Utc::now())
            .await?
            .map(|op| Operator {
                id: op.id,
                name: op.name,
            }),
    )
}

/// Signs `op` out of `session`, audited.
pub async fn end(db: &Db, op: &Operator, session: Uuid) -> Result<(), ApiError> {
    let txn = store::begin(db).await?;
    store::credentials::operators::revoke_session(&txn, session, Utc::now()).await?;
    audit(
        &txn,
        &op.actor(),
        "console.sign_out",
        "operator",
        Some(op.id.to_string()),
        None,
        json!({"session_id": session}),
    )
    .await?;
    txn.commit().await?;
    Ok(())
}

/// An operator after `set_status`.
#[derive(Debug, Serialize)]
pub struct StatusChanged {
    pub operator_id: Uuid,
    pub name: String,
    /// `active` or `inactive`.
    pub status: String,
    /// Console sessions the change ended.
    pub sessions_ended: u64,
}

/// Enables (`active`) or disables (`inactive`) an operator, ending every console session it
/// had either way, in one audited transaction. A disabled operator's key stops at once
/// (operator keys are checked against the database on every use).
pub async fn set_status(
    db: &Db,
    actor: &str,
    operator: Uuid,
    active: bool,
    reason: &str,
) -> Result<StatusChanged, ApiError> {
    let reason = reason.trim();
    if reason.is_empty() || reason.chars().count() > 500 || reason.chars().any(char::is_control) {
        return Err(ApiError::field(
            "--reason",
            "invalid",
            "1 to 500 printable characters",
        ));
    }
    let status = if active {
        OperatorStatus::Active
    } else {
        OperatorStatus::Inactive
    };
    let txn = store::begin(db).await?;
    let Some(op) = store::credentials::operators::find(&txn, operator).await? else {
        return Err(ApiError::not_found("operator"));
    };
    store::credentials::operators::set_status(&txn, operator, status).await?;
    let ended =
        store::credentials::operators::revoke_sessions_of(&txn, operator, Utc::now()).await?;
    audit(
        &txn,
        actor,
        if active {
            "operator.enable"
        } else {
            "operator.disable"
        },
        "operator",
        Some(operator.to_string()),
        Some(reason.to_string()),
        json!({"sessions_ended": ended, "previous_status": op.status.as_str()}),
    )
    .await?;
    txn.commit().await?;
    Ok(StatusChanged {
        operator_id: operator,
        name: op.name,
        status: status.as_str().into(),
        sessions_ended: ended,
    })
}
