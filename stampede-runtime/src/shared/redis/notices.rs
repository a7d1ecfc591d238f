//! The notice subscription: one RESP3 connection per store, demultiplexed per key.
//!
//! Publishes and invalidations announce themselves on their key's bucket channel (see
//! [`super::listen`]) with a slim notice, `<kind> <fence> <replica> <value key>` (kind `p`
//! published, `i` invalidated, `r` lease released), or, for a publish whose envelope is
//! small and whose lease another replica waits on,
//! `v <fence> <replica> <key length> <value key><envelope>`: the waiters it wakes answer
//! from it without reading again. A tag's move, `t <version> <replica> <tag>`, goes to the
//! prefix's own channel. The hub wakes the waiters registered for that key and forwards
//! key notices to the caches' [`StoreEvent`] listeners, tag notices to the tag book's.
//!
//! # In a Redis Cluster: plain `PUBLISH`, not sharded pub/sub
//! A script's `PUBLISH` reaches every node over the cluster bus, so a replica keeps one
//! subscription on any one node, whichever shard the key lives on, and moves it to the
//! next node when its node dies. Sharded pub/sub (`SPUBLISH`/`SSUBSCRIBE`) keeps a
//! message on the shard owning the channel's slot: a waiter would have to subscribe to
//! its key's channel on that shard before every wait (one more round trip), a tiered
//! listener to channels covering all 16384 slots, and the subscriptions would follow
//! slot migrations, where the `redis` crate 1.8.1 drops them (an unsolicited
//! `SUNSUBSCRIBE` after a migration; a CROSSSLOT re-subscribe after a reconnect). Plain
//! channels belong to no slot, so neither bug can occur here. Measured on a local
//! three-master cluster (debug build, loaded machine, 300 samples each), plain and
//! sharded wake-ups are within noise of each other: PUBLISH → subscriber p50 0.28 ms,
//! SPUBLISH → subscriber p50 0.25 ms, plus 0.24 ms for each per-key SSUBSCRIBE. The price
//! of plain channels is that every notice crosses the cluster bus to every node, which
//! is cheap for a few masters and worth revisiting for clusters of dozens.
//!
//! # Acknowledgements and the hearing lease
//! An acknowledged write, once Redis took it, sends `k <id> <replica>` on the prefix's
//! channel, which every replica hears after everything published to it before (the
//! write's notice among it). Each replica answers `a <id> <its id>` on the asking
//! replica's own channel ([`super::listen::replica_channel`]) once every listener of its
//! own has handled all of that (a [`Passage`]). The same channel carries the replica's
//! hearing renewals to itself, `h <epoch> <nanoseconds>` (see [`crate::hearing`]).
//!
//! Pub/sub is fire-and-forget: notices sent while the subscription is down are lost. So
//! when it drops (a `Disconnection` push, or a heartbeat PING without answer) the hub
//! wakes every waiter with [`Wake::SubscriptionLost`] and tells listeners to stop
//! trusting their memory copies until it reports [`StoreEvent::Subscribed`] again.
use crate::hearing::HearingLease;
use crate::shared::acknowledgement::{AckRegistry, Passage};
use crate::shared::store::{Notice, NoticeKind, StoreEvent, Wake};
use crate::shared::subscribed::{Subscribed, SubscribedWatch};
use foldhash::fast::SeedableRandomState;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::{broadcast, mpsc, oneshot};

/// How many events a slow listener may fall behind before it sees `Lagged`.
const EVENT_BACKLOG: usize = 1024;

/// The loads waiting for a notice, by value key, in an order of this hub's own (a seeded
/// hash: from the OS, or from a simulation's seed). One order shared by every replica (an
/// ordered map, or one fixed hasher) made eight replicas asking for the same hundred ids
/// wake their waiters in step when the subscription dropped and load some ids twice
/// (`tests/batch.rs`: 214 loads for 100 ids plus 11 takeovers); why waking in step costs
/// loads is not yet understood.
type Waiters = HashMap<String, Vec<oneshot::Sender<Wake>>, SeedableRandomState>;

pub(crate) struct NoticeHub {
    /// This store's id in notices, so it can tell its own.
    replica: String,
    waiters: Mutex<Waiters>,
    /// Key notices and subscription changes, for the caches' listeners.
    events: broadcast::Sender<StoreEvent>,
    /// Tag notices and subscription changes, for the runtime's tag book: each listener
    /// wakes only for what it uses.
    tag_events: broadcast::Sender<StoreEvent>,
    subscribed: Subscribed,
    /// Serializes subscription changes: the push task and the heartbeat both report them.
    changing: Mutex<()>,
    /// The last subscription's epoch; see [`SharedStore::hearing`].
    ///
    /// [`SharedStore::hearing`]: crate::shared::store::SharedStore::hearing
    epochs: AtomicU64,
    /// The epoch while subscribed, 0 while not.
    hearing: AtomicU64,
    received: AtomicU64,
    /// How long heard copies stay servable after the subscription was last confirmed.
    lease: Arc<HearingLease>,
    /// The acknowledgements this replica's invalidations wait for.
    acks: AckRegistry,
    /// Messages to publish (acknowledgements owed to other replicas), by channel.
    outbox: mpsc::UnboundedSender<(String, String)>,
    /// The prefix's channel, under which each replica's own channel is named.
    channel: String,
}

impl NoticeHub {
    pub(crate) fn new(
        replica: String,
        channel: String,
        lease: HearingLease,
        outbox: mpsc::UnboundedSender<(String, String)>,
    ) -> Self {
        Self {
            lease: Arc::new(lease),
            acks: AckRegistry::default(),
            outbox,
            channel,
            replica,
            waiters: Mutex::new(Waiters::with_hasher(crate::memory::seeded_hasher())),
            events: broadcast::channel(EVENT_BACKLOG).0,
            tag_events: broadcast::channel(EVENT_BACKLOG).0,
            subscribed: Subscribed::default(),
            changing: Mutex::new(()),
            epochs: AtomicU64::new(0),
            hearing: AtomicU64::new(0),
            received: AtomicU64::new(0),
        }
    }

    pub(crate) fn replica(&self) -> &str {
        &self.replica
    }

    fn waiters(&self) -> std::sync::MutexGuard<'_, Waiters> {
        self.waiters.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn watch(&self, key: &str) -> oneshot::Receiver<Wake> {
        let (sender, receiver) = oneshot::channel();
        // Checked under the waiters lock, which a drop holds while it flips the flag and
        // takes the waiters: a waiter either sees the drop here or is woken by it.
        let mut waiters = self.waiters();
        if !self.subscribed.is_up() {
            // Nothing would wake it: the caller re-reads at once instead of waiting blind.
            let _ = sender.send(Wake::SubscriptionLost);
            return receiver;
        }
        let list = waiters.entry(key.to_owned()).or_default();
        // Waiters that gave up (deadline, cancel) are dropped here rather than kept forever.
        list.retain(|waiter| !waiter.is_closed());
        list.push(sender);
        receiver
    }

    /// Drops waiters that gave up on keys no notice has named since.
    pub(crate) fn prune(&self) {
        self.waiters().retain(|_, list| {
            list.retain(|waiter| !waiter.is_closed());
            !list.is_empty()
        });
    }

    pub(crate) fn events(&self) -> broadcast::Receiver<StoreEvent> {
        self.events.subscribe()
    }

    pub(crate) fn tag_events(&self) -> broadcast::Receiver<StoreEvent> {
        self.tag_events.subscribe()
    }

    pub(crate) fn subscription(&self) -> SubscribedWatch {
        self.subscribed.watch()
    }

    pub(crate) fn is_subscribed(&self) -> bool {
        self.subscribed.is_up()
    }

    pub(crate) fn hearing(&self) -> u64 {
        self.hearing.load(Ordering::SeqCst)
    }

    pub(crate) fn received(&self) -> u64 {
        self.received.load(Ordering::Relaxed)
    }

    pub(crate) fn hearing_lease(&self) -> &Arc<HearingLease> {
        &self.lease
    }

    pub(crate) fn acks(&self) -> &AckRegistry {
        &self.acks
    }

    /// This replica's own channel: its hearing renewals and the acknowledgements owed to it.
    pub(crate) fn own_channel(&self) -> String {
        super::listen::replica_channel(&self.channel, &self.replica)
    }

    /// A message on a channel; malformed ones are ignored (they are not ours).
    pub(crate) fn deliver(&self, payload: &[u8]) {
        match payload.first() {
            Some(b'h') => return self.heard(payload),
            Some(b'k') => return self.asked(payload),
            Some(b'a') => return self.acknowledged(payload),
            _ => {}
        }
        let Some(notice) = self.parse(payload) else {
            return;
        };
        self.received.fetch_add(1, Ordering::Relaxed);
        // A tag's notice names a tag, not a value key: no load waits on it.
        let waiting = (notice.kind != NoticeKind::Tag)
            .then(|| self.waiters().remove(&notice.key))
            .flatten();
        if let Some(waiters) = waiting {
            for waiter in waiters {
                let _ = waiter.send(Wake::Notice(notice.clone()));
            }
        }
        let listeners = match notice.kind {
            NoticeKind::Tag => &self.tag_events,
            _ => &self.events,
        };
        let _ = listeners.send(StoreEvent::Notice(notice));
    }

    /// Sends `passage` after everything sent to this replica's listeners so far.
    fn pass(&self, passage: Passage) {
        let passage = Arc::new(passage);
        let _ = self.events.send(StoreEvent::Passage(passage.clone()));
        let _ = self.tag_events.send(StoreEvent::Passage(passage.clone()));
        passage.sent_to(self.events.receiver_count() + self.tag_events.receiver_count());
    }

    /// `h <epoch> <nanoseconds>`: a renewal this replica sent itself came back; the lease
    /// is renewed once every listener handled what came before it.
    fn heard(&self, payload: &[u8]) {
        let Some([epoch, sent]) = numbers(payload) else {
            return;
        };
        let lease = self.lease.clone();
        self.pass(Passage::new(move || lease.renew(epoch, sent)));
    }

    /// `k <id> <replica>`: `replica` asks to hear once this replica handled everything
    /// before.
    fn asked(&self, payload: &[u8]) {
        let Some((id, replica)) = id_and_replica(payload) else {
            return;
        };
        // Its own ask waits for no answer from itself; a replica that keeps no hearing
        // lease (the redis backend) keeps no copies, and nobody waits for it either.
        if replica == self.replica || !self.lease.kept() {
            return;
        }
        let channel = super::listen::replica_channel(&self.channel, replica);
        let answer = format!("a {id} {}", self.replica);
        let outbox = self.outbox.clone();
        self.pass(Passage::new(move || {
            let _ = outbox.send((channel, answer));
        }));
    }

    /// `a <id> <replica>`: `replica` handled everything before this replica's ask `id`.
    fn acknowledged(&self, payload: &[u8]) {
        if let Some((id, replica)) = id_and_replica(payload) {
            self.acks.acknowledged(id, replica);
        }
    }

    fn parse(&self, payload: &[u8]) -> Option<Notice> {
        if let Some(rest) = payload.strip_prefix(b"v ") {
            return self.parse_with_value(rest);
        }
        let text = std::str::from_utf8(payload).ok()?;
        let mut parts = text.splitn(4, ' ');
        let kind = match parts.next()? {
            "p" => NoticeKind::Published,
            "i" => NoticeKind::Invalidated,
            "r" => NoticeKind::Released,
            "t" => NoticeKind::Tag,
            _ => return None,
        };
        let fence = parts.next()?.parse().ok()?;
        let own = parts.next()? == self.replica;
        let key = parts.next()?.to_owned();
        Some(Notice {
            kind,
            key,
            fence,
            own,
            value: None,
        })
    }

    /// A publish with its envelope: `v <fence> <replica> <key length> <key><envelope>`,
    /// the key's length in bytes, the envelope's bytes as stored.
    fn parse_with_value(&self, rest: &[u8]) -> Option<Notice> {
        let mut fields = rest.splitn(4, |&byte| byte == b' ');
        let number = |field: &[u8]| std::str::from_utf8(field).ok()?.parse::<u64>().ok();
        let fence = number(fields.next()?)?;
        let own = fields.next()? == self.replica.as_bytes();
        let key_len = usize::try_from(number(fields.next()?)?).ok()?;
        let tail = fields.next()?;
        let key = std::str::from_utf8(tail.get(..key_len)?).ok()?.to_owned();
        let envelope = tail.get(key_len..)?;
        Some(Notice {
            kind: NoticeKind::Published,
            key,
            fence,
            own,
            value: Some(envelope.into()),
        })
    }

    /// Records a subscription change; only a change is announced, to listeners first, so
    /// whoever sees the new state through [`NoticeHub::subscription`] and then listens
    /// gets only later events.
    pub(crate) fn set_subscribed(&self, subscribed: bool) {
        let _one_change_at_a_time = self.changing.lock().unwrap_or_else(PoisonError::into_inner);
        if self.subscribed.is_up() == subscribed {
            return;
        }
        if subscribed {
            // Listeners hear of the epoch before any read can begin under it.
            let epoch = self.epochs.fetch_add(1, Ordering::SeqCst) + 1;
            let _ = self.events.send(StoreEvent::Subscribed(epoch));
            let _ = self.tag_events.send(StoreEvent::Subscribed(epoch));
            self.hearing.store(epoch, Ordering::SeqCst);
            self.lease.subscription(epoch);
            self.subscribed.set(true);
            return;
        }
        let waiters = {
            let mut registered = self.waiters();
            self.hearing.store(0, Ordering::SeqCst);
            self.lease.subscription(0);
            self.subscribed.set(false);
            std::mem::take(&mut *registered)
        };
        for waiter in waiters.into_values().flatten() {
            let _ = waiter.send(Wake::SubscriptionLost);
        }
        let _ = self.events.send(StoreEvent::SubscriptionLost);
        let _ = self.tag_events.send(StoreEvent::SubscriptionLost);
    }
}

/// `<letter> <number> <number>`.
fn numbers(payload: &[u8]) -> Option<[u64; 2]> {
    let text = std::str::from_utf8(payload).ok()?;
    let mut parts = text.split(' ').skip(1);
    let first = parts.next()?.parse().ok()?;
    let second = parts.next()?.parse().ok()?;
    Some([first, second])
}

/// `<letter> <id> <replica>`.
fn id_and_replica(payload: &[u8]) -> Option<(u64, &str)> {
    let text = std::str::from_utf8(payload).ok()?;
    let mut parts = text.split(' ').skip(1);
    let id = parts.next()?.parse().ok()?;
    let replica = parts.next().filter(|replica| !replica.is_empty())?;
    Some((id, replica))
}

#[cfg(test)]
mod tests;
