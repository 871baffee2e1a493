//! Writes held back to the end of a transaction (`api::store::db::writes`): a batch lands whole
//! or not at all, keeps the ledger's guards, and applies its writes in order, on both
//! backends (one statement on PostgreSQL, one by one on SQLite).
use api::{
    domain::{
        ledger::posting,
        outbox::events::{NewOutbox, OutboxKind},
    },
    store::{self, db::writes::Writes, ledger::Reference},
};
use chrono::Utc;
use entities::{ledger_posting, wallet};
use sea_orm::{ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter};
use serde_json::json;
use tests::{TestApp, shop::Shop};
use uuid::Uuid;

fn adjustment(merchant: Uuid, wallet: Uuid, amount: i64) -> api::domain::ledger::Posting {
    posting::adjustment(merchant, wallet, "EUR", amount)
}

fn reference() -> Reference<'static> {
    Reference {
        kind: "adjustment",
        id: Uuid::now_v7(),
        memo: None,
        at: chrono::Utc::now(),
    }
}

async fn postings_of(app: &TestApp, merchant: Uuid) -> u64 {
    ledger_posting::Entity::find()
        .filter(ledger_posting::Column::MerchantId.eq(merchant))
        .count(&app.server.state.db)
        .await
        .unwrap()
}

async fn actual_of(app: &TestApp, wallet_id: Uuid) -> i64 {
    wallet::Entity::find_by_id(wallet_id)
        .one(&app.server.state.db)
        .await
        .unwrap()
        .unwrap()
        .actual_minor
}

#[tokio::test]
async fn a_batch_that_would_take_a_wallet_below_zero_fails_and_writes_nothing() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 500).await;
    let (merchant, wallet) = (shop.merchant(), c.wallet_id.parse().unwrap());
    let before = postings_of(&app, merchant).await;

    let txn = store::begin(&app.server.state.db).await.unwrap();
    let mut w = Writes::default();
    store::ledger::defer_post(&mut w, &adjustment(merchant, wallet, -300), reference()).unwrap();
    store::ledger::defer_post(&mut w, &adjustment(merchant, wallet, -300), reference()).unwrap();
    let err = w.flush(&txn).await.unwrap_err();
    assert!(err.to_string().contains("would go below zero"), "{err}");
    drop(txn);

    assert_eq!(actual_of(&app, wallet).await, 500);
    assert_eq!(postings_of(&app, merchant).await, before);
    shop.assert_ledger_consistent().await;
}

#[tokio::test]
async fn moves_of_one_wallet_in_one_batch_apply_one_after_another() {
    let app = TestApp::spawn().await;
    let shop = Shop::open(&app).await;
    let c = shop.customer().await;
    shop.fund(&c, 500).await;
    let (merchant, wallet) = (shop.merchant(), c.wallet_id.parse().unwrap());

    let txn = store::begin(&app.server.state.db).await.unwrap();
    let mut w = Writes::default();
    // Each debit alone fits; both together leave 50. Applied on one snapshot, the second
    // would overwrite the first.
    store::ledger::defer_post(&mut w, &adjustment(merchant, wallet, -200), reference()).unwrap();
    store::ledger::defer_post(&mut w, &adjustment(merchant, wallet, -250), reference()).unwrap();
    w.flush(&txn).await.unwrap();
    txn.commit().await.unwrap();

    assert_eq!(actual_of(&app, wallet).await, 50);
    shop.assert_ledger_consistent().await;
}

#[tokio::test]
async fn events_of_one_resource_in_one_batch_are_numbered_consecutively_after_earlier_ones() {
    let app = TestApp::spawn().await;
    let db = &app.server.state.db;
    let resource = Uuid::now_v7().to_string();
    let other = Uuid::now_v7().to_string();
    let event = |resource_id: &str, n: i64| NewOutbox {
        kind: OutboxKind::Event,
        topic: "test.numbered".into(),
        merchant_id: None,
        resource_type: "test".into(),
        resource_id: resource_id.into(),
        payload: json!({"n": n}),
        occurred_at: Utc::now(),
    };
    store::outbox::append(db, event(&resource, 1))
        .await
        .unwrap();

    let txn = store::begin(db).await.unwrap();
    let mut w = Writes::default();
    let ids = store::outbox::defer_all(
        &mut w,
        vec![
            event(&resource, 2),
            event(&other, 1),
            event(&resource, 3),
            event(&resource, 4),
        ],
    );
    assert_eq!(ids.len(), 4);
    // Nothing is written before the flush.
    let seen = store::outbox::events_of(&txn, "test", &resource)
        .await
        .unwrap();
    assert_eq!(seen.len(), 1);
    w.flush(&txn).await.unwrap();
    txn.commit().await.unwrap();

    let numbered = |rows: Vec<entities::outbox::Model>| {
        rows.into_iter()
            .map(|e| (e.payload["n"].as_i64().unwrap(), e.sequence_number))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        numbered(
            store::outbox::events_of(db, "test", &resource)
                .await
                .unwrap()
        ),
        vec![(1, 1), (2, 2), (3, 3), (4, 4)]
    );
    assert_eq!(
        numbered(store::outbox::events_of(db, "test", &other).await.unwrap()),
        vec![(1, 1)]
    );
    let rows = store::outbox::events_of(db, "test", &resource)
        .await
        .unwrap();
    assert_eq!(
        rows[1..].iter().map(|e| e.event_id).collect::<Vec<_>>(),
        vec![ids[0], ids[2], ids[3]]
    );
}
