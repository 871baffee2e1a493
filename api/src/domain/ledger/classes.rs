//! The classes of customer value, named once. Every ledger account that holds value a
//! customer can (or may come to) spend belongs to exactly one class; the merchant's
//! counter-accounts hold none. `docs/accounting.md` gives the mapping with an example of
//! every movement, for a finance reader.
use crate::domain::ledger::posting::Account;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ValueClass {
    /// Money the customer paid in (top-ups, refunds of what they paid, adjustments).
    Actual,
    /// Promotional credit the customer can spend now.
    PromoReleased,
    /// Promotional credit waiting for the customer's verification.
    PromoLocked,
    /// Actual money of a lapsed enrollment, held by the merchant for the customer.
    Escrow,
    /// A settlement top-up requested before its payment settled: shown, not spendable,
    /// and not yet a liability.
    PendingTopup,
}

impl ValueClass {
    pub const ALL: [ValueClass; 5] = [
        ValueClass::Actual,
        ValueClass::PromoReleased,
        ValueClass::PromoLocked,
        ValueClass::Escrow,
        ValueClass::PendingTopup,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ValueClass::Actual => "actual",
            ValueClass::PromoReleased => "promo_released",
            ValueClass::PromoLocked => "promo_locked",
            ValueClass::Escrow => "escrow",
            ValueClass::PendingTopup => "pending_topup",
        }
    }

    pub fn parse(s: &str) -> Option<ValueClass> {
        ValueClass::ALL.into_iter().find(|c| c.as_str() == s)
    }

    /// Whether the merchant owes it to the customer now. A pending top-up is not owed until
    /// its payment settles.
    pub fn is_liability(self) -> bool {
        self != ValueClass::PendingTopup
    }

    /// Every class's account kind.
    pub fn account_kinds() -> Vec<&'static str> {
        ValueClass::ALL.iter().map(|c| c.account_kind()).collect()
    }

    /// The account kinds of the classes the merchant owes (`is_liability`).
    pub fn liability_kinds() -> Vec<&'static str> {
        ValueClass::ALL
            .iter()
            .filter(|c| c.is_liability())
            .map(|c| c.account_kind())
            .collect()
    }

    /// The ledger's account kind that holds this class (one each).
    pub fn account_kind(self) -> &'static str {
        let any = uuid::Uuid::nil();
        match self {
            ValueClass::Actual => Account::WalletActual(any),
            ValueClass::PromoReleased => Account::Grant(any),
            ValueClass::PromoLocked => Account::LockedGrant(any),
            ValueClass::Escrow => Account::MerchantEscrow(any),
            ValueClass::PendingTopup => Account::WalletPendingTopup(any),
        }
        .kind()
    }

    /// The class of an account kind as the ledger stores it; `None` for the merchant's
    /// counter-accounts.
    pub fn of_kind(kind: &str) -> Option<ValueClass> {
        ValueClass::ALL
            .into_iter()
            .find(|c| c.account_kind() == kind)
    }
}

impl Account {
    /// The class of customer value this account holds, if any.
    pub fn class(&self) -> Option<ValueClass> {
        match self {
            Account::WalletActual(_) => Some(ValueClass::Actual),
            Account::Grant(_) => Some(ValueClass::PromoReleased),
            Account::LockedGrant(_) => Some(ValueClass::PromoLocked),
            Account::MerchantEscrow(_) => Some(ValueClass::Escrow),
            Account::WalletPendingTopup(_) => Some(ValueClass::PendingTopup),
            Account::MerchantClearing(_)
            | Account::MerchantPromoFunding(_)
            | Account::MerchantPromoForfeit(_)
            | Account::MerchantAdjustment(_)
            | Account::MerchantTopup(_)
            | Account::MerchantPendingTopup(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_class_has_one_account_kind_and_back() {
        for c in ValueClass::ALL {
            assert_eq!(ValueClass::of_kind(c.account_kind()), Some(c));
            assert_eq!(ValueClass::parse(c.as_str()), Some(c));
        }
        assert_eq!(ValueClass::of_kind("merchant_clearing"), None);
        assert!(!ValueClass::PendingTopup.is_liability());
        assert!(ValueClass::Escrow.is_liability());
    }
}
