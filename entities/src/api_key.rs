use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "api_keys")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub integration_id: Uuid,
    /// integration, enterprise, brand or branch.
    pub scope: String,
    pub enterprise_id: Option<Uuid>,
    pub brand_id: Option<Uuid>,
    pub branch_id: Option<Uuid>,
    pub key_prefix: String,
    /// bcrypt hash of the raw key; the raw key itself is never stored.
    pub key_hash: String,
    pub key_last_four: String,
    pub label: String,
    pub is_sandbox: bool,
    pub status: ApiKeyStatus,
    pub expires_at: Option<DateTimeUtc>,
    pub previous_key_id: Option<Uuid>,
    /// What the key may do: permission names separated by spaces (see
    /// `api::domain::credentials::permissions`).
    pub permissions: String,
    /// The key that minted this one (null for a platform key, and for keys minted before
    /// this was recorded). A regenerated key keeps its predecessor's.
    pub created_by_key_id: Option<Uuid>,
    pub status_reason: Option<String>,
    pub created_at: DateTimeUtc,
    pub revoked_at: Option<DateTimeUtc>,
    pub deleted_at: Option<DateTimeUtc>,
}

states! {
    /// `active` while it authenticates; `inactive` once revoked (or rotated out); `deleted`
    /// once removed from lists too.
    ApiKeyStatus {
        Active = "active",
        Inactive = "inactive",
        Deleted = "deleted",
    }
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
