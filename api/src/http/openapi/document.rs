//! The built OpenAPI document as the operations use it: its JSON, the docs page, and each
//! operation's route, stability, credentials and permission. `openapi` builds it from
//! every API; an operation that serves or filters by it needs only these types.
use serde_json::Value;

use crate::domain::credentials::Permission;

#[derive(Clone, Debug)]
pub struct OperationInfo {
    pub operation_id: String,
    pub method: String,
    pub path: String,
    pub domain: String,
    pub stability: String,
    /// Security schemes any one of which admits a caller; empty means no credential needed.
    pub schemes: Vec<String>,
    /// What an x-api-key caller needs (`PERMISSION`).
    pub permission: Option<Permission>,
}

pub struct OpenApiInfo {
    pub document: Value,
    pub json: String,
    pub operations: Vec<OperationInfo>,
    /// The interactive docs page, with the 3.1 document embedded.
    pub docs_html: String,
}
