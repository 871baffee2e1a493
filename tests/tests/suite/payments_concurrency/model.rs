//! Random credits, payments, refunds and voids, checked against a reference model of the
//! wallet after every step.

use super::*;
use proptest::prelude::*;
use serde_json::json;
use tests::{
    TestApp,
    shop::{Customer, Shop},
};

pub(super) fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (1i64..500).prop_map(Op::Credit),
        (1i64..300).prop_map(Op::Grant),
        (1i64..600).prop_map(Op::Pay),
        (0usize..8, 1i64..400).prop_map(|(i, a)| Op::Refund(i, a)),
        (0usize..8).prop_map(Op::Void),
    ]
}

#[derive(Default, Debug)]
pub(super) struct Model {
    actual: i64,
    /// Remaining per grant, in spend order (each new grant expires later than the last).
    grants: Vec<i64>,
    payments: Vec<ModelPayment>,
}

#[derive(Debug)]
pub(super) struct ModelPayment {
    id: String,
    actual: i64,
    /// (grant index, amount) in spend order.
    promo: Vec<(usize, i64)>,
    actual_back: i64,
    promo_back: Vec<(usize, i64)>,
    voided: bool,
}

impl ModelPayment {
    fn left(&self) -> i64 {
        let paid = self.actual + self.promo.iter().map(|p| p.1).sum::<i64>();
        let back = self.actual_back + self.promo_back.iter().map(|p| p.1).sum::<i64>();
        paid - back
    }
}

impl Model {
    fn promo(&self) -> i64 {
        self.grants.iter().sum()
    }

    /// Some(split) when the payment can be made.
    fn pay(&mut self, amount: i64) -> Option<(i64, Vec<(usize, i64)>)> {
        if self.actual + self.promo() < amount {
            return None;
        }
        let mut left = amount;
        let mut split = Vec::new();
        for (i, g) in self.grants.iter_mut().enumerate() {
            let take = (*g).min(left);
            if take > 0 {
                *g -= take;
                left -= take;
                split.push((i, take));
            }
        }
        self.actual -= left;
        Some((left, split))
    }

    /// Actual money back first, then grant parts in reverse spend order.
    fn refund(&mut self, p: usize, amount: i64) -> bool {
        let pay = &mut self.payments[p];
        if pay.voided || amount > pay.left() {
            return false;
        }
        let mut left = amount;
        let a = (pay.actual - pay.actual_back).min(left);
        pay.actual_back += a;
        self.actual += a;
        left -= a;
        for &(g, part) in pay.promo.iter().rev() {
            let back: i64 = pay
                .promo_back
                .iter()
                .filter(|(x, _)| *x == g)
                .map(|(_, v)| v)
                .sum();
            let take = (part - back).min(left);
            if take > 0 {
                pay.promo_back.push((g, take));
                self.grants[g] += take;
                left -= take;
            }
        }
        true
    }
}

pub(super) async fn step(
    shop: &Shop<'_>,
    c: &Customer,
    model: &mut Model,
    op: &Op,
) -> Result<(), String> {
    match op {
        Op::Credit(a) => {
            shop.fund(c, *a).await;
            model.actual += a;
        }
        Op::Grant(a) => {
            // Later grants expire later, so spend order is creation order.
            shop.grant(c, *a, "RELEASED", 86_400 + 60 * model.grants.len() as i64)
                .await;
            model.grants.push(*a);
        }
        Op::Pay(a) => {
            let r = shop.pay(c, *a).await;
            match model.pay(*a) {
                Some((actual, promo)) => {
                    if r.status != 200 {
                        return Err(format!("pay {a}: expected success, got {}", r.body));
                    }
                    let d = &r.body["data"];
                    let got = (
                        d["debited_actual_minor"].as_i64(),
                        d["debited_promo_minor"].as_i64(),
                    );
                    let want = (Some(actual), Some(promo.iter().map(|p| p.1).sum::<i64>()));
                    if got != want {
                        return Err(format!("pay {a}: split {got:?} != {want:?}"));
                    }
                    model.payments.push(ModelPayment {
                        id: d["payment_id"].as_str().unwrap().to_string(),
                        actual,
                        promo,
                        actual_back: 0,
                        promo_back: vec![],
                        voided: false,
                    });
                }
                None if r.code() == "INSUFFICIENT_FUNDS" => {}
                None => {
                    return Err(format!(
                        "pay {a}: expected INSUFFICIENT_FUNDS, got {}",
                        r.body
                    ));
                }
            }
        }
        Op::Refund(i, a) => {
            if model.payments.is_empty() {
                return Ok(());
            }
            let p = i % model.payments.len();
            let id = model.payments[p].id.clone();
            let r = shop
                .post(
                    &format!("/payments/{id}/refund"),
                    json!({"amount_minor": a}),
                )
                .await;
            let expect = model.refund(p, *a);
            if expect != (r.status == 200) {
                return Err(format!("refund {a} of {p}: model {expect}, got {}", r.body));
            }
        }
        Op::Void(i) => {
            if model.payments.is_empty() {
                return Ok(());
            }
            let p = i % model.payments.len();
            let id = model.payments[p].id.clone();
            let r = shop.post(&format!("/payments/{id}/void"), json!({})).await;
            let pay = &model.payments[p];
            let untouched = pay.actual_back == 0 && pay.promo_back.is_empty();
            if pay.voided {
                if r.status != 200 {
                    return Err(format!("re-void: {}", r.body));
                }
            } else if untouched {
                let left = model.payments[p].left();
                if !model.refund(p, left) || r.status != 200 {
                    return Err(format!("void of {p}: {}", r.body));
                }
                model.payments[p].voided = true;
            } else if r.code() != "VALIDATION_ERROR" {
                return Err(format!("void of a refunded payment: {}", r.body));
            }
        }
    }
    let b = shop.balance(c).await;
    let got = (
        b["actual_minor"].as_i64(),
        b["promo_available_minor"].as_i64(),
    );
    let want = (Some(model.actual), Some(model.promo()));
    if got != want {
        return Err(format!("after {op:?}: balance {got:?} != model {want:?}"));
    }
    Ok(())
}

#[test]
fn random_credits_payments_refunds_and_voids_agree_with_the_reference_model() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let app = rt.block_on(TestApp::spawn());
    let shop = rt.block_on(Shop::open(&app));
    let config = ProptestConfig {
        cases: 12,
        max_shrink_iters: 20,
        ..ProptestConfig::default()
    };
    proptest!(config, |(ops in proptest::collection::vec(op(), 1..14))| {
        let outcome: Result<(), String> = rt.block_on(async {
            let c = shop.customer().await;
            let mut model = Model::default();
            for o in &ops {
                step(&shop, &c, &mut model, o).await?;
            }
            Ok(())
        });
        prop_assert!(outcome.is_ok(), "{}", outcome.unwrap_err());
    });
    rt.block_on(shop.assert_ledger_consistent());
}
