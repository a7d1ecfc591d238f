//! A master, one replica and three Sentinels watching them, on free loopback ports: a
//! failover the test can cause by killing the master.
use crate::server::{free_port, ping, redis_installed, RedisServer};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The name the Sentinels know the master by.
pub const MASTER_NAME: &str = "stampede-master";
/// How long a master may be silent before a Sentinel calls it down.
const DOWN_AFTER_MS: u64 = 1000;
/// How long the set may take to form.
const READY_WITHIN: Duration = Duration::from_secs(20);

/// A master, its replica and three Sentinels (quorum 2), killed on drop.
pub struct Sentinels {
    // Holds the Sentinels' configs (they rewrite them) until the set is dropped.
    _dir: tempfile::TempDir,
    master: RedisServer,
    replica: RedisServer,
    sentinels: Vec<(u16, Child)>,
}

impl Sentinels {
    /// Starts the set and waits until every Sentinel knows the replica and the other
    /// Sentinels (so a failover can be agreed), or returns `None` after a loud message
    /// when `redis-server` is not installed, unless `STAMPEDE_REQUIRE_REDIS=1`.
    pub fn start() -> Option<Self> {
        if !redis_installed() {
            return None;
        }
        let master = RedisServer::start()?;
        let port = master.port().to_string();
        let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port])?;
        let dir = tempfile::tempdir().expect("a temp dir for the Sentinels");
        let mut sentinels = Vec::new();
        while sentinels.len() < 3 {
            let sentinel_port = free_port();
            let config = dir.path().join(format!("sentinel-{sentinel_port}.conf"));
            std::fs::write(
                &config,
                format!(
                    "port {sentinel_port}\nbind 127.0.0.1\ndir {}\n\
                     sentinel monitor {MASTER_NAME} 127.0.0.1 {port} 2\n\
                     sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}\n\
                     sentinel failover-timeout {MASTER_NAME} 10000\n\
                     sentinel parallel-syncs {MASTER_NAME} 1\n",
                    dir.path().display()
                ),
            )
            .expect("a Sentinel's config");
            let child = Command::new("redis-server")
                .arg(&config)
                .arg("--sentinel")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server --sentinel starts");
            let deadline = Instant::now() + READY_WITHIN;
            while Instant::now() < deadline && !ping(sentinel_port) {
                std::thread::sleep(Duration::from_millis(10));
            }
            sentinels.push((sentinel_port, child));
        }
        let set = Sentinels {
            _dir: dir,
            master,
            replica,
            sentinels,
        };
        set.wait_until_formed();
        Some(set)
    }

    fn wait_until_formed(&self) {
        let deadline = Instant::now() + READY_WITHIN;
        let formed = |port: u16| {
            let replicas = cli(port, &["SENTINEL", "replicas", MASTER_NAME]);
            let others = cli(port, &["SENTINEL", "sentinels", MASTER_NAME]);
            let listed = |text: &str| text.lines().filter(|line| *line == "name").count();
            listed(&replicas) >= 1 && listed(&others) >= 2
        };
        while Instant::now() < deadline {
            if self.sentinels.iter().all(|(port, _)| formed(*port)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("the Sentinels did not find the replica and each other in time");
    }

    /// `redis+sentinel://127.0.0.1:<port>,…/<master name>`.
    pub fn url(&self) -> String {
        let nodes: Vec<String> = (self.sentinels.iter())
            .map(|(port, _)| format!("127.0.0.1:{port}"))
            .collect();
        format!("redis+sentinel://{}/{MASTER_NAME}", nodes.join(","))
    }

    /// The master the set started with.
    pub fn master(&mut self) -> &mut RedisServer {
        &mut self.master
    }

    /// The replica the set started with (the master after a failover).
    pub fn replica(&self) -> &RedisServer {
        &self.replica
    }

    /// The port of the master the first Sentinel names now.
    pub fn master_port(&self) -> Option<u16> {
        let reply = cli(
            self.sentinels[0].0,
            &["SENTINEL", "get-master-addr-by-name", MASTER_NAME],
        );
        reply.lines().nth(1)?.trim().parse().ok()
    }

    /// Kills the master and waits until the Sentinels name the replica instead; how
    /// long that took.
    pub fn fail_over(&mut self) -> Duration {
        let started = Instant::now();
        self.master.kill();
        let replica = self.replica.port();
        let deadline = started + READY_WITHIN;
        while Instant::now() < deadline {
            if self.master_port() == Some(replica) {
                return started.elapsed();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("the Sentinels did not promote the replica in time");
    }
}

impl Drop for Sentinels {
    fn drop(&mut self) {
        for (_, child) in &mut self.sentinels {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn cli(port: u16, args: &[&str]) -> String {
    let output = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli runs");
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}
