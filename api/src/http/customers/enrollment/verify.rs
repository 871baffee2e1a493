//! `POST /enroll/verify`: the code or link token that proves the phone, and what it released.
use crate::http::pipeline::fields::UuidText;
use crate::http::pipeline::fields::alternatives::{Alternatives, Branch};
use chrono::Utc;
use poem::web::Data;
use poem_openapi::{Object, OpenApi};
use serde::{Deserialize, Serialize};

use crate::http::{
    customers::balance::BalanceView,
    customers::{GrantItem, grant_item},
    openapi::tags::Tag,
    pipeline::auth::TerminalJwtAuth,
    pipeline::body::{JsonBody, Validate},
    pipeline::common::{RequestContext, RequestMeta, in_context, phone, ts},
    pipeline::mutation::Idempotent,
    pipeline::reply::Reply,
};
use crate::{
    domain::{
        customers::enrollment::{self, Proof, Released, Target},
        validate::{self, Errors},
    },
    error::ApiError,
    idempotency::Outcome,
    state::AppState,
};

// --- Verify ------------------------------------------------------------------------------

/// Complete phone proof with the link token or the code.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct EnrollVerifyRequest {
    /// Optional here: omitted, nothing is checked; given, it must be valid.
    pub meta: Option<RequestMeta>,
    #[serde(default)]
    pub context: RequestContext,
    /// The signed single-use token from the SMS link. Give this or `code`.
    #[oai(nullable)]
    pub verification_token: Option<crate::http::pipeline::fields::Ascii<1, 256>>,
    /// The 6 digits from the SMS, keyed by the cashier. Give this or
    /// `verification_token`. A code needs to know whose it is: alone, it is matched to the
    /// newest pending enrollment whose code the same till (`context.terminal_id`) sent;
    /// `phone`, `enrollment_id` or the checkout session (`context.service_session_id`) that
    /// started the enrollment name it otherwise.
    #[oai(nullable)]
    pub code: Option<crate::http::pipeline::fields::SmsCode>,
    /// With `code`: the phone being enrolled.
    #[oai(nullable)]
    pub phone: Option<crate::http::pipeline::fields::Phone>,
    /// With `code`: the enrollment from the initiate result.
    #[oai(nullable)]
    pub enrollment_id: Option<UuidText>,
}

/// A verification is proven by the link's token or by the code, one of them.
pub const ONE_PROOF: Alternatives = Alternatives {
    schema: "EnrollVerifyRequest",
    branches: &[
        Branch {
            given: &["verification_token"],
            absent: &["code"],
        },
        Branch {
            given: &["code"],
            absent: &["verification_token"],
        },
    ],
    field: "/verification_token",
    issue: "exactly_one",
    message: "give exactly one of verification_token or code",
};

/// A code names whose it is by phone or by enrollment, not both ...
pub const CODE_ONE_TARGET: Alternatives = Alternatives {
    schema: "EnrollVerifyRequest",
    branches: &[
        Branch {
            given: &[],
            absent: &["code"],
        },
        Branch {
            given: &[],
            absent: &["phone"],
        },
        Branch {
            given: &[],
            absent: &["enrollment_id"],
        },
    ],
    field: "/phone",
    issue: "exactly_one",
    message: "give phone or enrollment_id, not both",
};

/// ... or by the checkout session or the till that sent it.
pub const CODE_NAMES_WHOSE: Alternatives = Alternatives {
    schema: "EnrollVerifyRequest",
    branches: &[
        Branch {
            given: &[],
            absent: &["code"],
        },
        Branch {
            given: &["phone"],
            absent: &[],
        },
        Branch {
            given: &["enrollment_id"],
            absent: &[],
        },
        Branch {
            given: &["context/service_session_id"],
            absent: &[],
        },
        Branch {
            given: &["context/terminal_id"],
            absent: &[],
        },
    ],
    field: "/phone",
    issue: "required",
    message: "a code needs phone, enrollment_id, context.service_session_id or context.terminal_id (the till that sent it) to say whose it is",
};

impl EnrollVerifyRequest {
    fn proof(&self, e: &mut Errors) -> Option<Proof> {
        let given = |m: &str| match m {
            "verification_token" => self.verification_token.is_some(),
            "code" => self.code.is_some(),
            "phone" => self.phone.is_some(),
            "enrollment_id" => self.enrollment_id.is_some(),
            "context/service_session_id" => self.context.service_session_id.is_some(),
            _ => self.context.terminal_id.is_some(),
        };
        if !ONE_PROOF.check(e, "", given) {
            return None;
        }
        if let Some(t) = &self.verification_token {
            return t
                .check(e, "/verification_token")
                .then(|| Proof::Token(t.to_string()));
        }
        let code = self.code.as_ref()?;
        let code_ok = code.check(e, "/code");
        if !(CODE_ONE_TARGET.check(e, "", given) && CODE_NAMES_WHOSE.check(e, "", given)) {
            return None;
        }
        let target = match (
            &self.phone,
            &self.enrollment_id,
            &self.context.service_session_id,
        ) {
            (Some(p), _, _) => phone(e, "/phone", p).map(Target::Phone),
            (None, Some(id), _) => validate::uuid(e, "/enrollment_id", id).map(Target::Enrollment),
            (None, None, Some(s)) => {
                validate::uuid(e, "/context/service_session_id", s).map(Target::Session)
            }
            // The integration is the caller's: see `Proof::of_integration`.
            (None, None, None) => {
                self.context
                    .terminal_id
                    .clone()
                    .map(|terminal| Target::Terminal {
                        integration: uuid::Uuid::nil(),
                        terminal: terminal.into(),
                    })
            }
        };
        if !code_ok {
            return None;
        }
        Some(Proof::Code {
            code: code.to_string(),
            target: target?,
        })
    }
}

impl Validate for EnrollVerifyRequest {
    fn validate(&self, e: &mut Errors) {
        RequestMeta::validate_optional(&self.meta, e);
        self.context.validate(e);
        self.proof(e);
    }
}

/// A grant that could not be released, and why.
#[derive(Object, Serialize)]
pub struct SkippedGrant {
    pub grant: GrantItem,
    /// `expired`, `clawed_back` or `not_verified`.
    pub reason: String,
}

/// A wallet's balance after the release.
#[derive(Object, Serialize)]
pub struct WalletBalance {
    pub wallet_id: String,
    pub wallet_program_id: String,
    pub balance: BalanceView,
}

pub(super) fn released_parts(
    r: &Released,
) -> (Vec<GrantItem>, Vec<SkippedGrant>, Vec<WalletBalance>) {
    (
        r.grants.iter().map(grant_item).collect(),
        r.skipped
            .iter()
            .map(|(g, why)| SkippedGrant {
                grant: grant_item(g),
                reason: (*why).into(),
            })
            .collect(),
        r.wallets
            .iter()
            .map(|(w, b)| WalletBalance {
                wallet_id: w.id.to_string(),
                wallet_program_id: w.wallet_program_id.to_string(),
                balance: b.clone().into(),
            })
            .collect(),
    )
}

/// The customer is verified.
#[derive(Object, Serialize)]
pub struct EnrollVerifyResult {
    /// `VERIFIED`.
    pub state: String,
    pub wallet_user_id: String,
    pub enrollment_id: String,
    pub verified_at: String,
    /// Whether the `provider_customer_id` from initiate was linked now.
    pub provider_customer_id_linked: bool,
    /// LOCKED grants that released with the proof.
    pub released_grants: Vec<GrantItem>,
    pub released_promo_minor: i64,
    /// Actual money the merchant held in escrow after an earlier lapsed enrollment, now
    /// back in the wallet.
    pub escrow_returned_actual_minor: i64,
    pub wallets: Vec<WalletBalance>,
}

pub struct VerifyApi;

#[OpenApi(tag = "Tag::Enrollment")]
impl VerifyApi {
    /// Verify enrollment
    ///
    /// Exactly one of `verification_token` (from the SMS link) or `code` (6 ASCII digits;
    /// with `phone`, `enrollment_id` or the checkout session that started it). The
    /// identity becomes VERIFIED and, in the same transaction, its LOCKED grants release
    /// (promo_grant.released), escrowed money returns, the provider customer id is
    /// linked, and enrollment.verified is emitted. A retry with the same Idempotency-Key
    /// replays the success. A used token or code is CREDENTIAL_EXPIRED_OR_REPLAYED, a
    /// wrong code OTP_INVALID; five wrong codes lock the code (429 RATE_LIMITED with
    /// Retry-After until a resend may issue a new one).
    #[oai(
        path = "/enroll/verify",
        method = "post",
        operation_id = "enrollVerify"
    )]
    async fn verify(
        &self,
        state: Data<&AppState>,
        auth: TerminalJwtAuth,
        /// A UUID; retries with the same key replay the first response.
        #[oai(name = "Idempotency-Key")]
        key: Idempotent<'_>,
        body: JsonBody<EnrollVerifyRequest>,
    ) -> poem::Result<Reply<EnrollVerifyResult>> {
        let st = state.0.clone();
        let p = &auth.0;
        let b = &body.value;
        let mut e = Errors::default();
        let proof = b.proof(&mut e);
        e.finish()?;
        let proof = proof
            .ok_or_else(|| ApiError::internal("validated proof"))?
            .of_integration(p.integration_id);
        let prep = st.clone();
        let merchant = b.context.parsed().merchant_id;
        let clock = p.clock();
        key.run_prepared(
            &auth.0,
            &body,
            async move |_| {
                if let Proof::Code { code, target } = &proof {
                    enrollment::check_code(
                        &prep.db,
                        &prep.sealer,
                        merchant,
                        target.clone(),
                        code.clone(),
                        clock,
                    )
                    .await?;
                }
                Ok(proof)
            },
            async move |txn, acting, proof| {
                let who = in_context(acting, &b.context);
                let v = enrollment::verify(txn, &st.sealer, &who, &proof, who.now()).await?;
                let (released_grants, _, wallets) = released_parts(&v.released);
                Ok(Outcome::new(EnrollVerifyResult {
                    state: v.identity.state.as_str().to_string(),
                    wallet_user_id: v.identity.id.to_string(),
                    enrollment_id: v.enrollment.id.to_string(),
                    verified_at: ts(v.enrollment.verified_at.unwrap_or_else(Utc::now)),
                    provider_customer_id_linked: v.provider_customer_id_linked,
                    released_promo_minor: v.released.released_promo_minor(),
                    escrow_returned_actual_minor: v.released.escrow_returned_minor,
                    released_grants,
                    wallets,
                }))
            },
        )
        .await
    }
}
