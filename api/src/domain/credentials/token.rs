//! Minting terminal JWTs from an API key. The token's scope is the key's, narrowed to the
//! merchant and branch the exchange names; it can never be wider than the key.
use chrono::Utc;
use sea_orm::ConnectionTrait;
use uuid::Uuid;

use crate::domain::credentials::{
    CredentialKind, Principal,
    jwt::{AUDIENCE, Claims, ISSUER, JwtKeys, TTL_SECS},
    scope::Acting,
};
use crate::{error::ApiError, store};

pub async fn mint<C: ConnectionTrait>(
    c: &C,
    keys: &JwtKeys,
    caller: &Principal,
    acting: &Acting,
    cashier_id: Option<String>,
    terminal_id: Option<String>,
) -> Result<(String, Claims), ApiError> {
    if caller.kind != CredentialKind::ApiKey {
        return Err(ApiError::invalid_api_key());
    }
    let key_id = caller.key_id.ok_or_else(ApiError::invalid_api_key)?;
    // A branch named in the context narrows the token to it (and to its brand).
    let brand_id = match acting.branch_id {
        Some(b) => store::tenancy::find_branch_of_enterprise(c, acting.merchant_id, b)
            .await?
            .map(|br| br.brand_id)
            .ok_or_else(|| {
                ApiError::forbidden("The credential is not authorized for this merchant or branch.")
            })?
            .into(),
        None => caller.scope.brand_id(),
    };
    let now = Utc::now().timestamp();
    // A token never outlives the key it was minted from.
    let exp = match caller.expires_at {
        Some(t) => (now + TTL_SECS).min(t.timestamp()),
        None => now + TTL_SECS,
    };
    let claims = Claims {
        iss: ISSUER.into(),
        aud: AUDIENCE.into(),
        sub: key_id.to_string(),
        iat: now,
        exp,
        nbf: None,
        jti: Uuid::now_v7().to_string(),
        integration_id: caller.integration_id,
        enterprise_id: acting.merchant_id,
        brand_id,
        branch_id: acting.branch_id,
        cashier_id,
        terminal_id,
        sandbox: caller.is_sandbox,
        key_id,
        cell: keys.cell().map(str::to_string),
    };
    let token = keys.sign(&claims).map_err(ApiError::internal)?;
    Ok((token, claims))
}
