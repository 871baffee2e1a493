//! Models read by position. sea-orm's derived reader looks every column up by its name,
//! and under a join's prefix (`A_`, `B_`) formats `"{prefix}{column}"` first: per column,
//! row and payment, a tenth of a payment's row decoding. A statement that selects a model's
//! columns in its entity's order (`select_prefixed`) can have them read by position.
use entities::{cashback_rule, otp_session, promo_grant, qr_nonce, wallet, wallet_user};
use sea_orm::{DbErr, QueryResult};

pub trait Positional: Sized {
    /// Its columns, in the entity's order (a test holds them to it).
    const COLUMNS: &'static [&'static str];

    /// The model whose columns start at `at`.
    fn read_at(row: &QueryResult, at: usize) -> Result<Self, DbErr>;
}

/// Implements `Positional` for a model of its fields, listed in the order of its entity's
/// columns. A field missing from the list does not compile; a list out of order fails
/// `tests::every_list_is_its_entity_s_columns_in_order`.
macro_rules! positional {
    ($($model:path { $($field:ident),+ $(,)? })+) => {$(
        impl Positional for $model {
            const COLUMNS: &'static [&'static str] = &[$(stringify!($field)),+];

            fn read_at(row: &QueryResult, at: usize) -> Result<Self, DbErr> {
                let mut i = at;
                let mut next = || {
                    i += 1;
                    i - 1
                };
                Ok(Self { $($field: row.try_get_by_index(next())?),+ })
            }
        }
    )+};
}

positional! {
    wallet::Model {
        id, wallet_user_id, merchant_id, wallet_program_id, currency, actual_minor,
        pending_topups_minor, created_at, updated_at,
    }
    wallet_user::Model {
        id, merchant_id, phone, state, provider_customer_id, created_at, updated_at,
        verified_at,
    }
    cashback_rule::Model {
        id, merchant_id, integration_id, wallet_program_id, version, currency, rate_bps,
        min_payment_minor, max_cashback_minor, expiry_days, active, budget_id, created_at,
    }
    promo_grant::Model {
        id, wallet_id, merchant_id, source, state, currency, original_minor, remaining_minor,
        expires_at, created_at, updated_at,
    }
    otp_session::Model {
        id, merchant_id, wallet_id, order_ref, amount_minor, currency, code_hash,
        failed_attempts, status, payment_id, expires_at, created_at, consumed_at,
    }
    qr_nonce::Model {
        id, merchant_id, wallet_id, nonce_hash, short_code_hash, expires_at, superseded_at,
        consumed_at, payment_id, created_at, checkout_session_id,
    }
}

/// How many columns `M` takes.
pub const fn width<M: Positional>() -> usize {
    M::COLUMNS.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use sea_orm::{EntityTrait, IdenStatic, Iterable};

    fn columns<E: EntityTrait>() -> Vec<&'static str> {
        <E::Column as Iterable>::iter()
            .map(|c| c.as_str())
            .collect()
    }

    #[test]
    fn every_list_is_its_entity_s_columns_in_order() {
        assert_eq!(wallet::Model::COLUMNS, columns::<wallet::Entity>());
        assert_eq!(
            wallet_user::Model::COLUMNS,
            columns::<wallet_user::Entity>()
        );
        assert_eq!(
            cashback_rule::Model::COLUMNS,
            columns::<cashback_rule::Entity>()
        );
        assert_eq!(
            promo_grant::Model::COLUMNS,
            columns::<promo_grant::Entity>()
        );
        assert_eq!(
            otp_session::Model::COLUMNS,
            columns::<otp_session::Entity>()
        );
        assert_eq!(qr_nonce::Model::COLUMNS, columns::<qr_nonce::Entity>());
    }
}
