//! A requested top-up and its settlement's outcome may arrive in either order, or at once:
//! whichever wins the reference's lock, the customer is credited exactly once (SETTLED) or
//! not at all (FAILED), and nothing stays pending.
use serde_json::json;
use tests::{TestApp, shop::Shop};

async fn report(shop: &Shop<'_>, reference: &str, state: &str) -> tests::Reply {
    shop.control(
        "/topup/settlements",
        json!({"reference": reference, "amount_minor": 1_000, "currency": "EUR", "state": state}),
    )
    .await
}

#[tokio::test]
async fn a_confirm_racing_its_settlements_outcome_credits_once_or_not_at_all() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    let mut settled = 0;
    for round in 0..12 {
        let reference = format!("ST-RACE-{round}");
        let outcome = if round % 3 == 2 { "FAILED" } else { "SETTLED" };
        assert_eq!(report(&shop, &reference, "PENDING").await.status, 200);
        let (confirmed, reported) = tokio::join!(
            shop.post(
                "/topup/confirm",
                json!({"settlement_reference": reference,
                       "customer": {"credential_type": "phone", "phone": c.phone}}),
            ),
            report(&shop, &reference, outcome),
        );
        assert_eq!(reported.status, 200, "{}", reported.body);
        if outcome == "SETTLED" {
            // Before the report: requested, then credited by it; after: credited at once.
            assert_eq!(confirmed.status, 200, "{}", confirmed.body);
            settled += 1;
        } else if confirmed.status != 200 {
            // After the report: the reference failed.
            assert_eq!(
                confirmed.field_issues(),
                vec![(
                    "/settlement_reference".to_string(),
                    "settlement_failed".to_string()
                )]
            );
        }
        let balance = shop.balance(&c).await;
        assert_eq!(balance["actual_minor"], 1_000 * settled, "round {round}");
        assert_eq!(balance["pending_topups_minor"], 0, "round {round}");
    }
    shop.assert_ledger_consistent().await;
}
