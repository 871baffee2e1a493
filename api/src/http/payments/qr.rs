//! `POST /qr/mint`: a single-use QR nonce (and short code) for the customer's wallet.
use crate::domain::credentials::scope::Acting;
use crate::http::pipeline::fields::UuidText;
use crate::http::pipeline::fields::alternatives::{Alternatives, Branch};
use poem::web::Data;
use poem_openapi::{Object, OpenApi};
use serde::{Deserialize, Serialize};

use crate::http::payments::CustomerCredential;

use crate::{
    domain::{
        customers::IdentityCredential,
        payments::{self, Customer},
        validate::{self, Errors},
    },
    http::{
        openapi::tags::Tag,
        pipeline::auth::TerminalJwtAuth,
        pipeline::body::{JsonBody, Validate},
        pipeline::common::{RequestContext, RequestMeta, in_context, optional_uuid, phone, ts},
        pipeline::mutation::Idempotent,
        pipeline::reply::Reply,
    },
    idempotency::Outcome,
    state::AppState,
};

/// Mint a single-use QR nonce (and optionally a short code) for a customer's wallet. The
/// customer is the one a cashier identified in the checkout session that
/// `context.service_session_id` names; the wallet app (no session) names the customer
/// with `customer` or `wallet_user_id` instead.
#[derive(Object, Deserialize, Debug, Clone)]
pub struct QrMintRequest {
    #[serde(default)]
    pub meta: RequestMeta,
    #[serde(default)]
    pub context: RequestContext,
    /// The customer, by identity credential, when no identified checkout session names
    /// them. At most one of `customer` and `wallet_user_id`.
    #[oai(nullable)]
    pub customer: Option<CustomerCredential>,
    /// The customer, by wallet identity id (from identification), when no identified
    /// checkout session names them.
    #[oai(nullable)]
    pub wallet_user_id: Option<UuidText>,
    /// Also return a 5-character alphanumeric code the customer can read out. Default
    /// false.
    #[serde(default)]
    #[oai(default)]
    pub include_short_code: bool,
    /// Picks the program when the customer has wallets in several (default: the program
    /// the session's identification chose).
    #[oai(nullable)]
    pub wallet_program_id: Option<UuidText>,
}

/// A mint names its customer through the checkout session, `customer` or `wallet_user_id`.
pub const MINT_CUSTOMER: Alternatives = Alternatives {
    schema: "QrMintRequest",
    branches: &[
        Branch {
            given: &["context/service_session_id"],
            absent: &[],
        },
        Branch {
            given: &["customer"],
            absent: &[],
        },
        Branch {
            given: &["wallet_user_id"],
            absent: &[],
        },
    ],
    field: "/context/service_session_id",
    issue: "required",
    message: "name the checkout session the customer was identified in, or the customer (customer or wallet_user_id)",
};

/// ... and never by both `customer` and `wallet_user_id`.
pub const MINT_ONE_CUSTOMER: Alternatives = Alternatives {
    schema: "QrMintRequest",
    branches: &[
        Branch {
            given: &[],
            absent: &["customer"],
        },
        Branch {
            given: &[],
            absent: &["wallet_user_id"],
        },
    ],
    field: "/customer",
    issue: "at_most_one",
    message: "give at most one of customer or wallet_user_id",
};

impl QrMintRequest {
    /// The customer the body names, if any; `None` leaves it to the checkout session.
    fn customer(&self, e: &mut Errors) -> Option<Customer> {
        let given = |m: &str| match m {
            "customer" => self.customer.is_some(),
            "wallet_user_id" => self.wallet_user_id.is_some(),
            _ => self.context.service_session_id.is_some(),
        };
        if !(MINT_CUSTOMER.check(e, "", given) && MINT_ONE_CUSTOMER.check(e, "", given)) {
            return None;
        }
        match (&self.customer, &self.wallet_user_id) {
            (None, Some(id)) => validate::uuid(e, "/wallet_user_id", id).map(Customer::WalletUser),
            (Some(c), None) => {
                c.credential_type.check(e, "/customer/credential_type");
                phone(e, "/customer/phone", &c.phone).map(Customer::Phone)
            }
            _ => None,
        }
    }
}

impl Validate for QrMintRequest {
    fn validate(&self, e: &mut Errors) {
        self.meta.validate(e);
        self.context.validate(e);
        self.customer(e);
        optional_uuid(e, "/wallet_program_id", &self.wallet_program_id);
    }
}

/// A QR nonce: render `qr_payload` as a QR code. Single use, valid 5 minutes; a new mint
/// for the same wallet replaces it.
#[derive(Object, Serialize)]
pub struct QrMintResult {
    pub qr_payload: String,
    /// 5 characters, present when requested.
    #[oai(nullable)]
    pub short_code: Option<String>,
    pub wallet_program_id: String,
    pub expires_at: String,
    pub expires_in: i64,
}

pub struct QrApi;

#[OpenApi(tag = "Tag::Payments")]
impl QrApi {
    /// Mint a QR nonce
    ///
    /// A single-use nonce bound to the customer's wallet, valid 5 minutes, optionally with a
    /// 5-character short code (`include_short_code`). The customer is the one identified in
    /// the checkout session `context.service_session_id` names: a session of another
    /// tenant is NOT_FOUND, of another branch or terminal FORBIDDEN, not yet IDENTIFIED or
    /// already closed VALIDATION_ERROR on `/context/service_session_id`. Without a session
    /// (the wallet app), name the customer with `customer` or `wallet_user_id`; with both,
    /// they must be the session's customer. A new mint replaces the previous nonce (a
    /// payment already in flight with it still completes). A same-key retry within the TTL
    /// returns the same nonce.
    #[oai(path = "/qr/mint", method = "post", operation_id = "mintQr")]
    async fn qr_mint(
        &self,
        state: Data<&AppState>,
        auth: TerminalJwtAuth,
        /// A UUID; retries with the same key replay the first response.
        #[oai(name = "Idempotency-Key")]
        key: Idempotent<'_>,
        body: JsonBody<QrMintRequest>,
    ) -> poem::Result<Reply<QrMintResult>> {
        let st = state.0.clone();
        let principal = auth.0.clone();
        let b = &body.value;
        let mut e = Errors::default();
        let customer = b.customer(&mut e);
        let program = optional_uuid(&mut e, "/wallet_program_id", &b.wallet_program_id);
        let session = optional_uuid(
            &mut e,
            "/context/service_session_id",
            &b.context.service_session_id,
        );
        e.finish()?;
        let req = payments::QrMint {
            customer,
            service_session_id: session,
            with_short_code: b.include_short_code,
            wallet_program_id: program,
        };
        let clock = principal.clock();
        // A phone resolves a wallet: it counts as an identification.
        let phone = match &req.customer {
            Some(Customer::Phone(phone)) => Some(IdentityCredential::Phone(phone.clone())),
            _ => None,
        };
        let (shared, caller_key) = (state.0, &auth.0);
        let guard = async move |acting: &Acting| {
            if let Some(phone) = &phone {
                shared
                    .guard()
                    .before_identifying(caller_key, acting, phone)
                    .await?;
            }
            Ok(())
        };
        key.run_prepared(&auth.0, &body, guard, async move |txn, acting, ()| {
            let now = clock.now();
            let who = in_context(acting, &b.context);
            let m = payments::mint_qr(txn, &st.sealer, &who, req, now).await?;
            let mut out = Outcome::new(QrMintResult {
                qr_payload: m.qr_payload.clone(),
                short_code: m.short_code.clone(),
                wallet_program_id: m.wallet.wallet_program_id.to_string(),
                expires_at: ts(m.nonce.expires_at),
                expires_in: (m.nonce.expires_at - now).num_seconds(),
            })
            .with_secret(m.qr_payload);
            if let Some(code) = m.short_code {
                out = out.with_secret(code);
            }
            Ok(out)
        })
        .await
    }
}
