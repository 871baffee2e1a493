//! Turning a planned money movement into a balanced posting. Every entry moves a signed
//! amount on one account (positive raises that account's balance); the entries of a
//! posting sum to zero, so money is only ever moved, never made or lost.
use uuid::Uuid;

use crate::domain::ledger::plan::{DebitPlan, RefundPlan};
use crate::store::ledger::{AccountRef, BalanceColumn, PostingRows};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Account {
    /// A wallet's actual (cash) money.
    WalletActual(Uuid),
    /// One released promotional grant of a wallet (spendable, or emptied and able to take
    /// a refund back).
    Grant(Uuid),
    /// One locked promotional grant (same id as its `Grant` account): credit waiting for the
    /// customer's verification, moved to `Grant` when it is released.
    LockedGrant(Uuid),
    /// A wallet's settlement top-ups requested before their payment settled.
    WalletPendingTopup(Uuid),
    /// The merchant's side of money spent from and returned to wallets.
    MerchantClearing(Uuid),
    /// The merchant's source of the promotional credit it issues.
    MerchantPromoFunding(Uuid),
    /// Promotional credit that came back from a refund after its grant ended.
    MerchantPromoForfeit(Uuid),
    /// The other side of an operator's manual adjustment.
    MerchantAdjustment(Uuid),
    /// The merchant's side of top-ups it sold (cash taken at the till for wallet credit).
    MerchantTopup(Uuid),
    /// Actual money of one wallet (the id) whose pending-proof window lapsed: the merchant
    /// holds it until the customer verifies, then it goes back to the wallet.
    MerchantEscrow(Uuid),
    /// The merchant's side of top-ups requested and not yet settled.
    MerchantPendingTopup(Uuid),
}

impl Account {
    pub fn kind(&self) -> &'static str {
        match self {
            Account::WalletActual(_) => "wallet_actual",
            Account::Grant(_) => "promo_grant",
            Account::LockedGrant(_) => "promo_grant_locked",
            Account::WalletPendingTopup(_) => "wallet_pending_topup",
            Account::MerchantClearing(_) => "merchant_clearing",
            Account::MerchantPromoFunding(_) => "merchant_promo_funding",
            Account::MerchantPromoForfeit(_) => "merchant_promo_forfeit",
            Account::MerchantAdjustment(_) => "merchant_adjustment",
            Account::MerchantEscrow(_) => "merchant_escrow",
            Account::MerchantTopup(_) => "merchant_topup",
            Account::MerchantPendingTopup(_) => "merchant_pending_topup",
        }
    }

    pub fn id(&self) -> Uuid {
        match *self {
            Account::WalletActual(id)
            | Account::Grant(id)
            | Account::LockedGrant(id)
            | Account::WalletPendingTopup(id)
            | Account::MerchantPendingTopup(id)
            | Account::MerchantClearing(id)
            | Account::MerchantPromoFunding(id)
            | Account::MerchantPromoForfeit(id)
            | Account::MerchantAdjustment(id)
            | Account::MerchantEscrow(id)
            | Account::MerchantTopup(id) => id,
        }
    }

    /// Wallet-side accounts hold the customer's money and can never go below zero.
    pub fn is_wallet_side(&self) -> bool {
        matches!(
            self,
            Account::WalletActual(_)
                | Account::Grant(_)
                | Account::LockedGrant(_)
                | Account::WalletPendingTopup(_)
        )
    }

    /// A grant's account: its credit sits on `LockedGrant` while the grant is locked.
    pub fn grant(id: Uuid, locked: bool) -> Account {
        if locked {
            Account::LockedGrant(id)
        } else {
            Account::Grant(id)
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PostingKind {
    Payment,
    Refund,
    Void,
    Adjustment,
    GrantAccrual,
    GrantExpiry,
    EscrowHold,
    EscrowRelease,
    /// A top-up sold at the till as a SKU.
    TopupSku,
    /// A top-up paid by card or bank transfer, credited once its settlement is known.
    TopupSettlement,
    Clawback,
    RewardReversal,
    TopupReversal,
    GrantRelease,
    TopupRequested,
    TopupRequestCleared,
}

impl PostingKind {
    pub const ALL: [PostingKind; 16] = [
        PostingKind::Payment,
        PostingKind::Refund,
        PostingKind::Void,
        PostingKind::Adjustment,
        PostingKind::GrantAccrual,
        PostingKind::GrantExpiry,
        PostingKind::EscrowHold,
        PostingKind::EscrowRelease,
        PostingKind::TopupSku,
        PostingKind::TopupSettlement,
        PostingKind::Clawback,
        PostingKind::RewardReversal,
        PostingKind::TopupReversal,
        PostingKind::GrantRelease,
        PostingKind::TopupRequested,
        PostingKind::TopupRequestCleared,
    ];

    pub fn parse(s: &str) -> Option<PostingKind> {
        PostingKind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            PostingKind::Payment => "payment",
            PostingKind::Refund => "refund",
            PostingKind::Void => "void",
            PostingKind::Adjustment => "adjustment",
            PostingKind::GrantAccrual => "grant_accrual",
            PostingKind::GrantExpiry => "grant_expiry",
            PostingKind::EscrowHold => "escrow_hold",
            PostingKind::EscrowRelease => "escrow_release",
            PostingKind::TopupSku => "topup_sku",
            PostingKind::TopupSettlement => "topup_settlement",
            PostingKind::Clawback => "clawback",
            PostingKind::RewardReversal => "reward_reversal",
            PostingKind::TopupReversal => "topup_reversal",
            PostingKind::GrantRelease => "grant_release",
            PostingKind::TopupRequested => "topup_requested",
            PostingKind::TopupRequestCleared => "topup_request_cleared",
        }
    }
}

impl From<Account> for AccountRef {
    fn from(a: Account) -> Self {
        AccountRef {
            kind: a.kind(),
            id: a.id(),
            balance: match a {
                Account::WalletActual(_) => Some(BalanceColumn::WalletActual),
                Account::Grant(_) | Account::LockedGrant(_) => Some(BalanceColumn::GrantRemaining),
                Account::WalletPendingTopup(_) => Some(BalanceColumn::WalletPending),
                _ => None,
            },
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub account: Account,
    pub amount_minor: i64,
}

/// One business event's entries, all in one currency, about one wallet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Posting {
    pub kind: PostingKind,
    pub merchant_id: Uuid,
    /// The wallet whose value the posting moves (every posting moves one wallet's).
    pub wallet_id: Uuid,
    pub currency: String,
    pub entries: Vec<Entry>,
}

impl<'a> From<&'a Posting> for PostingRows<'a> {
    fn from(p: &'a Posting) -> Self {
        PostingRows {
            kind: p.kind.as_str(),
            merchant_id: p.merchant_id,
            wallet_id: p.wallet_id,
            currency: &p.currency,
            entries: p
                .entries
                .iter()
                .map(|e| (e.account.into(), e.amount_minor))
                .collect(),
        }
    }
}

impl Posting {
    fn new(kind: PostingKind, merchant_id: Uuid, wallet_id: Uuid, currency: &str) -> Self {
        Posting {
            kind,
            merchant_id,
            wallet_id,
            currency: currency.to_string(),
            entries: Vec::new(),
        }
    }

    fn push(&mut self, account: Account, amount_minor: i64) {
        if amount_minor != 0 {
            self.entries.push(Entry {
                account,
                amount_minor,
            });
        }
    }

    pub fn is_balanced(&self) -> bool {
        self.entries.iter().map(|e| e.amount_minor).sum::<i64>() == 0
    }

    /// The net change of one account in this posting.
    pub fn delta(&self, account: Account) -> i64 {
        self.entries
            .iter()
            .filter(|e| e.account == account)
            .map(|e| e.amount_minor)
            .sum()
    }
}

/// A payment: the wallet's grants and actual money go to the merchant's clearing account.
pub fn payment(merchant_id: Uuid, wallet_id: Uuid, currency: &str, plan: &DebitPlan) -> Posting {
    let mut p = Posting::new(PostingKind::Payment, merchant_id, wallet_id, currency);
    for (grant, amount) in &plan.from_grants {
        p.push(Account::Grant(*grant), -amount);
    }
    p.push(Account::WalletActual(wallet_id), -plan.from_actual);
    p.push(
        Account::MerchantClearing(merchant_id),
        plan.from_actual + plan.promo_minor(),
    );
    p
}

/// A refund or void: clearing pays back actual money and the grants' parts; a part whose
/// grant has ended goes to the forfeit account instead of reviving the grant.
pub fn refund(
    kind: PostingKind,
    merchant_id: Uuid,
    wallet_id: Uuid,
    currency: &str,
    plan: &RefundPlan,
) -> Posting {
    let mut p = Posting::new(kind, merchant_id, wallet_id, currency);
    p.push(Account::MerchantClearing(merchant_id), -plan.total());
    p.push(Account::WalletActual(wallet_id), plan.to_actual);
    for (grant, amount) in &plan.to_grants {
        p.push(Account::Grant(*grant), *amount);
    }
    p.push(
        Account::MerchantPromoForfeit(merchant_id),
        plan.forfeited_promo(),
    );
    p
}

/// An operator's manual adjustment of a wallet's actual money (`amount` signed).
pub fn adjustment(merchant_id: Uuid, wallet_id: Uuid, currency: &str, amount: i64) -> Posting {
    let mut p = Posting::new(PostingKind::Adjustment, merchant_id, wallet_id, currency);
    p.push(Account::WalletActual(wallet_id), amount);
    p.push(Account::MerchantAdjustment(merchant_id), -amount);
    p
}

/// Who holds a grant's credit: the wallet, and the grant's account as the grant stands
/// (`Account::grant`: locked or not).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GrantHolder {
    pub wallet_id: Uuid,
    pub account: Account,
}

impl From<&entities::promo_grant::Model> for GrantHolder {
    fn from(g: &entities::promo_grant::Model) -> Self {
        let locked = g.state == entities::promo_grant::PromoGrantState::Locked;
        GrantHolder {
            wallet_id: g.wallet_id,
            account: Account::grant(g.id, locked),
        }
    }
}

/// A new promotional grant funded by the merchant.
pub fn grant_accrual(merchant_id: Uuid, g: GrantHolder, currency: &str, amount: i64) -> Posting {
    let mut p = Posting::new(
        PostingKind::GrantAccrual,
        merchant_id,
        g.wallet_id,
        currency,
    );
    p.push(g.account, amount);
    p.push(Account::MerchantPromoFunding(merchant_id), -amount);
    p
}

/// A refund or void takes back part of a payment's reward grant (cashback, an offer): the
/// reverse of its accrual, back to the merchant's promotional funding.
pub fn reward_reversal(merchant_id: Uuid, g: GrantHolder, currency: &str, amount: i64) -> Posting {
    let mut p = Posting::new(
        PostingKind::RewardReversal,
        merchant_id,
        g.wallet_id,
        currency,
    );
    p.push(g.account, -amount);
    p.push(Account::MerchantPromoFunding(merchant_id), amount);
    p
}

/// A grant's unspent remainder leaves it when the grant ends unspent (expiry, or a lapsed
/// enrollment): it goes back to the merchant's forfeit account.
pub fn grant_expiry(merchant_id: Uuid, g: GrantHolder, currency: &str, amount: i64) -> Posting {
    let mut p = Posting::new(PostingKind::GrantExpiry, merchant_id, g.wallet_id, currency);
    p.push(g.account, -amount);
    p.push(Account::MerchantPromoForfeit(merchant_id), amount);
    p
}

/// A locked grant is released: its credit moves from the locked class to the spendable one.
/// Nothing leaves the wallet and the grant's remaining credit does not change.
pub fn grant_release(
    merchant_id: Uuid,
    wallet_id: Uuid,
    grant_id: Uuid,
    currency: &str,
    amount: i64,
) -> Posting {
    let mut p = Posting::new(PostingKind::GrantRelease, merchant_id, wallet_id, currency);
    p.push(Account::LockedGrant(grant_id), -amount);
    p.push(Account::Grant(grant_id), amount);
    p
}

/// A settlement top-up requested before its payment settled (`amount` > 0), or that request
/// leaving once the settlement is known (`amount` < 0): shown on the wallet, not spendable.
pub fn topup_request(merchant_id: Uuid, wallet_id: Uuid, currency: &str, amount: i64) -> Posting {
    let kind = if amount >= 0 {
        PostingKind::TopupRequested
    } else {
        PostingKind::TopupRequestCleared
    };
    let mut p = Posting::new(kind, merchant_id, wallet_id, currency);
    p.push(Account::WalletPendingTopup(wallet_id), amount);
    p.push(Account::MerchantPendingTopup(merchant_id), -amount);
    p
}

/// How a top-up's money came in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Load {
    Sku,
    Settlement,
}

/// A top-up: the merchant took the money (at the till, or by a settled payment); the
/// wallet's actual money rises.
pub fn topup(
    load: Load,
    merchant_id: Uuid,
    wallet_id: Uuid,
    currency: &str,
    amount: i64,
) -> Posting {
    let kind = match load {
        Load::Sku => PostingKind::TopupSku,
        Load::Settlement => PostingKind::TopupSettlement,
    };
    let mut p = Posting::new(kind, merchant_id, wallet_id, currency);
    p.push(Account::WalletActual(wallet_id), amount);
    p.push(Account::MerchantTopup(merchant_id), -amount);
    p
}

/// A top-up's credit taken back (a chargeback, or the top-up detached from a customer it
/// was wrongly attached to): the reverse of `topup`, for what the wallet still holds in
/// actual money and, after a lapsed enrollment, in the merchant's escrow for it.
pub fn topup_reversal(
    merchant_id: Uuid,
    wallet_id: Uuid,
    currency: &str,
    from_wallet: i64,
    from_escrow: i64,
) -> Posting {
    let mut p = Posting::new(PostingKind::TopupReversal, merchant_id, wallet_id, currency);
    p.push(Account::WalletActual(wallet_id), -from_wallet);
    p.push(Account::MerchantEscrow(wallet_id), -from_escrow);
    p.push(
        Account::MerchantTopup(merchant_id),
        from_wallet + from_escrow,
    );
    p
}

/// A clawback: a grant's unspent remainder goes back to the merchant. Never touches
/// actual money.
pub fn clawback(merchant_id: Uuid, g: GrantHolder, currency: &str, amount: i64) -> Posting {
    let mut p = Posting::new(PostingKind::Clawback, merchant_id, g.wallet_id, currency);
    p.push(g.account, -amount);
    p.push(Account::MerchantPromoForfeit(merchant_id), amount);
    p
}

/// A lapsed enrollment's actual money moves into the merchant's escrow for that wallet.
pub fn escrow_hold(merchant_id: Uuid, wallet_id: Uuid, currency: &str, amount: i64) -> Posting {
    let mut p = Posting::new(PostingKind::EscrowHold, merchant_id, wallet_id, currency);
    p.push(Account::WalletActual(wallet_id), -amount);
    p.push(Account::MerchantEscrow(wallet_id), amount);
    p
}

/// Escrowed money goes back to its wallet once the customer verifies.
pub fn escrow_release(merchant_id: Uuid, wallet_id: Uuid, currency: &str, amount: i64) -> Posting {
    let mut p = Posting::new(PostingKind::EscrowRelease, merchant_id, wallet_id, currency);
    p.push(Account::MerchantEscrow(wallet_id), -amount);
    p.push(Account::WalletActual(wallet_id), amount);
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payment_moves_exactly_the_amount_and_balances() {
        let (m, w, g) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
        let plan = DebitPlan {
            from_grants: vec![(g, 300)],
            from_actual: 700,
        };
        let p = payment(m, w, "EUR", &plan);
        assert!(p.is_balanced());
        assert_eq!(p.delta(Account::Grant(g)), -300);
        assert_eq!(p.delta(Account::WalletActual(w)), -700);
        assert_eq!(p.delta(Account::MerchantClearing(m)), 1000);
    }

    #[test]
    fn a_refund_with_an_ended_grant_forfeits_that_part_and_balances() {
        let (m, w, g) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
        let plan = RefundPlan {
            to_actual: 500,
            to_grants: vec![(g, 100)],
            forfeited: vec![(Uuid::now_v7(), 50)],
        };
        let p = refund(PostingKind::Refund, m, w, "EUR", &plan);
        assert!(p.is_balanced());
        assert_eq!(p.delta(Account::MerchantClearing(m)), -650);
        assert_eq!(p.delta(Account::MerchantPromoForfeit(m)), 50);
    }

    #[test]
    fn adjustments_and_accruals_balance_and_zero_entries_are_left_out() {
        let (m, w) = (Uuid::now_v7(), Uuid::now_v7());
        let a = adjustment(m, w, "EUR", -250);
        assert!(a.is_balanced());
        assert_eq!(a.delta(Account::WalletActual(w)), -250);
        let only_promo = payment(
            m,
            w,
            "EUR",
            &DebitPlan {
                from_grants: vec![(Uuid::now_v7(), 10)],
                from_actual: 0,
            },
        );
        assert_eq!(only_promo.entries.len(), 2);
        let holder = GrantHolder {
            wallet_id: w,
            account: Account::grant(Uuid::now_v7(), true),
        };
        assert!(grant_accrual(m, holder, "EUR", 5).is_balanced());
    }

    #[test]
    fn escrow_round_trip_returns_exactly_what_it_held() {
        let (m, w) = (Uuid::now_v7(), Uuid::now_v7());
        let hold = escrow_hold(m, w, "EUR", 1200);
        let release = escrow_release(m, w, "EUR", 1200);
        assert!(hold.is_balanced() && release.is_balanced());
        let escrow = Account::MerchantEscrow(w);
        assert_eq!(hold.delta(escrow) + release.delta(escrow), 0);
        assert_eq!(
            hold.delta(Account::WalletActual(w)) + release.delta(Account::WalletActual(w)),
            0
        );
        let g = Uuid::now_v7();
        let holder = GrantHolder {
            wallet_id: w,
            account: Account::Grant(g),
        };
        let e = grant_expiry(m, holder, "EUR", 300);
        assert!(e.is_balanced());
        assert_eq!(e.delta(Account::Grant(g)), -300);
    }

    #[test]
    fn a_release_moves_a_grant_between_classes_and_nothing_else() {
        let (m, w, g) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
        let r = grant_release(m, w, g, "EUR", 400);
        assert!(r.is_balanced());
        assert_eq!(r.delta(Account::LockedGrant(g)), -400);
        assert_eq!(r.delta(Account::Grant(g)), 400);
        let requested = topup_request(m, w, "EUR", 900);
        let cleared = topup_request(m, w, "EUR", -900);
        assert_eq!(requested.kind, PostingKind::TopupRequested);
        assert_eq!(cleared.kind, PostingKind::TopupRequestCleared);
        let pending = Account::WalletPendingTopup(w);
        assert_eq!(requested.delta(pending) + cleared.delta(pending), 0);
    }
}
