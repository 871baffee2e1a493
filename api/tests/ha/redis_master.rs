//! A Redis master dies under load (SIGKILL): the one holding the integration's standing,
//! which every terminal request reads. Its replica takes the slots; meanwhile every refusal
//! is a retryable answer, and payments resume with no operator action.
use std::{
    process::Command,
    time::{Duration, Instant},
};

use serde_json::json;

use super::{Paying, Rig, first_payment_after, run_on, setting};

/// `redis-cli -p port args...`, its output.
fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .arg("-p")
        .arg(port.to_string())
        .args(args)
        .output()
        .expect("redis-cli runs");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The port of the live master serving `key`, asked of the first of `nodes` that answers.
fn master_of(nodes: &[u16], key: &str) -> u16 {
    let (node, slot) = nodes
        .iter()
        .find_map(|n| {
            let slot = redis_cli(*n, &["cluster", "keyslot", key])
                .parse::<u16>()
                .ok()?;
            Some((*n, slot))
        })
        .expect("a Redis node answers");
    for line in redis_cli(node, &["cluster", "nodes"]).lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 8 || !f[2].contains("master") || f[2].contains("fail") {
            continue;
        }
        let serves = f[8..].iter().any(|range| {
            let mut ends = range
                .split('-')
                .map(|n| n.parse::<u16>().unwrap_or(u16::MAX));
            let lo = ends.next().unwrap_or(u16::MAX);
            let hi = ends.next().unwrap_or(lo);
            (lo..=hi).contains(&slot)
        });
        if serves {
            let addr = f[1].split('@').next().unwrap();
            return addr.rsplit(':').next().unwrap().parse().unwrap();
        }
    }
    panic!("no live master serves slot {slot}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn when_a_redis_master_dies_under_load_its_replica_takes_over_and_nothing_is_lost() {
    let Some(rig) = Rig::from_env("tests/ha/drill.sh") else {
        return;
    };
    let secs = setting("HA_DRILL_SECS", 30);
    let paying = Paying::start(&rig, "redis").await;
    let started = paying.started;
    tokio::time::sleep(Duration::from_secs(secs / 3)).await;

    // The master holding the integration's standing, which every terminal request reads:
    // while it is down, every payment of this tenant is refused.
    let nodes: Vec<u16> = rig
        .redis_url
        .split(',')
        .filter_map(|u| u.rsplit(':').next()?.parse().ok())
        .collect();
    let prefix = paying
        .env
        .iter()
        .find(|(k, _)| k == "WALLET_REDIS_PREFIX")
        .map_or_else(
            || api::config::Config::default().redis_prefix,
            |(_, v)| v.clone(),
        );
    let standing = format!(
        "{prefix}{}",
        api::domain::credentials::standing::entry(paying.merchant.integration_id.parse().unwrap())
    );
    let victim = master_of(&nodes, &standing);
    let pid = std::fs::read_to_string(rig.state.join(format!("redis/{victim}/redis.pid")))
        .expect("the master's pid file");
    let at = Instant::now();
    let killed = Command::new("kill")
        .args(["-9", pid.trim()])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    let acknowledged_before_kill = paying.load.acknowledged();
    run_on(&paying.load, started, Duration::from_secs(secs), at).await;
    let refusals: Vec<(Instant, u16)> = paying
        .load
        .refusals
        .lock()
        .unwrap()
        .iter()
        .filter(|(t, _)| *t >= at)
        .copied()
        .collect();
    let (outcomes, audit) = paying.audit(&rig.database_url).await;
    let refused_for = refusals
        .iter()
        .map(|(t, _)| *t - at)
        .max()
        .unwrap_or_default();
    let resumed = first_payment_after(&outcomes, at);
    let mut by_status = std::collections::BTreeMap::<String, u64>::new();
    for (_, s) in &refusals {
        *by_status.entry(s.to_string()).or_default() += 1;
    }
    // A retryable refusal is 503 (Redis or a dependency unavailable), 409 (the same key in
    // progress) or 429; 0 is a transport error, 500 a failure nobody planned for.
    let unplanned = refusals
        .iter()
        .filter(|(_, s)| ![503, 409, 429].contains(s))
        .count();
    let new_master = master_of(&nodes, &standing);
    let line = format!(
        "redis failover: lost {}, duplicated {}, retryable 503s for {:.1}s ({} answers), payments resumed {} after the kill, no operator action",
        audit.lost.len(),
        audit.duplicates + audit.phantoms,
        refused_for.as_secs_f64(),
        refusals.len(),
        resumed.map_or("never".into(), |d| format!("{:.1}s", d.as_secs_f64())),
    );
    let figures = audit.report(json!({
        "drill": "redis",
        "line": line,
        "killed_master": victim,
        "new_master": new_master,
        "acknowledged_before_kill": acknowledged_before_kill,
        "retryable_answers": refusals.len(),
        "retryable_answers_by_status": by_status,
        "refused_for_ms": refused_for.as_millis() as u64,
        "first_payment_after_kill_ms": resumed.map(|d| d.as_millis() as u64),
    }));
    rig.record(&figures);
    assert_ne!(new_master, victim, "a replica took the dead master's slots");
    assert_eq!(
        unplanned, 0,
        "while the master was down every refusal was a retryable answer: {figures}"
    );
    assert!(resumed.is_some(), "no payment was taken after the kill");
    audit.assert_money_held(20);
}
