//! A webhook receiver for the wallet service, in Rust (poem). The steps every receiver
//! takes, as the spec gives them:
//!   1. read the raw body (the signature covers these exact bytes, never a re-encoding);
//!   2. parse `Service-Signature: t=<unix>,v1=<hex>[,v1=<hex>]`, reject a timestamp outside
//!      the tolerance (300 s);
//!   3. recompute HMAC-SHA256 over `<t>.<raw body>` with each known secret and compare with
//!      every v1 in constant time (`verify_slice`); during a rotation's overlap the service
//!      signs with the new and the previous secret, so either verifies;
//!   4. deduplicate on `event_id` (delivery is at least once): a duplicate is acknowledged
//!      with 2xx and not processed again;
//!   5. answer 2xx quickly.
//!
//! Environment: `WEBHOOK_SECRETS` (comma-separated `whsec_…`), `PORT` (127.0.0.1; 0 for any
//! free port; default 8090), `WEBHOOK_TOLERANCE_SECS` (default 300). Prints one JSON line
//! per request: `{"outcome":"listening","port":N}` first, then `processed`, `duplicate` or
//! `rejected`. A real receiver keeps the seen ids in its database, beside its processing.
use std::{
    collections::HashSet,
    sync::{Arc, Mutex},
    time::{SystemTime, UNIX_EPOCH},
};

use hmac::{Hmac, KeyInit, Mac};
use poem::{
    Body, EndpointExt, Request, Response, Route, Server, handler,
    http::StatusCode,
    listener::{Acceptor, Listener, TcpListener},
    post,
    web::Data,
};
use serde_json::{Value, json};
use sha2::Sha256;

struct Receiver {
    secrets: Vec<String>,
    tolerance_secs: i64,
    seen: Mutex<HashSet<String>>,
}

#[derive(Debug, PartialEq)]
enum Reason {
    MalformedSignature,
    StaleTimestamp,
    BadSignature,
}

impl Reason {
    fn as_str(&self) -> &'static str {
        match self {
            Reason::MalformedSignature => "malformed_signature",
            Reason::StaleTimestamp => "stale_timestamp",
            Reason::BadSignature => "bad_signature",
        }
    }
}

fn verify(
    header: &str,
    body: &[u8],
    secrets: &[String],
    now: i64,
    tolerance: i64,
) -> Result<(), Reason> {
    let mut t = None;
    let mut signatures = Vec::new();
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", v)) => t = v.parse::<i64>().ok(),
            Some(("v1", v)) => {
                signatures.push(hex::decode(v).map_err(|_| Reason::MalformedSignature)?)
            }
            _ => {}
        }
    }
    let t = t.ok_or(Reason::MalformedSignature)?;
    if signatures.is_empty() {
        return Err(Reason::MalformedSignature);
    }
    if (now - t).abs() > tolerance {
        return Err(Reason::StaleTimestamp);
    }
    for secret in secrets {
        for sig in &signatures {
            let mut mac =
                Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("any key length");
            mac.update(format!("{t}.").as_bytes());
            mac.update(body);
            if mac.verify_slice(sig).is_ok() {
                return Ok(());
            }
        }
    }
    Err(Reason::BadSignature)
}

fn emit(v: Value) {
    println!("{v}");
}

fn reply(status: StatusCode, v: Value) -> Response {
    Response::builder()
        .status(status)
        .content_type("application/json")
        .body(v.to_string())
}

#[handler]
async fn receive(req: &Request, body: Body, r: Data<&Arc<Receiver>>) -> Response {
    let Ok(body) = body.into_bytes().await else {
        return reply(StatusCode::BAD_REQUEST, json!({"error": "unreadable body"}));
    };
    let header = req
        .headers()
        .get("service-signature")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    if let Err(reason) = verify(header, &body, &r.secrets, now, r.tolerance_secs) {
        emit(json!({"outcome": "rejected", "reason": reason.as_str()}));
        return reply(
            StatusCode::BAD_REQUEST,
            json!({"error": "INVALID_SIGNATURE", "reason": reason.as_str()}),
        );
    }
    let Ok(event) = serde_json::from_slice::<Value>(&body) else {
        return reply(StatusCode::BAD_REQUEST, json!({"error": "not JSON"}));
    };
    let id = event["event_id"].as_str().unwrap_or_default().to_string();
    let duplicate = !r.seen.lock().expect("seen set").insert(id.clone());
    emit(json!({
        "outcome": if duplicate { "duplicate" } else { "processed" },
        "event_id": id,
        "event_type": event["event_type"],
    }));
    // Process the event here (once per event_id); answer fast, work later if slow.
    reply(StatusCode::OK, json!({"received": true}))
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let secrets: Vec<String> = std::env::var("WEBHOOK_SECRETS")
        .unwrap_or_default()
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    if secrets.is_empty() {
        eprintln!("set WEBHOOK_SECRETS to the subscription's signing secret(s)");
        std::process::exit(2);
    }
    let port: u16 = std::env::var("PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(8090);
    let tolerance_secs = std::env::var("WEBHOOK_TOLERANCE_SECS")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(300);
    let receiver = Arc::new(Receiver {
        secrets,
        tolerance_secs,
        seen: Mutex::default(),
    });
    let app = Route::new()
        .at("/*path", post(receive))
        .at("/", post(receive))
        .data(receiver);
    // Bound before printing, so the port printed is listening (PORT=0 picks a free one).
    let acceptor = TcpListener::bind(("127.0.0.1", port))
        .into_acceptor()
        .await?;
    let bound = acceptor
        .local_addr()
        .first()
        .and_then(|a| a.as_socket_addr().map(|s| s.port()))
        .unwrap_or(port);
    emit(json!({"outcome": "listening", "port": bound}));
    Server::new_with_acceptor(acceptor).run(app).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sign(secret: &str, t: i64, body: &[u8]) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
        mac.update(format!("{t}.").as_bytes());
        mac.update(body);
        hex::encode(mac.finalize().into_bytes())
    }

    #[test]
    fn either_secret_of_a_rotation_verifies_and_nothing_else_does() {
        let body = br#"{"event_id":"e1"}"#;
        let header = format!(
            "t=100,v1={},v1={}",
            sign("whsec_new", 100, body),
            sign("whsec_old", 100, body)
        );
        assert_eq!(
            verify(&header, body, &["whsec_new".into()], 100, 300),
            Ok(())
        );
        assert_eq!(
            verify(&header, body, &["whsec_old".into()], 100, 300),
            Ok(())
        );
        assert_eq!(
            verify(&header, body, &["whsec_other".into()], 100, 300),
            Err(Reason::BadSignature)
        );
        assert_eq!(
            verify(&header, b"{}", &["whsec_new".into()], 100, 300),
            Err(Reason::BadSignature)
        );
        assert_eq!(
            verify(&header, body, &["whsec_new".into()], 401, 300),
            Err(Reason::StaleTimestamp)
        );
        assert_eq!(
            verify("v1=00", body, &["whsec_new".into()], 100, 300),
            Err(Reason::MalformedSignature)
        );
    }
}
