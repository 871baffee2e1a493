//! An offer's reward as a request states it (and a view shows it): a fixed amount or a share
//! of the payment, one of the two.
use poem_openapi::Object;
use serde::{Deserialize, Serialize};

use crate::{
    domain::{incentives::offers::Reward, validate::Errors},
    http::pipeline::fields::{
        AmountMinor, IntIn,
        alternatives::{Alternatives, Branch},
    },
};

/// An offer's reward: exactly one of a fixed `amount_minor` or `percent_bps` of the payment
/// (rounded down, optionally capped by `max_reward_minor`, which goes with `percent_bps`
/// only).
#[derive(Object, Deserialize, Serialize, Debug, Clone, Default)]
pub struct RewardBody {
    #[oai(nullable)]
    pub amount_minor: Option<AmountMinor>,
    #[oai(nullable)]
    pub percent_bps: Option<IntIn<1, 10_000>>,
    #[oai(nullable)]
    pub max_reward_minor: Option<AmountMinor>,
}

/// A reward is a fixed amount or a share of the payment (which a cap may bound), never both.
pub const REWARD: Alternatives = Alternatives {
    schema: "RewardBody",
    branches: &[
        Branch {
            given: &["amount_minor"],
            absent: &["percent_bps", "max_reward_minor"],
        },
        Branch {
            given: &["percent_bps"],
            absent: &["amount_minor"],
        },
    ],
    field: "",
    issue: "exactly_one",
    message: "give exactly one of amount_minor or percent_bps (max_reward_minor goes with percent_bps)",
};

impl RewardBody {
    pub(super) fn check(&self, e: &mut Errors) -> Option<Reward> {
        let one = REWARD.check(e, "/reward", |m| match m {
            "amount_minor" => self.amount_minor.is_some(),
            "percent_bps" => self.percent_bps.is_some(),
            _ => self.max_reward_minor.is_some(),
        });
        let amounts = [
            (&self.amount_minor, "/reward/amount_minor"),
            (&self.max_reward_minor, "/reward/max_reward_minor"),
        ];
        let mut ok = one;
        for (a, at) in amounts {
            if let Some(a) = a {
                ok &= a.check(e, at);
            }
        }
        if let Some(p) = &self.percent_bps {
            ok &= p.check(e, "/reward/percent_bps");
        }
        if !ok {
            return None;
        }
        Some(match (self.amount_minor, self.percent_bps) {
            (Some(a), _) => Reward::Fixed(a.0),
            (_, bps) => Reward::Percent {
                bps: bps.map_or(0, |b| b.0 as i32),
                max_minor: self.max_reward_minor.map(|m| m.0),
            },
        })
    }
}
