//! The Redis backend of the shared store: one Redis server or one Redis Cluster.
//!
//! One lazily connected, multiplexed [`connection::Connection`] carries every call of one
//! store (one store per runtime, that is per replica): a `ConnectionManager` for one
//! server, the `redis` crate's cluster client for a cluster. A second, RESP3 connection
//! to one node carries the notice subscription ([`subscriber`]). An unreachable Redis at
//! start-up is not an error: calls fail until it answers, and the loader falls back to
//! memory meanwhile.
//!
//! ```ignore
//! RedisStore::connect(RedisConfig::new("redis://cache:6379/"))?;
//! RedisStore::connect(RedisConfig::cluster(["redis://c1:7000", "redis://c2:7000"]))?;
//! ```
//!
//! Here: the store and its settings. [`call`]: how one call is bounded, retried and
//! judged by the breaker. [`ops`]: the operations, each one script. [`subscriber`]: the
//! notice subscription and the heartbeat. [`notices`], [`breaker`], [`cluster`],
//! [`connection`], [`script`]: one concern each.
//!
//! # The scripts
//! Each operation is one Lua script (`lua/*.lua`, sharing `lua/prelude.lua`) sent with
//! EVALSHA, and as EVAL after NOSCRIPT (a restart, failover or `SCRIPT FLUSH`; see
//! [`script`]):
//! - `read`: the value, the server's `TIME`, the fence (a missing one is created, so a
//!   later invalidation always raises it) and, when asked, the lease, named by the
//!   replica's token, taken over from a holder that has gone quiet;
//! - `publish`: stores only under the current fence and a source version not older than
//!   the key's mark or the stored value's, with PX = keep_until − server now, ends the
//!   holder's lease, then announces it (a refusal too);
//! - `invalidate`: deletes the value and the lease, raises the fence (and, with a source
//!   version, the mark), announces it; one that arrives late only raises the mark, and
//!   announces the current fence, so memory copies from older fences go;
//! - `release`: deletes the lease only if it still holds the holder's token;
//! - `beat`: the holder's sign of life while its load runs.
//!
//! # In a Redis Cluster
//! - Every key a script names shares the entry's hash tag, so each script runs on the
//!   one master owning that slot; the cluster client routes EVALSHA, and EVAL after
//!   NOSCRIPT, by the first key.
//! - Each master has its own breaker ([`cluster`]): a dead shard's keys fail fast while
//!   the other shards' keys are served as before.
//! - While a slot migrates, a script whose keys are split between the two nodes (or that
//!   names a key that does not exist yet, such as a lease) gets TRYAGAIN; the client
//!   retries within the call's deadline and a migration that outlasts it fails the call
//!   (the loader loads locally). That is the slot moving, not the node failing, so it
//!   does not count against the master's breaker. MOVED and ASK are followed by the
//!   client.
//! - The cluster client resends a command after a connection error on its own. A read
//!   that takes a lease is safe to send twice: the lease is named by the replica's token,
//!   and the second read gets the same lease back.
//! - Run the cluster with `cluster-require-full-coverage no`: with the default, every
//!   node refuses every query while one master is down.
pub(crate) mod access;
mod breaker;
mod call;
pub(crate) mod cluster;
mod connection;
mod diagnosis;
mod hearing;
mod listen;
#[cfg(feature = "simulation")]
pub(crate) use listen::{simulate_buckets, simulate_linger};
mod notices;
mod ops;
mod permits;
mod scan;
mod script;
mod sentinel;
mod subscriber;
mod tags;

use super::background;
use super::keys::{notice_channel, EntryKey};
use super::store::{ServerClock, StoreError};
use crate::hearing::HearingLease;
use access::{Access, Target};
use cluster::Shards;
use connection::{Connection, Patience};
use diagnosis::Problems;
use notices::NoticeHub;
use redis::RedisError;
use script::LuaScript;
use sentinel::Follower;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;
use subscriber::Subscriber;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Unless configured: how long one call may take before it counts as failed.
pub(crate) const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_millis(250);
pub(crate) const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Unless configured: consecutive failures that open the breaker.
pub(crate) const DEFAULT_BREAKER_FAILURES: u32 = 3;
/// Unless configured: how long the breaker stays open before a probe.
pub(crate) const DEFAULT_BREAKER_COOLDOWN: Duration = Duration::from_secs(1);
const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(1);
/// Unless configured: how long copies stay servable without word from the subscription.
pub(crate) const DEFAULT_HEARING_LEASE: Duration = Duration::from_millis(500);

/// How to reach Redis and how patient to be with it.
#[derive(Clone)]
pub(crate) struct RedisConfig {
    pub(crate) access: Access,
    /// The first segment of every key, and the notice channel's name.
    pub(crate) prefix: String,
    pub(crate) response_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) breaker_failures: u32,
    pub(crate) breaker_cooldown: Duration,
    pub(crate) heartbeat: Duration,
    /// How long memory copies stay servable after the subscription was last confirmed.
    pub(crate) hearing_lease: Duration,
    /// Whether this replica keeps copies (tiered), and so renews its hearing lease.
    pub(crate) keeps_hearing: bool,
}

impl RedisConfig {
    /// One Redis server at `url`, with the defaults (tests: a malformed URL panics).
    #[cfg(test)]
    pub(crate) fn new(url: impl Into<String>) -> Self {
        Self::over(Access::node(&url.into()).expect("a Redis URL"))
    }

    /// A Redis Cluster reached through any of `nodes` (`redis://host:port` each), with
    /// the defaults. Calls reach every master whichever nodes are listed; the notice
    /// subscription moves only among the listed ones, so list more than one.
    #[cfg(test)]
    pub(crate) fn cluster(nodes: impl IntoIterator<Item = impl Into<String>>) -> Self {
        let nodes: Vec<String> = nodes.into_iter().map(Into::into).collect();
        Self::over(Access::cluster(&nodes).expect("Redis URLs"))
    }

    /// Redis as `access` reaches it, with the default timeouts.
    pub(crate) fn over(access: Access) -> Self {
        Self {
            access,
            prefix: "stampede".into(),
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            breaker_failures: DEFAULT_BREAKER_FAILURES,
            breaker_cooldown: DEFAULT_BREAKER_COOLDOWN,
            heartbeat: DEFAULT_HEARTBEAT,
            hearing_lease: DEFAULT_HEARING_LEASE,
            keeps_hearing: false,
        }
    }
}

/// Every script, as EVALSHA names it and EVAL sends it. The model of the server
/// (`shared::model`) knows them by these texts too.
#[derive(Clone)]
pub(crate) struct Scripts {
    pub(crate) read: LuaScript,
    pub(crate) publish: LuaScript,
    pub(crate) invalidate: LuaScript,
    pub(crate) release: LuaScript,
    pub(crate) beat: LuaScript,
    pub(crate) tag: LuaScript,
    pub(crate) permits: LuaScript,
    pub(crate) hearing: LuaScript,
    pub(crate) probe: LuaScript,
}

impl Scripts {
    /// The scripts, hashed once per process (each replica's store holds a copy).
    pub(crate) fn new() -> Self {
        static SCRIPTS: std::sync::OnceLock<Scripts> = std::sync::OnceLock::new();
        SCRIPTS.get_or_init(Self::hashed).clone()
    }

    fn hashed() -> Self {
        let prelude = include_str!("lua/prelude.lua");
        let script = |body: &str| LuaScript::new(format!("{prelude}\n{body}"));
        Self {
            read: script(include_str!("lua/read.lua")),
            publish: script(include_str!("lua/publish.lua")),
            invalidate: script(include_str!("lua/invalidate.lua")),
            release: script(include_str!("lua/release.lua")),
            beat: script(include_str!("lua/beat.lua")),
            tag: script(include_str!("lua/tag.lua")),
            permits: script(include_str!("lua/permits.lua")),
            hearing: script(include_str!("lua/hearing.lua")),
            probe: LuaScript::new(include_str!("lua/probe.lua").to_owned()),
        }
    }
}

#[derive(Default)]
struct Counters {
    hits: AtomicU64,
    misses: AtomicU64,
    errors: AtomicU64,
    decode_failures: AtomicU64,
    notices_sent: AtomicU64,
    late_answers: AtomicU64,
    orphans_released: AtomicU64,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

struct Client {
    config: RedisConfig,
    /// `None` until the Sentinels name a master; replaced when they name another.
    connection: RwLock<Option<Connection>>,
    /// The Sentinels, for a master they name.
    follower: Option<Follower>,
    /// The address of the master the connection goes to, for a master Sentinels name.
    master: Mutex<Option<(String, u16)>>,
    /// One search for the master at a time.
    finding: tokio::sync::Mutex<()>,
    /// How many times the master moved (the subscription follows it by this count).
    moves: AtomicU64,
    /// Wakes the search for the master early: a call to it failed.
    follow_now: tokio::sync::Notify,
    /// Failures that point at a setting (credentials, permissions, TLS, Sentinels).
    problems: Problems,
    /// The permissions were probed (once per store, see [`diagnosis`]).
    probed: std::sync::atomic::AtomicBool,
    channel: String,
    scripts: Scripts,
    shards: Shards,
    hub: NoticeHub,
    /// The notice buckets this replica subscribes to, and why ([`listen`]).
    interest: listen::Interest,
    /// Subscribes share it; unsubscribing idle buckets takes it alone, so an unsubscribe
    /// never lands after a load's subscribe to the same bucket.
    subscribing: tokio::sync::RwLock<()>,
    /// The subscription's connection (a handle on it), to subscribe buckets through;
    /// `None` until the Sentinels name a master.
    listener: Mutex<Option<connection::Listener>>,
    /// Shared with calls finished in the background after their caller gave up.
    counters: Arc<Counters>,
    /// Calls given up on that may still send: a release waits for them.
    late: Arc<call::LateCalls>,
    /// The server's clock from the latest script read, taken as of the moment it was
    /// sent: never behind the server, so a value it calls fresh is fresh.
    clock: Mutex<Option<ServerClock>>,
}

/// A shared store in one Redis server or cluster. Dropping it stops its background tasks.
pub(crate) struct RedisStore {
    client: Arc<Client>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for RedisStore {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
        // Nothing serves this replica's copies any more: its entry leaves the registry of
        // hearers, so acknowledged writes stop waiting for it (best effort: else it ends
        // with its lease).
        background::spawn(hearing::leave(self.client.clone()));
    }
}

impl RedisStore {
    /// Connects lazily: only a malformed URL fails here. Must be called inside a Tokio
    /// runtime, like every call after it; the subscription and the heartbeat run on the
    /// background threads ([`background`]), so they outlive that runtime.
    ///
    /// Longer than a screen: it wires one client's parts (connection, breaker, notices,
    /// subscription, heartbeat) once, in the order they depend on each other.
    pub(crate) fn connect(config: RedisConfig) -> Result<Self, StoreError> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(StoreError::Backend(
                "the Redis store needs a Tokio runtime to run its connections in".into(),
            ));
        }
        let backend = |e: RedisError| StoreError::Backend(e.to_string());
        if let Target::Cluster(nodes) = &config.access.target
            && nodes.is_empty()
        {
            return Err(StoreError::Backend(
                "a Redis Cluster needs at least one node".into(),
            ));
        }
        access::prepare_tls();
        if config.access.insecure() {
            tracing::warn!(target: "stampede", redis = %config.access.describe(), "TLS without certificate checks (`tls_insecure` or `#insecure`): nothing proves this is the Redis it claims to be; for self-signed test setups only");
        }
        // The client spawns tasks of its own (reconnects, disconnect watchers) on the
        // runtime it is made in: the store's, which lives as long as the process.
        let store_runtime = background::handle();
        let _entered = store_runtime.enter();
        // The store's own deadline bounds every call; the client's are a backstop.
        let patience = Patience {
            response_timeout: config.response_timeout,
            connect_timeout: config.connect_timeout,
        };
        let connection = Connection::open(&config.access, patience).map_err(backend)?;
        let follower = match &config.access.target {
            Target::Sentinel(sentinels) => {
                Some(Follower::new(&config.access, sentinels, patience).map_err(backend)?)
            }
            _ => None,
        };
        let (push_sender, pushes) = mpsc::unbounded_channel();
        let (outbox, owed) = mpsc::unbounded_channel();
        let channel = notice_channel(&config.prefix);
        let subscriber = Subscriber::open(&config.access, patience, push_sender)?;

        let client = Arc::new(Client {
            hub: NoticeHub::new(
                format!("{:016x}", fastrand::u64(..)),
                channel.clone(),
                HearingLease::new(config.hearing_lease, config.keeps_hearing),
                outbox,
            ),
            channel,
            shards: Shards::new(config.breaker_failures, config.breaker_cooldown),
            interest: listen::Interest::default(),
            subscribing: tokio::sync::RwLock::new(()),
            listener: Mutex::new(subscriber.connection()),
            scripts: Scripts::new(),
            counters: Arc::default(),
            late: Arc::default(),
            clock: Mutex::new(None),
            connection: RwLock::new(connection),
            follower,
            master: Mutex::new(None),
            finding: tokio::sync::Mutex::new(()),
            moves: AtomicU64::new(0),
            follow_now: tokio::sync::Notify::new(),
            problems: Problems::default(),
            probed: Default::default(),
            config,
        });
        let store = background::handle();
        let mut tasks = vec![
            store.spawn(subscriber::receive_pushes(Arc::downgrade(&client), pushes)),
            store.spawn(subscriber::heartbeat(Arc::downgrade(&client), subscriber)),
            store.spawn(hearing::send_acknowledgements(
                Arc::downgrade(&client),
                owed,
            )),
        ];
        if client.config.keeps_hearing {
            tasks.push(store.spawn(hearing::keep_hearing(Arc::downgrade(&client))));
        }
        if client.follower.is_some() {
            tasks.push(store.spawn(sentinel::keep_following(Arc::downgrade(&client))));
        }
        Ok(Self { client, tasks })
    }
}

impl Client {
    /// The connection calls go through: `None` while no master is known.
    fn connection(&self) -> Option<Connection> {
        self.connection
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// The keys every script names, in the order the scripts read them (`KEYS[1..3]`): the
/// value, the lease and the fence (with the mark), all under one hash tag.
fn entry_keys(invocation: &mut script::Invocation, key: &EntryKey) {
    invocation
        .key(key.value())
        .key(key.lease())
        .key(key.fence());
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// A fence as the scripts write and accept it: decimal digits below 2^53, before the
/// mark when the fence key holds one.
fn fence_of(text: &str) -> Option<u64> {
    let fence = text.split(' ').next().unwrap_or_default();
    let digits =
        fence.len() <= 16 && !fence.is_empty() && fence.bytes().all(|b| b.is_ascii_digit());
    digits
        .then(|| fence.parse::<u64>().ok())
        .flatten()
        .filter(|&n| n < 1 << 53)
}

#[cfg(test)]
mod tests;
