//! Spend order: released, unexpired grants first, earliest `expires_at` first (ties by
//! creation), then actual money. Locked grants never pay. A refund returns actual money
//! first (the customer's cash back before promotional credit), then each grant's part in
//! the reverse of the order it was spent; a part whose grant can no longer hold credit
//! (expired, clawed back) is forfeited to the merchant rather than revived.
use chrono::{DateTime, Utc};
use uuid::Uuid;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GrantState {
    Locked,
    Released,
    Expired,
    ClawedBack,
    Consumed,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrantView {
    pub id: Uuid,
    pub state: GrantState,
    pub remaining_minor: i64,
    pub expires_at: DateTime<Utc>,
    pub created_at: DateTime<Utc>,
}

impl GrantView {
    /// Whether the grant can pay (and can take a refunded part back) at `now`.
    pub fn spendable(&self, now: DateTime<Utc>) -> bool {
        matches!(self.state, GrantState::Released | GrantState::Consumed) && self.expires_at > now
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DebitPlan {
    /// (grant, amount) in the order spent.
    pub from_grants: Vec<(Uuid, i64)>,
    pub from_actual: i64,
}

impl DebitPlan {
    pub fn promo_minor(&self) -> i64 {
        self.from_grants.iter().map(|(_, a)| a).sum()
    }
}

/// Why a debit cannot be made: the spec's INSUFFICIENT_FUNDS details.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shortfall {
    pub shortfall_minor: i64,
    pub available_actual_minor: i64,
    pub available_promo_minor: i64,
}

/// Splits a debit of `amount` (>= 1) over the wallet's grants and actual balance.
pub fn plan_debit(
    grants: &[GrantView],
    actual_minor: i64,
    amount: i64,
    now: DateTime<Utc>,
) -> Result<DebitPlan, Shortfall> {
    let mut usable: Vec<&GrantView> = grants
        .iter()
        .filter(|g| g.state == GrantState::Released && g.expires_at > now && g.remaining_minor > 0)
        .collect();
    usable.sort_by(|a, b| {
        (a.expires_at, a.created_at, a.id).cmp(&(b.expires_at, b.created_at, b.id))
    });
    let promo =
        crate::domain::ledger::money::saturating_sum(usable.iter().map(|g| g.remaining_minor));
    let actual = actual_minor.max(0);
    let available = promo.saturating_add(actual);
    if available < amount {
        return Err(Shortfall {
            shortfall_minor: amount - available,
            available_actual_minor: actual,
            available_promo_minor: promo,
        });
    }
    let mut left = amount;
    let mut plan = DebitPlan::default();
    for g in usable {
        if left == 0 {
            break;
        }
        let take = g.remaining_minor.min(left);
        plan.from_grants.push((g.id, take));
        left -= take;
    }
    plan.from_actual = left;
    Ok(plan)
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RefundPlan {
    pub to_actual: i64,
    /// (grant, amount) credited back to grants that can still hold it.
    pub to_grants: Vec<(Uuid, i64)>,
    /// (grant, amount) of promotional parts whose grant expired or was clawed back: they go
    /// to the merchant's forfeit account instead of reviving the grant.
    pub forfeited: Vec<(Uuid, i64)>,
}

impl RefundPlan {
    pub fn total(&self) -> i64 {
        self.to_actual + self.promo_returned() + self.forfeited_promo()
    }

    pub fn promo_returned(&self) -> i64 {
        self.to_grants.iter().map(|(_, a)| a).sum()
    }

    pub fn forfeited_promo(&self) -> i64 {
        self.forfeited.iter().map(|(_, a)| a).sum()
    }

    /// What this refund returned, in the shape of the payment's split (for the next refund).
    pub fn as_returned(&self) -> DebitPlan {
        DebitPlan {
            from_grants: self
                .to_grants
                .iter()
                .chain(self.forfeited.iter())
                .copied()
                .collect(),
            from_actual: self.to_actual,
        }
    }
}

/// Plans returning `amount` of a payment. `paid` is how the payment was debited and
/// `refunded` what earlier refunds already returned (both as debit plans); `grants` are the
/// payment's grants now. `None` when `amount` exceeds what is left to refund.
pub fn plan_refund(
    paid: &DebitPlan,
    refunded: &DebitPlan,
    grants: &[GrantView],
    amount: i64,
    now: DateTime<Utc>,
) -> Option<RefundPlan> {
    let actual_left = paid.from_actual - refunded.from_actual;
    let grant_left: Vec<(Uuid, i64)> = paid
        .from_grants
        .iter()
        .rev()
        .map(|(id, a)| {
            let back: i64 = refunded
                .from_grants
                .iter()
                .filter(|(g, _)| g == id)
                .map(|(_, x)| x)
                .sum();
            (*id, a - back)
        })
        .collect();
    let total_left = actual_left + grant_left.iter().map(|(_, a)| a).sum::<i64>();
    if amount < 1 || amount > total_left {
        return None;
    }
    let mut left = amount;
    let mut plan = RefundPlan {
        to_actual: actual_left.min(left),
        ..Default::default()
    };
    left -= plan.to_actual;
    for (id, part) in grant_left {
        if left == 0 {
            break;
        }
        let take = part.min(left);
        if take == 0 {
            continue;
        }
        let alive = grants.iter().any(|g| g.id == id && g.spendable(now));
        if alive {
            plan.to_grants.push((id, take));
        } else {
            plan.forfeited.push((id, take));
        }
        left -= take;
    }
    Some(plan)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Duration;
    use proptest::prelude::*;

    fn grant(state: GrantState, remaining: i64, expires_in_h: i64, created_min: i64) -> GrantView {
        let now = Utc::now();
        GrantView {
            id: Uuid::now_v7(),
            state,
            remaining_minor: remaining,
            expires_at: now + Duration::hours(expires_in_h),
            created_at: now - Duration::minutes(created_min),
        }
    }

    #[test]
    fn released_grants_pay_first_earliest_expiry_first_then_actual() {
        let late = grant(GrantState::Released, 300, 48, 10);
        let soon = grant(GrantState::Released, 200, 2, 5);
        let locked = grant(GrantState::Locked, 1000, 1, 1);
        let plan =
            plan_debit(&[late.clone(), soon.clone(), locked], 1000, 700, Utc::now()).unwrap();
        assert_eq!(plan.from_grants, vec![(soon.id, 200), (late.id, 300)]);
        assert_eq!(plan.from_actual, 200);
    }

    #[test]
    fn equal_expiries_are_spent_in_creation_order() {
        let older = grant(GrantState::Released, 100, 5, 30);
        let mut newer = grant(GrantState::Released, 100, 5, 1);
        newer.expires_at = older.expires_at;
        let plan = plan_debit(&[newer.clone(), older.clone()], 0, 150, Utc::now()).unwrap();
        assert_eq!(plan.from_grants, vec![(older.id, 100), (newer.id, 50)]);
    }

    #[test]
    fn locked_and_expired_grants_never_pay_and_the_shortfall_is_reported() {
        let locked = grant(GrantState::Locked, 500, 5, 1);
        let expired = grant(GrantState::Released, 500, -1, 100);
        let ok = grant(GrantState::Released, 30, 5, 1);
        let err = plan_debit(&[locked, expired, ok], 20, 100, Utc::now()).unwrap_err();
        assert_eq!(
            err,
            Shortfall {
                shortfall_minor: 50,
                available_actual_minor: 20,
                available_promo_minor: 30
            }
        );
    }

    #[test]
    fn a_refund_returns_cash_first_then_grants_in_reverse_spend_order() {
        let a = grant(GrantState::Released, 0, 5, 10);
        let b = grant(GrantState::Released, 0, 6, 5);
        let paid = DebitPlan {
            from_grants: vec![(a.id, 100), (b.id, 50)],
            from_actual: 70,
        };
        let first = plan_refund(
            &paid,
            &DebitPlan::default(),
            &[a.clone(), b.clone()],
            100,
            Utc::now(),
        )
        .unwrap();
        assert_eq!(first.to_actual, 70);
        assert_eq!(first.to_grants, vec![(b.id, 30)]);
        let done = DebitPlan {
            from_grants: vec![(b.id, 30)],
            from_actual: 70,
        };
        let rest = plan_refund(&paid, &done, &[a.clone(), b.clone()], 120, Utc::now()).unwrap();
        assert_eq!(rest.to_grants, vec![(b.id, 20), (a.id, 100)]);
        assert!(
            plan_refund(&paid, &done, &[a, b], 121, Utc::now()).is_none(),
            "never more than was paid"
        );
    }

    #[test]
    fn the_part_of_an_expired_grant_is_forfeited_not_revived() {
        let gone = grant(GrantState::Expired, 0, -1, 10);
        let paid = DebitPlan {
            from_grants: vec![(gone.id, 40)],
            from_actual: 10,
        };
        let plan = plan_refund(&paid, &DebitPlan::default(), &[gone], 50, Utc::now()).unwrap();
        assert_eq!(plan.to_actual, 10);
        assert!(plan.to_grants.is_empty());
        assert_eq!(plan.forfeited_promo(), 40);
    }

    proptest! {
        #[test]
        fn a_debit_plan_spends_exactly_the_amount_and_never_more_than_a_grant_holds(
            remainings in proptest::collection::vec(0i64..1_000, 0..6),
            states in proptest::collection::vec(0u8..3, 6),
            actual in 0i64..5_000,
            amount in 1i64..8_000,
        ) {
            let now = Utc::now();
            let grants: Vec<GrantView> = remainings.iter().zip(&states).enumerate().map(|(i, (r, s))| {
                let state = match s { 0 => GrantState::Released, 1 => GrantState::Locked, _ => GrantState::Expired };
                grant(state, *r, (i as i64 % 3) + 1, i as i64)
            }).collect();
            match plan_debit(&grants, actual, amount, now) {
                Ok(plan) => {
                    prop_assert_eq!(plan.promo_minor() + plan.from_actual, amount);
                    prop_assert!(plan.from_actual >= 0 && plan.from_actual <= actual);
                    for (id, take) in &plan.from_grants {
                        let g = grants.iter().find(|g| g.id == *id).unwrap();
                        prop_assert_eq!(g.state, GrantState::Released);
                        prop_assert!(*take > 0 && *take <= g.remaining_minor);
                    }
                    // Actual money is touched only once every usable grant is empty.
                    if plan.from_actual > 0 {
                        let usable: i64 = grants.iter().filter(|g| g.state == GrantState::Released).map(|g| g.remaining_minor).sum();
                        prop_assert_eq!(plan.promo_minor(), usable);
                    }
                }
                Err(s) => {
                    prop_assert!(s.shortfall_minor > 0);
                    prop_assert_eq!(s.available_actual_minor + s.available_promo_minor + s.shortfall_minor, amount);
                }
            }
        }

        #[test]
        fn refunds_never_return_more_than_was_paid(
            from_actual in 0i64..500,
            parts in proptest::collection::vec(1i64..300, 0..4),
            refunds in proptest::collection::vec(1i64..400, 1..8),
        ) {
            let now = Utc::now();
            let grants: Vec<GrantView> = parts.iter().map(|_| grant(GrantState::Released, 0, 5, 1)).collect();
            let paid = DebitPlan { from_grants: grants.iter().zip(&parts).map(|(g, p)| (g.id, *p)).collect(), from_actual };
            let total = from_actual + parts.iter().sum::<i64>();
            let mut done = DebitPlan::default();
            let mut returned = 0;
            for r in refunds {
                match plan_refund(&paid, &done, &grants, r, now) {
                    Some(plan) => {
                        prop_assert_eq!(plan.total(), r);
                        returned += r;
                        done.from_actual += plan.to_actual;
                        done.from_grants.extend(plan.to_grants.iter().copied());
                    }
                    None => prop_assert!(returned + r > total),
                }
                prop_assert!(returned <= total);
            }
        }
    }
}
