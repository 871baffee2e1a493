//! Report runs (x-api-key, permission `reporting`): ask for a report, follow it, download
//! its file. docs/accounting.md describes each report's columns.
use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use chrono::NaiveDate;
use poem::{Body, IntoResponse, Response, web::Data};
use poem_openapi::{
    ApiResponse, Object, OpenApi,
    param::Path,
    registry::{MetaMediaType, MetaResponse, MetaResponses, MetaSchema, MetaSchemaRef, Registry},
    types::Type,
};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::domain::credentials::Permission;
use crate::domain::ledger::reports::{self, Asked, Run, file::Format};
use crate::domain::{transactions, validate::Errors};
use crate::envelope::Page;
use crate::http::pipeline::fields::{
    Cursor, DateText, Field, OneOf, PageLimit, ReportFormats, ReportKinds, Text, UuidText,
};
use crate::http::pipeline::query_group::{Grouped, query_group};
use crate::http::{
    openapi::tags::Tag,
    pipeline::auth::ApiKeyAuth,
    pipeline::body::{JsonBody, Validate},
    pipeline::common::{RequestContext, RequestMeta, optional_uuid, path_uuid, ts},
    pipeline::mutation::Idempotent,
    pipeline::reply::{Accepted, ErrorEnvelope, Reply},
};
use crate::idempotency::Outcome;
use crate::{error::ApiError, state::AppState};

/// Ask for a report.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct CreateReportRequest {
    #[serde(default)]
    pub meta: RequestMeta,
    /// The merchant the request acts for (a merchant the key may act for).
    #[serde(default)]
    pub context: RequestContext,
    /// `liability_rollforward` (per merchant, currency, business day and class: opening,
    /// each type of movement, closing, and the breakage estimate), `liability_aging` (actual
    /// money by days since the wallet's last customer-initiated movement) or
    /// `dormant_wallets` (wallets past the merchant's dormancy period).
    #[oai(rename = "type")]
    #[serde(rename = "type", default)]
    pub kind: Field<OneOf<ReportKinds>>,
    /// A roll-forward's first business day (included).
    #[oai(nullable)]
    pub from: Option<DateText>,
    /// A roll-forward's last business day (included); it must have ended. At most 366 days
    /// after `from`.
    #[oai(nullable)]
    pub to: Option<DateText>,
    /// An aging or dormancy report's business day, as at its end; it must have ended.
    #[oai(nullable)]
    pub as_of: Option<DateText>,
    /// The IANA time zone the business days are days in (default `UTC`).
    #[oai(nullable)]
    pub timezone: Option<Text<1, 64>>,
    /// One merchant of the integration (default: every merchant the key may read).
    #[oai(nullable)]
    pub merchant_id: Option<UuidText>,
    /// `csv` (default; RFC 4180 with a header line) or `jsonl` (one JSON object per line).
    #[oai(nullable)]
    pub format: Option<Field<OneOf<ReportFormats>>>,
}

impl Validate for CreateReportRequest {
    fn validate(&self, e: &mut Errors) {
        self.meta.validate(e);
        self.context.validate(e);
        self.kind.check(e, "/type");
        for (field, d) in [
            ("/from", &self.from),
            ("/to", &self.to),
            ("/as_of", &self.as_of),
        ] {
            if let Some(d) = d {
                d.check(e, field);
            }
        }
        if let Some(t) = &self.timezone {
            t.check(e, "/timezone");
        }
        if let Some(m) = &self.merchant_id {
            m.check(e, "/merchant_id");
        }
        if let Some(f) = &self.format {
            f.check(e, "/format");
        }
    }
}

/// What a report run was asked for.
#[derive(Object, Serialize)]
pub struct ReportParameters {
    #[oai(rename = "type")]
    #[serde(rename = "type")]
    pub kind: String,
    #[oai(nullable)]
    pub from: Option<String>,
    #[oai(nullable)]
    pub to: Option<String>,
    #[oai(nullable)]
    pub as_of: Option<String>,
    pub timezone: String,
    #[oai(nullable)]
    pub merchant_id: Option<String>,
    pub format: String,
}

/// A report run and, once it succeeded, its file.
#[derive(Object, Serialize)]
pub struct ReportView {
    pub report_id: String,
    #[oai(rename = "type")]
    #[serde(rename = "type")]
    pub kind: String,
    /// `pending`, `running`, `succeeded` (the file is ready) or `failed` (see `error`).
    pub status: String,
    pub parameters: ReportParameters,
    /// The merchant the request acted for.
    pub merchant_id: String,
    /// Rows in the file (a CSV's header line not counted); set once it succeeded.
    #[oai(nullable)]
    pub row_count: Option<i64>,
    /// The file's size in bytes; set once it succeeded.
    #[oai(nullable)]
    pub byte_size: Option<i64>,
    /// SHA-256 of the file, lower-case hex; set once it succeeded.
    #[oai(nullable)]
    pub sha256: Option<String>,
    /// Where to download the file, once it succeeded.
    #[oai(nullable)]
    pub file_url: Option<String>,
    /// Why it failed.
    #[oai(nullable)]
    pub error: Option<String>,
    pub created_at: String,
    #[oai(nullable)]
    pub started_at: Option<String>,
    #[oai(nullable)]
    pub finished_at: Option<String>,
    /// When the run and its file are deleted.
    pub expires_at: String,
}

fn view(integration: Uuid, r: &Run) -> ReportView {
    let p: Option<reports::Params> = serde_json::from_value(r.parameters.clone()).ok();
    let succeeded = r.succeeded();
    ReportView {
        report_id: r.id.to_string(),
        kind: r.kind.clone(),
        status: r.status_str().to_string(),
        parameters: ReportParameters {
            kind: r.kind.clone(),
            from: p.as_ref().and_then(|p| p.from).map(|d| d.to_string()),
            to: p.as_ref().and_then(|p| p.to).map(|d| d.to_string()),
            as_of: p.as_ref().and_then(|p| p.as_of).map(|d| d.to_string()),
            timezone: p.as_ref().map(|p| p.timezone.clone()).unwrap_or_default(),
            merchant_id: p
                .as_ref()
                .and_then(|p| p.merchant_id)
                .map(|m| m.to_string()),
            format: r.format.clone(),
        },
        merchant_id: r.merchant_id.to_string(),
        row_count: r.row_count,
        byte_size: r.byte_size,
        sha256: r.sha256.clone(),
        file_url: succeeded.then(|| format!("/v1/{integration}/reports/{}/file", r.id)),
        error: r.error.clone(),
        created_at: ts(r.created_at),
        started_at: r.started_at.map(ts),
        finished_at: r.finished_at.map(ts),
        expires_at: ts(r.expires_at),
    }
}

query_group! {
    /// A page of report runs.
    pub struct ReportQuery {
        limit: Option<PageLimit> = "limit",
        cursor: Option<Cursor> = "cursor",
    }
}

/// A report's file, streamed from where it is kept.
pub struct ReportFile {
    format: Format,
    filename: String,
    sha256: String,
    size: i64,
    body: Body,
}

impl IntoResponse for ReportFile {
    fn into_response(self) -> Response {
        Response::builder()
            .content_type(self.format.content_type())
            .header(
                "Content-Disposition",
                format!("attachment; filename=\"{}\"", self.filename),
            )
            .header("Content-Length", self.size.to_string())
            .header(
                "Repr-Digest",
                format!("sha-256=:{}:", hex_to_base64(&self.sha256)),
            )
            .body(self.body)
    }
}

fn hex_to_base64(hex: &str) -> String {
    let bytes: Vec<u8> = (0..hex.len() / 2)
        .filter_map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok())
        .collect();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

impl ApiResponse for ReportFile {
    fn meta() -> MetaResponses {
        let file = || {
            MetaSchemaRef::Inline(Box::new(MetaSchema {
                format: Some("binary"),
                ..MetaSchema::new("string")
            }))
        };
        let json = "application/json; charset=utf-8";
        MetaResponses {
            responses: vec![
                MetaResponse {
                    description: "The file: CSV (RFC 4180, a header line first) or JSON Lines, with `Repr-Digest` (its SHA-256) and `Content-Disposition`.",
                    status: Some(200),
                    status_range: None,
                    content: vec![
                        MetaMediaType {
                            content_type: "text/csv; charset=utf-8",
                            schema: file(),
                        },
                        MetaMediaType {
                            content_type: "application/jsonl",
                            schema: file(),
                        },
                    ],
                    headers: vec![],
                },
                MetaResponse {
                    description: "Client error: `ok` is false and `error.code` says why (NOT_FOUND for a run that has no file, or has expired).",
                    status: None,
                    status_range: Some("4XX".into()),
                    content: vec![MetaMediaType {
                        content_type: json,
                        schema: ErrorEnvelope::schema_ref(),
                    }],
                    headers: vec![],
                },
            ],
        }
    }

    fn register(registry: &mut Registry) {
        ErrorEnvelope::register(registry);
    }
}

pub struct ReportsApi;

#[OpenApi(tag = "Tag::Reporting")]
impl ReportsApi {
    /// Ask for a report
    ///
    /// Accepts a report run and answers 202 with it, `status: pending`. A job worker runs
    /// it from the ledger alone (it never posts to it), stores its file, and fires
    /// `report.ready` (or `report.failed`). `liability_rollforward`: one row per merchant,
    /// currency, business day (in `timezone`) and class (`actual`, `promo_released`,
    /// `promo_locked`, `escrow`, `pending_topup`): `opening_minor`, one column per type of
    /// movement, `closing_minor`; on every row opening plus movements is closing, a day's
    /// closing is the next day's opening and equals the liability at the end of that day
    /// (`GET /{integrationId}/liability`). The run covers the merchants the key may read
    /// now (`merchant_id` narrows to one). `to` must be a day that has ended; at most 366
    /// days. Brand and branch keys are FORBIDDEN; another integration in the path is
    /// FORBIDDEN.
    ///
    /// Permission: `reporting`.
    #[oai(
        path = "/:integration_id/reports",
        method = "post",
        operation_id = "createReport"
    )]
    async fn create(
        &self,
        state: Data<&AppState>,
        auth: ApiKeyAuth,
        integration_id: Path<UuidText>,
        /// A UUID; retries with the same key replay the first response.
        #[oai(name = "Idempotency-Key")]
        key: Idempotent<'_>,
        body: JsonBody<CreateReportRequest>,
    ) -> poem::Result<Accepted<ReportView>> {
        auth.0.require(Permission::Reporting)?;
        let integration = path_uuid("path:integrationId", &integration_id.0)?;
        transactions::check_integration(&auth.0, integration)?;
        crate::domain::ledger::liability::reporting_scope(&auth.0)?;
        let b = &body.value;
        let date = |d: &Option<DateText>| {
            d.as_deref()
                .and_then(|d| NaiveDate::parse_from_str(d, "%Y-%m-%d").ok())
        };
        let mut e = Errors::default();
        let merchant = optional_uuid(&mut e, "/merchant_id", &b.merchant_id);
        let asked = Asked {
            kind: &b.kind,
            from: date(&b.from),
            to: date(&b.to),
            as_of: date(&b.as_of),
            timezone: b.timezone.as_deref(),
            merchant_id: merchant,
            format: b.format.as_deref(),
        };
        let params = reports::check(&mut e, &asked, auth.0.clock().now());
        e.finish()?;
        let params = params.ok_or_else(|| ApiError::internal("report parameters checked"))?;
        let retention = state.0.config.report_retention_days;
        let reply = key
            .run(&auth.0, &body, async |txn, acting| {
                let run = reports::request(
                    txn,
                    &auth.0,
                    acting.merchant_id,
                    params,
                    retention,
                    chrono::Utc::now(),
                )
                .await?;
                Ok(Outcome::accepted(view(integration, &run)))
            })
            .await?;
        Ok(Accepted(reply))
    }

    /// List report runs
    ///
    /// The integration's report runs, newest first (a merchant key sees those acted for its
    /// merchant), until they expire. Cursor-paginated (`limit` 1–200, default 50).
    ///
    /// Permission: `reporting`.
    #[oai(
        path = "/:integration_id/reports",
        method = "get",
        operation_id = "listReports"
    )]
    async fn list(
        &self,
        state: Data<&AppState>,
        auth: ApiKeyAuth,
        integration_id: Path<UuidText>,
        query: Grouped<ReportQuery>,
    ) -> poem::Result<Reply<Vec<ReportView>>> {
        auth.0.require(Permission::Reporting)?;
        let integration = path_uuid("path:integrationId", &integration_id.0)?;
        transactions::check_integration(&auth.0, integration)?;
        let ReportQuery { limit, cursor } = query.0;
        let mut e = Errors::default();
        let limit = PageLimit::resolve(limit, &mut e);
        let before = match cursor.as_deref() {
            None => None,
            Some(raw) => {
                let id = URL_SAFE_NO_PAD
                    .decode(raw)
                    .ok()
                    .and_then(|b| String::from_utf8(b).ok())
                    .and_then(|s| Uuid::parse_str(&s).ok());
                if id.is_none() {
                    e.push(
                        "query:cursor",
                        "invalid_cursor",
                        "is not a cursor this list returned",
                    );
                }
                id
            }
        };
        e.finish()?;
        let (rows, more) = reports::page(&state.0.db, &auth.0, before, limit).await?;
        let page = Page {
            next_cursor: if more {
                rows.last()
                    .map(|r| URL_SAFE_NO_PAD.encode(r.id.to_string()))
            } else {
                None
            },
            has_more: more,
        };
        let out: Vec<ReportView> = rows.iter().map(|r| view(integration, r)).collect();
        Ok(Reply::page(&out, &page))
    }

    /// Read a report run
    ///
    /// Its status, parameters and, once it succeeded, the file's row count, size, SHA-256
    /// and `file_url`. A run of another integration, or that has expired, is NOT_FOUND.
    ///
    /// Permission: `reporting`.
    #[oai(
        path = "/:integration_id/reports/:report_id",
        method = "get",
        operation_id = "getReport"
    )]
    async fn get(
        &self,
        state: Data<&AppState>,
        auth: ApiKeyAuth,
        integration_id: Path<UuidText>,
        report_id: Path<UuidText>,
    ) -> poem::Result<Reply<ReportView>> {
        auth.0.require(Permission::Reporting)?;
        let integration = path_uuid("path:integrationId", &integration_id.0)?;
        transactions::check_integration(&auth.0, integration)?;
        let id = path_uuid("path:reportId", &report_id.0)?;
        let run = reports::readable(&state.0.db, &auth.0, id).await?;
        Ok(Reply::ok(&view(integration, &run)))
    }

    /// Download a report's file
    ///
    /// Streams the file of a run that succeeded, with its content type (`text/csv` or
    /// `application/jsonl`), `Content-Length` and `Repr-Digest` (the SHA-256 also in the
    /// run). A run that has not succeeded, has expired or is another integration's is
    /// NOT_FOUND.
    ///
    /// Permission: `reporting`.
    #[oai(
        path = "/:integration_id/reports/:report_id/file",
        method = "get",
        operation_id = "getReportFile"
    )]
    async fn file(
        &self,
        state: Data<&AppState>,
        auth: ApiKeyAuth,
        integration_id: Path<UuidText>,
        report_id: Path<UuidText>,
    ) -> poem::Result<ReportFile> {
        auth.0.require(Permission::Reporting)?;
        let integration = path_uuid("path:integrationId", &integration_id.0)?;
        transactions::check_integration(&auth.0, integration)?;
        let id = path_uuid("path:reportId", &report_id.0)?;
        let run = reports::readable(&state.0.db, &auth.0, id).await?;
        if !run.succeeded() {
            return Err(ApiError::not_found("Report file").into());
        }
        let pieces = reports::file_stream(state.0.db.clone(), id);
        let format = run.format();
        let ext = format.as_str();
        Ok(ReportFile {
            format,
            filename: format!("{}-{}.{ext}", run.kind, run.id),
            sha256: run.sha256.clone().unwrap_or_default(),
            size: run.byte_size.unwrap_or(0),
            body: Body::from_bytes_stream(pieces),
        })
    }
}
