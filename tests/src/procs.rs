//! The service's binaries as separate processes, for tests that kill them.
use std::{
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::OnceLock,
    time::{Duration, Instant},
};

/// The path of a workspace binary (`wallet-api`, `wallet-worker`). `cargo test
/// --workspace` builds both before any test runs; a test run of one package may find the
/// other's binary missing or older than the sources, and then builds it.
pub fn binary(name: &str) -> PathBuf {
    static CHECKED: OnceLock<()> = OnceLock::new();
    // target/<profile>/deps/<test binary> -> target/<profile>/<name>
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>")
        .to_path_buf();
    CHECKED.get_or_init(|| {
        let stale = ["wallet-api", "wallet-worker"]
            .iter()
            .any(|b| !is_fresh(&profile_dir.join(b)));
        if stale {
            let status = Command::new(env!("CARGO"))
                .args(["build", "-p", "api", "-p", "worker", "--bins"])
                .current_dir(workspace())
                .status()
                .expect("cargo build runs");
            assert!(status.success(), "building the service's binaries failed");
        }
    });
    profile_dir.join(name)
}

/// Whether `bin` exists and is newer than every source file it is built from.
fn is_fresh(bin: &Path) -> bool {
    let Ok(built) = std::fs::metadata(bin).and_then(|m| m.modified()) else {
        return false;
    };
    let root = workspace();
    let mut dirs: Vec<PathBuf> = ["api/src", "worker/src", "entities/src", "migration/src"]
        .iter()
        .map(|d| root.join(d))
        .collect();
    let mut newest = std::fs::metadata(root.join("Cargo.lock"))
        .and_then(|m| m.modified())
        .ok();
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if let Ok(t) = entry.metadata().and_then(|m| m.modified()) {
                newest = Some(newest.map_or(t, |n| n.max(t)));
            }
        }
    }
    newest.is_none_or(|n| built >= n)
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// A tool (npm, tsc, mypy, a generator) at the lowest CPU priority: it prepares a test and
/// must not starve the service under test in the tests running beside it (the machine has
/// two cores, and several suite tests wait on timers).
pub fn tool(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new("nice");
    c.args(["-n", "19"]).arg(program);
    c
}

/// Runs a tool to completion (npm, tsc, cargo) and fails the test with its output unless
/// it succeeded.
pub fn run_ok(cmd: &mut Command, what: &str) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

/// A child process that is SIGKILLed when dropped.
pub struct Process {
    child: Option<Child>,
    command: Vec<(String, String)>,
    name: String,
    args: Vec<String>,
    log: PathBuf,
}

impl Process {
    /// Starts `binary` with `args` and exactly `env` (plus PATH), its output appended to
    /// `log`.
    pub fn start(name: &str, args: &[&str], env: &[(String, String)], log: &Path) -> Process {
        let mut p = Process {
            child: None,
            command: env.to_vec(),
            name: name.to_string(),
            args: args.iter().map(|s| s.to_string()).collect(),
            log: log.to_path_buf(),
        };
        p.restart();
        p
    }

    /// Starts it again (after a kill).
    pub fn restart(&mut self) {
        self.kill();
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("log file");
        let err = out.try_clone().expect("log file");
        let child = Command::new(binary(&self.name))
            .args(&self.args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .envs(self.command.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .expect("the service binary starts");
        self.child = Some(child);
    }

    /// SIGKILL, and reap.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Waits until `port` on loopback accepts connections.
pub fn wait_for_port(port: u16, within: Duration) {
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(start.elapsed() < within, "nothing listens on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The environment that points a `wallet-api` or `wallet-worker` process at this test run's
/// database, Redis and secrets; no listener is named (the caller adds `WALLET_LISTEN_ADDR`
/// and `WALLET_METRICS_LISTEN_ADDR` where it wants them).
pub fn service_env(cfg: &api::config::Config) -> Vec<(String, String)> {
    let mut env = vec![
        (
            "WALLET_DATABASE_URL",
            cfg.database_url.clone().expect("a database URL"),
        ),
        ("WALLET_DATA_DIR", cfg.data_dir.display().to_string()),
        (
            "WALLET_JWT_SECRET",
            cfg.jwt_secret
                .as_ref()
                .expect("a JWT secret")
                .expose()
                .to_string(),
        ),
        (
            "WALLET_SECRET_KEY",
            cfg.secret_key
                .as_ref()
                .expect("a sealing key")
                .expose()
                .to_string(),
        ),
        ("WALLET_REDIS_PREFIX", cfg.redis_prefix.clone()),
    ];
    if let Some(redis) = &cfg.redis_url {
        env.push(("WALLET_REDIS_URL", redis.clone()));
        if cfg.redis_mode == api::config::RedisMode::Cluster {
            env.push(("WALLET_REDIS_MODE", "cluster".to_string()));
        }
    }
    if let Some(direct) = &cfg.database_direct_url {
        env.push(("WALLET_DATABASE_POOLER", "transaction".to_string()));
        env.push(("WALLET_DATABASE_DIRECT_URL", direct.clone()));
    }
    env.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

/// Runs `binary args` as an operator would in a fresh directory: no `WALLET_*` variable
/// but `env`, the directory its working directory. Returns its output and the directory.
pub fn run_in_empty_dir(
    binary: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> (std::process::Output, PathBuf) {
    let dir = std::env::temp_dir().join(format!("wallet-cli-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    let out = Command::new(binary)
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(env.iter().copied())
        .current_dir(&dir)
        .stdin(Stdio::null())
        .output()
        .expect("the command runs");
    (out, dir)
}

/// A database the service never migrated, for commands that must say so: an empty SQLite
/// file in embedded mode, an empty PostgreSQL database in production mode.
pub fn unmigrated_database_url() -> String {
    match crate::mode() {
        crate::Mode::Embedded => {
            let file = std::env::temp_dir().join(format!(
                "wallet-unmigrated-{}.db",
                uuid::Uuid::new_v4().simple()
            ));
            std::fs::File::create(&file).expect("an empty SQLite file");
            format!("sqlite://{}", file.display())
        }
        crate::Mode::Production => {
            let base = std::env::var("WALLET_TEST_DATABASE_URL").expect("WALLET_TEST_DATABASE_URL");
            let name = format!("wallet_iso_{}", uuid::Uuid::new_v4().simple());
            crate::create_database(&base, &name)
        }
    }
}
