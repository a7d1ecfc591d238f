//! Test support for stampede's shared-store tests: a throwaway `redis-server` on a free
//! loopback port, reached through a TCP proxy that can stop forwarding (a black hole) and
//! resume.
//!
//! Tests never touch a Redis they did not start: each one starts its own server (or uses a
//! prefix of its own), so the suite runs in parallel and can kill, restart and black-hole
//! the server without disturbing anything else.
//!
//! ```no_run
//! let Some(redis) = testkit::RedisServer::start() else { return }; // skipped, said why
//! let url = redis.url(); // through the proxy: redis.black_hole() freezes it
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod cluster;
mod proxy;
mod server;

pub use cluster::RedisCluster;
pub use proxy::Proxy;
pub use server::{RedisServer, REQUIRE_REDIS_VAR};

#[cfg(test)]
mod tests {
    use super::RedisServer;

    #[test]
    fn black_hole_holds_replies_until_healed() {
        use std::io::{Read, Write};
        use std::time::Duration;
        let Some(redis) = RedisServer::start() else {
            return;
        };
        let mut stream = std::net::TcpStream::connect(redis.proxy().addr()).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut reply = [0u8; 7];
        stream.write_all(b"PING\r\n").unwrap();
        stream.read_exact(&mut reply).unwrap();
        assert_eq!(&reply, b"+PONG\r\n");

        redis.black_hole();
        stream.write_all(b"PING\r\n").unwrap();
        let held = stream.read(&mut reply);
        assert!(held.is_err(), "a black hole answers nothing: {held:?}");

        redis.heal();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        stream.read_exact(&mut reply).unwrap();
        assert_eq!(&reply, b"+PONG\r\n");
    }

    #[test]
    fn a_cluster_forms_migrates_a_slot_and_survives_a_restart() {
        let Some(mut cluster) = super::RedisCluster::start() else {
            return;
        };
        // `{a}` hashes to slot 15495.
        let owner = cluster.owner(15495);
        assert_eq!(cluster.cli(owner, &["SET", "{a}x", "1"]), "OK");
        let to = (owner + 1) % 3;
        cluster.migrate_slot(15495, owner, to);
        assert_eq!(cluster.owner(15495), to);
        assert_eq!(cluster.cli(to, &["GET", "{a}x"]), "1");
        cluster.restart(to);
        assert_eq!(
            cluster.owner(15495),
            to,
            "a restarted master keeps its slots"
        );
        assert_eq!(cluster.cli(to, &["EXISTS", "{a}x"]), "0");
    }

    #[test]
    fn restart_comes_back_empty_on_the_same_port() {
        let Some(mut redis) = RedisServer::start() else {
            return;
        };
        assert_eq!(redis.cli(&["SET", "k", "v"]), "OK");
        let port = redis.port();
        redis.restart();
        assert_eq!(redis.port(), port);
        assert_eq!(redis.cli(&["EXISTS", "k"]), "0");
    }
}
