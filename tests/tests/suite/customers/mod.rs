//! Customers at the till, as the spec's "Identity" rules and the checkout-session state
//! table state them: identification is read-only and never a token, not_found is HTTP 200,
//! sessions move OPEN → IDENTIFIED → closed and a closed session refuses payments.
mod identify;
mod sessions;

use api::store::Db;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use serde_json::{Value, json};
use tests::shop::{Customer, Shop};
use uuid::Uuid;

/// Every row of the merchant's customer and money tables, as text.
async fn money_state(db: &Db, merchant: Uuid) -> String {
    use entities::*;
    macro_rules! rows {
        ($m:ident) => {
            format!(
                "{:?}",
                $m::Entity::find()
                    .filter($m::Column::MerchantId.eq(merchant))
                    .all(db)
                    .await
                    .unwrap()
            )
        };
    }
    [
        rows!(wallet_user),
        rows!(wallet),
        rows!(promo_grant),
        rows!(ledger_posting),
        rows!(ledger_entry),
        rows!(payment),
        rows!(otp_session),
        rows!(qr_nonce),
        rows!(enrollment),
        rows!(checkout_session),
        rows!(identity_link),
    ]
    .join("\n")
}

async fn events_of(db: &Db, merchant: Uuid, topic: &str) -> Vec<Value> {
    entities::outbox::Entity::find()
        .filter(entities::outbox::Column::MerchantId.eq(merchant))
        .filter(entities::outbox::Column::Topic.eq(topic))
        .all(db)
        .await
        .unwrap()
        .into_iter()
        .map(|o| o.payload)
        .collect()
}

async fn identify(shop: &Shop<'_>, credential: Value) -> tests::Reply {
    shop.post("/identify", json!({ "credential": credential }))
        .await
}

fn by_phone(c: &Customer) -> Value {
    json!({"credential_type": "phone", "phone": c.phone})
}
