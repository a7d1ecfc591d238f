//! Test support for stampede's shared-store tests: a throwaway `redis-server` on a free
//! loopback port, reached through a TCP proxy that can stop forwarding (a black hole) and
//! resume. Also [`Skewed`], a seeded key stream with one hot key, for hot-key tests.
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
mod sentinel;
mod server;
mod skewed;
mod tls;

pub use cluster::RedisCluster;
pub use proxy::Proxy;
pub use sentinel::Sentinels;
pub use server::{RedisServer, REQUIRE_REDIS_VAR};
pub use skewed::Skewed;
pub use tls::Certificates;
