//! Risk controls at the till (docs/risk.md): failed credentials counted where they happen,
//! codes bound to where they were minted, velocity limits a merchant sets, and an alert
//! once per crossing.
mod binding;
mod failures;
mod limits;

use entities::outbox;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder};
use serde_json::Value;
use tests::{TestApp, shop::Shop};

/// The `risk.limit_reached` events written for the shop's merchant, oldest first.
pub async fn alerts(app: &TestApp, shop: &Shop<'_>) -> Vec<Value> {
    outbox::Entity::find()
        .filter(outbox::Column::Topic.eq("risk.limit_reached"))
        .filter(outbox::Column::MerchantId.eq(shop.merchant()))
        .order_by_asc(outbox::Column::Id)
        .all(&app.server.state.db)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.payload)
        .collect()
}
