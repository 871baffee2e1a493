//! A read replica (docs/scaling.md, section 2): the transaction and event feeds read there
//! while it keeps up, still seeing every write committed before the request; money reads
//! never do; a replica that falls behind or goes away sends those reads back to the
//! primary without a failed request. Each test runs its own primary and a real streaming
//! replica of it (`pg_basebackup -R`), so it may pause or stop the replica.
use std::time::{Duration, Instant};

use api::config::Pooler;
use sea_orm::{ConnectionTrait, Database, DatabaseConnection};
use tests::{Mode, TestApp, cluster::PrivateCluster, mode, shop::Shop};

struct Rig {
    app: TestApp,
    replica: PrivateCluster,
    replica_sql: DatabaseConnection,
    primary_sql: DatabaseConnection,
    _primary: PrivateCluster,
}

impl Rig {
    /// The app's replica probe's last decision.
    fn probe_says_usable(&self) -> bool {
        let replica = self.app.server.state.replica.as_ref().expect("a replica");
        replica.usable()
    }
}

async fn rig(max_lag_ms: u64) -> Option<Rig> {
    rig_with(max_lag_ms, &[]).await
}

/// A rig whose primary runs with `settings` (`ALTER SYSTEM` statements) from the start.
async fn rig_with(max_lag_ms: u64, settings: &[&str]) -> Option<Rig> {
    if mode() != Mode::Production {
        eprintln!("production mode only: a replica streams from PostgreSQL");
        return None;
    }
    let primary = PrivateCluster::start();
    if !settings.is_empty() {
        let sql = Database::connect(primary.url("postgres")).await.unwrap();
        for s in settings {
            sql.execute_unprepared(s).await.unwrap();
        }
        sql.execute_unprepared("SELECT pg_reload_conf()")
            .await
            .unwrap();
        sql.close().await.unwrap();
    }
    let replica = PrivateCluster::replica_of(&primary);
    let (p, r) = (primary.url("postgres"), replica.url("postgres"));
    let app = TestApp::spawn_isolated(false, move |c| {
        c.database_url = Some(p);
        c.database_pooler = Pooler::None;
        c.database_direct_url = None;
        c.database_replica_url = Some(r);
        c.replica_max_lag_ms = max_lag_ms;
    })
    .await;
    let replica_sql = Database::connect(replica.url("postgres")).await.unwrap();
    let primary_sql = Database::connect(primary.url("postgres")).await.unwrap();
    Some(Rig {
        app,
        replica,
        replica_sql,
        primary_sql,
        _primary: primary,
    })
}

/// A read of the integration's `path` under `/{integrationId}`: where it was served, and
/// its data.
async fn served_read(shop: &Shop<'_>, path: &str) -> (String, serde_json::Value) {
    let r = shop
        .read(&format!("/{}{path}", shop.tenant.integration_id))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let served = r.body["meta"]["capabilities"]["served_from"]
        .as_str()
        .expect("the read says where it was served")
        .to_string();
    (served, r.body["data"].clone())
}

/// Where the feed was served, and how many movements it listed.
async fn feed(shop: &Shop<'_>) -> (String, usize) {
    let (served, data) = served_read(shop, "/transactions?limit=100").await;
    (served, data.as_array().unwrap().len())
}

async fn eventually_served_from(shop: &Shop<'_>, want: &str) -> usize {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let (served, n) = feed(shop).await;
        if served == want {
            return n;
        }
        assert!(
            Instant::now() < until,
            "the feed was never served from the {want}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn the_feed_reads_the_replica_and_still_sees_the_callers_own_writes() {
    let Some(rig) = rig(5_000).await else { return };
    let shop = Shop::open(&rig.app).await;
    let c = shop.customer().await;
    shop.fund(&c, 10_000).await;
    eventually_served_from(&shop, "replica").await;
    for i in 1..=5 {
        let pay = shop.pay(&c, 100).await;
        assert_eq!(pay.status, 200, "{}", pay.body);
        // Read straight after the write, from the replica: it is there.
        let (served, n) = feed(&shop).await;
        assert_eq!(served, "replica");
        assert_eq!(
            n, i,
            "{i} payments (the funding is an adjustment, not in the feed)"
        );
        let id = pay.body["data"]["payment_id"].as_str().unwrap();
        let (served, _) = served_read(&shop, &format!("/transactions/{id}")).await;
        assert_eq!(served, "replica");
    }
    // A balance is a money read: the primary's, and no hint about replicas.
    let balance = shop.balance(&c).await;
    assert_eq!(balance["actual_minor"], 9_500, "{balance}");
    assert!(rig.probe_says_usable());
    // The gauge is one per process and other tests' replicas set it too: its name, not its
    // value, is what this test can tell.
    let metrics = reqwest::get(format!("http://{}/metrics", rig.app.server.metrics_addr))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("wallet_db_replica_usable "), "{metrics}");
    assert!(metrics.contains("wallet_db_lagging_reads_total{served_from=\"replica\"}"));
    rig.app.stop().await;
}

#[tokio::test]
async fn the_feed_sees_a_write_whose_commit_is_not_yet_written_out_on_the_primary() {
    // With synchronous_commit off a commit answers while its WAL is still in the primary's
    // buffers; the WAL writer writes it out (and so sends it on) later. Here the WAL writer
    // is held still: the replica has replayed all the primary has written out, yet lacks
    // the caller's payments.
    let Some(rig) = rig_with(5_000, &["ALTER SYSTEM SET synchronous_commit = off"]).await else {
        return;
    };
    let shop = Shop::open(&rig.app).await;
    let c = shop.customer().await;
    shop.fund(&c, 10_000).await;
    eventually_served_from(&shop, "replica").await;
    let held = HeldWalWriter::hold(&rig.primary_sql).await;
    for i in 1..=3 {
        let pay = shop.pay(&c, 100).await;
        assert_eq!(pay.status, 200, "{}", pay.body);
        let (served, n) = feed(&shop).await;
        assert_eq!(
            (served.as_str(), n),
            ("primary", i),
            "payment {i} is listed, by the primary: the replica cannot have it"
        );
    }
    drop(held);
    assert_eq!(eventually_served_from(&shop, "replica").await, 3);
    rig.app.stop().await;
}

/// The primary's WAL writer stopped (SIGSTOP) until dropped.
struct HeldWalWriter(String);

impl HeldWalWriter {
    async fn hold(primary: &DatabaseConnection) -> HeldWalWriter {
        let row = primary
            .query_one_raw(sea_orm::Statement::from_string(
                primary.get_database_backend(),
                "SELECT pid::text AS pid FROM pg_stat_activity WHERE backend_type = 'walwriter'",
            ))
            .await
            .unwrap()
            .expect("the primary has a WAL writer");
        let pid: String = row.try_get("", "pid").unwrap();
        signal("-STOP", &pid);
        HeldWalWriter(pid)
    }
}

impl Drop for HeldWalWriter {
    fn drop(&mut self) {
        signal("-CONT", &self.0);
    }
}

fn signal(sig: &str, pid: &str) {
    let status = std::process::Command::new("kill")
        .args([sig, pid])
        .status()
        .unwrap();
    assert!(status.success(), "kill {sig} {pid}");
}

#[tokio::test]
async fn a_replica_that_stops_replaying_leaves_the_feed_to_the_primary_until_it_catches_up() {
    let Some(rig) = rig(1_000).await else { return };
    let shop = Shop::open(&rig.app).await;
    let c = shop.customer().await;
    shop.fund(&c, 10_000).await;
    eventually_served_from(&shop, "replica").await;

    pause_replay(&rig.replica_sql).await;
    let pay = shop.pay(&c, 300).await;
    assert_eq!(pay.status, 200, "{}", pay.body);
    // The replica has not replayed the payment: the primary answers, with it.
    let (served, n) = feed(&shop).await;
    assert_eq!((served.as_str(), n), ("primary", 1));
    // Past the lag bound the probe stops sending requests there at all.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert!(!rig.probe_says_usable());

    rig.replica_sql
        .execute_unprepared("SELECT pg_wal_replay_resume()")
        .await
        .unwrap();
    assert_eq!(eventually_served_from(&shop, "replica").await, 1);
    rig.app.stop().await;
}

/// Stops the replica's replay, and waits until it has stopped.
async fn pause_replay(replica: &DatabaseConnection) {
    replica
        .execute_unprepared("SELECT pg_wal_replay_pause()")
        .await
        .unwrap();
    // The call only asks: replay stops at its next check, which may come after a write
    // that follows was replayed. Wait until it has stopped.
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let row = replica
            .query_one_raw(sea_orm::Statement::from_string(
                replica.get_database_backend(),
                "SELECT pg_get_wal_replay_pause_state() AS state",
            ))
            .await
            .unwrap()
            .expect("a row");
        let state: String = row.try_get("", "state").unwrap();
        if state == "paused" {
            break;
        }
        assert!(Instant::now() < until, "replay did not pause: {state}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn an_id_learnt_from_another_caller_is_never_not_found_while_the_replica_catches_up() {
    // Max lag high: the paused replica stays usable for this test's few seconds.
    let Some(rig) = rig(60_000).await else { return };
    let shop = Shop::open(&rig.app).await;
    let other = Shop::open(&rig.app).await;
    let c = other.customer().await;
    other.fund(&c, 1_000).await;
    eventually_served_from(&shop, "replica").await;
    pause_replay(&rig.replica_sql).await;
    let theirs = other.pay(&c, 100).await;
    let theirs = theirs.body["data"]["payment_id"].as_str().unwrap();
    // The replica lacks the payment; the caller's own read would not wait for it. The
    // detail still answers as the spec says: another integration's transaction is 403.
    let r = shop
        .read(&format!(
            "/{}/transactions/{theirs}",
            shop.tenant.integration_id
        ))
        .await;
    assert_eq!((r.status, r.code()), (403, "FORBIDDEN"), "{}", r.body);
    // Its owner's reads wait for its own write: the primary serves them.
    let (served, _) = served_read(&other, &format!("/transactions/{theirs}")).await;
    assert_eq!(served, "primary");
    let (served, n) = feed(&other).await;
    assert_eq!((served.as_str(), n), ("primary", 1));
    rig.replica_sql
        .execute_unprepared("SELECT pg_wal_replay_resume()")
        .await
        .unwrap();
    assert_eq!(eventually_served_from(&other, "replica").await, 1);
    rig.app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_stopped_mid_run_fails_no_request_and_serves_again_once_back() {
    let Some(rig) = rig(5_000).await else { return };
    let shop = Shop::open(&rig.app).await;
    let c = shop.customer().await;
    shop.fund(&c, 10_000).await;
    eventually_served_from(&shop, "replica").await;

    // Readers run while the replica crashes under them, and on for a second after.
    let crashed = std::sync::atomic::AtomicBool::new(false);
    let reads = async {
        let mut served = Vec::new();
        let mut after = None;
        loop {
            served.push(feed(&shop).await.0);
            if crashed.load(std::sync::atomic::Ordering::Relaxed) {
                let since = *after.get_or_insert_with(Instant::now);
                if since.elapsed() > Duration::from_secs(1) {
                    return served;
                }
            }
        }
    };
    let replica = &rig.replica;
    let crash = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        // Off the test's one runtime thread, so the readers go on meanwhile.
        tokio::task::block_in_place(|| replica.stop_immediate());
        crashed.store(true, std::sync::atomic::Ordering::Relaxed);
        shop.pay(&c, 100).await
    };
    let (served, pay) = tokio::join!(reads, crash);
    assert_eq!(pay.status, 200, "{}", pay.body);
    assert!(served.iter().any(|s| s == "replica"), "{served:?}");
    assert_eq!(
        served.last().map(String::as_str),
        Some("primary"),
        "{served:?}"
    );
    let (_, n) = feed(&shop).await;
    assert_eq!(
        n, 1,
        "the payment made while the replica was down is listed"
    );

    rig.replica.start_server();
    assert_eq!(eventually_served_from(&shop, "replica").await, 1);
    rig.app.stop().await;
}

/// Where feed reads were served during a payment load.
#[derive(Debug, Default)]
struct Shares {
    /// Reads by the integrations that were paying (each read straight after their latest
    /// payments): (served by the replica, all).
    payers: (usize, usize),
    /// Reads by integrations that paid before the load and only read during it.
    readers: (usize, usize),
}

/// Payments flow for `run` on two integrations, two payers each, while the feeds of those
/// two and of two more integrations (which paid before the load, then only read) are read
/// over and over. Every read lists the last payment its integration completed before the
/// read began, whichever database served it.
async fn feed_reads_under_payments(app: &TestApp, run: Duration) -> Shares {
    use std::sync::{
        Mutex,
        atomic::{AtomicBool, Ordering},
    };
    let shops = [
        Shop::open(app).await,
        Shop::open(app).await,
        Shop::open(app).await,
        Shop::open(app).await,
    ];
    // Shops 0 and 1 pay throughout, each with two wallets (a wallet's new QR code
    // replaces its last one); shops 2 and 3 pay once now.
    let last_paid: [Mutex<Option<String>>; 4] = Default::default();
    let mut payers = Vec::new();
    for (i, shop) in shops.iter().enumerate() {
        for _ in 0..if i < 2 { 2 } else { 1 } {
            let c = shop.customer().await;
            shop.fund(&c, 1_000_000).await;
            payers.push((i, c));
        }
    }
    for (i, c) in payers.iter().filter(|(i, _)| *i >= 2) {
        let pay = shops[*i].pay(c, 1).await;
        assert_eq!(pay.status, 200, "{}", pay.body);
        *last_paid[*i].lock().unwrap() =
            Some(pay.body["data"]["payment_id"].as_str().unwrap().to_string());
    }
    eventually_served_from(&shops[0], "replica").await;
    let done = AtomicBool::new(false);
    let payer = |n: usize| {
        let (i, c) = &payers[n];
        let (shop, last, done) = (&shops[*i], &last_paid[*i], &done);
        async move {
            let mut paid = 0;
            while !done.load(Ordering::Relaxed) {
                let pay = shop.pay(c, 1).await;
                assert_eq!(pay.status, 200, "{}", pay.body);
                let id = pay.body["data"]["payment_id"].as_str().unwrap().to_string();
                *last.lock().unwrap() = Some(id);
                paid += 1;
            }
            paid
        }
    };
    // One reader for the paying integrations, one for the others: a read that waits for
    // the replica delays only the reads of its own kind.
    let until = Instant::now() + run;
    let reader = |of: std::ops::Range<usize>| {
        let (shops, last_paid) = (&shops, &last_paid);
        async move {
            let (mut replica, mut all) = (0, 0);
            while Instant::now() < until {
                for i in of.clone() {
                    let Some(must_list) = last_paid[i].lock().unwrap().clone() else {
                        continue;
                    };
                    let (served, data) = served_read(&shops[i], "/transactions?limit=100").await;
                    let listed = data
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|t| t["transaction_id"] == must_list.as_str());
                    assert!(
                        listed,
                        "a read from the {served} lists the integration's payment {must_list}"
                    );
                    replica += usize::from(served == "replica");
                    all += 1;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            (replica, all)
        }
    };
    let reads = async {
        let (payers, readers) = tokio::join!(reader(0..2), reader(2..4));
        done.store(true, Ordering::Relaxed);
        Shares { payers, readers }
    };
    let (shares, a, b, c, d) = tokio::join!(reads, payer(0), payer(1), payer(2), payer(3));
    let paid = a + b + c + d;
    let pct = |(r, all): (usize, usize)| 100.0 * r as f64 / all.max(1) as f64;
    eprintln!(
        "feed reads during {paid} payments in {run:?} served by the replica: \
         of the paying integrations {} of {} ({:.1}%), of the others {} of {} ({:.1}%)",
        shares.payers.0,
        shares.payers.1,
        pct(shares.payers),
        shares.readers.0,
        shares.readers.1,
        pct(shares.readers),
    );
    assert!(paid > 50, "payments flowed throughout: {paid}");
    shares
}

fn at_least_nine_in_ten((replica, all): (usize, usize)) {
    assert!(all >= 50, "enough reads to tell: {all}");
    assert!(
        replica * 10 >= all * 9,
        "the replica served {replica} of {all} feed reads under load"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_a_steady_payment_load_the_replica_serves_nine_feed_reads_in_ten() {
    let Some(rig) = rig(5_000).await else { return };
    let shares = feed_reads_under_payments(&rig.app, Duration::from_secs(8)).await;
    // A commit waits for its WAL to be written out, so it reaches the replica at once:
    // even a caller reading straight after its own payments reads there.
    at_least_nine_in_ten(shares.payers);
    at_least_nine_in_ten(shares.readers);
    rig.app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_asynchronous_commit_too_the_replica_serves_nine_feed_reads_in_ten() {
    // The scaled rig's primary: a commit answers before its WAL is written out, and the WAL
    // writer writes out whole pages and the last commit every `wal_writer_delay` (200 ms),
    // so WAL past it (a page prune by a read) can wait there for seconds. A caller's own
    // latest payment is not on the replica for up to that long (those reads go to the
    // primary); every other caller's reads must not wait for the primary's newest WAL.
    let Some(rig) = rig_with(5_000, &["ALTER SYSTEM SET synchronous_commit = off"]).await else {
        return;
    };
    let shares = feed_reads_under_payments(&rig.app, Duration::from_secs(8)).await;
    at_least_nine_in_ten(shares.readers);
    rig.app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_scaled_rig_the_replica_serves_nine_feed_reads_in_ten() {
    let app = TestApp::spawn().await;
    if app.server.state.replica.is_none() {
        eprintln!("scaled mode only: the run's database has no replica");
        return;
    }
    let shares = feed_reads_under_payments(&app, Duration::from_secs(8)).await;
    at_least_nine_in_ten(shares.readers);
    app.stop().await;
}
