//! The Redis backend of the shared store: one Redis server or one Redis Cluster.
//!
//! One lazily connected, multiplexed [`connection::Connection`] carries every call of one
//! store (one store per runtime, that is per replica): a `ConnectionManager` for one
//! server, the `redis` crate's cluster client for a cluster. A second, RESP3 connection
//! to one node carries the notice subscription ([`notices`]). An unreachable Redis at
//! start-up is not an error: calls fail until it answers, and the loader falls back to
//! memory meanwhile.
//!
//! ```ignore
//! RedisStore::connect(RedisConfig::new("redis://cache:6379/"))?;
//! RedisStore::connect(RedisConfig::cluster(["redis://c1:7000", "redis://c2:7000"]))?;
//! ```
//!
//! # Every call is bounded
//! Each call runs under the response timeout (default 250 ms) on top of the client's own,
//! because the client's reconnect attempts can otherwise outlast it. A connection error
//! is retried once within the same deadline: after an outage the first command may get
//! the old connection's error while the next one works. The [`breaker`] turns repeated
//! failures into instant ones, and a heartbeat PING about once a second probes an open
//! breaker and keeps reconnecting while nobody calls, so recovery needs no caller and no
//! restart.
//!
//! # The scripts
//! Each operation is one Lua script (`lua/*.lua`, sharing `lua/prelude.lua`) sent with
//! EVALSHA, and as EVAL after NOSCRIPT (a restart, failover or `SCRIPT FLUSH`; see
//! [`script`]):
//! - `read`: the value, the server's `TIME`, the fence (a missing counter is created, so
//!   a later invalidation always raises it) and, when asked, the lease;
//! - `publish`: stores only under the current fence and a source version not older than
//!   the key's mark or the stored value's, with PX = keep_until − server now, releases the
//!   owner's lease, then announces it;
//! - `invalidate`: raises the fence (and, with a source version, the mark), deletes the
//!   value and the lease, announces it; one that arrives late only raises the mark;
//! - `release`: deletes the lease only if it still holds the owner's fence.
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
//! - The cluster client resends a command after a connection error on its own. For a
//!   read that takes a lease this can leave a lease no caller holds; it lapses with its
//!   TTL, and waiters end by the lease's remaining time, so it costs a delay, never a
//!   wrong value.
//! - Run the cluster with `cluster-require-full-coverage no`: with the default, every
//!   node refuses every query while one master is down.
mod breaker;
pub(crate) mod cluster;
mod connection;
mod notices;
mod script;

use super::keys::{notice_channel, EntryKey};
use super::shared::{
    Invalidated, Lease, LeaseFor, LeaseRequest, Publication, Published, Read, ServerClock,
    SharedStats, SharedStore, StoreError, StoreEvent, Wake,
};
use super::wire::{version_digits, Wire};
use breaker::Breaker;
use cluster::Shards;
pub(crate) use connection::Target;
use connection::{Connection, Patience};
use futures_util::future::BoxFuture;
use notices::NoticeHub;
use redis::aio::ConnectionManager;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{ErrorKind, PushKind, RedisError, RedisResult, ServerErrorKind};
use script::LuaScript;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, Weak};
use std::time::{Duration, Instant};
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::task::JoinHandle;

/// Unless configured: how long one call may take before it counts as failed.
pub(crate) const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_millis(250);
pub(crate) const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Unless configured: consecutive failures that open the breaker.
pub(crate) const DEFAULT_BREAKER_FAILURES: u32 = 3;
/// Unless configured: how long the breaker stays open before a probe.
pub(crate) const DEFAULT_BREAKER_COOLDOWN: Duration = Duration::from_secs(1);
const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(1);
/// How long a fence counter outlives its last raise. A lost counter is safe (it restarts
/// above every earlier fence), so this only bounds memory for keys no longer used.
const FENCE_KEEP: Duration = Duration::from_secs(3600);
/// How long a source-version mark outlives its last invalidation: the longest an
/// invalidation or a lagging publish may be delayed and still be recognized as late.
const MARK_KEEP: Duration = Duration::from_secs(24 * 3600);

/// How to reach Redis and how patient to be with it.
#[derive(Debug, Clone)]
pub(crate) struct RedisConfig {
    pub(crate) target: Target,
    /// The first segment of every key, and the notice channel's name.
    pub(crate) prefix: String,
    pub(crate) response_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) breaker_failures: u32,
    pub(crate) breaker_cooldown: Duration,
    pub(crate) heartbeat: Duration,
}

impl RedisConfig {
    /// One Redis server at `url`, with the defaults.
    pub(crate) fn new(url: impl Into<String>) -> Self {
        Self::with_target(Target::Node(url.into()))
    }

    /// A Redis Cluster reached through any of `nodes` (`redis://host:port` each), with
    /// the defaults. Calls reach every master whichever nodes are listed; the notice
    /// subscription moves only among the listed ones, so list more than one.
    pub(crate) fn cluster(nodes: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self::with_target(Target::Cluster(nodes.into_iter().map(Into::into).collect()))
    }

    fn with_target(target: Target) -> Self {
        Self {
            target,
            prefix: "stampede".into(),
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            breaker_failures: DEFAULT_BREAKER_FAILURES,
            breaker_cooldown: DEFAULT_BREAKER_COOLDOWN,
            heartbeat: DEFAULT_HEARTBEAT,
        }
    }
}

struct Scripts {
    read: LuaScript,
    publish: LuaScript,
    invalidate: LuaScript,
    release: LuaScript,
}

impl Scripts {
    fn new() -> Self {
        let prelude = include_str!("lua/prelude.lua");
        let script = |body: &str| LuaScript::new(format!("{prelude}\n{body}"));
        Self {
            read: script(include_str!("lua/read.lua")),
            publish: script(include_str!("lua/publish.lua")),
            invalidate: script(include_str!("lua/invalidate.lua")),
            release: script(include_str!("lua/release.lua")),
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
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

struct Inner {
    config: RedisConfig,
    connection: Connection,
    channel: String,
    scripts: Scripts,
    shards: Shards,
    hub: NoticeHub,
    counters: Counters,
    /// The server's clock from the latest script read, taken as of the moment it was
    /// sent: never behind the server, so a value it calls fresh is fresh.
    clock: std::sync::Mutex<Option<ServerClock>>,
}

/// A shared store in one Redis server. Dropping it stops its background tasks.
pub(crate) struct RedisStore {
    inner: Arc<Inner>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for RedisStore {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl RedisStore {
    /// Connects lazily: only a malformed URL fails here. Must run inside a Tokio runtime,
    /// which then runs the heartbeat and the subscription.
    pub(crate) fn connect(config: RedisConfig) -> Result<Self, StoreError> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(StoreError::Backend(
                "the Redis store needs a Tokio runtime to run its connections in".into(),
            ));
        }
        let backend = |e: RedisError| StoreError::Backend(e.to_string());
        if config.target.urls().is_empty() {
            return Err(StoreError::Backend(
                "a Redis Cluster needs at least one node".into(),
            ));
        }
        // The store's own deadline bounds every call; the client's are a backstop.
        let patience = Patience {
            response_timeout: config.response_timeout,
            connect_timeout: config.connect_timeout,
        };
        let connection = Connection::open(&config.target, patience).map_err(backend)?;
        let (push_sender, pushes) = mpsc::unbounded_channel();
        let subscriber = Subscriber::open(&config.target, patience, push_sender)?;

        let inner = Arc::new(Inner {
            channel: notice_channel(&config.prefix),
            shards: Shards::new(config.breaker_failures, config.breaker_cooldown),
            hub: NoticeHub::new(format!("{:016x}", fastrand::u64(..))),
            scripts: Scripts::new(),
            counters: Counters::default(),
            clock: std::sync::Mutex::new(None),
            connection,
            config,
        });
        let tasks = vec![
            tokio::spawn(receive_pushes(Arc::downgrade(&inner), pushes)),
            tokio::spawn(heartbeat(Arc::downgrade(&inner), subscriber)),
        ];
        Ok(Self { inner, tasks })
    }

    /// Whether the notice subscription is up; `wait_for(|up| *up)` to wait for it.
    pub(crate) fn subscription(&self) -> watch::Receiver<bool> {
        self.inner.hub.subscription()
    }

    pub(crate) fn prefix(&self) -> &str {
        &self.inner.config.prefix
    }
}

impl Inner {
    /// Runs one call through the breaker, under the response timeout, retrying once on a
    /// connection error (the reconnect gap) while time remains. The first attempt may have
    /// run before its connection broke, so `attempt` must be safe to run twice: every
    /// script is, except a read that takes a lease, whose retry only reads.
    async fn call<T, F, Fut>(&self, key: &EntryKey, attempt: F) -> Result<T, StoreError>
    where
        F: Fn(Connection) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let (_, breaker) = self.shards.for_key(key.value());
        self.call_through(&breaker, attempt).await
    }

    /// [`Inner::call`] through a given breaker: the one of the master it goes to.
    async fn call_through<T, F, Fut>(&self, breaker: &Breaker, attempt: F) -> Result<T, StoreError>
    where
        F: Fn(Connection) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        // Refused calls are not errors of Redis: the breaker's state and time degraded
        // account for them.
        let Some(pass) = breaker.pass() else {
            return Err(StoreError::Unavailable);
        };
        let timeout = self.config.response_timeout;
        let outcome = tokio::time::timeout(timeout, async {
            match attempt(self.connection.clone()).await {
                Err(e)
                    if e.is_io_error()
                        || e.is_connection_dropped()
                        || e.is_connection_refusal() =>
                {
                    attempt(self.connection.clone()).await
                }
                other => other,
            }
        })
        .await;
        let result = match outcome {
            Ok(Ok(value)) => {
                breaker.succeeded(pass);
                return Ok(value);
            }
            Ok(Err(e)) if slot_in_motion(&e) => {
                // The node answered: its slot is migrating, not its health failing.
                breaker.succeeded(pass);
                bump(&self.counters.errors);
                return Err(StoreError::Backend(e.to_string()));
            }
            Ok(Err(e)) => StoreError::Backend(e.to_string()),
            Err(_) => StoreError::Timeout(timeout),
        };
        breaker.failed(pass);
        bump(&self.counters.errors);
        Err(result)
    }

    async fn read(&self, key: &EntryKey, lease: Option<LeaseRequest>) -> Result<Read, StoreError> {
        // A refresh takes the lease whatever is stored; anything else is answered by a
        // fresh value without the script when there is one.
        if !matches!(
            lease,
            Some(LeaseRequest {
                purpose: LeaseFor::Refresh,
                ..
            })
        ) {
            if let Some(read) = self.read_fresh(key).await? {
                return Ok(read);
            }
        }
        let (mode, ttl) = match lease {
            None => ("none", 0),
            Some(LeaseRequest { purpose, ttl }) => (
                match purpose {
                    LeaseFor::Miss => "miss",
                    LeaseFor::Refresh => "refresh",
                },
                millis(ttl).max(1),
            ),
        };
        let fence_keep = millis(FENCE_KEEP).max(ttl);
        let sent = Instant::now();
        let attempts = AtomicU64::new(0);
        let (now, envelope, fence, lease, left): (u64, Option<Vec<u8>>, u64, String, u64) = self
            .call(key, |mut connection| {
                // The retry after a connection error (the reconnect gap) only reads: the
                // first attempt may have taken the lease, and taking it again would make
                // this caller wait for a lease of its own. A lease nobody holds that way
                // is consumed by this caller's publish (same fence), or lapses.
                let first = attempts.fetch_add(1, Ordering::Relaxed) == 0;
                let (mode, ttl) = if first { (mode, ttl) } else { ("none", 0) };
                let mut invocation = self.scripts.read.prepare_invoke();
                entry_keys(&mut invocation, key);
                invocation.arg(mode).arg(ttl).arg(fence_keep);
                async move { invocation.invoke_async(&mut connection).await }
            })
            .await?;
        let received = Instant::now();
        *self.clock.lock().unwrap_or_else(PoisonError::into_inner) =
            Some(ServerClock::new(now, sent));
        bump(if envelope.is_some() {
            &self.counters.hits
        } else {
            &self.counters.misses
        });
        let lease = match lease.as_str() {
            "granted" => Lease::Granted { fence },
            "held" => Lease::HeldBy {
                remaining: Duration::from_millis(left),
            },
            _ => Lease::NotTaken,
        };
        Ok(Read {
            clock: ServerClock::new(now, received),
            envelope,
            fence,
            lease,
        })
    }

    /// The common hit without a script: one `MGET` of the value and its fence (one slot),
    /// served when the value is fresh by a server clock read within the last second.
    /// `None` sends the caller to the read script: no recent clock, nothing stored, no
    /// fence, an envelope this cannot read, or a value near or past its fresh time.
    async fn read_fresh(&self, key: &EntryKey) -> Result<Option<Read>, StoreError> {
        let clock = *self.clock.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(clock) = clock.filter(|clock| clock.age() < FAST_READ_CLOCK_AGE) else {
            return Ok(None);
        };
        let (envelope, fence): (Option<Vec<u8>>, Option<String>) = self
            .call(key, |mut connection| {
                let mut mget = redis::cmd("MGET");
                mget.arg(key.value()).arg(key.fence());
                async move { mget.query_async(&mut connection).await }
            })
            .await?;
        let (Some(envelope), Some(fence)) = (envelope, fence.as_deref().and_then(counter)) else {
            return Ok(None);
        };
        let fresh = Wire::default().header(&envelope).is_ok_and(|header| {
            header.fresh_until_ms > clock.now_ms().saturating_add(FAST_READ_MARGIN_MS)
        });
        if !fresh {
            return Ok(None);
        }
        bump(&self.counters.hits);
        Ok(Some(Read {
            clock,
            envelope: Some(envelope),
            fence,
            lease: Lease::NotTaken,
        }))
    }

    async fn publish(
        &self,
        key: &EntryKey,
        publication: Publication,
    ) -> Result<Published, StoreError> {
        let version = publication
            .source_version
            .map(version_digits)
            .unwrap_or_default();
        let (outcome, notices): (String, u64) = self
            .call(key, |mut connection| {
                let mut invocation = self.scripts.publish.prepare_invoke();
                entry_keys(&mut invocation, key);
                invocation
                    .arg(publication.fence.to_string())
                    .arg(publication.envelope.as_slice())
                    .arg(publication.keep_until_ms)
                    .arg(version.as_str())
                    .arg(self.channel.as_str())
                    .arg(self.hub.node());
                async move { invocation.invoke_async(&mut connection).await }
            })
            .await?;
        self.counters
            .notices_sent
            .fetch_add(notices, Ordering::Relaxed);
        Ok(match outcome.as_str() {
            "stored" => Published::Stored,
            "fence" => Published::RefusedByFence,
            "version" => Published::RefusedBySourceVersion,
            _ => Published::AlreadyExpired,
        })
    }

    async fn invalidate(
        &self,
        key: &EntryKey,
        source_version: Option<u64>,
    ) -> Result<Invalidated, StoreError> {
        let version = source_version.map(version_digits).unwrap_or_default();
        let fence: i64 = self
            .call(key, |mut connection| {
                let mut invocation = self.scripts.invalidate.prepare_invoke();
                entry_keys(&mut invocation, key);
                invocation
                    .arg(self.channel.as_str())
                    .arg(self.hub.node())
                    .arg(millis(FENCE_KEEP))
                    .arg(version.as_str())
                    .arg(millis(MARK_KEEP));
                async move { invocation.invoke_async(&mut connection).await }
            })
            .await?;
        Ok(match u64::try_from(fence) {
            Ok(fence) => {
                bump(&self.counters.notices_sent);
                Invalidated::Fenced { fence }
            }
            Err(_) => Invalidated::Late,
        })
    }

    async fn release(&self, key: &EntryKey, fence: u64) -> Result<bool, StoreError> {
        let released: i64 = self
            .call(key, |mut connection| {
                let mut invocation = self.scripts.release.prepare_invoke();
                entry_keys(&mut invocation, key);
                invocation
                    .arg(fence.to_string())
                    .arg(self.channel.as_str())
                    .arg(self.hub.node());
                async move { invocation.invoke_async(&mut connection).await }
            })
            .await?;
        if released == 1 {
            bump(&self.counters.notices_sent);
        }
        Ok(released == 1)
    }

    /// Every entry with a key matching `pattern`, each once, from every master. A cluster's
    /// masters are read from a fresh `CLUSTER SLOTS` first: a scan that skipped a master
    /// would leave its entries behind.
    async fn entries(&self, pattern: &str) -> Result<Vec<EntryKey>, StoreError> {
        let masters = match &self.connection {
            Connection::Node(_) => vec![String::new()],
            Connection::Cluster(_) => {
                let breaker = self.shards.breaker("");
                let reply = self
                    .call_through(&breaker, |connection| async move {
                        let Connection::Cluster(mut cluster) = connection else {
                            unreachable!("matched a cluster connection above")
                        };
                        let slots = redis::cmd("CLUSTER").arg("SLOTS").to_owned();
                        cluster
                            .route_command(
                                slots,
                                RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
                            )
                            .await
                    })
                    .await?;
                if !self.shards.update(&reply) {
                    return Err(StoreError::Backend(
                        "CLUSTER SLOTS gave no slot map to scan".into(),
                    ));
                }
                self.shards.masters()
            }
        };
        // By value key: an entry's four keys name it once.
        let mut found = std::collections::BTreeMap::new();
        for master in masters {
            let breaker = self.shards.breaker(&master);
            let mut cursor = 0_u64;
            loop {
                let (next, keys): (u64, Vec<String>) = self
                    .call_through(&breaker, |connection| {
                        scan(connection, &master, cursor, pattern)
                    })
                    .await?;
                found.extend(
                    keys.iter()
                        .filter_map(|key| EntryKey::of_stored(key))
                        .map(|entry| (entry.value().to_owned(), entry)),
                );
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        Ok(found.into_values().collect())
    }
}

/// One `SCAN` step on the master at `address` (any node when it is `""`).
async fn scan(
    mut connection: Connection,
    address: &str,
    cursor: u64,
    pattern: &str,
) -> RedisResult<(u64, Vec<String>)> {
    let mut command = redis::cmd("SCAN");
    command
        .arg(cursor)
        .arg("MATCH")
        .arg(pattern)
        .arg("COUNT")
        .arg(1000);
    let target = address
        .rsplit_once(':')
        .and_then(|(host, port)| Some((host.to_owned(), port.parse().ok()?)));
    match (&mut connection, target) {
        (Connection::Cluster(cluster), Some((host, port))) => {
            let reply = cluster
                .route_command(
                    command,
                    RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host, port }),
                )
                .await?;
            Ok(redis::from_redis_value(reply)?)
        }
        _ => command.query_async(&mut connection).await,
    }
}

/// How recent the server clock must be for a read without the script: the local
/// monotonic clock carries it forward, and a second keeps any drift far below a millisecond.
const FAST_READ_CLOCK_AGE: Duration = Duration::from_secs(1);
/// A value this close to its fresh time goes through the script, which reads the clock.
const FAST_READ_MARGIN_MS: u64 = 2;

/// A fence counter as the scripts write and accept it: decimal digits below 2^53.
fn counter(text: &str) -> Option<u64> {
    let digits = text.len() <= 16 && !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    digits
        .then(|| text.parse::<u64>().ok())
        .flatten()
        .filter(|&n| n < 1 << 53)
}

/// The error a healthy node gives while a slot moves: TRYAGAIN, when a script's keys are
/// split between the two nodes. (A MOVED or ASK left over once the client's redirects ran
/// out is not one: a dead master's slots end that way too.)
fn slot_in_motion(error: &RedisError) -> bool {
    error.kind() == ErrorKind::Server(ServerErrorKind::TryAgain)
}

/// The keys every script names, in the order the scripts read them (`KEYS[1..4]`): the
/// value, the lease, the fence counter and the source-version mark, all under one hash tag.
fn entry_keys(invocation: &mut script::Invocation<'_>, key: &EntryKey) {
    invocation
        .key(key.value())
        .key(key.lease())
        .key(key.fence())
        .key(key.source_version());
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Feeds the subscription's pushes to the hub until the store is dropped.
async fn receive_pushes(inner: Weak<Inner>, mut pushes: mpsc::UnboundedReceiver<redis::PushInfo>) {
    while let Some(push) = pushes.recv().await {
        let Some(inner) = inner.upgrade() else { return };
        match push.kind {
            PushKind::Message => {
                if let Some(payload) = push.data.into_iter().nth(1) {
                    if let Ok(payload) = redis::from_redis_value::<Vec<u8>>(payload) {
                        inner.hub.deliver(&payload);
                    }
                }
            }
            PushKind::Subscribe => inner.hub.set_subscribed(true),
            PushKind::Disconnection => inner.hub.set_subscribed(false),
            _ => {}
        }
    }
}

/// The notice subscription's connection: one node. Notices go out with plain `PUBLISH`,
/// which a cluster broadcasts to every node, so in a cluster any node will do, and the
/// subscriber moves to the next one when its node does not let it subscribe.
struct Subscriber {
    urls: Vec<String>,
    at: usize,
    patience: Patience,
    pushes: mpsc::UnboundedSender<redis::PushInfo>,
    connection: ConnectionManager,
}

impl Subscriber {
    fn open(
        target: &Target,
        patience: Patience,
        pushes: mpsc::UnboundedSender<redis::PushInfo>,
    ) -> Result<Self, StoreError> {
        let backend = |e: RedisError| StoreError::Backend(e.to_string());
        let urls = target.urls().to_vec();
        // Every URL is checked now, so moving on later cannot fail on a malformed one.
        for url in &urls {
            connection::subscriber(url, patience, pushes.clone()).map_err(backend)?;
        }
        let connection =
            connection::subscriber(&urls[0], patience, pushes.clone()).map_err(backend)?;
        Ok(Self {
            urls,
            at: 0,
            patience,
            pushes,
            connection,
        })
    }

    /// Moves to the next node, if there is another.
    fn next_node(&mut self) {
        if self.urls.len() < 2 {
            return;
        }
        self.at = (self.at + 1) % self.urls.len();
        if let Ok(connection) =
            connection::subscriber(&self.urls[self.at], self.patience, self.pushes.clone())
        {
            self.connection = connection;
        }
    }
}

/// About once a second: in a cluster, reload the slot map; PING every master through its
/// breaker (probing it when open, reconnecting while nobody calls); keep the subscription
/// up, subscribing again (in a cluster, on the next node) when it dropped.
async fn heartbeat(inner: Weak<Inner>, mut subscriber: Subscriber) {
    let period = match inner.upgrade() {
        Some(inner) => inner.config.heartbeat,
        None => return,
    };
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(inner) = inner.upgrade() else { return };
        inner.hub.prune();
        let timeout = inner.config.response_timeout;
        if let Connection::Cluster(connection) = &inner.connection {
            let mut connection = connection.clone();
            let slots = connection.route_command(
                redis::cmd("CLUSTER").arg("SLOTS").to_owned(),
                RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
            );
            if let Ok(Ok(reply)) = tokio::time::timeout(timeout, slots).await {
                inner.shards.update(&reply);
            }
        }
        for master in inner.shards.masters() {
            let breaker = inner.shards.breaker(&master);
            let _ = inner
                .call_through(&breaker, |connection| ping(connection, &master))
                .await;
        }
        if *inner.hub.subscription().borrow() {
            let ping = redis::cmd("PING");
            let answered =
                tokio::time::timeout(timeout, ping.query_async::<()>(&mut subscriber.connection))
                    .await;
            if !matches!(answered, Ok(Ok(()))) {
                // A black hole never disconnects; a silent subscription is a lost one.
                inner.hub.set_subscribed(false);
            }
        } else {
            let channel = inner.channel.clone();
            let subscribed =
                tokio::time::timeout(timeout, subscriber.connection.subscribe(&channel)).await;
            if matches!(subscribed, Ok(Ok(()))) {
                inner.hub.set_subscribed(true);
            } else {
                subscriber.next_node();
            }
        }
    }
}

/// PING the master at `address` (`host:port`), or any node when it is `""`.
async fn ping(mut connection: Connection, address: &str) -> RedisResult<()> {
    let target = address
        .rsplit_once(':')
        .and_then(|(host, port)| Some((host.to_owned(), port.parse().ok()?)));
    match (&mut connection, target) {
        (Connection::Cluster(cluster), Some((host, port))) => cluster
            .route_command(
                redis::cmd("PING"),
                RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host, port }),
            )
            .await
            .map(drop),
        _ => redis::cmd("PING").query_async(&mut connection).await,
    }
}

impl SharedStore for RedisStore {
    fn read<'a>(
        &'a self,
        key: &'a EntryKey,
        lease: Option<LeaseRequest>,
    ) -> BoxFuture<'a, Result<Read, StoreError>> {
        Box::pin(self.inner.read(key, lease))
    }

    fn publish<'a>(
        &'a self,
        key: &'a EntryKey,
        publication: Publication,
    ) -> BoxFuture<'a, Result<Published, StoreError>> {
        Box::pin(self.inner.publish(key, publication))
    }

    fn invalidate<'a>(
        &'a self,
        key: &'a EntryKey,
    ) -> BoxFuture<'a, Result<Invalidated, StoreError>> {
        Box::pin(self.inner.invalidate(key, None))
    }

    fn invalidate_at<'a>(
        &'a self,
        key: &'a EntryKey,
        source_version: u64,
    ) -> BoxFuture<'a, Result<Invalidated, StoreError>> {
        Box::pin(self.inner.invalidate(key, Some(source_version)))
    }

    fn release<'a>(
        &'a self,
        key: &'a EntryKey,
        fence: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(self.inner.release(key, fence))
    }

    fn entries<'a>(&'a self, pattern: &'a str) -> BoxFuture<'a, Result<Vec<EntryKey>, StoreError>> {
        Box::pin(self.inner.entries(pattern))
    }

    fn watch(&self, key: &EntryKey) -> oneshot::Receiver<Wake> {
        self.inner.hub.watch(key.value())
    }

    fn events(&self) -> broadcast::Receiver<StoreEvent> {
        self.inner.hub.events()
    }

    fn count_decode_failure(&self) {
        bump(&self.inner.counters.decode_failures);
    }

    fn stats(&self) -> SharedStats {
        let counters = &self.inner.counters;
        let (breaker, breaker_opened, degraded) = self.inner.shards.summary();
        SharedStats {
            hits: counters.hits.load(Ordering::Relaxed),
            misses: counters.misses.load(Ordering::Relaxed),
            errors: counters.errors.load(Ordering::Relaxed),
            decode_failures: counters.decode_failures.load(Ordering::Relaxed),
            notices_sent: counters.notices_sent.load(Ordering::Relaxed),
            notices_received: self.inner.hub.received(),
            subscribed: self.inner.hub.is_subscribed(),
            breaker,
            breaker_opened,
            degraded,
        }
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;

#[cfg(test)]
#[path = "cluster_tests.rs"]
mod cluster_tests;
