//! The primary's machine dies (`tests/ha/kill-primary.sh`): SIGKILL to its Patroni and
//! every PostgreSQL process, after its WAL sender was held back `HA_STALL_MS`. Patroni
//! promotes the standby, HAProxy follows it, and no acknowledged payment is lost when the
//! cluster replicates synchronously (`tests/ha/drill.sh long` also runs it without).
use std::time::{Duration, Instant};

use serde_json::json;

use super::{Paying, Rig, first_payment_after, instant_of, rate, run_on, run_script, setting};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn when_the_primarys_machine_dies_the_replica_takes_over_and_no_acknowledged_payment_is_lost()
{
    let Some(rig) = Rig::from_env("tests/ha/drill.sh") else {
        return;
    };
    let secs = setting("HA_DRILL_SECS", 30);
    let stall_ms = setting("HA_STALL_MS", 1000);
    let paying = Paying::start(&rig, "failover").await;
    let started = paying.started;
    tokio::time::sleep(Duration::from_secs(secs / 3)).await;

    let killed = run_script(&rig, "kill-primary.sh", &[&stall_ms.to_string()]);
    let at = instant_of(killed["at_ms"].as_u64().unwrap());
    let acknowledged_before_kill = paying
        .load
        .outcomes
        .lock()
        .unwrap()
        .iter()
        .filter(|o| o.status == 200 && o.finished < at)
        .count();
    run_on(&paying.load, started, Duration::from_secs(secs), at).await;
    let ended = Instant::now();
    // Through HAProxy's read-write port: the new primary.
    let (outcomes, audit) = paying.audit(&rig.database_url).await;
    let load_secs = (ended - started).as_secs_f64();
    let resumed = first_payment_after(&outcomes, at);
    let line = format!(
        "failover: lost {}, duplicated {}, first payment after kill {}, longest retry {:.1}s",
        audit.lost.len(),
        audit.duplicates + audit.phantoms,
        resumed.map_or("never".into(), |d| format!("{:.1}s", d.as_secs_f64())),
        audit.longest_payment.as_secs_f64(),
    );
    let figures = audit.report(json!({
        "drill": "failover",
        "line": line,
        "synchronous_mode": rig.sync,
        "killed": killed["killed"],
        "replication_stalled_ms": stall_ms,
        "load_secs": load_secs,
        "acknowledged_before_kill": acknowledged_before_kill,
        "first_payment_after_kill_ms": resumed.map(|d| d.as_millis() as u64),
        "payments_per_sec_before_kill": rate(&outcomes, started, at),
        "payments_per_sec_after_resuming": resumed.map(|d| rate(&outcomes, at + d, ended)),
    }));
    rig.record(&figures);
    assert!(resumed.is_some(), "no payment was taken after the kill");
    audit.assert_money_held(20);
}
