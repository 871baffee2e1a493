//! Failed credentials are counted per terminal, branch and merchant: a terminal past its
//! threshold is refused credential entry while the merchant's other terminals keep paying.
use std::time::Instant;

use futures::future::join_all;
use serde_json::json;
use tests::{TestApp, send, shop::Shop};
use uuid::Uuid;

use super::alerts;

const ALPHABET: &[u8] = b"23456789ABCDEFGHJKMNPQRSTUVWXYZ";

/// A well-formed short code (almost surely not a live one).
fn random_code() -> String {
    let n = Uuid::new_v4().as_u128();
    (0..5)
        .map(|i| ALPHABET[((n >> (i * 8)) % ALPHABET.len() as u128) as usize] as char)
        .collect()
}

fn threshold(app: &TestApp) -> u64 {
    app.server.state.config.risk_terminal_failures
}

/// The attack the issue names: 10,000 wrong short codes from one terminal. It is refused
/// from its threshold on (within 20 failures), RATE_LIMITED naming the terminal, while a
/// second terminal of the same merchant pays by short code throughout; one alert fires.
#[tokio::test]
async fn ten_thousand_wrong_short_codes_block_their_terminal_within_twenty_and_not_the_next_till() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let guesser = shop.at_terminal(Some("till-guess")).await;
    let c = shop.customer().await;
    shop.fund(&c, 100_000).await;
    let started = Instant::now();
    let (mut tried, mut refused, mut paid) = (0u64, 0u64, 0);
    let mut first_refusal_at = None;
    for round in 0..20 {
        // The other till pays with a fresh short code between bursts.
        let code = shop.short_code(&c).await;
        let r = shop
            .pay_with(json!({"type": "short_code", "short_code": code}), 10)
            .await;
        assert_eq!(r.status, 200, "round {round}: {}", r.body);
        paid += 1;
        // 500 guesses a round, 16 at a time.
        for chunk in 0..32 {
            let burst = if chunk < 31 { 16 } else { 4 };
            let replies = join_all((0..burst).map(|_| {
                guesser.pay_with(
                    json!({"type": "short_code", "short_code": random_code()}),
                    10,
                )
            }))
            .await;
            for r in replies {
                match (r.status, r.code()) {
                    (400, "CREDENTIAL_EXPIRED_OR_REPLAYED") => {
                        assert!(
                            first_refusal_at.is_none(),
                            "a guess was tried after the terminal was blocked"
                        );
                        tried += 1;
                    }
                    (429, "RATE_LIMITED") => {
                        assert_eq!(
                            r.body["error"]["details"]["scope"], "terminal",
                            "{}",
                            r.body
                        );
                        assert!(r.headers.get("retry-after").is_some());
                        refused += 1;
                        first_refusal_at.get_or_insert((round, chunk));
                    }
                    other => panic!("unexpected {other:?}: {}", r.body),
                }
            }
        }
    }
    assert_eq!(tried + refused, 10_000);
    // Guesses in flight together when the threshold was reached were all tried (16 at
    // most): the bound is 20.
    assert!(
        tried >= threshold(&app) && tried <= 16,
        "{tried} guesses tried before the block"
    );
    assert_eq!(paid, 20);
    assert_eq!(shop.balance(&c).await["actual_minor"], 100_000 - 20 * 10);
    let raised = alerts(&app, &shop).await;
    assert_eq!(raised.len(), 1, "one crossing, one alert: {raised:?}");
    assert_eq!(raised[0]["scope"], "terminal");
    assert_eq!(raised[0]["rule"], "credential_failures");
    assert_eq!(raised[0]["subject"]["terminal_id"], "till-guess");
    assert_eq!(raised[0]["threshold"], threshold(&app));
    eprintln!(
        "10,000 guesses: {tried} tried, {refused} refused, {paid} payments by the other till, in {:?}",
        started.elapsed()
    );
    shop.assert_ledger_consistent().await;
}

/// The terminal counted is the one signed into the token. A token minted without one counts
/// against its API key, so naming a new terminal in each request's context dodges nothing.
#[tokio::test]
async fn a_token_without_a_terminal_counts_against_its_key_whatever_the_context_names() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let unnamed = shop.at_terminal(None).await;
    for i in 0..threshold(&app) {
        let mut body = unnamed.body(json!({
            "credential": {"type": "short_code", "short_code": random_code()},
            "amount_minor": 10, "currency": "EUR"}));
        body["context"]["terminal_id"] = json!(format!("renamed-{i}"));
        let r = unnamed.post_body("/payments", &body).await;
        assert_eq!(r.code(), "CREDENTIAL_EXPIRED_OR_REPLAYED", "{}", r.body);
    }
    let r = unnamed
        .pay_with(
            json!({"type": "short_code", "short_code": random_code()}),
            10,
        )
        .await;
    assert_eq!((r.status, r.code()), (429, "RATE_LIMITED"), "{}", r.body);
    let raised = alerts(&app, &shop).await;
    assert_eq!(raised.len(), 1);
    assert!(raised[0]["subject"]["api_key_id"].is_string(), "{raised:?}");
    // The signed terminal of the shop's own token is another till: it still pays.
    let c = shop.customer().await;
    shop.fund(&c, 100).await;
    assert_eq!(shop.pay(&c, 10).await.status, 200);
}

/// Wrong OTPs and failed balance checks count too, and a blocked terminal is refused the
/// short code (to pay, check or identify with), while a scanned QR code, which nobody can
/// guess, still pays.
#[tokio::test]
async fn wrong_otps_and_failed_balance_checks_count_and_a_blocked_terminal_takes_no_short_code() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    let stranger = shop.customer().await;
    shop.fund(&c, 1_000).await;
    let sent = shop
        .post(
            "/payments/otp/send",
            json!({"phone": c.phone, "amount_minor": 100, "currency": "EUR", "order_ref": "ORD-R"}),
        )
        .await;
    assert_eq!(sent.status, 200, "{}", sent.body);
    let session = sent.body["data"]["otp_session_id"].as_str().unwrap();
    // The session's own lock takes three wrong codes; each counts for the terminal.
    for _ in 0..3 {
        let r = shop
            .post(
                "/payments",
                json!({"credential": {"type": "otp", "phone": stranger.phone, "otp_code": "000000",
                        "otp_session_id": session},
                       "amount_minor": 100, "currency": "EUR", "order_ref": "ORD-R"}),
            )
            .await;
        assert_eq!(r.code(), "OTP_INVALID", "{}", r.body);
    }
    let check = |credential: serde_json::Value| {
        shop.post(
            "/redeem/balance-check",
            json!({"credential": credential, "amount_minor": 10, "currency": "EUR"}),
        )
    };
    for _ in 3..threshold(&app) {
        let r =
            check(json!({"type": "qr", "qr_payload": format!("wq1.{}", Uuid::new_v4().simple())}))
                .await;
        assert_eq!(r.code(), "CREDENTIAL_EXPIRED_OR_REPLAYED", "{}", r.body);
    }
    // Minted by another till: minting is not credential entry, paying is.
    let code = shop.at_terminal(Some("till-2")).await.short_code(&c).await;
    let paying = shop
        .pay_with(json!({"type": "short_code", "short_code": code}), 10)
        .await;
    let checking = check(json!({"type": "short_code", "short_code": code})).await;
    let identifying = shop
        .post(
            "/identify",
            json!({"credential": {"credential_type": "short_code", "short_code": code}}),
        )
        .await;
    for r in [&paying, &checking, &identifying] {
        assert_eq!((r.status, r.code()), (429, "RATE_LIMITED"), "{}", r.body);
        assert_eq!(
            r.body["error"]["details"]["scope"], "terminal",
            "{}",
            r.body
        );
    }
    let qr = shop.qr(&c).await;
    let scanned = shop
        .pay_with(json!({"type": "qr", "qr_payload": qr}), 10)
        .await;
    assert_eq!(scanned.status, 200, "{}", scanned.body);
    // Identification by phone is not a guessable credential: it goes on.
    let by_phone = shop
        .post(
            "/identify",
            json!({"credential": {"credential_type": "phone", "phone": c.phone}}),
        )
        .await;
    assert_eq!(by_phone.status, 200, "{}", by_phone.body);
    assert_eq!(shop.balance(&c).await["actual_minor"], 990);
}

/// Operators list the blocks in force with the latest attempts, and clearing one (audited)
/// lets the terminal enter credentials again at once; a cleared block is not cleared twice.
#[tokio::test]
async fn an_operator_sees_a_block_with_its_last_attempts_and_clearing_it_reopens_the_till() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    for _ in 0..threshold(&app) {
        let r = shop
            .pay_with(
                json!({"type": "short_code", "short_code": random_code()}),
                10,
            )
            .await;
        assert_eq!(r.code(), "CREDENTIAL_EXPIRED_OR_REPLAYED", "{}", r.body);
    }
    let list = send(
        app.get(&format!(
            "/operator/risk/blocks?merchant_id={}",
            shop.merchant()
        ))
        .header("x-operator-key", &shop.operator_key),
    )
    .await;
    assert_eq!(list.status, 200, "{}", list.body);
    let blocks = list.body["data"]["data"].as_array().unwrap();
    assert_eq!(blocks.len(), 1, "{}", list.body);
    let b = &blocks[0];
    assert_eq!(b["scope"], "terminal");
    assert_eq!(b["subject"]["terminal_id"], "till-1");
    assert_eq!(b["observed"], threshold(&app));
    assert_eq!(b["clearable"], true);
    let attempts = b["last_attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 10.min(threshold(&app) as usize));
    assert!(
        attempts[0]["what"]
            .as_str()
            .unwrap()
            .starts_with("short_code:req_")
    );

    let id = b["block_id"].as_str().unwrap();
    let clear = shop
        .operator(
            &format!("/operator/risk/blocks/{id}/clear"),
            json!({"reason": "cashier retrained"}),
        )
        .await;
    assert_eq!(clear.status, 200, "{}", clear.body);
    assert!(clear.body["data"]["cleared_at"].is_string());
    let r = shop
        .pay_with(
            json!({"type": "short_code", "short_code": random_code()}),
            10,
        )
        .await;
    assert_eq!(
        r.code(),
        "CREDENTIAL_EXPIRED_OR_REPLAYED",
        "open again: {}",
        r.body
    );
    let again = shop
        .operator(
            &format!("/operator/risk/blocks/{id}/clear"),
            json!({"reason": "twice"}),
        )
        .await;
    assert_eq!(
        (again.status, again.code()),
        (409, "CONFLICT"),
        "{}",
        again.body
    );
    let audit = send(
        app.get("/operator/audit-log?limit=200")
            .header("x-operator-key", &shop.operator_key),
    )
    .await;
    assert!(
        audit.body.to_string().contains("risk_block.clear"),
        "audited: {}",
        audit.body
    );
}

/// Failures add up per branch and per merchant, each with its own (higher) threshold: a
/// branch is blocked for all its terminals, a merchant for all its branches, and another
/// merchant of the same service never.
#[tokio::test]
async fn branch_and_merchant_windows_add_up_their_terminals_and_never_another_merchants() {
    let app = TestApp::spawn_with(false, |c| {
        c.risk_terminal_failures = 2;
        c.risk_branch_failures = 3;
        c.risk_merchant_failures = 5;
    })
    .await;
    let shop = Shop::open(&app).await;
    let (b1, b2) = (shop.tenant.branch_ids[0], shop.tenant.branch_ids[1]);
    let at = |till: &Shop<'_>, branch: uuid::Uuid| {
        let mut body = till.body(json!({
            "credential": {"type": "short_code", "short_code": random_code()},
            "amount_minor": 10, "currency": "EUR"}));
        body["context"]["branch_id"] = json!(branch.to_string());
        body
    };
    let a1 = shop.at_terminal(Some("a1")).await;
    let a2 = shop.at_terminal(Some("a2")).await;
    let a3 = shop.at_terminal(Some("a3")).await;
    let c1 = shop.at_terminal(Some("c1")).await;
    let c2 = shop.at_terminal(Some("c2")).await;
    let expect = |r: tests::Reply, scope: Option<&str>| match scope {
        None => assert_eq!(r.code(), "CREDENTIAL_EXPIRED_OR_REPLAYED", "{}", r.body),
        Some(s) => {
            assert_eq!(r.code(), "RATE_LIMITED", "{}", r.body);
            assert_eq!(r.body["error"]["details"]["scope"], s, "{}", r.body);
        }
    };
    // a1 at branch 1: blocked itself after two.
    for _ in 0..2 {
        expect(a1.post_body("/payments", &at(&a1, b1)).await, None);
    }
    expect(
        a1.post_body("/payments", &at(&a1, b1)).await,
        Some("terminal"),
    );
    // a2's first failure is the branch's third: every till of branch 1 is blocked.
    expect(a2.post_body("/payments", &at(&a2, b1)).await, None);
    expect(
        a2.post_body("/payments", &at(&a2, b1)).await,
        Some("branch"),
    );
    expect(
        a3.post_body("/payments", &at(&a3, b1)).await,
        Some("branch"),
    );
    // Branch 2 goes on until the merchant's fifth failure, then no till of it may.
    for _ in 0..2 {
        expect(c1.post_body("/payments", &at(&c1, b2)).await, None);
    }
    expect(
        c2.post_body("/payments", &at(&c2, b2)).await,
        Some("merchant"),
    );
    // Another merchant: untouched.
    let other = Shop::open(&app).await;
    expect(
        other
            .pay_with(
                json!({"type": "short_code", "short_code": random_code()}),
                10,
            )
            .await,
        None,
    );
    let scopes: Vec<String> = alerts(&app, &shop)
        .await
        .iter()
        .map(|a| a["scope"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(scopes, ["terminal", "branch", "terminal", "merchant"]);
    assert!(alerts(&app, &other).await.is_empty());
}
