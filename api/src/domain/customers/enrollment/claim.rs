//! Claims (`POST /claims`): a verified customer, named by credentials that must agree,
//! takes the promotional grants held LOCKED for them.
use chrono::{DateTime, Utc};
use entities::{promo_grant::PromoGrantState, wallet_user};
use sea_orm::ConnectionTrait;
use uuid::Uuid;

use crate::domain::customers::enrollment::{Released, release_all};

use crate::{
    domain::{
        credentials::scope::Acting,
        customers,
        customers::wallets::{self, VERIFIED},
    },
    error::ApiError,
    infra::crypto::Sealer,
    store,
};

// ---------------------------------------------------------------------------------------
// Claims

/// Where a claim ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClaimState {
    /// At least one grant released.
    Completed,
    /// Verified, but nothing was claimable (already released, clawed back, expired).
    NothingToClaim,
    /// The identity has not proven its phone: nothing released; verify first.
    PendingVerification,
}

impl ClaimState {
    pub fn as_str(self) -> &'static str {
        match self {
            ClaimState::Completed => "completed",
            ClaimState::NothingToClaim => "nothing_to_claim",
            ClaimState::PendingVerification => "pending_verification",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Claimed {
    pub claim_id: Uuid,
    pub state: ClaimState,
    pub identity: wallet_user::Model,
    pub released: Released,
}

/// POST /claims: releases the LOCKED grants of a VERIFIED identity, named by one or more
/// credentials that must agree. Nothing claimable, or an identity still pending proof, is
/// a success that releases nothing.
pub async fn claim<C: ConnectionTrait>(
    c: &C,
    sealer: &Sealer,
    acting: &Acting,
    named: &[customers::IdentityCredential],
    now: DateTime<Utc>,
) -> Result<Claimed, ApiError> {
    let merchant = acting.merchant_id;
    let found = customers::find_named(c, sealer, acting, named, now).await?;
    let identity = store::customers::wallets::lock_identity(c, merchant, found.id)
        .await?
        .ok_or_else(|| ApiError::not_found("Customer"))?;
    let claim_id = Uuid::now_v7();
    if identity.state != VERIFIED {
        let mut released = Released::default();
        for w in store::customers::wallets::wallets_of_identity(c, identity.id).await? {
            for g in
                store::customers::wallets::grants_in_states(c, w.id, &[PromoGrantState::Locked])
                    .await?
            {
                released.skipped.push((g.into(), "not_verified"));
            }
            let balance = wallets::current_balance(c, &w, now).await?;
            released.wallets.push((w, balance));
        }
        return Ok(Claimed {
            claim_id,
            state: ClaimState::PendingVerification,
            identity,
            released,
        });
    }
    let released = release_all(c, &identity, "claim", claim_id, now).await?;
    let state = if released.grants.is_empty() {
        ClaimState::NothingToClaim
    } else {
        ClaimState::Completed
    };
    Ok(Claimed {
        claim_id,
        state,
        identity,
        released,
    })
}
