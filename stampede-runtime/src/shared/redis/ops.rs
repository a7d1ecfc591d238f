//! The store's operations, each one script (or, for a fresh hit, one `MGET`), through
//! [`Client::call`], and the store seam ([`SharedStore`]) they implement.
use super::{bump, entry_keys, fence_of, millis, Client, RedisStore};
use crate::clock::StoreInstant as Instant;
use crate::hearing::HearingLease;
use crate::shared::acknowledgement::{Acknowledgements, Hearer};
use crate::shared::keys::EntryKey;
use crate::shared::store::{
    Holder, Invalidated, Lease, LeaseFor, LeaseRequest, LeaseToken, PermitRequest, PermitToken,
    Permits, Publication, Published, Read, Scan, ServerClock, StoreError,
};
use crate::shared::store::{Listening, SharedStore, StoreEvent, StoreStats, Wake};
use crate::shared::subscribed::SubscribedWatch;
use crate::shared::wire::{version_digits, Wire};
use futures_util::future::BoxFuture;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::Duration;
use tokio::sync::{broadcast, oneshot};

/// How recent the server clock must be for a read without the script: the local
/// monotonic clock carries it forward, and a second keeps any drift far below a millisecond.
const FAST_READ_CLOCK_AGE: Duration = Duration::from_secs(1);
/// A value this close to its fresh time goes through the script, which reads the clock.
const FAST_READ_MARGIN_MS: u64 = 2;
/// How far past the end of its key's TTL an envelope's last deadline may reach and still
/// be one we wrote (the publisher's estimate of the server's clock lags a little).
const DEADLINE_SLACK_MS: u64 = 1000;

/// The largest envelope a publish notice carries, when a replica waits on the lease (see
/// `lua/publish.lua`): each replica that hears the key receives it, and those waiting
/// answer without a read.
const NOTICE_VALUE_MAX: usize = 2048;

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

impl Client {
    /// Longer than a screen: the read script's arguments and its reply are translated in one
    /// place, so the two can be checked against each other and against `read.lua`.
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
        if !takes_lease_anyway && let Some(read) = self.read_fresh(key).await? {
            return Ok(read);
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
        // `held <token>`: the holder's token names its replica.
        let (lease, holder) = match lease.strip_prefix("held ") {
            Some(token) => ("held", token),
            None => (lease.as_str(), ""),
        };
        let lease = match lease {
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
                replica: u64::from_str_radix(holder, 16)
                    .ok()
                    .map(|token| LeaseToken(token).replica()),
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
        let write_through = match publication.write_through {
            Some(write) => (write.own.to_string(), write.began.to_string()),
            None => (String::new(), String::new()),
        };
        let (outcome, notices): (String, u64) = self
            .call(key, |mut connection| {
                let mut invocation = self.scripts.publish.prepare_invoke();
                entry_keys(&mut invocation, key);
                invocation
                    .arg(publication.fence.to_string())
                    .arg(publication.envelope.as_slice())
                    .arg(publication.keep_until_ms)
                    .arg(version.as_str())
                    .arg(self.channel_of(key).as_str())
                    .arg(self.hub.replica())
                    .arg(token.as_str())
                    .arg(millis(publication.recompute))
                    .arg(publication.incarnation.as_str())
                    .arg(NOTICE_VALUE_MAX)
                    .arg(write_through.0.as_str())
                    .arg(write_through.1.as_str());
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
                    .arg(self.channel_of(key).as_str())
                    .arg(self.hub.replica())
                    .arg(version.as_str());
                async move { invocation.invoke_async(&mut connection).await }
            })
            .await?;
        match fence {
            -1 => Ok(Invalidated::Late),
            -2 => Err(StoreError::Backend(
                "Redis is out of memory: the late version's mark could not be written, and nobody was told; sent again once it can be".into(),
            )),
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
        // Whatever a read given up on still sends (the read again, after `NOSCRIPT`) reaches
        // the server first, so the lease it may take is there to release.
        self.late.ended_before_now().await;
        let token = token.to_string();
        let released: i64 = self
            .call(key, |mut connection| {
                let mut invocation = self.scripts.release.prepare_invoke();
                entry_keys(&mut invocation, key);
                invocation
                    .arg(token.as_str())
                    .arg(self.channel_of(key).as_str())
                    .arg(self.hub.replica());
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
}

impl Client {
    /// The channel a key's notices go out on: its bucket's (see [`super::listen`]).
    fn channel_of(&self, key: &EntryKey) -> String {
        let bucket = super::listen::bucket_of(key.value());
        super::listen::bucket_channel(&self.channel, bucket)
    }
}

impl SharedStore for RedisStore {
    fn read<'a>(
        &'a self,
        key: &'a EntryKey,
        lease: Option<LeaseRequest>,
    ) -> BoxFuture<'a, Result<Read, StoreError>> {
        Box::pin(self.client.read(key, lease))
    }

    fn publish<'a>(
        &'a self,
        key: &'a EntryKey,
        publication: Publication,
    ) -> BoxFuture<'a, Result<Published, StoreError>> {
        Box::pin(self.client.publish(key, publication))
    }

    fn invalidate<'a>(
        &'a self,
        key: &'a EntryKey,
    ) -> BoxFuture<'a, Result<Invalidated, StoreError>> {
        Box::pin(self.client.invalidate(key, None))
    }

    fn ask_acknowledgements<'a>(
        &'a self,
        near: &'a str,
        acks: &'a Acknowledgements,
    ) -> BoxFuture<'a, Result<Vec<Hearer>, StoreError>> {
        Box::pin(self.client.ask_acknowledgements(near, acks))
    }

    fn acknowledgements(&self) -> Acknowledgements {
        self.client.hub.acks().register()
    }

    fn hearing_lease(&self) -> Arc<HearingLease> {
        self.client.hub.hearing_lease().clone()
    }

    fn invalidate_at<'a>(
        &'a self,
        key: &'a EntryKey,
        source_version: u64,
    ) -> BoxFuture<'a, Result<Invalidated, StoreError>> {
        Box::pin(self.client.invalidate(key, Some(source_version)))
    }

    fn release<'a>(
        &'a self,
        key: &'a EntryKey,
        token: LeaseToken,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(self.client.release(key, token))
    }

    fn beat<'a>(
        &'a self,
        key: &'a EntryKey,
        token: LeaseToken,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(self.client.beat(key, token))
    }

    fn take_permits(&self, request: PermitRequest) -> BoxFuture<'_, Result<Permits, StoreError>> {
        Box::pin(self.client.take_permits(request))
    }

    fn renew_permit<'a>(
        &'a self,
        admission: &'a str,
        token: PermitToken,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(self.client.renew_permit(admission, token, ttl))
    }

    fn give_permit<'a>(
        &'a self,
        admission: &'a str,
        token: PermitToken,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(self.client.give_permit(admission, token))
    }

    fn invalidate_tag<'a>(
        &'a self,
        tag: &'a str,
        keep: Duration,
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        Box::pin(self.client.invalidate_tag(tag, keep))
    }

    fn tag_versions<'a>(
        &'a self,
        tags: &'a [std::sync::Arc<str>],
    ) -> BoxFuture<'a, Result<Vec<u64>, StoreError>> {
        Box::pin(self.client.tag_versions(tags))
    }

    fn entries<'a>(
        &'a self,
        pattern: &'a str,
        shards: Option<&'a [String]>,
    ) -> BoxFuture<'a, Scan> {
        Box::pin(self.client.entries(pattern, shards))
    }

    fn shard_of(&self, key: &EntryKey) -> String {
        self.client.shards.for_key(key.value()).0
    }

    fn one_server(&self) -> bool {
        !matches!(
            self.client.config.access.target,
            super::access::Target::Cluster(_)
        )
    }

    fn listen<'a>(&'a self, key: &'a EntryKey) -> BoxFuture<'a, Listening> {
        Box::pin(async move {
            let (epoch, hold) = self.client.listen(key.value()).await;
            Listening::new(epoch, Box::new(hold))
        })
    }

    fn hears(&self, key: &EntryKey) -> bool {
        let bucket = super::listen::bucket_of(key.value());
        (self.client.interest).heard(bucket, self.client.hub.hearing())
    }

    fn copy_kept(&self, key: &EntryKey) {
        let bucket = super::listen::bucket_of(key.value());
        self.client.interest.copy_kept(bucket);
    }

    fn copy_gone(&self, value_key: &str) {
        let bucket = super::listen::bucket_of(value_key);
        self.client.interest.copy_gone(bucket);
    }

    fn watch(&self, key: &EntryKey) -> oneshot::Receiver<Wake> {
        self.client.hub.watch(key.value())
    }

    fn events(&self) -> broadcast::Receiver<StoreEvent> {
        self.client.hub.events()
    }

    fn tag_events(&self) -> broadcast::Receiver<StoreEvent> {
        self.client.hub.tag_events()
    }

    fn subscription(&self) -> SubscribedWatch {
        self.client.hub.subscription()
    }

    fn hearing(&self) -> u64 {
        self.client.hub.hearing()
    }

    fn clock(&self) -> Option<ServerClock> {
        let clock = *self
            .client
            .clock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        clock.filter(|clock| clock.age() < FAST_READ_CLOCK_AGE)
    }

    fn replica(&self) -> &str {
        self.client.hub.replica()
    }

    fn count_decode_failure(&self) {
        bump(&self.client.counters.decode_failures);
    }

    fn count_orphan_released(&self) {
        bump(&self.client.counters.orphans_released);
    }

    fn stats(&self) -> StoreStats {
        let counters = &self.client.counters;
        let (breaker, breaker_opened, degraded) = self.client.shards.summary();
        StoreStats {
            hits: counters.hits.load(Ordering::Relaxed),
            misses: counters.misses.load(Ordering::Relaxed),
            errors: counters.errors.load(Ordering::Relaxed),
            decode_failures: counters.decode_failures.load(Ordering::Relaxed),
            notices_sent: counters.notices_sent.load(Ordering::Relaxed),
            notices_received: self.client.hub.received(),
            notice_buckets: self.client.interest.len(),
            subscribed: self.client.hub.is_subscribed(),
            late_answers: counters.late_answers.load(Ordering::Relaxed),
            orphans_released: counters.orphans_released.load(Ordering::Relaxed),
            breaker,
            breaker_opened,
            degraded,
            problem: self.client.problems.current(),
        }
    }
}
