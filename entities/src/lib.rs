//! sea-orm entities shared by the API, the worker and the tests. One file per table.

/// A status or state column as a closed set: each variant stored as the string the column
/// always held (so no migration), compared as a value, spelt once. `as_str` is the
/// spelling the API and the events use; `parse` reads one back (from a cache or a filter).
macro_rules! states {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $value:tt),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, EnumIter, DeriveActiveEnum)]
        #[sea_orm(rs_type = "String", db_type = "String(StringLen::None)")]
        pub enum $name {
            $($(#[$vmeta])* #[sea_orm(string_value = $value)] $variant),+
        }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $value),+
                }
            }

            pub fn parse(s: &str) -> Option<Self> {
                match s {
                    $($value => Some($name::$variant),)+
                    _ => None,
                }
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

pub mod accounting_policy;
pub mod api_key;
pub mod branch;
pub mod brand;
pub mod budget;
pub mod cashback_rule;
pub mod checkout_session;
pub mod dead_letter;
pub mod dispute;
pub mod enrollment;
pub mod enterprise;
pub mod idempotency_record;
pub mod identity_link;
pub mod integration;
pub mod integration_enterprise;
pub mod ledger_entry;
pub mod ledger_hour_closing;
pub mod ledger_hour_movement;
pub mod ledger_posting;
pub mod ledger_snapshot_mark;
pub mod offer;
pub mod operator;
pub mod operator_audit;
pub mod operator_session;
pub mod otp_session;
pub mod outbox;
pub mod payment;
pub mod payment_refund;
pub mod payment_reward;
pub mod promo_grant;
pub mod qr_nonce;
pub mod reload_bonus_config;
pub mod report_chunk;
pub mod report_run;
pub mod resource_sequence;
pub mod risk_block;
pub mod risk_limits;
pub mod risk_terminal_usage;
pub mod sandbox_message;
pub mod settlement;
pub mod sku;
pub mod topup;
pub mod topup_reversal;
pub mod wallet;
pub mod wallet_program;
pub mod wallet_user;
pub mod webhook_attempt;
pub mod webhook_delivery;
pub mod webhook_subscription;
