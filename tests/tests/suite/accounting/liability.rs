//! `GET /{integrationId}/liability`: per merchant, currency and class at any instant, equal
//! to the sum of the merchant's wallet balances then; never in the future; another
//! tenant's merchant reads as one without wallets.
use serde_json::{Value, json};
use tests::{TestApp, send, shop::Shop};
use uuid::Uuid;

fn line(r: &tests::Reply) -> Value {
    let lines = r.body["data"]["merchants"].as_array().expect("merchants");
    assert_eq!(lines.len(), 1, "{}", r.body);
    lines[0].clone()
}

/// The sum of the wallets' balances as the operator tools show them, per class.
async fn wallet_sums(shop: &Shop<'_>, customers: &[&tests::shop::Customer]) -> (i64, i64, i64) {
    let mut sums = (0, 0, 0);
    for c in customers {
        let b = shop.balance(c).await;
        sums.0 += b["actual_minor"].as_i64().unwrap();
        sums.1 += b["promo_available_minor"].as_i64().unwrap();
        sums.2 += b["promo_locked_minor"].as_i64().unwrap();
    }
    sums
}

fn at(base: &str, instant: chrono::DateTime<chrono::Utc>) -> String {
    format!(
        "{base}?as_of={}",
        instant
            .to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
            .replace('+', "%2B")
    )
}

#[tokio::test]
async fn the_liability_at_any_instant_is_the_sum_of_the_wallets_balances_by_class() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let base = format!("/{}/liability", shop.tenant.integration_id);
    let before_anything = chrono::Utc::now();
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;

    let payer = shop.customer().await;
    shop.fund(&payer, 10_000).await;
    shop.grant(&payer, 500, "RELEASED", 86_400).await;
    let waiting = shop.customer_in("PENDING_PROOF").await;
    shop.grant(&waiting, 300, "LOCKED", 86_400).await;
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let funded = chrono::Utc::now();
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;

    // Released promotional credit pays first: 500 of it, then 700 of actual money.
    let p = shop.pay(&payer, 1_200).await;
    assert_eq!(p.status, 200, "{}", p.body);

    let now = shop.read(&base).await;
    assert_eq!(now.status, 200, "{}", now.body);
    let l = line(&now);
    assert_eq!(l["merchant_id"], shop.merchant().to_string());
    assert_eq!(l["currency"], "EUR");
    assert_eq!(l["actual_minor"], 9_300);
    assert_eq!(l["promo_released_minor"], 0);
    assert_eq!(l["promo_locked_minor"], 300);
    assert_eq!(l["escrow_minor"], 0);
    assert_eq!(l["pending_topup_minor"], 0);
    assert_eq!(l["liability_minor"], 9_600);
    assert_eq!(l["wallets_holding"], 2);
    let (actual, released, locked) = wallet_sums(&shop, &[&payer, &waiting]).await;
    assert_eq!(
        (actual, released, locked),
        (9_300, 0, 300),
        "the wallets hold exactly what the ledger says they owe"
    );

    // Before the payment: the funding and both grants, nothing spent.
    let then = shop.read(&at(&base, funded)).await;
    assert_eq!(then.status, 200, "{}", then.body);
    let l = line(&then);
    assert_eq!(l["actual_minor"], 10_000);
    assert_eq!(l["promo_released_minor"], 500);
    assert_eq!(l["promo_locked_minor"], 300);
    assert_eq!(l["liability_minor"], 10_800);
    let echoed =
        chrono::DateTime::parse_from_rfc3339(then.body["data"]["as_of"].as_str().unwrap()).unwrap();
    assert!(
        (echoed.to_utc() - funded).num_milliseconds().abs() < 1,
        "the answer names the instant asked"
    );

    // Before anything the merchant held nothing at all.
    let empty = shop.read(&at(&base, before_anything)).await;
    assert_eq!(empty.status, 200, "{}", empty.body);
    assert_eq!(empty.body["data"]["merchants"], json!([]));

    // Narrowed to the merchant and currency: the same line; to another currency, none.
    let narrowed = shop
        .read(&format!(
            "{base}?merchant_id={}&currency=EUR",
            shop.merchant()
        ))
        .await;
    assert_eq!(line(&narrowed)["liability_minor"], 9_600);
    let other_currency = shop.read(&format!("{base}?currency=USD")).await;
    assert_eq!(other_currency.body["data"]["merchants"], json!([]));

    shop.assert_ledger_consistent().await;
}

#[tokio::test]
async fn a_future_instant_or_a_malformed_one_is_refused_and_changes_nothing() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let base = format!("/{}/liability", shop.tenant.integration_id);
    let future = shop
        .read(&at(&base, chrono::Utc::now() + chrono::Duration::hours(1)))
        .await;
    assert_eq!(future.status, 400, "{}", future.body);
    assert_eq!(future.code(), "VALIDATION_ERROR");
    assert_eq!(
        future.body["error"]["details"]["fields"][0]["field"],
        "query:as_of"
    );
    for bad in ["as_of=yesterday", "merchant_id=not-a-uuid", "currency=eur"] {
        let r = shop.read(&format!("{base}?{bad}")).await;
        assert_eq!(r.code(), "VALIDATION_ERROR", "{bad}: {}", r.body);
    }
}

#[tokio::test]
async fn another_tenants_merchant_reads_as_one_without_wallets_and_its_path_is_forbidden() {
    let app = TestApp::spawn().await;
    let mine = Shop::open(&app).await;
    let theirs = Shop::open(&app).await;
    let c = theirs.customer().await;
    theirs.fund(&c, 4_000).await;

    let base = format!("/{}/liability", mine.tenant.integration_id);
    let foreign = mine
        .read(&format!("{base}?merchant_id={}", theirs.merchant()))
        .await;
    assert_eq!(foreign.status, 200, "{}", foreign.body);
    let unknown = mine
        .read(&format!("{base}?merchant_id={}", Uuid::new_v4()))
        .await;
    assert_eq!(foreign.body["data"]["merchants"], json!([]));
    assert_eq!(
        foreign.body["data"]["merchants"],
        unknown.body["data"]["merchants"]
    );

    let their_path = mine
        .read(&format!("/{}/liability", theirs.tenant.integration_id))
        .await;
    assert_eq!(their_path.status, 403, "{}", their_path.body);
    assert_eq!(their_path.code(), "FORBIDDEN");

    // A terminal's token is no reporting key.
    let r = send(app.get(&base).bearer_auth(&mine.token)).await;
    assert!(r.status == 401 || r.status == 403, "{}", r.body);
}

#[tokio::test]
async fn a_sandbox_reads_its_liability_on_its_test_clock() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    assert!(shop.tenant.is_sandbox);
    let c = shop.customer().await;
    shop.fund(&c, 2_500).await;
    let r = shop
        .control("/sandbox/clock/advance", json!({"seconds": 2 * 86_400}))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    shop.fund(&c, 500).await;
    let base = format!("/{}/liability", shop.tenant.integration_id);

    // A day from real now is in the past on the clock: before the second funding.
    let tomorrow = chrono::Utc::now() + chrono::Duration::days(1);
    let r = shop.read(&at(&base, tomorrow)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(line(&r)["actual_minor"], 2_500);
    let now = shop.read(&base).await;
    assert_eq!(line(&now)["actual_minor"], 3_000);
    let as_of =
        chrono::DateTime::parse_from_rfc3339(now.body["data"]["as_of"].as_str().unwrap()).unwrap();
    assert!(as_of > tomorrow, "the default instant is the clock's now");
}
