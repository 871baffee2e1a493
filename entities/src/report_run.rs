use sea_orm::entity::prelude::*;

/// One report a finance team asked for, and the file it made (`report_chunk`).
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "report_runs")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub integration_id: Uuid,
    pub merchant_id: Uuid,
    pub kind: String,
    pub format: String,
    pub parameters: Json,
    pub merchant_ids: Json,
    pub status: ReportStatus,
    pub row_count: Option<i64>,
    pub byte_size: Option<i64>,
    pub sha256: Option<String>,
    pub error: Option<String>,
    pub created_at: DateTimeUtc,
    pub started_at: Option<DateTimeUtc>,
    pub finished_at: Option<DateTimeUtc>,
    pub expires_at: DateTimeUtc,
}

states! {
    /// `pending` until a worker takes it, `running`, then `succeeded` (its file complete)
    /// or `failed` (no file).
    ReportStatus {
        Pending = "pending",
        Running = "running",
        Succeeded = "succeeded",
        Failed = "failed",
    }
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
