//! Signing in with an operator key: at the console's form, or as `x-operator-key` on
//! `/v1/operator/*`. A guess must cost the guesser. Failures are counted per client
//! address and per key prefix in a fixed window; past either budget the address (or the
//! prefix) is refused with RATE_LIMITED and `Retry-After` before any key is looked up or
//! hashed. A key proven in the last day is exempt from its prefix's lock, so a flood of
//! guesses at one prefix cannot lock its holder out (its address's own budget still
//! applies to the flood).
//!
//! Every failure is audited, with the address, the surface, the key's prefix and why, never
//! the key: an unknown key, a disabled operator's key, a stale or reused sign-in form.
//! Locks bound what a flood can write there too: a locked address is refused unaudited.
use std::time::Duration;

use chrono::Utc;
use serde_json::json;

use crate::domain::operators::{Operator, audit};
use crate::{
    domain::credentials::api_key,
    error::{ApiError, RateLimitInfo},
    infra::kv::Kv,
    store::{self, Db},
};

/// How many failed sign-ins are allowed, and over what window
/// (`WALLET_OPS_SIGN_IN_FAILURES_PER_CLIENT`, `_PER_PREFIX`, `WALLET_OPS_SIGN_IN_WINDOW_SECS`).
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    /// Failed sign-ins one client address may make per window.
    pub per_client: u64,
    /// Failed sign-ins with one key prefix (any address) per window: fewer than an address
    /// may make by default, since guesses at one operator's prefix can come from many
    /// addresses.
    pub per_prefix: u64,
    pub window: Duration,
}

impl Budget {
    pub fn of(config: &crate::config::Config) -> Budget {
        Budget {
            per_client: config.ops_sign_in_failures_per_client,
            per_prefix: config.ops_sign_in_failures_per_prefix,
            window: Duration::from_secs(config.ops_sign_in_window_secs),
        }
    }
}

/// How long a key that signed in stays exempt from its prefix's lock.
const PROVEN_TTL: Duration = Duration::from_secs(24 * 3600);

/// One attempt to sign in.
pub struct Attempt<'a> {
    pub budget: Budget,
    /// The operator key as presented.
    pub key: &'a str,
    /// The client's address.
    pub client: &'a str,
    /// `console` or `api`: where the attempt was made.
    pub surface: &'static str,
}

/// Why an attempt failed, as the audit log records it.
enum Failure {
    UnknownKey,
    Disabled(Operator),
    StaleForm,
}

impl Failure {
    fn reason(&self) -> &'static str {
        match self {
            Failure::UnknownKey => "unknown_key",
            Failure::Disabled(_) => "operator_disabled",
            Failure::StaleForm => "stale_form",
        }
    }
}

/// The operator whose key `a` presents, within the failure budgets.
pub async fn sign_in(db: &Db, kv: &Kv, a: &Attempt<'_>) -> Result<Operator, ApiError> {
    let prefix = api_key::split_with(api_key::OPERATOR_PREFIX, a.key).map(|(p, _)| p);
    let proven = proven_key(a.key);
    refuse_while_locked(kv, &a.budget, a.client, prefix, Some(&proven)).await?;
    let failure = match prefix {
        None => Failure::UnknownKey,
        Some(p) => match verify(db, a.key, p).await? {
            Ok(op) => {
                kv.set_px(&proven, "1", PROVEN_TTL).await?;
                return Ok(op);
            }
            Err(f) => f,
        },
    };
    failed(db, kv, a, prefix, failure).await?;
    Err(ApiError::invalid_api_key())
}

/// A sign-in form refused before any key was read (its token missing, stale or used
/// already): counted and audited like a wrong key, so such refusals cannot be sent at will
/// either. RATE_LIMITED once the address is past its budget.
pub async fn refused_form(db: &Db, kv: &Kv, budget: Budget, client: &str) -> Result<(), ApiError> {
    refuse_while_locked(kv, &budget, client, None, None).await?;
    let a = Attempt {
        budget,
        key: "",
        client,
        surface: "console",
    };
    failed(db, kv, &a, None, Failure::StaleForm).await
}

/// The active operator with this key, else why not. Operators are few and their calls
/// rare: bcrypt every time, no cache.
async fn verify(db: &Db, raw: &str, prefix: &str) -> Result<Result<Operator, Failure>, ApiError> {
    let active = store::credentials::operators::active_by_prefix(db, prefix).await?;
    if let Some(op) = first_matching(raw, active).await? {
        return Ok(Ok(op));
    }
    let inactive = store::credentials::operators::inactive_by_prefix(db, prefix).await?;
    Ok(Err(match first_matching(raw, inactive).await? {
        Some(op) => Failure::Disabled(op),
        None => Failure::UnknownKey,
    }))
}

async fn first_matching(
    raw: &str,
    candidates: Vec<entities::operator::Model>,
) -> Result<Option<Operator>, ApiError> {
    for op in candidates {
        let (raw_owned, hash) = (raw.to_string(), op.key_hash.clone());
        let ok = tokio::task::spawn_blocking(move || api_key::verify(&raw_owned, &hash))
            .await
            .map_err(ApiError::internal)?;
        if ok {
            return Ok(Some(Operator {
                id: op.id,
                name: op.name,
            }));
        }
    }
    Ok(None)
}

/// RATE_LIMITED while the client or the prefix is locked (a proven key passes its
/// prefix's lock).
async fn refuse_while_locked(
    kv: &Kv,
    budget: &Budget,
    client: &str,
    prefix: Option<&str>,
    proven: Option<&str>,
) -> Result<(), ApiError> {
    let ms = |v: Option<String>| v.and_then(|v| v.parse::<i64>().ok());
    let mut until = ms(kv.get(&lock_key("client", client)).await?);
    if let Some(p) = prefix
        && let Some(locked) = ms(kv.get(&lock_key("prefix", p)).await?)
    {
        let exempt = match proven {
            Some(k) => kv.get(k).await?.is_some(),
            None => false,
        };
        if !exempt {
            until = until.max(Some(locked));
        }
    }
    let Some(until) = until else {
        return Ok(());
    };
    let left_ms = until - Utc::now().timestamp_millis();
    if left_ms <= 0 {
        return Ok(());
    }
    let secs = u64::try_from(left_ms).unwrap_or(0).div_ceil(1000);
    Err(ApiError::rate_limited(
        RateLimitInfo {
            limit: budget.per_client,
            remaining: 0,
            reset_secs: secs,
            window_secs: budget.window.as_secs(),
        },
        secs,
    ))
}

/// Counts a failure against the client and the prefix, locks whichever ran out of budget
/// until its window ends, and audits the failure.
async fn failed(
    db: &Db,
    kv: &Kv,
    a: &Attempt<'_>,
    prefix: Option<&str>,
    failure: Failure,
) -> Result<(), ApiError> {
    let mut locked = Vec::new();
    let mut budgets = vec![("client", a.client, a.budget.per_client)];
    if let Some(p) = prefix {
        budgets.push(("prefix", p, a.budget.per_prefix));
    }
    for (what, id, budget) in budgets {
        let (n, left) = kv
            .incr_window(&format!("op_signin_failures:{what}:{id}"), a.budget.window)
            .await?;
        if n >= budget && !left.is_zero() {
            let until =
                Utc::now().timestamp_millis() + i64::try_from(left.as_millis()).unwrap_or(0);
            kv.set_px(&lock_key(what, id), &until.to_string(), left)
                .await?;
            locked.push(what);
        }
    }
    let (actor, target) = match &failure {
        Failure::Disabled(op) => (op.actor(), Some(op.id.to_string())),
        _ => (format!("anonymous:{}", a.client), None),
    };
    audit(
        db,
        &actor,
        "operator.sign_in_failed",
        "operator",
        target,
        None,
        json!({
            "surface": a.surface,
            "client": a.client,
            "key_prefix": prefix,
            "reason": failure.reason(),
            "locked": locked,
        }),
    )
    .await
}

fn lock_key(what: &str, id: &str) -> String {
    format!("op_signin_lock:{what}:{id}")
}

/// Where a key's proof is kept: its SHA-256, never the key.
fn proven_key(raw: &str) -> String {
    format!(
        "op_signin_proven:{}",
        crate::infra::crypto::sha256_hex(raw.as_bytes())
    )
}
