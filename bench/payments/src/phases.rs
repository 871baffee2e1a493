//! The timed phases: many wallets paying with fresh QR credentials, and one hot wallet
//! paying with OTP credentials.
use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use anyhow::{Result, bail};
use futures::{StreamExt, TryStreamExt, stream};
use reqwest::Url;
use serde_json::json;

use crate::{
    PhaseResult, RunArgs, Wallet,
    client::{self, Prepared, Tally},
    ctx::{Cpu, Ctx},
    log, procfs,
};

fn payment_body(
    merchant: &str,
    credential: serde_json::Value,
    currency: &str,
    order_ref: &str,
) -> String {
    json!({
        "meta": client::meta(),
        "context": {"merchant_id": merchant},
        "credential": credential,
        "amount_minor": 1,
        "currency": currency,
        "order_ref": order_ref,
    })
    .to_string()
}

/// Many wallets, QR credentials: rounds of (mint one QR per wallet, untimed) then (pay with
/// all of them at concurrency `conc`, timed), until the timed seconds reach `--secs`.
pub(crate) async fn qr_phase(
    ctx: &mut Ctx,
    a: &RunArgs,
    pool: &[Wallet],
    conc: usize,
) -> Result<PhaseResult> {
    log(format!(
        "{}: payments phase, concurrency {conc}, {:.0} s in rounds of {} (QR minted per round)",
        a.target.mode,
        a.secs,
        pool.len()
    ));
    let url = Url::parse(&ctx.api.url("/payments"))?;
    let target = Duration::from_secs_f64(a.secs.max(0.1));
    ctx.phase_start();
    let (mut window, mut prep) = (Duration::ZERO, Duration::ZERO);
    let mut tally = Tally::default();
    let mut rounds = 0;
    let mut cpu = Cpu::zero();
    while window < target {
        ctx.check_alive()?;
        let bearer = ctx.bearer().await?;
        let t_prep = Instant::now();
        let merchant = &ctx.tenant.merchant_id;
        let currency = &ctx.tenant.currency;
        let api = &ctx.api;
        let bearer_ref = &bearer;
        let items: Vec<Prepared> = stream::iter(pool.iter().enumerate())
            .map(|(i, w)| async move {
                let qr = api.mint_qr(bearer_ref, merchant, &w.user_id).await?;
                let order = format!("bench-c{conc}-r{rounds}-{i}");
                anyhow::Ok(Prepared::new(payment_body(
                    merchant,
                    json!({"type": "qr", "qr_payload": qr}),
                    currency,
                    &order,
                )))
            })
            .buffer_unordered(a.mint_concurrency.max(1))
            .try_collect()
            .await?;
        prep += t_prep.elapsed();
        ctx.count(true)?;
        let cpu0 = ctx.cpu();
        let (t, w) =
            client::drive(&ctx.api.http, &url, &bearer, items, conc, target - window).await;
        let cpu1 = ctx.cpu();
        ctx.count(false)?;
        cpu = cpu.add(cpu0, cpu1);
        window += w;
        tally.merge(t);
        rounds += 1;
    }
    let r = ctx.finish(
        "payments",
        "qr",
        conc,
        pool.len(),
        rounds,
        window,
        tally,
        prep,
        cpu,
    );
    ctx.instructions(r)
}

/// The code and order of a sandbox OTP message: "... for order <order_ref>. Valid ...".
fn otp_of(m: &serde_json::Value) -> Option<(String, String)> {
    if m.get("kind")?.as_str()? != "otp" {
        return None;
    }
    let code = m.get("code")?.as_str()?.to_string();
    let body = m.get("body")?.as_str()?;
    let rest = &body[body.find(" for order ")? + " for order ".len()..];
    let order = rest.split(". Valid").next()?.trim_end_matches('.');
    Some((order.to_string(), code))
}

/// One wallet, OTP credentials: sends `--hot-otps` OTPs in batches (each batch's codes
/// harvested from the sandbox inbox before the next), then pays with them at
/// `--hot-concurrency` (timed) until they run out or `--hot-secs` passes.
pub(crate) async fn hot_phase(
    ctx: &mut Ctx,
    a: &RunArgs,
    phone: &str,
    run_tag: u32,
) -> Result<PhaseResult> {
    let conc = a.hot_concurrency;
    log(format!(
        "{}: hot wallet: sending {} OTPs in batches of {} and reading their codes",
        a.target.mode, a.hot_otps, a.otp_batch
    ));
    ctx.phase_start();
    let t_prep = Instant::now();
    let batch = a.otp_batch.clamp(1, 190);
    let mut creds: Vec<(String, String, String)> = Vec::with_capacity(a.hot_otps); // order, session, code
    let mut start = 0;
    while start < a.hot_otps {
        let end = (start + batch).min(a.hot_otps);
        let bearer = ctx.bearer().await?;
        let (api, merchant, cur) = (&ctx.api, &ctx.tenant.merchant_id, &ctx.tenant.currency);
        let bearer_ref = &bearer;
        let sent: Vec<(String, String)> = stream::iter(start..end)
            .map(|i| async move {
                let order = format!("hot-{run_tag:08x}-{i}");
                let session = api
                    .otp_send(bearer_ref, merchant, phone, 1, cur, &order)
                    .await?;
                anyhow::Ok((order, session))
            })
            .buffered(16)
            .try_collect()
            .await?;
        let mut want: HashMap<String, String> = sent.into_iter().collect();
        let mut codes: HashMap<String, String> = HashMap::with_capacity(want.len());
        let t_wait = Instant::now();
        loop {
            for m in ctx
                .api
                .sandbox_messages(&ctx.tenant.platform_key, phone)
                .await?
            {
                if let Some((order, code)) = otp_of(&m)
                    && want.contains_key(&order)
                {
                    codes.insert(order, code);
                }
            }
            if codes.len() == want.len() {
                break;
            }
            if t_wait.elapsed() > Duration::from_secs(120) {
                bail!(
                    "hot wallet: only {} of {} OTP messages arrived in the sandbox inbox within 120 s (is the job worker running?)",
                    codes.len(),
                    want.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for i in start..end {
            let order = format!("hot-{run_tag:08x}-{i}");
            let session = want.remove(&order).expect("sent");
            let code = codes.remove(&order).expect("harvested");
            creds.push((order, session, code));
        }
        start = end;
    }
    let prep = t_prep.elapsed();
    let prep_peak = ctx
        .api_proc
        .and_then(|p| procfs::status_kib(p.pid, "VmHWM"))
        .map(|k| format!("{:.1} MiB", k as f64 / 1024.0))
        .unwrap_or_else(|| "-".into());
    log(format!(
        "{}: hot wallet: {} OTPs ready in {:.1} s (API peak RSS so far in this phase: {prep_peak})",
        a.target.mode,
        creds.len(),
        prep.as_secs_f64()
    ));
    if prep > Duration::from_secs(240) {
        bail!(
            "hot wallet: sending the OTPs took {prep:?}; the first ones expire after 300 s (lower --hot-otps)"
        );
    }
    let merchant = ctx.tenant.merchant_id.clone();
    let currency = ctx.tenant.currency.clone();
    let items: Vec<Prepared> = creds
        .iter()
        .map(|(order, session, code)| {
            Prepared::new(payment_body(
                &merchant,
                json!({"type": "otp", "phone": phone, "otp_code": code, "otp_session_id": session}),
                &currency,
                order,
            ))
        })
        .collect();
    let bearer = ctx.bearer().await?;
    let url = Url::parse(&ctx.api.url("/payments"))?;
    ctx.count(true)?;
    let cpu0 = ctx.cpu();
    let (tally, window) = client::drive(
        &ctx.api.http,
        &url,
        &bearer,
        items,
        conc,
        Duration::from_secs_f64(a.hot_secs.max(0.1)),
    )
    .await;
    let cpu = Cpu::zero().add(cpu0, ctx.cpu());
    ctx.count(false)?;
    let r = ctx.finish("hot wallet", "otp", conc, 1, 1, window, tally, prep, cpu);
    ctx.instructions(r)
}
