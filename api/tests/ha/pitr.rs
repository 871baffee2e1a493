//! Point-in-time recovery (`tests/ha/pitr.sh`): a full pgBackRest backup while the clients
//! pay, an instant T noted, the clients paying on, then a new cluster restored to T
//! (`tests/ha/restore.sh`). In it: every payment acknowledged before T, once and under its
//! id; none begun after T; balances that match the payments present; the ledger check; a
//! schema `wallet-api migrate` finds current.
use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use serde_json::json;
use tests::paying::{Outcome, Stored, cli, rows, set_env, wrong_balances};

use super::{Paying, Rig, run_script, setting};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restore_to_an_instant_holds_every_payment_acknowledged_before_it_and_none_begun_after() {
    let Some(rig) = Rig::from_env("tests/ha/pitr.sh") else {
        return;
    };
    let secs = setting("HA_DRILL_SECS", 30);
    let Paying {
        env,
        _service,
        merchant,
        load,
        started,
        ..
    } = Paying::start(&rig, "pitr").await;
    tokio::time::sleep(Duration::from_secs(3)).await;

    // A full backup while the clients pay.
    let backup = run_script(&rig, "backup.sh", &["full"]);
    let paid_during_backup = load.acknowledged();
    tokio::time::sleep(Duration::from_secs(3)).await;
    // The instant to restore to, in the database's terms (one clock on this machine).
    // Between two readings of the monotonic clock: a payment acknowledged before the first
    // committed before T, one begun after the second committed after it.
    let just_before = Instant::now();
    let target_wall = chrono::Utc::now();
    let target = Instant::now();
    let rest = Duration::from_secs(secs).saturating_sub(started.elapsed());
    tokio::time::sleep(rest.max(Duration::from_secs(5))).await;
    let outcomes = load.finish().await;

    // The WAL holding commits after the target must be archived before the restore.
    let db = sea_orm::Database::connect(&rig.database_url).await.unwrap();
    let segment: String = rows(&db, "SELECT pg_walfile_name(pg_switch_wal()) AS segment").await[0]
        .try_get("", "segment")
        .unwrap();
    tests::eventually(Duration::from_secs(60), "the WAL archived", || async {
        let r = rows(&db, "SELECT last_archived_wal FROM pg_stat_archiver").await;
        let last: Option<String> = r[0].try_get("", "last_archived_wal").unwrap();
        last.filter(|l| l[8..] >= segment[8..]).map(|_| ())
    })
    .await;

    let target_arg = target_wall.format("%Y-%m-%d %H:%M:%S%.6f+00").to_string();
    let restored = run_script(&rig, "restore.sh", &[&target_arg]);
    let restored_url = format!(
        "postgres://postgres@127.0.0.1:{}/wallet",
        restored["port"].as_u64().unwrap()
    );
    let copy = sea_orm::Database::connect(&restored_url).await.unwrap();
    let Stored {
        by_key: present,
        debited,
    } = Stored::read(&copy, &merchant.merchant_id).await;
    let refused: Vec<u16> = outcomes
        .iter()
        .filter(|o| o.status != 200)
        .map(|o| o.status)
        .collect();
    let before: Vec<&Outcome> = outcomes
        .iter()
        .filter(|o| o.status == 200 && o.finished < just_before)
        .collect();
    let after: Vec<&Outcome> = outcomes.iter().filter(|o| o.started > target).collect();
    let in_flight: Vec<&Outcome> = outcomes
        .iter()
        .filter(|o| o.finished >= just_before && o.started <= target)
        .collect();
    // A row is a payment some client was answered for, once, under the id it was given.
    let answered: HashMap<&str, &Outcome> = outcomes.iter().map(|o| (o.key.as_str(), o)).collect();
    let misplaced = present
        .iter()
        .filter(|(key, ids)| {
            answered
                .get(key.as_str())
                .is_some_and(|o| ids.len() != 1 || o.payment_id.as_deref() != Some(ids[0].as_str()))
        })
        .count();
    let missing_before = before
        .iter()
        .filter(|o| present.get(&o.key) != Some(&vec![o.payment_id.clone().unwrap()]))
        .count();
    let present_after = after
        .iter()
        .filter(|o| present.contains_key(&o.key))
        .count();
    let in_flight_present = in_flight
        .iter()
        .filter(|o| present.contains_key(&o.key))
        .count();
    let unknown = present
        .keys()
        .filter(|k| !answered.contains_key(k.as_str()))
        .count();
    let wrong_balances = wrong_balances(&copy, &merchant, |wallet| {
        debited.get(wallet).copied().unwrap_or(0)
    })
    .await;
    let mut copy_env = env.clone();
    set_env(&mut copy_env, "WALLET_DATABASE_URL", restored_url.clone());
    let ledger = cli(&["ledger", "check"], &copy_env);
    let migrate = cli(&["migrate"], &copy_env);
    let migrate_said = String::from_utf8_lossy(&migrate.stderr).trim().to_string();
    let took_ms =
        restored["restore_ms"].as_u64().unwrap() + restored["replay_ms"].as_u64().unwrap();
    let line = format!(
        "pitr: restored to T in {:.1}s; {} acknowledged before T present, {} missing; {} of {} begun after T present; {} of {} in flight at T present",
        took_ms as f64 / 1000.0,
        before.len() - missing_before,
        missing_before,
        present_after,
        after.len(),
        in_flight_present,
        in_flight.len(),
    );
    let figures = json!({
        "drill": "pitr",
        "line": line,
        "target": target_arg,
        "backup": backup,
        "acknowledged_while_backing_up": paid_during_backup,
        "restore_ms": restored["restore_ms"],
        "replay_ms": restored["replay_ms"],
        "acknowledged_before_target": before.len(),
        "missing_before_target": missing_before,
        "begun_after_target": after.len(),
        "present_after_target": present_after,
        "in_flight_at_target": in_flight.len(),
        "in_flight_present": in_flight_present,
        "stored_but_never_sent": unknown,
        "stored_twice_or_under_another_id": misplaced,
        "refused_payments": refused.len(),
        "wrong_balances": wrong_balances.len(),
        "ledger_check_passed": ledger.status.success(),
        "migrate": migrate_said,
    });
    rig.record(&figures);
    assert!(before.len() >= 20, "too little paid before T: {figures}");
    assert!(!after.is_empty(), "nothing paid after T: {figures}");
    assert_eq!(missing_before, 0, "{figures}");
    assert_eq!(present_after, 0, "{figures}");
    assert_eq!(unknown, 0, "{figures}");
    assert!(refused.is_empty(), "payments refused: {refused:?}");
    assert_eq!(misplaced, 0, "{figures}");
    assert!(wrong_balances.is_empty(), "{wrong_balances:?}");
    assert!(
        ledger.status.success(),
        "ledger check on the restored copy: {}{}",
        String::from_utf8_lossy(&ledger.stdout),
        String::from_utf8_lossy(&ledger.stderr)
    );
    assert!(migrate.status.success(), "{migrate_said}");
    assert!(
        migrate_said.contains("migrations applied: 0 of"),
        "the restored schema is current: {migrate_said}"
    );
}
