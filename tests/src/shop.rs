//! A merchant with a terminal and funded customer wallets, for payment tests: the tenant,
//! an operator key (wallets are registered and funded with the operator tools), and a
//! terminal JWT for the merchant.
use serde_json::{Value, json};
use uuid::Uuid;

use crate::{Reply, TestApp, TestTenant, eventually, send};

pub struct Shop<'a> {
    pub app: &'a TestApp,
    pub tenant: TestTenant,
    pub operator_key: String,
    pub token: String,
    /// The terminal its token was minted for (and its requests' context names).
    pub terminal_id: Option<String>,
}

/// A customer's wallet as the operator tools return it.
#[derive(Clone, Debug)]
pub struct Customer {
    pub phone: String,
    pub wallet_id: String,
    pub wallet_user_id: String,
}

pub fn random_phone() -> String {
    // +49 15x, 11 random digits: unique per test run with overwhelming probability.
    let n = Uuid::new_v4().as_u128() % 100_000_000_000;
    format!("+4915{n:011}")
}

pub fn envelope(merchant: Uuid) -> Value {
    json!({
        "meta": {"partner_request_id": Uuid::new_v4().to_string(), "api_version": "2026-06-01"},
        "context": {"merchant_id": merchant.to_string(), "terminal_id": "till-1"},
    })
}

/// `base` with `extra`'s members; an object in both is merged member by member, so an
/// `extra` of `{"context": {"service_session_id": ..}}` keeps the envelope's merchant.
fn merge(mut base: Value, extra: Value) -> Value {
    if let (Some(b), Value::Object(e)) = (base.as_object_mut(), extra) {
        for (k, v) in e {
            let merged = match b.remove(&k) {
                Some(old @ Value::Object(_)) if v.is_object() => merge(old, v),
                _ => v,
            };
            b.insert(k, merged);
        }
    }
    base
}

/// A terminal token for `merchant` minted with `key`, signed for `terminal_id`.
pub async fn mint_token(
    app: &TestApp,
    key: &str,
    merchant: Uuid,
    terminal_id: Option<&str>,
) -> String {
    let mut body = envelope(merchant);
    match terminal_id {
        Some(t) => body["context"]["terminal_id"] = json!(t),
        None => {
            body["context"]
                .as_object_mut()
                .unwrap()
                .remove("terminal_id");
        }
    }
    let r = send(
        app.post("/auth/token")
            .header("x-api-key", key)
            .header("Idempotency-Key", Uuid::new_v4().to_string())
            .json(&body),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["data"]["token"].as_str().unwrap().to_string()
}

impl<'a> Shop<'a> {
    pub async fn open(app: &'a TestApp) -> Shop<'a> {
        let tenant = app.tenant(true).await;
        let operator_key = api::domain::operators::create(
            &app.server.state.db,
            "payments tests",
            app.server.state.config.bcrypt_cost,
        )
        .await
        .expect("operator")
        .operator_key;
        let r = send(
            app.post("/auth/token")
                .header("x-api-key", &tenant.platform_key)
                .header("Idempotency-Key", Uuid::new_v4().to_string())
                .json(&envelope(tenant.merchant_id)),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.body);
        let token = r.body["data"]["token"].as_str().unwrap().to_string();
        Shop {
            app,
            tenant,
            operator_key,
            token,
            terminal_id: Some("till-1".into()),
        }
    }

    /// The same merchant at another till: a token minted for `terminal_id` (none: a token
    /// that names no terminal).
    pub async fn at_terminal(&self, terminal_id: Option<&str>) -> Shop<'a> {
        self.till_of(self.tenant.clone(), terminal_id).await
    }

    /// A till of `tenant`'s merchant (sharing this shop's operator), its token minted with
    /// the tenant's platform key for `terminal_id`.
    async fn till_of(&self, tenant: TestTenant, terminal_id: Option<&str>) -> Shop<'a> {
        let token = mint_token(
            self.app,
            &tenant.platform_key,
            tenant.merchant_id,
            terminal_id,
        )
        .await;
        Shop {
            app: self.app,
            tenant,
            operator_key: self.operator_key.clone(),
            token,
            terminal_id: terminal_id.map(str::to_string),
        }
    }

    /// Another merchant of the same platform: a new merchant linked to this shop's
    /// integration, its terminal's token minted with this shop's platform key.
    pub async fn sibling(&self) -> Shop<'a> {
        let other = self.app.tenant(self.tenant.is_sandbox).await;
        let db = &self.app.server.state.db;
        api::store::tenancy::link_enterprise(db, self.tenant.integration_id, other.merchant_id)
            .await
            .expect("link the merchant");
        // The platform key's cached merchants predate the link.
        use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
        let keys = entities::api_key::Entity::find()
            .filter(entities::api_key::Column::IntegrationId.eq(self.tenant.integration_id))
            .all(db)
            .await
            .expect("the integration's keys");
        for k in keys {
            self.app
                .server
                .state
                .key_auth()
                .invalidate(k.id)
                .await
                .expect("uncache the key");
        }
        let tenant = TestTenant {
            integration_id: self.tenant.integration_id,
            platform_key: self.tenant.platform_key.clone(),
            ..other
        };
        self.till_of(tenant, Some("till-1")).await
    }

    /// This merchant through another platform integration, live or sandbox: a new
    /// integration linked to the merchant, its terminal's token minted with its key.
    pub async fn through_new_integration(&self, sandbox: bool) -> Shop<'a> {
        let other = self.app.tenant(sandbox).await;
        api::store::tenancy::link_enterprise(
            &self.app.server.state.db,
            other.integration_id,
            self.merchant(),
        )
        .await
        .expect("link the merchant");
        let tenant = TestTenant {
            merchant_id: self.tenant.merchant_id,
            brand_id: self.tenant.brand_id,
            branch_ids: self.tenant.branch_ids.clone(),
            wallet_program_id: self.tenant.wallet_program_id,
            ..other
        };
        self.till_of(tenant, Some("till-1")).await
    }

    pub fn merchant(&self) -> Uuid {
        self.tenant.merchant_id
    }

    /// A request body: the envelope plus `extra`.
    pub fn body(&self, extra: Value) -> Value {
        let mut base = envelope(self.merchant());
        match &self.terminal_id {
            Some(t) => base["context"]["terminal_id"] = json!(t),
            None => {
                base["context"]
                    .as_object_mut()
                    .unwrap()
                    .remove("terminal_id");
            }
        }
        merge(base, extra)
    }

    /// POST as the terminal with a fresh Idempotency-Key.
    pub async fn post(&self, path: &str, extra: Value) -> Reply {
        self.post_with_key(path, extra, &Uuid::new_v4().to_string())
            .await
    }

    /// POST a whole body (its envelope already edited) with a fresh Idempotency-Key.
    pub async fn post_body(&self, path: &str, body: &Value) -> Reply {
        send(
            self.app
                .post(path)
                .bearer_auth(&self.token)
                .header("Idempotency-Key", Uuid::new_v4().to_string())
                .json(body),
        )
        .await
    }

    pub async fn post_with_key(&self, path: &str, extra: Value, key: &str) -> Reply {
        send(
            self.app
                .post(path)
                .bearer_auth(&self.token)
                .header("Idempotency-Key", key)
                .json(&self.body(extra)),
        )
        .await
    }

    /// POST with the platform key (the control plane) and a fresh Idempotency-Key.
    pub async fn control(&self, path: &str, extra: Value) -> Reply {
        send(
            self.app
                .post(path)
                .header("x-api-key", &self.tenant.platform_key)
                .header("Idempotency-Key", Uuid::new_v4().to_string())
                .json(&self.body(extra)),
        )
        .await
    }

    /// GET with the platform key (the control plane).
    pub async fn read(&self, path: &str) -> Reply {
        send(
            self.app
                .get(path)
                .header("x-api-key", &self.tenant.platform_key),
        )
        .await
    }

    pub async fn operator(&self, path: &str, body: Value) -> Reply {
        send(
            self.app
                .post(path)
                .header("x-operator-key", &self.operator_key)
                .header("Idempotency-Key", Uuid::new_v4().to_string())
                .json(&body),
        )
        .await
    }

    /// Registers a customer (VERIFIED unless `state` says otherwise).
    pub async fn customer_in(&self, state: &str) -> Customer {
        let phone = random_phone();
        let r = self
            .operator(
                "/operator/wallets",
                json!({"merchant_id": self.merchant().to_string(), "phone": phone, "state": state, "reason": "test customer"}),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        Customer {
            phone,
            wallet_id: r.body["data"]["wallet_id"].as_str().unwrap().into(),
            wallet_user_id: r.body["data"]["wallet_user_id"].as_str().unwrap().into(),
        }
    }

    pub async fn customer(&self) -> Customer {
        self.customer_in("VERIFIED").await
    }

    /// Credits actual money by operator adjustment.
    pub async fn fund(&self, c: &Customer, amount: i64) -> Reply {
        let r = self.credit(c, amount).await;
        assert_eq!(r.status, 200, "{}", r.body);
        r
    }

    /// An operator's credit of actual money, whatever it answers.
    pub async fn credit(&self, c: &Customer, amount: i64) -> Reply {
        self.operator(
            &format!("/operator/wallets/{}/adjustments", c.wallet_id),
            json!({"direction": "credit", "amount_minor": amount, "currency": "EUR", "reason": "test funding"}),
        )
        .await
    }

    /// Issues a promotional grant expiring in `expires_in_secs`.
    pub async fn grant(
        &self,
        c: &Customer,
        amount: i64,
        state: &str,
        expires_in_secs: i64,
    ) -> String {
        let at = chrono::Utc::now() + chrono::Duration::seconds(expires_in_secs);
        let r = self
            .operator(
                &format!("/operator/wallets/{}/grants", c.wallet_id),
                json!({"amount_minor": amount, "currency": "EUR", "source": "CASHBACK", "state": state,
                       "expires_at": at.to_rfc3339(), "reason": "test grant"}),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        let grants = r.body["data"]["balance"]["promo_grants"]
            .as_array()
            .unwrap();
        grants
            .iter()
            .max_by_key(|g| g["grant_id"].as_str().unwrap().to_string())
            .unwrap()["grant_id"]
            .as_str()
            .unwrap()
            .to_string()
    }

    pub async fn balance(&self, c: &Customer) -> Value {
        let r = send(
            self.app
                .get(&format!("/operator/wallets/{}", c.wallet_id))
                .header("x-operator-key", &self.operator_key),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.body);
        r.body["data"]["balance"].clone()
    }

    /// Sends one OTP per order and reads every code back from the sandbox inbox.
    pub async fn otp_sessions(
        &self,
        c: &Customer,
        n: usize,
        amount: i64,
    ) -> Vec<(String, String, String)> {
        let mut sessions = Vec::new();
        for i in 0..n {
            let order = format!("C-{i}");
            let r = self
                .post(
                    "/payments/otp/send",
                    json!({"phone": c.phone, "amount_minor": amount, "currency": "EUR", "order_ref": order}),
                )
                .await;
            assert_eq!(r.status, 200, "{}", r.body);
            sessions.push((
                order,
                r.body["data"]["otp_session_id"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            ));
        }
        let url = format!(
            "/sandbox/messages?phone={}&limit=200",
            c.phone.replace('+', "%2B")
        );
        let msgs = eventually(
            std::time::Duration::from_secs(60),
            "every OTP SMS",
            || async {
                let r = send(
                    self.app
                        .get(&url)
                        .header("x-api-key", &self.tenant.platform_key),
                )
                .await;
                let msgs = r.body["data"].as_array().cloned().unwrap_or_default();
                (msgs.len() >= n).then_some(msgs)
            },
        )
        .await;
        sessions
            .into_iter()
            .map(|(order, session)| {
                let code = msgs
                    .iter()
                    .find(|m| {
                        m["body"]
                            .as_str()
                            .unwrap_or("")
                            .contains(&format!("order {order}."))
                    })
                    .and_then(|m| m["code"].as_str())
                    .expect("code for order")
                    .to_string();
                (order, session, code)
            })
            .collect()
    }

    /// A fresh QR payload for the customer.
    pub async fn qr(&self, c: &Customer) -> String {
        let r = self
            .post(
                "/qr/mint",
                json!({"customer": {"credential_type": "phone", "phone": c.phone}}),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        r.body["data"]["qr_payload"].as_str().unwrap().to_string()
    }

    /// Mints a QR nonce with a short code for `c` and returns the code.
    pub async fn short_code(&self, c: &Customer) -> String {
        let r = self
            .post(
                "/qr/mint",
                json!({"wallet_user_id": c.wallet_user_id, "include_short_code": true}),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        r.body["data"]["short_code"].as_str().unwrap().to_string()
    }

    /// Pays `amount` with a fresh QR nonce.
    pub async fn pay(&self, c: &Customer, amount: i64) -> Reply {
        let qr = self.qr(c).await;
        self.pay_with(json!({"type": "qr", "qr_payload": qr}), amount)
            .await
    }

    pub async fn pay_with(&self, credential: Value, amount: i64) -> Reply {
        self.post(
            "/payments",
            json!({"credential": credential, "amount_minor": amount, "currency": "EUR", "order_ref": "R-1"}),
        )
        .await
    }

    /// The newest sandbox SMS of `kind` (`otp`, `enrollment`) sent to `phone` after
    /// `since` messages of that kind had been sent, waiting for the job to deliver it.
    pub async fn sms_after(&self, phone: &str, kind: &str, since: usize) -> Value {
        let url = format!(
            "/sandbox/messages?phone={}&limit=200",
            phone.replace('+', "%2B")
        );
        crate::eventually(
            std::time::Duration::from_secs(20),
            "the sandbox SMS",
            || async {
                let r = send(
                    self.app
                        .get(&url)
                        .header("x-api-key", &self.tenant.platform_key),
                )
                .await;
                let msgs: Vec<Value> = r.body["data"]
                    .as_array()?
                    .iter()
                    .filter(|m| m["kind"] == kind)
                    .cloned()
                    .collect();
                // Newest first.
                (msgs.len() > since).then(|| msgs[0].clone())
            },
        )
        .await
    }

    /// How many sandbox SMS of `kind` went to `phone` so far.
    pub async fn sms_count(&self, phone: &str, kind: &str) -> usize {
        let url = format!(
            "/sandbox/messages?phone={}&limit=200",
            phone.replace('+', "%2B")
        );
        let r = send(
            self.app
                .get(&url)
                .header("x-api-key", &self.tenant.platform_key),
        )
        .await;
        r.body["data"]
            .as_array()
            .map_or(0, |m| m.iter().filter(|m| m["kind"] == kind).count())
    }

    /// Asserts the operator ledger check finds every posting balanced and every balance
    /// equal to its entries, for this merchant.
    pub async fn assert_ledger_consistent(&self) {
        let r = send(
            self.app
                .get(&format!(
                    "/operator/ledger/check?merchant_id={}",
                    self.merchant()
                ))
                .header("x-operator-key", &self.operator_key),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(
            r.body["data"]["consistent"], true,
            "ledger: {}",
            r.body["data"]
        );
    }
}

/// Subscribes a webhook endpoint at `url` to `types` with the shop's platform key; returns
/// the subscription id and its signing secret.
pub async fn subscribe(shop: &Shop<'_>, url: &str, types: Value) -> (String, String) {
    let r = shop
        .control(
            "/webhooks/subscriptions",
            json!({"url": url, "event_types": types, "description": "till events"}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    (
        r.body["data"]["subscription"]["subscription_id"]
            .as_str()
            .unwrap()
            .to_string(),
        r.body["data"]["secret"].as_str().unwrap().to_string(),
    )
}

/// A shop whose payments a webhook receiver hears about, and a funded customer's fresh QR
/// payload (1,000 minor units on the wallet): what the tests of whole processes pay with.
pub struct ReadyToPay<'a> {
    pub shop: Shop<'a>,
    pub receiver: crate::webhooks::Receiver,
    pub customer: Customer,
    pub qr: String,
}

pub async fn ready_to_pay(app: &TestApp) -> ReadyToPay<'_> {
    let shop = Shop::open(app).await;
    let receiver = crate::webhooks::Receiver::ok().await;
    subscribe(&shop, &receiver.url, json!(["payment.completed"])).await;
    let customer = shop.customer().await;
    shop.fund(&customer, 1_000).await;
    let qr = shop.qr(&customer).await;
    ReadyToPay {
        shop,
        receiver,
        customer,
        qr,
    }
}
