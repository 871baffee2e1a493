//! Amounts the service computes, kept inside the bound that request amounts have.
//!
//! A request may carry at most `MAX_AMOUNT_MINOR` in any amount field. Everything the
//! service derives from such amounts (a SKU credit times its quantity, a per-unit or
//! percentage bonus, a reload-bonus tier, cashback, an offer's reward, a refund) is computed
//! here with checked arithmetic and must land in `0..=MAX_AMOUNT_MINOR` too; so must
//! everything a wallet holds (`MAX_HOLDING_MINOR`). A computation that would leave the
//! bound answers `None`, and its caller refuses the request before anything is written.
//! That keeps every balance, and every sum of balances the service prints, far below
//! `i64::MAX` (about 9.2 × 10^18): a wallet's total is at most 10^12, so even ten million
//! wallets' worth of one merchant sums without overflow.

/// Largest amount accepted in, or computed for, one call: 10^12 minor units.
pub const MAX_AMOUNT_MINOR: i64 = 1_000_000_000_000;

/// Most a wallet may hold, actual money and every live promotional grant together. A credit
/// that would take a wallet past it is refused (`wallet_limit`).
pub const MAX_HOLDING_MINOR: i64 = MAX_AMOUNT_MINOR;

/// `v` if it is a valid computed amount (`0..=MAX_AMOUNT_MINOR`).
pub fn bounded(v: i128) -> Option<i64> {
    (0..=i128::from(MAX_AMOUNT_MINOR))
        .contains(&v)
        .then(|| i64::try_from(v).ok())
        .flatten()
}

/// `unit × quantity`, within the bound.
pub fn times(unit: i64, quantity: i64) -> Option<i64> {
    bounded(i128::from(unit) * i128::from(quantity))
}

/// `bps` basis points of `amount`, rounded down, within the bound.
pub fn basis_points(amount: i64, bps: i32) -> Option<i64> {
    bounded(i128::from(amount) * i128::from(bps) / 10_000)
}

/// The sum of `parts`, within the bound.
pub fn sum(parts: impl IntoIterator<Item = i64>) -> Option<i64> {
    bounded(parts.into_iter().map(i128::from).sum())
}

/// The sum of `parts` for display: never wraps, at worst it stops at `i64::MAX`. Balances
/// are bounded by `MAX_HOLDING_MINOR`, so a read never gets near that in practice; this is
/// the guard for rows written before the bound existed.
pub fn saturating_sum(parts: impl IntoIterator<Item = i64>) -> i64 {
    parts.into_iter().fold(0i64, i64::saturating_add)
}

/// Whether a wallet holding `held` can take `credit` more and stay within
/// `MAX_HOLDING_MINOR`.
pub fn fits_in_wallet(held: i64, credit: i64) -> bool {
    credit >= 0 && i128::from(held) + i128::from(credit) <= i128::from(MAX_HOLDING_MINOR)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_issue_25_bonus_of_ten_to_the_eighteenth_is_refused() {
        // A per-unit bonus of 10^12 sold a million times: the grant that wrapped the promo sum.
        assert_eq!(times(MAX_AMOUNT_MINOR, 1_000_000), None);
        assert_eq!(times(MAX_AMOUNT_MINOR, 1), Some(MAX_AMOUNT_MINOR));
        assert_eq!(times(i64::MAX, i64::MAX), None);
        assert_eq!(times(-1, 1), None);
    }

    #[test]
    fn basis_points_round_down_and_stay_bounded() {
        assert_eq!(basis_points(99, 1), Some(0));
        assert_eq!(basis_points(1_000, 333), Some(33));
        assert_eq!(
            basis_points(MAX_AMOUNT_MINOR, 10_000),
            Some(MAX_AMOUNT_MINOR)
        );
        assert_eq!(basis_points(MAX_AMOUNT_MINOR, 100_000), None);
        assert_eq!(basis_points(i64::MAX, i32::MAX), None);
    }

    #[test]
    fn a_wallet_takes_credit_up_to_its_limit_and_not_a_unit_more() {
        assert!(fits_in_wallet(0, MAX_HOLDING_MINOR));
        assert!(fits_in_wallet(MAX_HOLDING_MINOR - 5, 5));
        assert!(!fits_in_wallet(MAX_HOLDING_MINOR - 5, 6));
        assert!(!fits_in_wallet(i64::MAX, i64::MAX));
        assert!(!fits_in_wallet(0, -1));
    }

    proptest! {
        #[test]
        fn a_product_is_the_exact_product_or_refused(unit in any::<i64>(), q in any::<i64>()) {
            let exact = i128::from(unit) * i128::from(q);
            match times(unit, q) {
                Some(v) => prop_assert_eq!(i128::from(v), exact),
                None => prop_assert!(exact < 0 || exact > i128::from(MAX_AMOUNT_MINOR)),
            }
        }

        #[test]
        fn a_share_never_exceeds_the_bound_nor_the_exact_floor(
            amount in 0..=MAX_AMOUNT_MINOR, bps in 0..=200_000i32,
        ) {
            let exact = i128::from(amount) * i128::from(bps) / 10_000;
            match basis_points(amount, bps) {
                Some(v) => {
                    prop_assert_eq!(i128::from(v), exact);
                    prop_assert!(v <= MAX_AMOUNT_MINOR);
                }
                None => prop_assert!(exact > i128::from(MAX_AMOUNT_MINOR)),
            }
        }

        #[test]
        fn sums_are_exact_or_refused_and_saturating_sums_never_wrap(
            parts in proptest::collection::vec(any::<i64>(), 0..40),
        ) {
            let exact: i128 = parts.iter().copied().map(i128::from).sum();
            match sum(parts.clone()) {
                Some(v) => prop_assert_eq!(i128::from(v), exact),
                None => prop_assert!(exact < 0 || exact > i128::from(MAX_AMOUNT_MINOR)),
            }
            let nonneg: Vec<i64> = parts.iter().map(|p| p.saturating_abs()).collect();
            let s = saturating_sum(nonneg.clone());
            prop_assert!(s >= 0);
            prop_assert!(s >= *nonneg.iter().max().unwrap_or(&0));
        }
    }
}
