//! The store's operations, each one script (or, for a fresh hit, one `MGET`), through
//! [`Inner::call`].
use super::connection::Connection;
use super::{bump, entry_keys, fence_of, millis, Inner};
use crate::remote::keys::EntryKey;
use crate::remote::store::{
    Holder, Invalidated, Lease, LeaseFor, LeaseRequest, LeaseToken, Publication, Published, Read,
    Scan, ScanFailure, ServerClock, StoreError,
};
use crate::remote::wire::{version_digits, Wire};
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::RedisResult;
use std::sync::atomic::Ordering;
use std::sync::PoisonError;
use std::time::{Duration, Instant};

/// How recent the server clock must be for a read without the script: the local
/// monotonic clock carries it forward, and a second keeps any drift far below a millisecond.
const FAST_READ_CLOCK_AGE: Duration = Duration::from_secs(1);
/// A value this close to its fresh time goes through the script, which reads the clock.
const FAST_READ_MARGIN_MS: u64 = 2;
/// How far past the end of its key's TTL an envelope's last deadline may reach and still
/// be one we wrote (the publisher's estimate of the server's clock lags a little).
const DEADLINE_SLACK_MS: u64 = 1000;

/// What the read script answers (see `lua/read.lua`).
type ReadReply = (
    u64,
    Option<Vec<u8>>,
    u64,
    String,
    i64,
    i64,
    i64,
    i64,
    String,
    String,
);

impl Inner {
    pub(super) async fn read(
        &self,
        key: &EntryKey,
        lease: Option<LeaseRequest>,
    ) -> Result<Read, StoreError> {
        // A refresh takes the lease whatever is stored; anything else is answered by a
        // fresh value without the script when there is one.
        let takes_lease_anyway = matches!(
            lease,
            Some(LeaseRequest {
                purpose: LeaseFor::Refresh | LeaseFor::Force,
                ..
            })
        );
        if !takes_lease_anyway {
            if let Some(read) = self.read_fresh(key).await? {
                return Ok(read);
            }
        }
        let ms = |duration: Option<Duration>| duration.map_or(-1, |d| millis(d) as i64);
        let (mode, ttl, token, quiet_after, held_after, recompute) = match lease {
            None => ("none", 0, String::new(), -1, -1, -1),
            Some(request) => (
                match request.purpose {
                    LeaseFor::Miss => "miss",
                    LeaseFor::Refresh => "refresh",
                    LeaseFor::Force => "force",
                },
                millis(request.ttl).max(1),
                request.token.to_string(),
                ms(request.quiet_after),
                ms(request.held_after),
                ms(request.recompute),
            ),
        };
        let sent = Instant::now();
        let (
            now,
            envelope,
            fence,
            lease,
            left,
            held_for,
            silent_for,
            holder_recompute,
            repaired,
            incarnation,
        ): ReadReply = self
            .call(key, |mut connection| {
                let mut invocation = self.scripts.read.prepare_invoke();
                entry_keys(&mut invocation, key);
                invocation
                    .arg(mode)
                    .arg(ttl)
                    .arg(token.as_str())
                    .arg(quiet_after)
                    .arg(held_after)
                    .arg(recompute);
                async move { invocation.invoke_async(&mut connection).await }
            })
            .await?;
        let received = Instant::now();
        *self.clock.lock().unwrap_or_else(PoisonError::into_inner) =
            Some(ServerClock::new(now, sent));
        if !repaired.is_empty() {
            tracing::warn!(target: "stampede", key = %key, found = %repaired, "a key of stampede's held something it did not write; read as absent, to be overwritten");
        }
        bump(if envelope.is_some() {
            &self.counters.hits
        } else {
            &self.counters.misses
        });
        let ms = |ms: i64| Duration::from_millis(ms.max(0) as u64);
        let lease = match lease.as_str() {
            "granted" => Lease::Granted {
                fence,
                took_over: false,
            },
            "taken over" => Lease::Granted {
                fence,
                took_over: true,
            },
            "held" => Lease::HeldBy(Holder {
                remaining: ms(left),
                held_for: ms(held_for),
                silent_for: ms(silent_for),
                recompute: (holder_recompute >= 0).then(|| ms(holder_recompute)),
            }),
            _ => Lease::NotTaken,
        };
        Ok(Read {
            clock: ServerClock::new(now, received),
            envelope,
            fence,
            lease,
            incarnation,
        })
    }

    /// The common hit without a script: one `MGET` of the value and its fence and the
    /// value's TTL, in one round trip to one slot, served when the value is fresh by a
    /// server clock read within the last second. `None` sends the caller to the read
    /// script: no recent clock, nothing stored, no fence, an envelope this cannot read, a
    /// value near or past its fresh time, or one the script would refuse (no TTL,
    /// deadlines past it).
    async fn read_fresh(&self, key: &EntryKey) -> Result<Option<Read>, StoreError> {
        let clock = *self.clock.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(clock) = clock.filter(|clock| clock.age() < FAST_READ_CLOCK_AGE) else {
            return Ok(None);
        };
        type Fast = ((Option<Vec<u8>>, Option<String>), i64);
        let ((envelope, fence), ttl): Fast = self
            .call(key, |mut connection| {
                let mut pipe = redis::pipe();
                pipe.cmd("MGET").arg(key.value()).arg(key.fence());
                pipe.cmd("PTTL").arg(key.value());
                async move { pipe.query_async(&mut connection).await }
            })
            .await?;
        let (Some(envelope), Some(fence)) = (envelope, fence.as_deref().and_then(fence_of)) else {
            return Ok(None);
        };
        let now_ms = clock.now_ms();
        let servable = Wire::default().header(&envelope).is_ok_and(|header| {
            let ends = now_ms.saturating_add(ttl.max(0) as u64 + DEADLINE_SLACK_MS);
            ttl > 0
                && header.keep_until_ms <= ends
                && header.fresh_until_ms > now_ms.saturating_add(FAST_READ_MARGIN_MS)
        });
        if !servable {
            return Ok(None);
        }
        bump(&self.counters.hits);
        Ok(Some(Read {
            clock,
            envelope: Some(envelope),
            fence,
            lease: Lease::NotTaken,
            incarnation: String::new(),
        }))
    }

    pub(super) async fn publish(
        &self,
        key: &EntryKey,
        publication: Publication,
    ) -> Result<Published, StoreError> {
        let version = publication
            .source_version
            .map(version_digits)
            .unwrap_or_default();
        let token = publication
            .token
            .map(|token| token.to_string())
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
                    .arg(self.hub.node())
                    .arg(token.as_str())
                    .arg(millis(publication.recompute))
                    .arg(publication.incarnation.as_str());
                async move { invocation.invoke_async(&mut connection).await }
            })
            .await?;
        self.counters
            .notices_sent
            .fetch_add(notices, Ordering::Relaxed);
        Ok(match outcome.as_str() {
            "stored" => Published::Stored,
            "fence" => Published::RefusedByFence,
            "restarted" => Published::RefusedAfterRestart,
            "version" => Published::RefusedBySourceVersion,
            "memory" => Published::OutOfMemory,
            _ => Published::AlreadyExpired,
        })
    }

    pub(super) async fn invalidate(
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
                    .arg(version.as_str());
                async move { invocation.invoke_async(&mut connection).await }
            })
            .await?;
        match fence {
            -1 => Ok(Invalidated::Late),
            -2 => {
                bump(&self.counters.notices_sent);
                Err(StoreError::Backend(
                    "Redis is out of memory: the value was dropped and every replica told, but the fence could not be raised, so a load running now could still store".into(),
                ))
            }
            fence => {
                bump(&self.counters.notices_sent);
                Ok(Invalidated::Fenced {
                    fence: fence.max(0) as u64,
                })
            }
        }
    }

    pub(super) async fn release(
        &self,
        key: &EntryKey,
        token: LeaseToken,
    ) -> Result<bool, StoreError> {
        let token = token.to_string();
        let released: i64 = self
            .call(key, |mut connection| {
                let mut invocation = self.scripts.release.prepare_invoke();
                entry_keys(&mut invocation, key);
                invocation
                    .arg(token.as_str())
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

    pub(super) async fn beat(&self, key: &EntryKey, token: LeaseToken) -> Result<bool, StoreError> {
        let token = token.to_string();
        let still: i64 = self
            .call(key, |mut connection| {
                let mut invocation = self.scripts.beat.prepare_invoke();
                entry_keys(&mut invocation, key);
                invocation.arg(token.as_str());
                async move { invocation.invoke_async(&mut connection).await }
            })
            .await?;
        Ok(still == 1)
    }

    /// Every entry with a key matching `pattern`, each once, from every master (or from
    /// `only` these). A cluster's masters are read from a fresh `CLUSTER SLOTS` first: a
    /// scan that skipped a master would leave its entries behind. A master that cannot be
    /// scanned does not stop the others; it is named in the answer.
    pub(super) async fn entries(&self, pattern: &str, only: Option<&[String]>) -> Scan {
        let masters = match (&self.connection, only) {
            (_, Some(only)) => only.to_vec(),
            (Connection::Node(_), None) => vec![String::new()],
            (Connection::Cluster(_), None) => match self.masters().await {
                Ok(masters) => masters,
                Err(error) => {
                    return Scan {
                        found: Vec::new(),
                        failed: Some(ScanFailure {
                            shards: None,
                            error,
                        }),
                    }
                }
            },
        };
        // By value key: an entry's three keys name it once.
        let mut found = std::collections::BTreeMap::new();
        let mut failed = Vec::new();
        let mut error = None;
        for master in masters {
            match self.scan_master(&master, pattern).await {
                Ok(keys) => found.extend(
                    keys.iter()
                        .filter_map(|key| EntryKey::of_stored(key))
                        .map(|entry| (entry.value().to_owned(), entry)),
                ),
                Err(e) => {
                    failed.push(master);
                    error = Some(e);
                }
            }
        }
        Scan {
            found: found.into_values().collect(),
            failed: error.map(|error| ScanFailure {
                shards: Some(failed),
                error,
            }),
        }
    }

    /// The cluster's masters, from a fresh `CLUSTER SLOTS`.
    async fn masters(&self) -> Result<Vec<String>, StoreError> {
        let breaker = self.shards.breaker("");
        let reply = self
            .call_through(&breaker, |connection| async move {
                let Connection::Cluster(mut cluster) = connection else {
                    unreachable!("only a cluster lists its masters")
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
        Ok(self.shards.masters())
    }

    async fn scan_master(&self, master: &str, pattern: &str) -> Result<Vec<String>, StoreError> {
        let breaker = self.shards.breaker(master);
        let mut cursor = 0_u64;
        let mut keys = Vec::new();
        loop {
            let (next, more): (u64, Vec<String>) = self
                .call_through(&breaker, |connection| {
                    scan(connection, master.to_owned(), cursor, pattern.to_owned())
                })
                .await?;
            keys.extend(more);
            if next == 0 {
                return Ok(keys);
            }
            cursor = next;
        }
    }
}

/// One `SCAN` step on the master at `address` (any node when it is `""`).
async fn scan(
    mut connection: Connection,
    address: String,
    cursor: u64,
    pattern: String,
) -> RedisResult<(u64, Vec<String>)> {
    let mut command = redis::cmd("SCAN");
    command
        .arg(cursor)
        .arg("MATCH")
        .arg(pattern)
        .arg("COUNT")
        .arg(1000);
    match (&mut connection, super::subscriber::host_port(&address)) {
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
