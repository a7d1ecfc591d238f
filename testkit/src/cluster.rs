//! A local three-master Redis Cluster owned by one test binary.
use crate::server::{ping, redis_installed};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long the cluster may take to form, or a node to come back.
const READY_WITHIN: Duration = Duration::from_secs(20);
const MASTERS: usize = 3;
/// Redis Cluster's bus listens on the client port + 10000, so both must be free.
const BUS_OFFSET: u16 = 10_000;

/// Three `redis-server --cluster-enabled yes` masters on free loopback ports, no replicas,
/// no persistence, killed on drop.
///
/// They run with `cluster-require-full-coverage no`, so a dead master takes only its own
/// slots down: with the default, every node refuses every query while any slot is
/// uncovered.
pub struct RedisCluster {
    dir: tempfile::TempDir,
    nodes: Vec<Node>,
    /// Directives beyond the defaults (TLS), each node's TLS port added per node.
    tls: Option<Vec<String>>,
}

struct Node {
    port: u16,
    /// The node's TLS port, in a cluster started with [`RedisCluster::start_tls`].
    tls_port: Option<u16>,
    child: Option<Child>,
}

impl RedisCluster {
    /// Starts and forms the cluster, or returns `None` after a loud message when
    /// `redis-server` is not installed, unless `STAMPEDE_REQUIRE_REDIS=1` (then it panics).
    pub fn start() -> Option<Self> {
        Self::start_listening(None)
    }

    /// A cluster whose nodes also speak TLS, each on a port of its own
    /// ([`RedisCluster::tls_node_urls`]), with `certificates`' server certificate (the
    /// cluster bus too). A client that connects over TLS is told the TLS ports in
    /// redirections; the plain ports stay open for the test's own commands.
    pub fn start_tls(certificates: &crate::Certificates) -> Option<Self> {
        let (cert, key) = certificates.server();
        let path = |p: &Path| p.display().to_string();
        let tls = vec![
            "--tls-cluster".into(),
            "yes".into(),
            "--tls-cert-file".into(),
            path(&cert),
            "--tls-key-file".into(),
            path(&key),
            "--tls-ca-cert-file".into(),
            path(&certificates.ca()),
            "--tls-auth-clients".into(),
            "no".into(),
        ];
        Self::start_listening(Some(tls))
    }

    fn start_listening(tls: Option<Vec<String>>) -> Option<Self> {
        if !redis_installed() {
            return None;
        }
        let dir = tempfile::tempdir().expect("a temp dir for the cluster");
        let mut nodes = Vec::new();
        let mut attempts = 0;
        while nodes.len() < MASTERS {
            attempts += 1;
            assert!(attempts <= 20, "no free port pair for a cluster node");
            let taken = nodes
                .iter()
                .flat_map(|node: &Node| [Some(node.port), node.tls_port])
                .flatten();
            let port = free_port_pair(taken.clone());
            let tls_port = tls.as_ref().map(|_| free_port_pair(taken.chain([port])));
            let extra = node_directives(&tls, tls_port);
            if let Some(child) = spawn(port, dir.path(), &extra) {
                nodes.push(Node {
                    port,
                    tls_port,
                    child: Some(child),
                });
            }
        }
        let cluster = Self { dir, nodes, tls };
        let addresses: Vec<String> = cluster
            .nodes
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.port))
            .collect();
        let created = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("redis-cli runs");
        assert!(created.success(), "redis-cli --cluster create failed");
        cluster.wait_until_ok();
        Some(cluster)
    }

    /// `redis://` URLs of the three masters, for the cluster client's initial nodes.
    pub fn node_urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|node| format!("redis://127.0.0.1:{}/", node.port))
            .collect()
    }

    /// `rediss://localhost:<TLS port>/` of the three masters, for a cluster started with
    /// [`RedisCluster::start_tls`].
    pub fn tls_node_urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|node| {
                let port = node.tls_port.expect("a cluster started with start_tls");
                format!("rediss://localhost:{port}/")
            })
            .collect()
    }

    /// The client port of master `i`.
    pub fn port(&self, i: usize) -> u16 {
        self.nodes[i].port
    }

    /// Runs `redis-cli` against master `i` and returns its trimmed output.
    pub fn cli(&self, i: usize, args: &[&str]) -> String {
        cli(self.nodes[i].port, args)
    }

    /// The master that owns `slot` now.
    pub fn owner(&self, slot: u16) -> usize {
        let slot = slot.to_string();
        (0..self.nodes.len())
            .find(|&i| {
                self.nodes[i].child.is_some() && owns(&self.cli(i, &["CLUSTER", "NODES"]), &slot)
            })
            .expect("some master owns every slot")
    }

    /// SIGKILLs master `i` (an outage, not a shutdown). Its slots stay unserved until
    /// [`RedisCluster::restart`]: there are no replicas to fail over to.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.nodes[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts master `i` again on its port with its node file (same id, same slots, no
    /// keys) and waits until the cluster is whole again.
    pub fn restart(&mut self, i: usize) {
        self.kill(i);
        let port = self.nodes[i].port;
        let deadline = Instant::now() + READY_WITHIN;
        while self.nodes[i].child.is_none() {
            assert!(
                Instant::now() < deadline,
                "redis-server did not restart on port {port}"
            );
            let extra = node_directives(&self.tls, self.nodes[i].tls_port);
            self.nodes[i].child = spawn(port, self.dir.path(), &extra);
        }
        self.wait_until_ok();
    }

    /// Moves `slot` from master `from` to master `to` as an operator would: IMPORTING on
    /// the target, MIGRATING on the source, MIGRATE its keys one at a time (clients meet
    /// ASK and TRYAGAIN meanwhile), then the new owner on every master.
    pub fn migrate_slot(&self, slot: u16, from: usize, to: usize) {
        let slot = slot.to_string();
        let id = |i: usize| self.cli(i, &["CLUSTER", "MYID"]);
        let (from_id, to_id) = (id(from), id(to));
        assert_eq!(
            self.cli(to, &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from_id]),
            "OK"
        );
        assert_eq!(
            self.cli(from, &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id]),
            "OK"
        );
        let to_port = self.nodes[to].port.to_string();
        loop {
            let listed = self.cli(from, &["CLUSTER", "GETKEYSINSLOT", &slot, "1"]);
            let keys: Vec<&str> = listed.lines().filter(|key| !key.is_empty()).collect();
            if keys.is_empty() {
                break;
            }
            let mut args = vec!["MIGRATE", "127.0.0.1", &to_port, "", "0", "5000", "KEYS"];
            args.extend(&keys);
            let moved = self.cli(from, &args);
            assert!(moved == "OK" || moved == "NOKEY", "MIGRATE: {moved}");
        }
        for i in [to, from] {
            assert_eq!(
                self.cli(i, &["CLUSTER", "SETSLOT", &slot, "NODE", &to_id]),
                "OK"
            );
        }
        for i in (0..self.nodes.len()).filter(|i| ![from, to].contains(i)) {
            self.cli(i, &["CLUSTER", "SETSLOT", &slot, "NODE", &to_id]);
        }
    }

    /// Polls every live master until each reports `cluster_state:ok`.
    fn wait_until_ok(&self) {
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            let ok = self
                .nodes
                .iter()
                .filter(|node| node.child.is_some())
                .all(|node| cli(node.port, &["CLUSTER", "INFO"]).contains("cluster_state:ok"));
            if ok {
                return;
            }
            assert!(Instant::now() < deadline, "the cluster did not become ok");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            self.kill(i);
        }
    }
}

/// Whether `CLUSTER NODES` output says `myself` owns `slot`.
fn owns(nodes: &str, slot: &str) -> bool {
    let slot: u16 = slot.parse().expect("a slot number");
    nodes
        .lines()
        .filter(|line| line.contains("myself"))
        .flat_map(|line| line.split(' ').skip(8))
        .any(|range| {
            let mut bounds = range.split('-').map(str::parse::<u16>);
            match (bounds.next(), bounds.next()) {
                (Some(Ok(first)), Some(Ok(last))) => (first..=last).contains(&slot),
                (Some(Ok(only)), None) => only == slot,
                _ => false,
            }
        })
}

fn cli(port: u16, args: &[&str]) -> String {
    let output = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli runs");
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// A port P with P and P + 10000 free, outside the ephemeral range so P + 10000 exists.
fn free_port_pair(taken: impl Iterator<Item = u16> + Clone) -> u16 {
    loop {
        let port = fastrand_port();
        if taken.clone().any(|t| t == port) {
            continue;
        }
        let free = |p: u16| TcpListener::bind(("127.0.0.1", p)).is_ok();
        if free(port) && free(port + BUS_OFFSET) {
            return port;
        }
    }
}

/// A pseudo-random port in 20000..30000, seeded by the clock and the process id.
fn fastrand_port() -> u16 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    hasher.write_u128(Instant::now().elapsed().as_nanos());
    20_000 + (hasher.finish() % 10_000) as u16
}

/// A node's directives beyond the defaults: the cluster's TLS ones with its own port.
fn node_directives(tls: &Option<Vec<String>>, tls_port: Option<u16>) -> Vec<String> {
    match (tls, tls_port) {
        (Some(tls), Some(port)) => {
            let mut extra = vec!["--tls-port".to_owned(), port.to_string()];
            extra.extend(tls.iter().cloned());
            extra
        }
        _ => Vec::new(),
    }
}

/// Spawns a cluster-enabled `redis-server` on `port`; `None` if it exits or never answers.
fn spawn(port: u16, dir: &Path, extra: &[String]) -> Option<Child> {
    let mut child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--cluster-enabled", "yes"])
        .args(["--cluster-config-file", &format!("nodes-{port}.conf")])
        .args(["--cluster-node-timeout", "2000"])
        .args(["--cluster-require-full-coverage", "no"])
        .args(["--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(dir)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return None;
        }
        if ping(port) {
            return Some(child);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}
