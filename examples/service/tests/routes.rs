//! The service over HTTP: one request of each route on the embedded default, and two
//! instances sharing values and invalidations through a Redis the test starts.
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One HTTP/1.1 request; the status and the body.
fn request(address: &str, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    let mut stream = TcpStream::connect(address).expect("the service listens");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let body = body.unwrap_or("");
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response[9..12].parse().expect("a status line");
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// The service binary on a free port with `env`, and the address it listens on.
struct Instance {
    child: Child,
    address: String,
}

impl Instance {
    fn start(env: &[(&str, &str)]) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_service"));
        for (key, _) in std::env::vars() {
            if key.starts_with("STAMPEDE_") {
                command.env_remove(key);
            }
        }
        let mut child = command
            .env("PORT", "0")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the service starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let address = line
            .trim()
            .strip_prefix("listening on http://")
            .unwrap_or_else(|| panic!("the service said {line:?}"))
            .to_owned();
        Instance { child, address }
    }

    fn get(&self, path: &str) -> (u16, String) {
        request(&self.address, "GET", path, None)
    }

    fn put(&self, path: &str, body: &str) -> (u16, String) {
        request(&self.address, "PUT", path, Some(body))
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn every_route_answers_on_the_embedded_default() {
    let service = Instance::start(&[("DB_LATENCY_MS", "1")]);
    assert_eq!(
        service.get("/price/7"),
        (200, r#"{"id":7,"cents":107,"version":1}"#.to_owned())
    );
    let (status, body) = service.get("/price/5000");
    assert_eq!(
        (status, body.as_str()),
        (404, "no price 5000"),
        "404 stays 404"
    );
    assert_eq!(
        service.put("/price/7", r#"{"cents":250}"#),
        (200, r#"{"id":7,"cents":250,"version":2}"#.to_owned())
    );
    assert_eq!(
        service.get("/price/7").1,
        r#"{"id":7,"cents":250,"version":2}"#,
        "the write invalidated the cached price"
    );
    let (status, metrics) = service.get("/metrics");
    assert_eq!(status, 200);
    assert!(
        metrics.contains(r#"stampede_origin_calls_total{cache="stampede_service::price"} 3"#),
        "{metrics}"
    );
    let (status, health) = service.get("/health");
    assert_eq!(status, 200);
    assert!(
        health.starts_with(r#"{"backend":"memory","degraded":false"#),
        "{health}"
    );
}

#[test]
fn two_instances_on_redis_share_values_and_see_each_others_writes() {
    let Some(redis) = testkit::RedisServer::start_with(&["--requirepass", "s3cr3t-pw"]) else {
        return;
    };
    // The password in the URL, as a deployment would give it.
    let url = redis.url().replace("redis://", "redis://:s3cr3t-pw@");
    let env = |base| {
        [
            ("STAMPEDE_BACKEND", "tiered"),
            ("STAMPEDE_REDIS_URL", url.as_str()),
            ("DB_LATENCY_MS", "1"),
            ("PRICE_BASE", base),
        ]
    };
    // Each process has a database of its own, with other prices: an instance answering
    // with the other's price got it from Redis.
    let (one, other) = (Instance::start(&env("100")), Instance::start(&env("500")));
    wait_until_subscribed(&other);
    assert_eq!(one.get("/price/9").1, r#"{"id":9,"cents":109,"version":1}"#);
    assert_eq!(
        other.get("/price/9").1,
        r#"{"id":9,"cents":109,"version":1}"#,
        "served from Redis, not from its own database"
    );
    let (_, health) = other.get("/health");
    assert!(!health.contains("s3cr3t-pw"), "a password served: {health}");
    assert!(
        health.contains(r#""backend":"tiered, redis://:***@127.0.0.1:"#),
        "{health}"
    );
    // A write on one instance: every copy is invalidated, the next read loads anew.
    assert_eq!(one.put("/price/9", r#"{"cents":901}"#).0, 200);
    assert_eq!(one.get("/price/9").1, r#"{"id":9,"cents":901,"version":2}"#);
    let deadline = Instant::now() + Duration::from_secs(5);
    while other.get("/price/9").1 != r#"{"id":9,"cents":901,"version":2}"# {
        assert!(
            Instant::now() < deadline,
            "the write never reached the other instance"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Until the instance's notice subscription is up (its copies are dropped when it comes up).
fn wait_until_subscribed(instance: &Instance) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let _ = instance.get("/price/1");
    while !instance.get("/health").1.contains(r#""subscribed":true"#) {
        assert!(Instant::now() < deadline, "never subscribed");
        std::thread::sleep(Duration::from_millis(10));
    }
}
