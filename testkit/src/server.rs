//! A `redis-server` child process owned by one test.
use crate::proxy::Proxy;
use crate::tls::Certificates;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Set to `1` to make a missing `redis-server` fail the test instead of skipping it (CI).
pub const REQUIRE_REDIS_VAR: &str = "STAMPEDE_REQUIRE_REDIS";

/// How long a started server may take to answer `PING`.
const READY_WITHIN: Duration = Duration::from_secs(10);

/// A `redis-server` on a free loopback port with no persistence and its own temp dir,
/// killed on drop. Clients should use [`RedisServer::url`], which goes through a
/// [`Proxy`] so the test can black-hole it.
pub struct RedisServer {
    port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
    proxy: Proxy,
    /// Directives beyond the defaults (TLS, renamed commands, replication), kept for a
    /// restart.
    extra: Vec<String>,
    /// The TLS port, when the server listens on one too.
    tls_port: Option<u16>,
}

impl RedisServer {
    /// Starts a server, or returns `None` after a loud message when `redis-server` is not
    /// installed, unless `STAMPEDE_REQUIRE_REDIS=1`, which turns the skip into a panic.
    pub fn start() -> Option<Self> {
        Self::start_with(&[])
    }

    /// [`RedisServer::start`] with more directives, each an argument as `redis-server`
    /// takes it on its command line (`["--rename-command", "INFO", ""]`).
    pub fn start_with(extra: &[&str]) -> Option<Self> {
        Self::start_listening(extra.iter().map(|s| s.to_string()).collect(), None)
    }

    /// A server that also speaks TLS on a port of its own ([`RedisServer::tls_url`]),
    /// with `certificates`' server certificate; `client_certificates` makes it ask every
    /// TLS client for a certificate signed by their CA (mutual TLS). Its plain port stays
    /// open, for the test's own commands ([`RedisServer::cli`]).
    pub fn start_tls(certificates: &Certificates, client_certificates: bool) -> Option<Self> {
        let tls_port = free_port();
        let (cert, key) = certificates.server();
        let path = |p: &std::path::Path| p.display().to_string();
        let extra = vec![
            "--tls-port".into(),
            tls_port.to_string(),
            "--tls-cert-file".into(),
            path(&cert),
            "--tls-key-file".into(),
            path(&key),
            "--tls-ca-cert-file".into(),
            path(&certificates.ca()),
            "--tls-auth-clients".into(),
            if client_certificates { "yes" } else { "no" }.into(),
        ];
        Self::start_listening(extra, Some(tls_port))
    }

    fn start_listening(extra: Vec<String>, tls_port: Option<u16>) -> Option<Self> {
        if !redis_installed() {
            return None;
        }
        let dir = tempfile::tempdir().expect("a temp dir for redis-server");
        // A free port can be taken between probing and binding: retry on a new one.
        for _ in 0..5 {
            let port = free_port();
            let Some(child) = spawn(port, dir.path(), &extra) else {
                continue;
            };
            let upstream = SocketAddr::from(([127, 0, 0, 1], port));
            let proxy = Proxy::start(upstream).expect("a loopback proxy");
            return Some(Self {
                port,
                dir,
                child: Some(child),
                proxy,
                extra,
                tls_port,
            });
        }
        panic!("redis-server did not start on any of 5 free ports");
    }

    /// `rediss://localhost:<tls port>/`, for a server started with
    /// [`RedisServer::start_tls`] (its certificate names `localhost`).
    pub fn tls_url(&self) -> String {
        let port = self.tls_port.expect("a server started with start_tls");
        format!("rediss://localhost:{port}/")
    }

    /// `redis://` URL through the proxy (black-holes and heals apply to it).
    pub fn url(&self) -> String {
        format!("redis://{}/", self.proxy.addr())
    }

    /// `redis://` URL straight to the server, bypassing the proxy.
    pub fn direct_url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The server's own port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The proxy in front of the server.
    pub fn proxy(&self) -> &Proxy {
        &self.proxy
    }

    /// Stops forwarding through the proxy; see [`Proxy::black_hole`].
    pub fn black_hole(&self) {
        self.proxy.black_hole();
    }

    /// Lets requests through the proxy but holds the replies; see [`Proxy::hold_replies`].
    pub fn hold_replies(&self) {
        self.proxy.hold_replies();
    }

    /// Forwards through the proxy again.
    pub fn heal(&self) {
        self.proxy.heal();
    }

    /// Kills the server (SIGKILL: an outage, not a shutdown) and closes proxied connections.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.proxy.drop_connections();
    }

    /// Starts the server again on the same port (empty: nothing is persisted).
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + READY_WITHIN;
        // The port may linger for a moment after the kill; retry until the deadline.
        while Instant::now() < deadline {
            if let Some(child) = spawn(self.port, self.dir.path(), &self.extra) {
                self.child = Some(child);
                return;
            }
        }
        panic!("redis-server did not restart on port {}", self.port);
    }

    /// Runs `redis-cli` against the server (bypassing the proxy) and returns its output.
    pub fn cli(&self, args: &[&str]) -> String {
        let output = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli runs");
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Whether `redis-server` is on PATH; a loud skip message when not, a panic when not and
/// `STAMPEDE_REQUIRE_REDIS=1`.
pub(crate) fn redis_installed() -> bool {
    if Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
    {
        return true;
    }
    if std::env::var(REQUIRE_REDIS_VAR).as_deref() == Ok("1") {
        panic!(
            "redis-server is not on PATH and {REQUIRE_REDIS_VAR}=1: install it \
             (`sudo apt-get install -y redis-server`, or `brew install redis`)"
        );
    }
    eprintln!(
        "\n*** SKIPPED: redis-server is not on PATH, so this Redis test did not run. \
         Install it (`sudo apt-get install -y redis-server`) to run it; \
         {REQUIRE_REDIS_VAR}=1 makes this a failure. ***\n"
    );
    false
}

pub(crate) fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a free loopback port");
    listener.local_addr().expect("its address").port()
}

/// Spawns `redis-server` on `port` and waits for `PONG`; `None` if it exits or never answers.
fn spawn(port: u16, dir: &std::path::Path, extra: &[String]) -> Option<Child> {
    let mut child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(dir)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let deadline = Instant::now() + READY_WITHIN;
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

pub(crate) fn ping(port: u16) -> bool {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
    if stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    // A server that requires a password answers, too: with NOAUTH.
    let mut reply = [0u8; 7];
    stream.read_exact(&mut reply).is_ok() && (&reply == b"+PONG\r\n" || &reply == b"-NOAUTH")
}
