//! The fault suite: the service as production runs it (two `wallet-api` replicas and a
//! `wallet-worker`, separate processes, on a PostgreSQL cluster of the suite's own and a
//! Redis, each behind a proxy the suite can cut or black-hole) under paying load, while
//! the suite SIGKILLs the API and the worker, cuts and black-holes PostgreSQL and Redis, and
//! crashes PostgreSQL (`pg_ctl stop -m immediate`). Clients retry each payment with its
//! Idempotency-Key until a definitive answer. Then:
//!
//! - every acknowledged payment exists once, and nothing exists that was not acknowledged;
//! - every balance is its funding minus its acknowledged debits;
//! - `wallet-api ledger check` passes;
//! - every committed event reached the webhook receiver at least once.
//!
//! `FAULT_SECS` (default 60) is how long the faults go on: CI runs the default, a long run
//! by hand sets it (see the README). Production mode only.
use std::{
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use serde_json::json;
use tests::{
    Mode,
    cluster::PrivateCluster,
    mode,
    paying::{Audit, Load, Merchant, Service, fault_env},
    procs::wait_for_port,
    proxy::Proxy,
    redis_server::PrivateRedis,
    webhooks::Receiver,
};

const CLIENTS: usize = 8;

fn install_tls() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// What the suite counts; printed at the end (the figures of the closing note).
#[derive(Default, Debug)]
struct Counts {
    api_kills: AtomicU64,
    worker_kills: AtomicU64,
    pg_cuts: AtomicU64,
    pg_black_holes: AtomicU64,
    pg_crashes: AtomicU64,
    redis_cuts: AtomicU64,
    redis_black_holes: AtomicU64,
}

struct Rig {
    dir: PathBuf,
    cluster: PrivateCluster,
    _redis: PrivateRedis,
    pg: Proxy,
    redis: Proxy,
    service: Service,
    env: Vec<(String, String)>,
}

impl Rig {
    async fn start() -> Rig {
        let cluster = PrivateCluster::start();
        let dir = cluster.dir().join("rig");
        std::fs::create_dir_all(&dir).unwrap();
        let redis = PrivateRedis::start();
        let pg = Proxy::start(format!("127.0.0.1:{}", cluster.port).parse().unwrap()).await;
        let redis_proxy = Proxy::start(format!("127.0.0.1:{}", redis.port).parse().unwrap()).await;
        let env = fault_env(
            format!("postgres://postgres@127.0.0.1:{}/postgres", pg.port),
            format!("redis://127.0.0.1:{}", redis_proxy.port),
            &dir,
        );
        let service = Service::start(&env, &dir, 2);
        Rig {
            dir,
            cluster,
            _redis: redis,
            pg,
            redis: redis_proxy,
            service,
            env,
        }
    }

    /// The database as the suite's checks read it (not through the proxy).
    fn direct_url(&self) -> String {
        self.cluster.url("postgres")
    }
}

/// The faults, one after another, until `secs` have passed.
async fn chaos(rig: &mut Rig, secs: u64, counts: &Counts) {
    let until = Instant::now() + Duration::from_secs(secs);
    let mut step = 0usize;
    while Instant::now() < until {
        match step % 7 {
            0 | 4 => {
                let i = step % rig.service.apis.len();
                rig.service.apis[i].kill();
                counts.api_kills.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(500)).await;
                rig.service.apis[i].restart();
                let port = rig.service.api_ports[i];
                tokio::task::block_in_place(|| wait_for_port(port, Duration::from_secs(60)));
            }
            1 => {
                rig.service.worker.kill();
                counts.worker_kills.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(500)).await;
                rig.service.worker.restart();
            }
            2 => {
                rig.pg.cut();
                counts.pg_cuts.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_secs(2)).await;
                rig.pg.heal();
            }
            3 => {
                if step % 2 == 1 {
                    rig.pg.black_hole();
                    counts.pg_black_holes.fetch_add(1, Ordering::Relaxed);
                } else {
                    rig.redis.black_hole();
                    counts.redis_black_holes.fetch_add(1, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_secs(3)).await;
                rig.pg.heal();
                rig.redis.heal();
            }
            5 => {
                rig.redis.cut();
                counts.redis_cuts.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_secs(2)).await;
                rig.redis.heal();
            }
            _ => {
                tokio::task::block_in_place(|| rig.cluster.stop_immediate());
                counts.pg_crashes.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_secs(1)).await;
                tokio::task::block_in_place(|| rig.cluster.start_server());
            }
        }
        step += 1;
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn under_kills_and_outages_every_acknowledged_payment_exists_once_and_nothing_else() {
    if mode() != Mode::Production {
        eprintln!("production mode only: the fault suite runs the service as separate processes");
        return;
    }
    install_tls();
    let secs: u64 = std::env::var("FAULT_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let mut rig = Rig::start().await;
    let receiver = Receiver::ok().await;
    let urls = rig.service.urls();
    let merchant = Arc::new(Merchant::open(&rig.env, &urls, &receiver, CLIENTS).await);
    let load = Load::start(&merchant, &urls);
    let counts = Counts::default();
    let started = Instant::now();
    chaos(&mut rig, secs, &counts).await;
    rig.pg.heal();
    rig.redis.heal();
    // A little load on the healed service, then every client finishes its payment.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let outcomes = load.finish().await;
    let load_secs = started.elapsed().as_secs_f64();

    let audit = Audit::run(
        &rig.direct_url(),
        &rig.env,
        &merchant,
        &outcomes,
        &receiver,
        Duration::from_secs(180),
    )
    .await;
    let report = audit.report(json!({
        "fault_secs": secs,
        "load_secs": load_secs,
        "api_kills": counts.api_kills.load(Ordering::Relaxed),
        "worker_kills": counts.worker_kills.load(Ordering::Relaxed),
        "pg_cuts": counts.pg_cuts.load(Ordering::Relaxed),
        "pg_black_holes": counts.pg_black_holes.load(Ordering::Relaxed),
        "pg_crashes": counts.pg_crashes.load(Ordering::Relaxed),
        "redis_cuts": counts.redis_cuts.load(Ordering::Relaxed),
        "redis_black_holes": counts.redis_black_holes.load(Ordering::Relaxed),
    }));
    eprintln!("fault suite: {report:#}");
    let _ = std::fs::write(
        Path::new(env!("CARGO_TARGET_TMPDIR")).join("fault-suite-report.json"),
        format!("{report:#}\n"),
    );
    audit.assert_money_held(51);
    if std::env::var("KEEP_FAULT_DIRS").is_ok() {
        eprintln!("logs kept in {}", rig.dir.display());
    }
}
