//! A webhook receiver on 127.0.0.1 for the tests, and the signature check a partner's
//! receiver does (the README's example follows the same steps): parse `t` and every `v1`,
//! reject a timestamp outside the tolerance, compare in constant time, dedup on event_id.
use std::{
    collections::HashSet,
    sync::{Arc, Mutex},
    time::Duration,
};

use hmac::{Hmac, KeyInit, Mac};
use poem::{Request, Response, http::StatusCode};
use serde_json::Value;
use sha2::Sha256;

/// Why a delivery is rejected (the spec's INVALID_SIGNATURE, receiver-side).
#[derive(Debug, PartialEq, Eq)]
pub enum Invalid {
    Malformed,
    StaleTimestamp,
    NoMatchingSignature,
}

/// Checks `Service-Signature` against the raw body with one secret: some `v1` must be the
/// HMAC-SHA256 of `<t>.<body>` and `t` within `tolerance_secs` of `now`.
pub fn verify(
    header: &str,
    body: &[u8],
    secret: &str,
    now: i64,
    tolerance_secs: i64,
) -> Result<(), Invalid> {
    let mut t = None;
    let mut sigs = Vec::new();
    for part in header.split(',') {
        match part.split_once('=') {
            Some(("t", v)) => t = v.parse::<i64>().ok(),
            Some(("v1", v)) => sigs.push(hex::decode(v).map_err(|_| Invalid::Malformed)?),
            _ => return Err(Invalid::Malformed),
        }
    }
    let t = t.ok_or(Invalid::Malformed)?;
    if (now - t).abs() > tolerance_secs {
        return Err(Invalid::StaleTimestamp);
    }
    for sig in sigs {
        let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("any key");
        mac.update(format!("{t}.").as_bytes());
        mac.update(body);
        // verify_slice compares in constant time.
        if mac.verify_slice(&sig).is_ok() {
            return Ok(());
        }
    }
    Err(Invalid::NoMatchingSignature)
}

/// One request the receiver got.
#[derive(Clone, Debug)]
pub struct Received {
    pub signature: String,
    /// The W3C trace context the delivery carried.
    pub traceparent: Option<String>,
    pub body: String,
    pub json: Value,
    /// What the receiver answered (0: it did not answer in time).
    pub answered: u16,
    /// When the request arrived.
    pub at: chrono::DateTime<chrono::Utc>,
}

impl Received {
    pub fn event_id(&self) -> String {
        self.json["event_id"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
}

/// How the receiver answers its `n`th request (0-based) for a body.
pub type Script = Arc<dyn Fn(usize, &Value) -> Answer + Send + Sync>;

#[derive(Clone, Copy, Debug)]
pub enum Answer {
    Status(u16),
    /// Answer 200 after this long (longer than the service's timeout: never in time).
    Hang(Duration),
}

#[derive(Clone)]
pub struct Receiver {
    pub url: String,
    got: Arc<Mutex<Vec<Received>>>,
    script: Arc<Mutex<Script>>,
}

impl Receiver {
    pub async fn start(script: Script) -> Receiver {
        let got: Arc<Mutex<Vec<Received>>> = Arc::default();
        let script = Arc::new(Mutex::new(script));
        let (g, s) = (got.clone(), script.clone());
        let ep = poem::endpoint::make(move |req: Request| {
            let (g, s) = (g.clone(), s.clone());
            async move {
                let signature = req
                    .header("service-signature")
                    .unwrap_or_default()
                    .to_string();
                let traceparent = req.header("traceparent").map(str::to_string);
                let at = chrono::Utc::now();
                let body = req.into_body().into_string().await.unwrap_or_default();
                let json: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
                let n = g.lock().unwrap().len();
                let answer = (s.lock().unwrap().clone())(n, &json);
                let status = match answer {
                    Answer::Status(code) => code,
                    Answer::Hang(d) => {
                        g.lock().unwrap().push(Received {
                            signature,
                            traceparent,
                            body,
                            json,
                            answered: 0,
                            at,
                        });
                        tokio::time::sleep(d).await;
                        return Response::builder().status(StatusCode::OK).finish();
                    }
                };
                g.lock().unwrap().push(Received {
                    signature,
                    traceparent,
                    body,
                    json,
                    answered: status,
                    at,
                });
                Response::builder()
                    .status(StatusCode::from_u16(status).unwrap_or(StatusCode::OK))
                    .finish()
            }
        });
        let port = crate::serve_endpoint(ep).await;
        Receiver {
            url: format!("http://127.0.0.1:{port}/hooks"),
            got,
            script,
        }
    }

    /// A receiver that answers 200 to everything.
    pub async fn ok() -> Receiver {
        Self::start(Arc::new(|_, _| Answer::Status(200))).await
    }

    pub fn answer_with(&self, script: Script) {
        *self.script.lock().unwrap() = script;
    }

    pub fn received(&self) -> Vec<Received> {
        self.got.lock().unwrap().clone()
    }

    /// Requests answered 2xx, deduplicated on event_id as a receiver must.
    pub fn accepted_event_ids(&self) -> HashSet<String> {
        self.received()
            .iter()
            .filter(|r| (200..300).contains(&r.answered))
            .map(Received::event_id)
            .collect()
    }
}
