//! No interleaving of concurrent requests overdraws a wallet, spends a grant or a credential
//! twice, or refunds more than was paid; and random sequences of money operations agree
//! with a simple reference model after every step.
use std::time::Duration;

use futures::future::join_all;
use proptest::prelude::*;
use serde_json::json;
use tests::{
    TestApp, eventually, send,
    shop::{Customer, Shop},
};
use uuid::Uuid;

/// Sends one OTP per order and reads every code back from the sandbox inbox.
async fn otp_sessions(
    shop: &Shop<'_>,
    c: &Customer,
    n: usize,
    amount: i64,
) -> Vec<(String, String, String)> {
    let mut sessions = Vec::new();
    for i in 0..n {
        let order = format!("C-{i}");
        let r = shop
            .post(
                "/payments/otp/send",
                json!({"phone": c.phone, "amount_minor": amount, "currency": "EUR", "order_ref": order}),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        sessions.push((
            order,
            r.body["data"]["otp_session_id"]
                .as_str()
                .unwrap()
                .to_string(),
        ));
    }
    let url = format!(
        "/sandbox/messages?phone={}&limit=200",
        c.phone.replace('+', "%2B")
    );
    let msgs = eventually(Duration::from_secs(60), "every OTP SMS", || async {
        let r = send(
            shop.app
                .get(&url)
                .header("x-api-key", &shop.tenant.platform_key),
        )
        .await;
        let msgs = r.body["data"].as_array().cloned().unwrap_or_default();
        (msgs.len() >= n).then_some(msgs)
    })
    .await;
    sessions
        .into_iter()
        .map(|(order, session)| {
            let code = msgs
                .iter()
                .find(|m| {
                    m["body"]
                        .as_str()
                        .unwrap_or("")
                        .contains(&format!("order {order}."))
                })
                .and_then(|m| m["code"].as_str())
                .expect("code for order")
                .to_string();
            (order, session, code)
        })
        .collect()
}

#[tokio::test]
async fn fifty_concurrent_payments_at_a_wallet_funded_for_ten_land_exactly_ten() {
    // Fifty live OTP sessions for one wallet: above the default per-wallet send limit.
    let app = TestApp::spawn_with(true, |c| c.otp_sends_per_wallet = 100).await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 600).await;
    shop.grant(&c, 400, "RELEASED", 3_600).await;
    let sessions = otp_sessions(&shop, &c, 50, 100).await;

    let results = join_all(sessions.iter().map(|(order, session, code)| {
        shop.post(
            "/payments",
            json!({"credential": {"type": "otp", "phone": c.phone, "otp_code": code, "otp_session_id": session},
                   "amount_minor": 100, "currency": "EUR", "order_ref": order}),
        )
    }))
    .await;
    let ok = results.iter().filter(|r| r.status == 200).count();
    let short = results
        .iter()
        .filter(|r| r.code() == "INSUFFICIENT_FUNDS")
        .count();
    let others: Vec<_> = results
        .iter()
        .filter(|r| r.status != 200 && r.code() != "INSUFFICIENT_FUNDS")
        .map(|r| r.body.to_string())
        .collect();
    assert_eq!((ok, short), (10, 40), "unexpected: {others:?}");
    let promo: i64 = results
        .iter()
        .filter(|r| r.status == 200)
        .map(|r| r.body["data"]["debited_promo_minor"].as_i64().unwrap())
        .sum();
    assert_eq!(promo, 400, "the grant was spent exactly once");
    let b = shop.balance(&c).await;
    assert_eq!(
        (
            b["actual_minor"].as_i64(),
            b["promo_available_minor"].as_i64()
        ),
        (Some(0), Some(0))
    );
    shop.assert_ledger_consistent().await;
    app.stop().await;
}

#[tokio::test]
async fn concurrent_wrong_otp_guesses_get_three_tries_in_all() {
    let app = TestApp::spawn_with_workers().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    let (order, session, code) = otp_sessions(&shop, &c, 1, 100).await.remove(0);
    let guesses: Vec<String> = (0..20)
        .map(|i| format!("{:06}", (code.parse::<u32>().unwrap() + 1 + i) % 1_000_000))
        .collect();
    let results = join_all(guesses.iter().map(|g| {
        shop.post(
            "/payments",
            json!({"credential": {"type": "otp", "phone": c.phone, "otp_code": g, "otp_session_id": session},
                   "amount_minor": 100, "currency": "EUR", "order_ref": order}),
        )
    }))
    .await;
    let wrong = results.iter().filter(|r| r.code() == "OTP_INVALID").count();
    let locked = results
        .iter()
        .filter(|r| r.code() == "RATE_LIMITED")
        .count();
    assert_eq!(
        (wrong, locked),
        (3, 17),
        "{:?}",
        results
            .iter()
            .map(|r| r.body.to_string())
            .collect::<Vec<_>>()
    );
    let r = shop
        .post(
            "/payments",
            json!({"credential": {"type": "otp", "phone": c.phone, "otp_code": code, "otp_session_id": session},
                   "amount_minor": 100, "currency": "EUR", "order_ref": order}),
        )
        .await;
    assert_eq!(
        r.code(),
        "RATE_LIMITED",
        "the right code no longer works: {}",
        r.body
    );
    assert_eq!(shop.balance(&c).await["actual_minor"], 1_000);
    app.stop().await;
}

/// Exactly one of the payments presenting one single-use credential went through; every
/// other one heard that the credential was used.
fn assert_one_paid_and_the_rest_replayed(results: &[tests::Reply]) {
    let ok = results.iter().filter(|r| r.status == 200).count();
    assert_eq!(
        ok,
        1,
        "{:?}",
        results
            .iter()
            .map(|r| r.body.to_string())
            .collect::<Vec<_>>()
    );
    assert!(
        results
            .iter()
            .filter(|r| r.status != 200)
            .all(|r| r.code() == "CREDENTIAL_EXPIRED_OR_REPLAYED")
    );
}

#[tokio::test]
async fn one_qr_nonce_presented_concurrently_pays_exactly_once() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 10_000).await;
    let qr = shop.qr(&c).await;
    let results =
        join_all((0..20).map(|_| shop.pay_with(json!({"type": "qr", "qr_payload": qr}), 100)))
            .await;
    assert_one_paid_and_the_rest_replayed(&results);
    assert_eq!(shop.balance(&c).await["actual_minor"], 9_900);
    shop.assert_ledger_consistent().await;
}

#[tokio::test]
async fn one_short_code_presented_concurrently_pays_exactly_once() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 10_000).await;
    let code = shop.short_code(&c).await;
    // Fewer than the integration's budget of failed short codes, so every loser hears why.
    let results = join_all(
        (0..10).map(|_| shop.pay_with(json!({"type": "short_code", "short_code": code}), 100)),
    )
    .await;
    assert_one_paid_and_the_rest_replayed(&results);
    assert_eq!(shop.balance(&c).await["actual_minor"], 9_900);
    shop.assert_ledger_consistent().await;
}

#[tokio::test]
async fn concurrent_retries_with_one_idempotency_key_debit_once() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    let qr = shop.qr(&c).await;
    let key = Uuid::new_v4().to_string();
    let extra = json!({"credential": {"type": "qr", "qr_payload": qr}, "amount_minor": 250, "currency": "EUR"});
    let results =
        join_all((0..10).map(|_| shop.post_with_key("/payments", extra.clone(), &key))).await;
    let ids: std::collections::HashSet<_> = results
        .iter()
        .filter(|r| r.status == 200)
        .map(|r| r.body["data"]["payment_id"].to_string())
        .collect();
    assert_eq!(ids.len(), 1, "one payment, the rest replays");
    assert!(
        results
            .iter()
            .all(|r| r.status == 200 || r.code() == "CONFLICT")
    );
    assert_eq!(shop.balance(&c).await["actual_minor"], 750);
}

#[tokio::test]
async fn concurrent_refunds_never_return_more_than_was_paid() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    shop.grant(&c, 500, "RELEASED", 3_600).await;
    let paid = shop.pay(&c, 1_000).await;
    assert_eq!(paid.status, 200, "{}", paid.body);
    let id = paid.body["data"]["payment_id"]
        .as_str()
        .unwrap()
        .to_string();
    let path = format!("/payments/{id}/refund");
    let results = join_all((0..25).map(|_| shop.post(&path, json!({"amount_minor": 100})))).await;
    let ok = results.iter().filter(|r| r.status == 200).count();
    assert_eq!(ok, 10);
    assert!(
        results
            .iter()
            .filter(|r| r.status != 200)
            .all(|r| r.code() == "VALIDATION_ERROR")
    );
    let b = shop.balance(&c).await;
    assert_eq!(
        b["actual_minor"].as_i64().unwrap() + b["promo_available_minor"].as_i64().unwrap(),
        1_500
    );
    shop.assert_ledger_consistent().await;
}

// --- Reference model ---------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Op {
    Credit(i64),
    Grant(i64),
    Pay(i64),
    Refund(usize, i64),
    Void(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (1i64..500).prop_map(Op::Credit),
        (1i64..300).prop_map(Op::Grant),
        (1i64..600).prop_map(Op::Pay),
        (0usize..8, 1i64..400).prop_map(|(i, a)| Op::Refund(i, a)),
        (0usize..8).prop_map(Op::Void),
    ]
}

#[derive(Default, Debug)]
struct Model {
    actual: i64,
    /// Remaining per grant, in spend order (each new grant expires later than the last).
    grants: Vec<i64>,
    payments: Vec<ModelPayment>,
}

#[derive(Debug)]
struct ModelPayment {
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

async fn step(shop: &Shop<'_>, c: &Customer, model: &mut Model, op: &Op) -> Result<(), String> {
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

/// Forwards one request to the service and drops the response on the floor: to the caller
/// it is as if the service crashed after committing and before answering.
async fn response_dropping_proxy(upstream: String) -> String {
    use tokio::io::AsyncReadExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (client, _) = listener.accept().await.unwrap();
        let server = tokio::net::TcpStream::connect(upstream).await.unwrap();
        let (mut client_rx, client_tx) = client.into_split();
        let (mut server_rx, mut server_tx) = server.into_split();
        tokio::spawn(async move {
            let _ = tokio::io::copy(&mut client_rx, &mut server_tx).await;
        });
        // Wait for the service's answer (it has committed by then), then hang up on the
        // caller without relaying a byte of it.
        let mut buf = vec![0u8; 64 * 1024];
        let _ = server_rx.read(&mut buf).await;
        drop(client_tx);
    });
    format!("http://{addr}/v1")
}

#[tokio::test]
async fn a_response_lost_after_commit_is_replayed_by_the_retry_without_a_second_debit() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    let qr = shop.qr(&c).await;
    let key = Uuid::new_v4().to_string();
    let body = shop.body(json!({"credential": {"type": "qr", "qr_payload": qr}, "amount_minor": 300, "currency": "EUR"}));
    let upstream = app
        .url
        .trim_start_matches("http://")
        .trim_end_matches("/v1")
        .to_string();
    let via = response_dropping_proxy(upstream).await;
    let lost = app
        .client
        .post(format!("{via}/payments"))
        .bearer_auth(&shop.token)
        .header("Idempotency-Key", &key)
        .json(&body)
        .send()
        .await;
    assert!(
        lost.is_err() || lost.as_ref().is_ok_and(|r| r.status().as_u16() != 200),
        "the caller saw no answer"
    );

    let retry = send(
        app.post("/payments")
            .bearer_auth(&shop.token)
            .header("Idempotency-Key", &key)
            .json(&body),
    )
    .await;
    assert_eq!(retry.status, 200, "{}", retry.body);
    assert_eq!(
        retry.body["meta"]["idempotency_replayed"], true,
        "the committed original is replayed"
    );
    assert_eq!(shop.balance(&c).await["actual_minor"], 700, "debited once");
    shop.assert_ledger_consistent().await;
}

#[tokio::test]
async fn a_payment_queued_too_long_behind_a_wallet_lock_gets_a_retryable_error_not_an_endless_wait()
{
    use sea_orm::{ConnectionTrait, Statement, TransactionTrait};
    if tests::mode() != tests::Mode::Production {
        // SQLite writers queue on the database lock up to its busy timeout instead.
        return;
    }
    let app = TestApp::spawn_with(false, |c| c.db_lock_timeout_ms = 300).await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    let qr = shop.qr(&c).await;
    let db = &app.server.state.db;
    let holder = db.begin().await.unwrap();
    holder
        .execute_raw(Statement::from_sql_and_values(
            sea_orm::DbBackend::Postgres,
            "SELECT id FROM wallets WHERE id = $1 FOR UPDATE",
            [Uuid::parse_str(&c.wallet_id).unwrap().into()],
        ))
        .await
        .unwrap();
    let key = Uuid::new_v4().to_string();
    let extra = json!({"credential": {"type": "qr", "qr_payload": qr}, "amount_minor": 100, "currency": "EUR"});
    let started = std::time::Instant::now();
    let r = shop.post_with_key("/payments", extra.clone(), &key).await;
    assert_eq!(
        (r.status, r.code()),
        (503, "INTERNAL_SERVER_ERROR"),
        "{}",
        r.body
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "bounded: {:?}",
        started.elapsed()
    );
    assert!(r.headers.get("retry-after").is_some());
    holder.rollback().await.unwrap();

    let r = shop.post_with_key("/payments", extra, &key).await;
    assert_eq!(
        r.status, 200,
        "the same key succeeds once the wallet is free: {}",
        r.body
    );
    assert_eq!(shop.balance(&c).await["actual_minor"], 900);
}

#[tokio::test]
async fn an_otp_payment_waiting_too_long_for_its_wallets_turn_gets_a_retryable_error() {
    // Payments of one wallet whose wallet is known before the transaction (OTP) take turns
    // in the process; the wait is bounded like a row lock's.
    let app = TestApp::spawn_with(false, |c| c.db_lock_timeout_ms = 300).await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    let (order, session, code) = otp_sessions(&shop, &c, 1, 100).await.remove(0);
    let wallet = Uuid::parse_str(&c.wallet_id).unwrap();
    let queue = app.server.state.wallet_queue.clone();
    let held = queue.take(wallet, Duration::from_secs(1)).await.unwrap();

    let key = Uuid::new_v4().to_string();
    let extra = json!({"credential": {"type": "otp", "phone": c.phone, "otp_code": code, "otp_session_id": session},
                       "amount_minor": 100, "currency": "EUR", "order_ref": order});
    let started = std::time::Instant::now();
    let r = shop.post_with_key("/payments", extra.clone(), &key).await;
    assert_eq!(
        (r.status, r.code()),
        (503, "INTERNAL_SERVER_ERROR"),
        "{}",
        r.body
    );
    assert_eq!(r.body["error"]["details"]["retryable"], true);
    assert!(r.headers.get("retry-after").is_some());
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "bounded: {:?}",
        started.elapsed()
    );
    assert_eq!(
        shop.balance(&c).await["actual_minor"],
        1_000,
        "nothing moved"
    );

    drop(held);
    let r = shop.post_with_key("/payments", extra, &key).await;
    assert_eq!(
        r.status, 200,
        "the same key succeeds in its turn: {}",
        r.body
    );
    assert_eq!(shop.balance(&c).await["actual_minor"], 900);
    assert_eq!(queue.busy_wallets(), 0, "no line is left behind");
    shop.assert_ledger_consistent().await;
}

#[tokio::test]
async fn concurrent_operator_debits_never_take_a_wallet_below_zero() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 500).await;
    let path = format!("/operator/wallets/{}/adjustments", c.wallet_id);
    let results = join_all((0..12).map(|_| {
        shop.operator(
            &path,
            json!({"direction": "debit", "amount_minor": 100, "currency": "EUR", "reason": "correction"}),
        )
    }))
    .await;
    let ok = results.iter().filter(|r| r.status == 200).count();
    assert_eq!(
        ok,
        5,
        "{:?}",
        results
            .iter()
            .map(|r| r.body.to_string())
            .collect::<Vec<_>>()
    );
    assert!(
        results
            .iter()
            .filter(|r| r.status != 200)
            .all(|r| r.code() == "INSUFFICIENT_FUNDS")
    );
    assert_eq!(shop.balance(&c).await["actual_minor"], 0);
    shop.assert_ledger_consistent().await;
}

/// Two payments racing in one checkout session: the session completes once. The first
/// takes the session's lock and completes it; the second, whose credential is checked
/// before the session's state, is refused `session_closed` and its OTP is rolled back
/// unused, so it still pays outside the session. One debit in the session, never two.
#[tokio::test]
async fn two_payments_racing_in_one_checkout_session_complete_it_once() {
    let app = TestApp::spawn_with_workers().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 1_000).await;
    let r = shop.post("/checkout/sessions", json!({})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let session = r.body["data"]["session_id"].as_str().unwrap().to_string();
    let r = shop
        .post(
            &format!("/checkout/sessions/{session}/identify"),
            json!({"customer": {"credential_type": "phone", "phone": c.phone}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let otps = otp_sessions(&shop, &c, 2, 100).await;
    let pay = |(order, id, code): &(String, String, String), in_session: bool| {
        let mut body = json!({"credential": {"type": "otp", "phone": c.phone, "otp_code": code,
                                             "otp_session_id": id},
                              "amount_minor": 100, "currency": "EUR", "order_ref": order});
        if in_session {
            body["context"] = json!({"service_session_id": session});
        }
        shop.post("/payments", body)
    };
    let answers = join_all(otps.iter().map(|o| pay(o, true))).await;
    let paid: Vec<_> = answers.iter().filter(|r| r.status == 200).collect();
    assert_eq!(paid.len(), 1, "{answers:?}");
    let refused = answers.iter().find(|r| r.status != 200).unwrap();
    assert_eq!(refused.code(), "VALIDATION_ERROR", "{}", refused.body);
    assert_eq!(
        refused.body["error"]["details"]["session_state"],
        "COMPLETED"
    );
    assert_eq!(shop.balance(&c).await["actual_minor"], 900);
    // The refused payment's OTP was not used up: it pays outside the session.
    let loser = otps
        .iter()
        .find(|(order, ..)| paid[0].body["data"]["order_ref"] != order.as_str())
        .unwrap();
    let r = pay(loser, false).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(shop.balance(&c).await["actual_minor"], 800);
    shop.assert_ledger_consistent().await;
    app.stop().await;
}
