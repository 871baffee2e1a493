//! A private PostgreSQL cluster on a free port, for tests that crash the database server
//! (`pg_ctl stop -m immediate`) without touching the shared one. Built from the machine's
//! own PostgreSQL binaries (`pg_config --bindir`, else the newest under
//! /usr/lib/postgresql); as root, they run as the `postgres` user, since initdb refuses
//! root.
use std::{
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

pub struct PrivateCluster {
    dir: PathBuf,
    bin: PathBuf,
    pub port: u16,
}

fn bindir() -> PathBuf {
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output()
        && out.status.success()
    {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if dir.join("initdb").exists() {
            return dir;
        }
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL server binaries (/usr/lib/postgresql/*/bin)")
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|p| p.join("initdb").exists())
        .collect();
    versions.sort_by_key(|p| {
        p.parent()
            .and_then(|v| v.file_name())
            .and_then(|v| v.to_str())
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(0)
    });
    versions.pop().expect("initdb not found")
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

impl PrivateCluster {
    /// A free port and an empty directory, owned by the user the server runs as.
    fn fresh() -> PrivateCluster {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let dir = std::env::temp_dir().join(format!("wallet-pg-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("cluster dir");
        let c = PrivateCluster {
            dir,
            bin: bindir(),
            port,
        };
        if is_root() {
            let status = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&c.dir)
                .status()
                .expect("chown");
            assert!(status.success(), "chown of the cluster dir failed");
        }
        c
    }

    /// A streaming replica of `primary` (`pg_basebackup -R`: a base backup that starts as a
    /// hot standby following it), started on a port of its own.
    pub fn replica_of(primary: &PrivateCluster) -> PrivateCluster {
        let c = Self::fresh();
        c.run(
            "pg_basebackup",
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &primary.port.to_string(),
                "-U",
                "postgres",
                "-D",
                &c.data().display().to_string(),
                "-R",
                "-X",
                "stream",
                "--no-sync",
            ],
        );
        c.start_server();
        c
    }

    /// initdb (trust authentication on loopback, replication included) and start.
    pub fn start() -> PrivateCluster {
        let c = Self::fresh();
        c.run(
            "initdb",
            &[
                "-D",
                &c.data().display().to_string(),
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
                "-E",
                "UTF8",
            ],
        );
        c.start_server();
        c
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn run(&self, tool: &str, args: &[&str]) {
        let program = self.bin.join(tool);
        let mut cmd = if is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&program);
            c
        } else {
            Command::new(&program)
        };
        let out = cmd
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("{tool} runs: {e}"));
        assert!(
            out.status.success(),
            "{tool} {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Starts the server and waits until it accepts connections.
    pub fn start_server(&self) {
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=on",
            self.port,
            self.dir.display()
        );
        let log = self.dir.join("server.log").display().to_string();
        self.run(
            "pg_ctl",
            &[
                "-D",
                &self.data().display().to_string(),
                "-o",
                &opts,
                "-l",
                &log,
                "-w",
                "-t",
                "60",
                "start",
            ],
        );
    }

    /// Crashes the server: `pg_ctl stop -m immediate` (no checkpoint; the next start
    /// recovers from the WAL).
    pub fn stop_immediate(&self) {
        self.run(
            "pg_ctl",
            &[
                "-D",
                &self.data().display().to_string(),
                "-m",
                "immediate",
                "-w",
                "stop",
            ],
        );
    }

    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        let data = self.data().display().to_string();
        let program = self.bin.join("pg_ctl");
        let mut cmd = if is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&program);
            c
        } else {
            Command::new(&program)
        };
        let _ = cmd
            .args(["-D", &data, "-m", "immediate", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if std::env::var("KEEP_FAULT_DIRS").is_err() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
