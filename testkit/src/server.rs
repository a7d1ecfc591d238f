//! A `redis-server` child process owned by one test.
use crate::proxy::Proxy;
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
}

impl RedisServer {
    /// Starts a server, or returns `None` after a loud message when `redis-server` is not
    /// installed, unless `STAMPEDE_REQUIRE_REDIS=1`, which turns the skip into a panic.
    pub fn start() -> Option<Self> {
        if !redis_installed() {
            return None;
        }
        let dir = tempfile::tempdir().expect("a temp dir for redis-server");
        // A free port can be taken between probing and binding: retry on a new one.
        for _ in 0..5 {
            let port = free_port();
            let Some(child) = spawn(port, dir.path()) else {
                continue;
            };
            let upstream = SocketAddr::from(([127, 0, 0, 1], port));
            let proxy = Proxy::start(upstream).expect("a loopback proxy");
            return Some(Self {
                port,
                dir,
                child: Some(child),
                proxy,
            });
        }
        panic!("redis-server did not start on any of 5 free ports");
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
            if let Some(child) = spawn(self.port, self.dir.path()) {
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

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a free loopback port");
    listener.local_addr().expect("its address").port()
}

/// Spawns `redis-server` on `port` and waits for `PONG`; `None` if it exits or never answers.
fn spawn(port: u16, dir: &std::path::Path) -> Option<Child> {
    let mut child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(dir)
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
    let mut reply = [0u8; 7];
    stream.read_exact(&mut reply).is_ok() && &reply == b"+PONG\r\n"
}
