use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "integrations")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub name: String,
    pub status: IntegrationStatus,
    pub is_sandbox: bool,
    /// JSON array of identify credential types enabled for this integration.
    pub identify_credential_types: Json,
    /// JSON array of browser origins (`https://host[:port]`) allowed to call the
    /// integration's terminal-JWT operations (CORS); NULL or empty: none.
    pub cors_origins: Option<Json>,
    /// A sandbox integration's test clock: seconds its time runs ahead of real time. NULL:
    /// real time (every live integration).
    pub clock_offset_secs: Option<i64>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

states! {
    /// An `ACTIVE` integration's keys and terminal tokens work; a `SUSPENDED` one's do not.
    IntegrationStatus {
        Active = "ACTIVE",
        Suspended = "SUSPENDED",
    }
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
