//! Enrollment and claims: start phone proof, verify it by code or link, resend the SMS,
//! and claim locked grants.
use crate::http::pipeline::fields::Text;
use crate::http::pipeline::fields::UuidText;
use crate::http::pipeline::fields::alternatives::{Alternatives, Branch};
mod claims;
mod verify;

pub use claims::*;
pub use verify::*;

use poem::web::Data;
use poem_openapi::{Object, OpenApi};
use serde::{Deserialize, Serialize};

use crate::http::{
    openapi::tags::Tag,
    pipeline::auth::TerminalJwtAuth,
    pipeline::body::{JsonBody, Validate},
    pipeline::common::{RequestContext, RequestMeta, in_context, optional_uuid, phone, ts},
    pipeline::mutation::Idempotent,
    pipeline::reply::Reply,
};
use crate::{
    domain::{
        customers::enrollment::{self, Initiate, Policy, Target},
        validate::{self, Errors},
    },
    error::ApiError,
    idempotency::Outcome,
    state::AppState,
};

fn policy(st: &AppState) -> Policy {
    Policy {
        window: chrono::Duration::seconds(st.config.enrollment_window_secs as i64),
        link_base: st.config.enrollment_link_base.clone(),
    }
}

/// The session named in `context.service_session_id`, if any.
fn session(e: &mut Errors, ctx: &RequestContext) -> Option<uuid::Uuid> {
    optional_uuid(e, "/context/service_session_id", &ctx.service_session_id)
}

// --- Initiate ----------------------------------------------------------------------------

/// Start enrollment: prove the customer's phone.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct EnrollInitiateRequest {
    /// Optional here: omitted, nothing is checked; given, it must be valid.
    pub meta: Option<RequestMeta>,
    #[serde(default)]
    pub context: RequestContext,
    /// Normalised to E.164; with the merchant, the identity key.
    #[serde(default)]
    pub phone: crate::http::pipeline::fields::Phone,
    /// Your POS's customer id, linked to the customer when the phone is proven (not now).
    #[oai(nullable)]
    pub provider_customer_id: Option<Text<1, 128>>,
    /// A payment card fingerprint to recognise the customer by, linked at verification
    /// like `provider_customer_id`.
    #[oai(nullable)]
    pub card_fingerprint: Option<crate::http::pipeline::fields::CardFingerprint>,
    /// Null: the merchant's program (WALLET_PROGRAM_AMBIGUOUS when it runs several).
    #[oai(nullable)]
    pub wallet_program_id: Option<UuidText>,
    /// SMS language (en, de, fr, es; others fall back to en).
    #[oai(nullable)]
    pub language: Option<crate::http::pipeline::fields::Language>,
}

impl Validate for EnrollInitiateRequest {
    fn validate(&self, e: &mut Errors) {
        RequestMeta::validate_optional(&self.meta, e);
        self.context.validate(e);
        if self.phone.is_empty() {
            e.push("/phone", "required", "is required (E.164)");
        } else {
            phone(e, "/phone", &self.phone);
        }
        if let Some(p) = &self.provider_customer_id {
            p.check(e, "/provider_customer_id");
        }
        if let Some(f) = &self.card_fingerprint {
            f.check(e, "/card_fingerprint");
        }
        optional_uuid(e, "/wallet_program_id", &self.wallet_program_id);
        if let Some(l) = &self.language {
            l.check(e, "/language");
        }
    }
}

/// Where an enrollment stands.
#[derive(Object, Serialize)]
pub struct EnrollmentResult {
    /// `PENDING_PROOF` (waiting for the code or link) or `VERIFIED`.
    pub state: String,
    pub wallet_user_id: String,
    pub wallet_id: String,
    pub wallet_program_id: String,
    /// Null for a customer who was already verified.
    #[oai(nullable)]
    pub enrollment_id: Option<String>,
    pub phone_masked: String,
    /// Whether this call sent an SMS (a second initiate sends none: use /enroll/resend).
    pub sms_sent: bool,
    /// SMS left in this window, the one just sent excluded.
    #[oai(nullable)]
    pub sends_remaining: Option<i64>,
    /// When the window for proof lapses.
    #[oai(nullable)]
    pub expires_at: Option<String>,
    /// When the code in the latest SMS stops working.
    #[oai(nullable)]
    pub code_expires_at: Option<String>,
}

fn enrollment_result(s: &enrollment::Standing, sms_sent: bool) -> EnrollmentResult {
    EnrollmentResult {
        state: s.state.as_str().to_string(),
        wallet_user_id: s.wallet_user_id.to_string(),
        wallet_id: s.wallet_id.map(|w| w.to_string()).unwrap_or_default(),
        wallet_program_id: s
            .wallet_program_id
            .map(|p| p.to_string())
            .unwrap_or_default(),
        enrollment_id: s.enrollment_id.map(|e| e.to_string()),
        phone_masked: s.phone_masked.clone(),
        sms_sent,
        sends_remaining: s.sends_remaining,
        expires_at: s.expires_at.map(ts),
        code_expires_at: s.code_expires_at.map(ts),
    }
}

// --- Resend ------------------------------------------------------------------------------

/// Send the enrollment SMS again (a new code; the link keeps working).
#[derive(Object, Deserialize, Debug, Clone)]
pub struct EnrollResendRequest {
    /// Optional here: omitted, nothing is checked; given, it must be valid.
    pub meta: Option<RequestMeta>,
    #[serde(default)]
    pub context: RequestContext,
    /// The phone being enrolled. Give this or `enrollment_id`.
    #[oai(nullable)]
    pub phone: Option<crate::http::pipeline::fields::Phone>,
    #[oai(nullable)]
    pub enrollment_id: Option<UuidText>,
}

/// A resend names its enrollment by phone or by id, one of them.
pub const RESEND_TARGET: Alternatives = Alternatives {
    schema: "EnrollResendRequest",
    branches: &[
        Branch {
            given: &["phone"],
            absent: &["enrollment_id"],
        },
        Branch {
            given: &["enrollment_id"],
            absent: &["phone"],
        },
    ],
    field: "/phone",
    issue: "exactly_one",
    message: "give exactly one of phone or enrollment_id",
};

impl EnrollResendRequest {
    fn target(&self, e: &mut Errors) -> Option<Target> {
        RESEND_TARGET.check(e, "", |m| match m {
            "phone" => self.phone.is_some(),
            _ => self.enrollment_id.is_some(),
        });
        match (&self.phone, &self.enrollment_id) {
            (Some(p), None) => phone(e, "/phone", p).map(Target::Phone),
            (None, Some(id)) => validate::uuid(e, "/enrollment_id", id).map(Target::Enrollment),
            // Neither or both: the rule above said so.
            _ => None,
        }
    }
}

impl Validate for EnrollResendRequest {
    fn validate(&self, e: &mut Errors) {
        RequestMeta::validate_optional(&self.meta, e);
        self.context.validate(e);
        self.target(e);
    }
}

pub struct EnrollmentApi;

#[OpenApi(tag = "Tag::Enrollment")]
impl EnrollmentApi {
    /// Start enrollment
    ///
    /// Creates the customer's PENDING_PROOF wallet identity (keyed by merchant and
    /// normalised phone) and wallet, and texts a 6-digit code and a signed single-use
    /// link. No money moves. A phone already VERIFIED is a success with no SMS; a second
    /// initiate while the window is open returns it without another SMS (use
    /// `/enroll/resend`). The window for proof lapses after a configured time (7 days by
    /// default): enrollment.expired fires, the identity can no longer pay, and its actual
    /// money is held in the merchant's escrow until the customer enrolls again.
    #[oai(
        path = "/enroll/initiate",
        method = "post",
        operation_id = "enrollInitiate"
    )]
    async fn initiate(
        &self,
        state: Data<&AppState>,
        auth: TerminalJwtAuth,
        /// A UUID; retries with the same key replay the first response.
        #[oai(name = "Idempotency-Key")]
        key: Idempotent<'_>,
        body: JsonBody<EnrollInitiateRequest>,
    ) -> poem::Result<Reply<EnrollmentResult>> {
        let st = state.0.clone();
        let b = &body.value;
        let mut e = Errors::default();
        let req = Initiate {
            phone: phone(&mut e, "/phone", &b.phone).unwrap_or_default(),
            program: optional_uuid(&mut e, "/wallet_program_id", &b.wallet_program_id),
            language: b.language.clone().map(String::from),
            provider_customer_id: b.provider_customer_id.clone().map(String::from),
            card_fingerprint: b.card_fingerprint.clone().map(String::from),
            service_session_id: session(&mut e, &b.context),
        };
        e.finish()?;
        key.run(&auth.0, &body, async move |txn, acting| {
            let who = in_context(acting, &b.context);
            let r =
                enrollment::initiate(txn, &st.sealer, &who, &policy(&st), req, who.now()).await?;
            Ok(Outcome::new(enrollment_result(&r.standing(), r.sms_sent)))
        })
        .await
    }

    /// Resend the enrollment SMS
    ///
    /// A new code (the previous one stops working; the link keeps working) by SMS. At
    /// most 5 SMS per enrollment window and one per 60 seconds (429 RATE_LIMITED with
    /// Retry-After). A customer already verified is a success with no SMS; no pending
    /// enrollment is NOT_FOUND.
    #[oai(
        path = "/enroll/resend",
        method = "post",
        operation_id = "enrollResend"
    )]
    async fn resend(
        &self,
        state: Data<&AppState>,
        auth: TerminalJwtAuth,
        /// A UUID; retries with the same key replay the first response.
        #[oai(name = "Idempotency-Key")]
        key: Idempotent<'_>,
        body: JsonBody<EnrollResendRequest>,
    ) -> poem::Result<Reply<EnrollmentResult>> {
        let st = state.0.clone();
        let b = &body.value;
        let mut e = Errors::default();
        let target = b.target(&mut e);
        let session = self::session(&mut e, &b.context);
        e.finish()?;
        let target = target.ok_or_else(|| ApiError::internal("validated target"))?;
        key.run(&auth.0, &body, async move |txn, acting| {
            let who = in_context(acting, &b.context);
            let r = enrollment::resend(
                txn,
                &st.sealer,
                &who,
                &policy(&st),
                &target,
                session,
                who.now(),
            )
            .await?;
            Ok(Outcome::new(enrollment_result(&r.standing(), r.sms_sent)))
        })
        .await
    }
}
