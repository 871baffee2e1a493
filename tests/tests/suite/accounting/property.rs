//! Random days of money movements on a sandbox test clock (fundings and debits, grants
//! released and locked, SKU top-ups with bonuses, top-ups paid by card settled at once or
//! pending until their payment settles or fails, payments, refunds, voids, disputes won by
//! the customer, top-ups detached, clawbacks, expiries, an enrollment lapsing into escrow and
//! its proof returning it), then the roll-forward over all of them: for every day and class, the row closes, the next day opens where it closed, and
//! its closing is what `GET …/liability` says at the last instant of that day; and all of it
//! reads the same from the entries alone, with half the days in hourly snapshots and with
//! every sealed hour in them, whose rows the ledger check finds right. Each seed is a
//! different sequence; a failure names its seed.
use std::collections::BTreeMap;

use serde_json::{Value, json};
use tests::{TestApp, finance, send, shop::Customer, shop::Shop};

/// xorshift64*: a sequence that is the same for a seed on every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn amount(&mut self, from: i64, to: i64) -> i64 {
        from + self.below((to - from) as u64) as i64
    }
}

/// An operator's grant expiring `days` after the sandbox clock's now.
async fn grant(
    shop: &Shop<'_>,
    c: &Customer,
    amount: i64,
    state: &str,
    days: i64,
) -> Option<String> {
    let at = finance::clock_now(shop).await + chrono::Duration::days(days);
    let r = shop
        .operator(
            &format!("/operator/wallets/{}/grants", c.wallet_id),
            json!({"amount_minor": amount, "currency": "EUR", "source": "CASHBACK", "state": state,
                   "expires_at": at.to_rfc3339(), "reason": "property test"}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["data"]["balance"]["promo_grants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["grant_id"].as_str().unwrap().to_string())
        .max()
}

/// A settlement report from the acquirer (`POST /topup/settlements`).
async fn settle(shop: &Shop<'_>, reference: &str, amount: i64, state: &str) -> tests::Reply {
    shop.control(
        "/topup/settlements",
        json!({"reference": reference, "amount_minor": amount, "currency": "EUR", "state": state,
               "provider": "test-acquirer"}),
    )
    .await
}

/// A correction of a transaction with the platform key (`corrections`).
async fn correct(shop: &Shop<'_>, path: &str, extra: Value) -> tests::Reply {
    send(
        shop.app
            .post(&format!("/{}{path}", shop.tenant.integration_id))
            .header("x-api-key", &shop.tenant.platform_key)
            .header("Idempotency-Key", uuid::Uuid::new_v4().to_string())
            .json(&shop.body(extra)),
    )
    .await
}

/// The roll-forward over `first..=last` and the liability at the last instant of each day.
async fn observe(
    shop: &Shop<'_>,
    first: chrono::NaiveDate,
    last: chrono::NaiveDate,
) -> (Vec<Value>, BTreeMap<chrono::NaiveDate, Vec<Value>>) {
    let report = finance::rows(
        shop,
        json!({"type": "liability_rollforward", "from": first.to_string(), "to": last.to_string()}),
    )
    .await;
    let mut closings = BTreeMap::new();
    let mut day = first;
    while day <= last {
        closings.insert(day, finance::liability_at(shop, finance::end_of(day)).await);
        day = day.succ_opt().unwrap();
    }
    (report, closings)
}

async fn random_days(seed: u64) {
    // The snapshot builder runs only when the test says so: on a database of its own, no
    // other test's worker builds this merchant's days behind its back.
    let app = TestApp::spawn_isolated(true, |c| c.snapshot_interval_secs = 86_400).await;
    let shop = Shop::open(&app).await;
    let mut rng = Rng(seed);
    let verified = [
        shop.customer().await,
        shop.customer().await,
        shop.customer().await,
    ];
    // Unverified: its money lapses into escrow when the 7-day window ends, and comes back
    // when the phone is proven.
    let waiting = shop.customer_in("PENDING_PROOF").await;
    shop.fund(&waiting, 1_000).await;
    let sku = send(
        app.post("/skus")
            .header("x-api-key", &shop.tenant.platform_key)
            .header("Idempotency-Key", uuid::Uuid::new_v4().to_string())
            .json(&shop.body(json!({"sku_id": "CARD-5", "name": "Top-up card", "currency": "EUR",
                                    "wallet_credits_minor": 500, "bonus": {"amount_minor": 50, "expiry_days": 3}}))),
    )
    .await;
    assert_eq!(sku.status, 200, "{}", sku.body);
    let mut payments: Vec<String> = Vec::new();
    let mut topups: Vec<String> = Vec::new();
    // Settlement references whose top-up waits for its payment to settle.
    let mut pending: Vec<(String, i64)> = Vec::new();
    let mut grants: Vec<String> = Vec::new();
    let mut proven = false;
    // How many of each movement went through (printed: the sequence a seed drove).
    let mut done: BTreeMap<&str, u32> = BTreeMap::new();
    let first = finance::clock_now(&shop).await.date_naive();
    let days = 9;
    for day in 0..days {
        if day == 8 && !proven {
            // After the lapse: prove the phone; the escrow and the locked grants come back.
            let r = shop
                .post("/enroll/initiate", json!({ "phone": waiting.phone }))
                .await;
            assert_eq!(r.status, 200, "{}", r.body);
            let sms = shop.sms_after(&waiting.phone, "enrollment", 0).await;
            let r = shop
                .post(
                    "/enroll/verify",
                    json!({"verification_token": sms["verification_token"]}),
                )
                .await;
            assert_eq!(r.status, 200, "{}", r.body);
            proven = true;
        }
        for _ in 0..10 {
            let c = &verified[rng.below(3) as usize];
            match rng.below(14) {
                0 | 1 => {
                    shop.fund(c, rng.amount(100, 5_000)).await;
                }
                2 => {
                    // A debit the wallet may not cover: refused then, and nothing moves.
                    let r = shop
                        .operator(
                            &format!("/operator/wallets/{}/adjustments", c.wallet_id),
                            json!({"direction": "debit", "amount_minor": rng.amount(10, 800),
                                   "currency": "EUR", "reason": "property test"}),
                        )
                        .await;
                    assert!(
                        r.status == 200 || r.code() == "INSUFFICIENT_FUNDS",
                        "{}",
                        r.body
                    );
                }
                3 => {
                    let days = rng.amount(1, 4);
                    grants.extend(grant(&shop, c, rng.amount(50, 600), "RELEASED", days).await);
                }
                4 => {
                    let days = rng.amount(1, 5);
                    grants
                        .extend(grant(&shop, &waiting, rng.amount(50, 400), "LOCKED", days).await);
                }
                5 => {
                    let r = shop.pay(c, rng.amount(50, 1_500)).await;
                    if r.status == 200 {
                        payments.push(r.body["data"]["payment_id"].as_str().unwrap().into());
                    } else {
                        assert_eq!(r.code(), "INSUFFICIENT_FUNDS", "{}", r.body);
                    }
                }
                6 if !payments.is_empty() => {
                    let p = &payments[rng.below(payments.len() as u64) as usize];
                    let r = shop
                        .post(
                            &format!("/payments/{p}/refund"),
                            json!({"amount_minor": rng.amount(1, 300), "reason": "property test"}),
                        )
                        .await;
                    assert!(
                        r.status == 200 || r.status == 400 || r.status == 409,
                        "{}",
                        r.body
                    );
                }
                7 if !payments.is_empty() => {
                    let p = &payments[rng.below(payments.len() as u64) as usize];
                    let r = shop
                        .post(
                            &format!("/payments/{p}/void"),
                            json!({"reason": "property test"}),
                        )
                        .await;
                    assert!(
                        r.status == 200 || r.status == 400 || r.status == 409,
                        "{}",
                        r.body
                    );
                }
                8 if !grants.is_empty() => {
                    let g = &grants[rng.below(grants.len() as u64) as usize];
                    let r = send(
                        app.post(&format!("/grants/{g}/clawback"))
                            .header("x-operator-key", &shop.operator_key)
                            .header("Idempotency-Key", uuid::Uuid::new_v4().to_string())
                            .json(&json!({"reason": "property test"})),
                    )
                    .await;
                    // A grant that expired or was spent has nothing left to claw back.
                    let ended =
                        r.body["error"]["details"]["fields"][0]["issue"] == "nothing_to_claw_back";
                    assert!(r.status == 200 || ended, "{}", r.body);
                }
                9 => {
                    let r = shop
                        .post(
                            "/topup/sku/CARD-5",
                            json!({"pos_order_ref": uuid::Uuid::new_v4().to_string(),
                                   "customer": {"credential_type": "phone", "phone": c.phone},
                                   "quantity": rng.amount(1, 4), "amount_minor": 999_999}),
                        )
                        .await;
                    assert_eq!(r.status, 200, "{}", r.body);
                    topups.push(r.body["data"]["topup_id"].as_str().unwrap().into());
                    *done.entry("sku top-ups").or_default() += 1;
                }
                10 if !payments.is_empty() => {
                    // A dispute the customer wins refunds what is still refundable.
                    let p = payments[rng.below(payments.len() as u64) as usize].clone();
                    let r = correct(
                        &shop,
                        &format!("/transactions/{p}/disputes"),
                        json!({"reason": "property test"}),
                    )
                    .await;
                    if r.status == 200 {
                        let d = r.body["data"]["dispute_id"].as_str().unwrap().to_string();
                        let r = correct(
                            &shop,
                            &format!("/transactions/{p}/disputes/{d}/resolve"),
                            json!({"outcome": "customer_won", "note": "property test"}),
                        )
                        .await;
                        assert_eq!(r.status, 200, "{}", r.body);
                        *done.entry("disputes won").or_default() += 1;
                    } else {
                        assert_eq!(r.code(), "VALIDATION_ERROR", "{}", r.body);
                    }
                }
                11 if !topups.is_empty() => {
                    let t = topups.swap_remove(rng.below(topups.len() as u64) as usize);
                    let r = correct(
                        &shop,
                        &format!("/transactions/{t}/unattach"),
                        json!({"reason": "property test"}),
                    )
                    .await;
                    assert!(
                        r.status == 200 || r.code() == "VALIDATION_ERROR" || r.code() == "CONFLICT",
                        "{}",
                        r.body
                    );
                    if r.status == 200 {
                        *done.entry("unattached").or_default() += 1;
                    }
                }
                12 => {
                    // A top-up paid by card: settled already, or pending until it settles.
                    let (reference, amount) =
                        (uuid::Uuid::new_v4().to_string(), rng.amount(100, 3_000));
                    let state = if rng.below(2) == 0 {
                        "SETTLED"
                    } else {
                        "PENDING"
                    };
                    let r = settle(&shop, &reference, amount, state).await;
                    assert_eq!(r.status, 200, "{}", r.body);
                    let r = shop
                        .post(
                            "/topup/confirm",
                            json!({"settlement_reference": reference, "amount_minor": amount,
                                   "customer": {"credential_type": "phone", "phone": c.phone}}),
                        )
                        .await;
                    assert_eq!(r.status, 200, "{}", r.body);
                    if state == "PENDING" {
                        pending.push((reference, amount));
                        *done.entry("settlement top-ups pending").or_default() += 1;
                    } else {
                        *done.entry("settlement top-ups").or_default() += 1;
                    }
                }
                13 if !pending.is_empty() => {
                    // Its payment settles (the top-up is credited) or fails (it is dropped).
                    let (reference, amount) =
                        pending.swap_remove(rng.below(pending.len() as u64) as usize);
                    let state = if rng.below(3) == 0 {
                        "FAILED"
                    } else {
                        "SETTLED"
                    };
                    let r = settle(&shop, &reference, amount, state).await;
                    assert_eq!(r.status, 200, "{}", r.body);
                    *done
                        .entry(if state == "FAILED" {
                            "pending failed"
                        } else {
                            "pending settled"
                        })
                        .or_default() += 1;
                }
                _ => {}
            }
        }
        // The next day: grants due expire as the clock moves.
        let r = shop
            .control("/sandbox/clock/advance", json!({"seconds": 86_400}))
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    eprintln!(
        "seed {seed}: {} payments, {} grants, {done:?}",
        payments.len(),
        grants.len()
    );
    assert!(
        !payments.is_empty() && !grants.is_empty() && proven,
        "seed {seed} moved too little to prove anything"
    );
    let last = finance::clock_now(&shop)
        .await
        .date_naive()
        .pred_opt()
        .unwrap();
    assert_eq!((last - first).num_days(), days - 1);

    // The same figures three ways: from the entries alone, with the first half of the days
    // in snapshots, and with every sealed hour in them (docs/accounting.md, "Snapshots").
    finance::reset_snapshots(&shop).await;
    let from_entries = observe(&shop, first, last).await;
    let midway = finance::end_of(first + chrono::Duration::days(days / 2));
    assert!(
        finance::build_snapshots(&shop, midway).await > 0,
        "seed {seed}"
    );
    assert_eq!(
        observe(&shop, first, last).await,
        from_entries,
        "seed {seed}: half the days in snapshots"
    );
    finance::build_snapshots(&shop, finance::clock_now(&shop).await).await;
    assert!(finance::snapshots_built_until(&shop).await >= Some(finance::start_of(last)));
    assert_eq!(
        observe(&shop, first, last).await,
        from_entries,
        "seed {seed}: every sealed hour in snapshots"
    );
    let wrong = finance::snapshot_mismatches(&shop).await;
    assert!(wrong.is_empty(), "seed {seed}: {wrong:?}");
    let (report, closings) = from_entries;

    // (date, class) -> (opening, closing), every row closing.
    let mut rows: BTreeMap<(String, String), (i64, i64)> = BTreeMap::new();
    let (mut escrowed, mut returned) = (false, false);
    for row in &report {
        if row["class"] == "escrow" {
            escrowed |= row["escrow_in_minor"].as_i64().unwrap() > 0;
            returned |= row["escrow_out_minor"].as_i64().unwrap() < 0;
        }
        let moved = finance::moved(row);
        let (opening, closing) = (
            row["opening_minor"].as_i64().unwrap(),
            row["closing_minor"].as_i64().unwrap(),
        );
        assert_eq!(opening + moved, closing, "seed {seed}: {row}");
        rows.insert(
            (
                row["date"].as_str().unwrap().to_string(),
                row["class"].as_str().unwrap().to_string(),
            ),
            (opening, closing),
        );
    }
    assert_eq!(rows.len() as i64, days * 5, "seed {seed}");
    assert!(
        escrowed && returned,
        "seed {seed}: the lapse escrowed and the proof returned"
    );
    let mut day = first;
    while day <= last {
        let said = closings[&day].first().cloned().unwrap_or(json!({}));
        for class in [
            "actual",
            "promo_released",
            "promo_locked",
            "escrow",
            "pending_topup",
        ] {
            let (opening, closing) = rows[&(day.to_string(), class.to_string())];
            assert_eq!(
                said[format!("{class}_minor")].as_i64().unwrap_or(0),
                closing,
                "seed {seed}: {class} at the end of {day}"
            );
            if day > first {
                let before = rows[&(day.pred_opt().unwrap().to_string(), class.to_string())].1;
                assert_eq!(opening, before, "seed {seed}: {class} opens {day}");
            }
        }
        day = day.succ_opt().unwrap();
    }
    shop.assert_ledger_consistent().await;
    app.stop().await;
}

#[tokio::test]
async fn random_days_of_movements_roll_forward_to_the_liability_seed_7() {
    random_days(7).await;
}

#[tokio::test]
async fn random_days_of_movements_roll_forward_to_the_liability_seed_2026() {
    random_days(2026).await;
}
