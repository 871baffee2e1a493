//! A private Redis Cluster on loopback (`tests/scaled/redis-cluster.sh`, Debian's
//! redis-server), for tests that kill its nodes. The shared Redis is never touched.
use std::{
    net::TcpListener,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

pub struct PrivateRedisCluster {
    dir: PathBuf,
    pub ports: Vec<u16>,
    /// The seed nodes, comma-separated, as `WALLET_REDIS_URL` takes them.
    pub seeds: String,
}

impl PrivateRedisCluster {
    /// `masters` masters with `replicas` replicas each, on consecutive free ports.
    pub fn start(masters: usize, replicas: usize) -> PrivateRedisCluster {
        let n = masters * (1 + replicas);
        let first = free_ports(n);
        let dir = std::env::temp_dir().join(format!("wallet-redis-cluster-{first}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("cluster dir");
        let script = workspace().join("tests/scaled/redis-cluster.sh");
        let out = Command::new("bash")
            .arg(&script)
            .arg(&dir)
            .args([first, masters as u16, replicas as u16].map(|v| v.to_string()))
            .output()
            .expect("bash runs");
        assert!(
            out.status.success(),
            "redis-cluster.sh failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        PrivateRedisCluster {
            dir,
            ports: (first..first + n as u16).collect(),
            seeds: String::from_utf8_lossy(&out.stdout).trim().to_string(),
        }
    }

    /// `CLUSTER NODES` as node lines: (port, flags, slots).
    pub fn nodes(&self) -> Vec<(u16, String, String)> {
        let text = self.ask(&["cluster", "nodes"]);
        text.lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                let port = f.get(1)?.split(['@', ':']).nth(1)?.parse().ok()?;
                Some((port, f.get(2)?.to_string(), f.get(8..)?.join(" ")))
            })
            .collect()
    }

    /// The master serving `slot`.
    pub fn master_of_slot(&self, slot: u16) -> u16 {
        self.nodes()
            .into_iter()
            .find(|(_, flags, slots)| {
                flags.contains("master")
                    && !flags.contains("fail")
                    && slots.split(' ').any(|r| match r.split_once('-') {
                        Some((a, b)) => {
                            (a.parse().unwrap_or(u16::MAX)..=b.parse().unwrap_or(0)).contains(&slot)
                        }
                        None => r.parse() == Ok(slot),
                    })
            })
            .map(|(port, _, _)| port)
            .expect("a master serves the slot")
    }

    /// The hash slot of `key` (`CLUSTER KEYSLOT`).
    pub fn slot_of(&self, key: &str) -> u16 {
        self.ask(&["cluster", "keyslot", key])
            .trim()
            .parse()
            .expect("a slot number")
    }

    /// Kills the node on `port` at once (SIGKILL: no goodbye to the cluster).
    pub fn kill(&self, port: u16) {
        let pid = std::fs::read_to_string(self.dir.join(port.to_string()).join("redis.pid"))
            .expect("the node's pid file");
        let status = Command::new("kill")
            .args(["-KILL", pid.trim()])
            .status()
            .unwrap();
        assert!(status.success(), "kill {port}");
    }

    /// Waits until every live node reports `cluster_state:ok`.
    pub fn wait_ok(&self, within: Duration) {
        let until = Instant::now() + within;
        loop {
            let ok = self.ports.iter().all(|p| {
                let info = self.cli(*p, &["cluster", "info"]);
                info.is_empty() || info.contains("cluster_state:ok")
            });
            if ok {
                return;
            }
            assert!(Instant::now() < until, "the cluster did not settle");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The first live node's answer.
    fn ask(&self, args: &[&str]) -> String {
        self.ports
            .iter()
            .map(|p| self.cli(*p, args))
            .find(|out| !out.trim().is_empty())
            .expect("a live node answers")
    }

    fn cli(&self, port: u16, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli runs");
        String::from_utf8_lossy(&out.stdout).replace('\r', "")
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for PrivateRedisCluster {
    fn drop(&mut self) {
        for p in &self.ports {
            let _ = Command::new("redis-cli")
                .args(["-p", &p.to_string(), "shutdown", "nosave"])
                .output();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The first of `n` consecutive free ports whose cluster bus ports (+10000) are free too.
fn free_ports(n: usize) -> u16 {
    loop {
        let first = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        // Nodes and their buses (port + 10000) below the ephemeral range (32768 and up),
        // where outgoing connections would take ports from under them; and clear of the
        // scaled mode's cluster (21001-21006).
        let first = 10_000 + first % 11_000;
        let all_free = (0..n as u16).all(|i| {
            [first + i, first + i + 10_000]
                .iter()
                .all(|p| TcpListener::bind(("127.0.0.1", *p)).is_ok())
        });
        if all_free {
            return first;
        }
    }
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}
