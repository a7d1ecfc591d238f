//! The hearing lease's renewals, the registry of replicas whose leases may run, and the
//! acknowledgements a write asks for and owes, all through the `hearing` script and plain
//! `PUBLISH` (see [`crate::hearing`] and `lua/hearing.lua`).
use super::connection::Connection;
use super::Client;
use crate::clock::StoreInstant;
use crate::shared::acknowledgement::{Acknowledgements, Hearer};
use crate::shared::keys::hearing_key;
use crate::shared::store::StoreError;
use futures_util::future::Either;
use futures_util::StreamExt;
use redis::RedisResult;
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::mpsc;

/// Every quarter of the hearing lease, while the subscription is up: renews this
/// replica's entry in the registry and, in the same script, publishes
/// `h <epoch> <nanoseconds>` to its own channel, the moment taken before it is sent.
/// Redis delivers it after every notice published before it, so its return renews the
/// lease from that moment. Runs until the store is dropped.
pub(super) async fn keep_hearing(client: Weak<Client>) {
    let period = match client.upgrade() {
        Some(client) => client.hub.hearing_lease().lease() / 4,
        None => return,
    };
    let mut subscription = match client.upgrade() {
        Some(client) => client.hub.subscription(),
        None => return,
    };
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut unregistered = false;
    loop {
        // At once when the subscription comes (back) up: copies are served again a round
        // trip later, not a quarter lease.
        let came_up = {
            let tick = std::pin::pin!(ticks.tick());
            let changed = std::pin::pin!(subscription.changed());
            matches!(
                futures_util::future::select(tick, changed).await,
                Either::Right(_)
            )
        };
        if came_up {
            ticks.reset();
        }
        let Some(client) = client.upgrade() else {
            return;
        };
        let epoch = client.hub.hearing();
        if epoch == 0 {
            continue;
        }
        let sent = client.hub.hearing_lease().moment(StoreInstant::now());
        let message = format!("h {epoch} {sent}");
        match client.renew_hearing(&message).await {
            Ok(_) => unregistered = false,
            // The registry is refused to this user (an ACL without the hash commands): a
            // lease renewed without an entry would let an acknowledged write skip this
            // replica while it serves copies, so none is renewed: every call reads Redis.
            Err(StoreError::Backend(error)) if error.contains("stampede hearing") => {
                if !unregistered {
                    tracing::warn!(target: "stampede", %error, "the hearing registry is refused to this user: tiered copies are not served (each call reads Redis); grant +hset +hgetall +hdel +pexpire on stampede's keys");
                    unregistered = true;
                }
            }
            Err(error) => {
                tracing::debug!(target: "stampede", %error, "the hearing lease's renewal was not sent");
            }
        }
    }
}

/// Publishes the answers this replica owes, up to `ANSWERING` at once (one at a time, a
/// fleet's acknowledged writes could outpace the round trips). One that cannot be sent
/// is dropped: the asking replica waits out this replica's hearing lease instead.
pub(super) async fn send_acknowledgements(
    client: Weak<Client>,
    outbox: mpsc::UnboundedReceiver<(String, String)>,
) {
    let owed = futures_util::stream::unfold(outbox, |mut outbox| async move {
        outbox.recv().await.map(|answer| (answer, outbox))
    });
    owed.for_each_concurrent(ANSWERING, |(channel, message)| {
        let client = client.clone();
        async move {
            let Some(client) = client.upgrade() else {
                return;
            };
            let breaker = client.shards.breaker("");
            let sent = client
                .call_through(&breaker, |connection| {
                    publish(connection, String::new(), channel.clone(), message.clone())
                })
                .await;
            if let Err(error) = sent {
                tracing::debug!(target: "stampede", %error, "an acknowledgement was not sent");
            }
        }
    })
    .await;
}

/// How many answers a replica sends at once.
const ANSWERING: usize = 32;

/// Takes this replica's entry out of the registry of hearers (`HDEL`): its store was
/// dropped, so no copy of it is served any more.
pub(super) async fn leave(client: Arc<Client>) {
    let key = hearing_key(&client.config.prefix);
    let (_, breaker) = client.shards.for_key(&key);
    let replica = client.hub.replica().to_owned();
    let _ = client
        .call_optional(&breaker, |connection| {
            let mut command = redis::cmd("HDEL");
            command.arg(key.as_str()).arg(replica.as_str());
            async move {
                let mut connection = connection;
                command.query_async::<i64>(&mut connection).await
            }
        })
        .await;
}

impl Client {
    /// The `hearing` script's `renew`: `true` when the entry was written and `message`
    /// sent, `false` when memory is full.
    async fn renew_hearing(&self, message: &str) -> Result<bool, StoreError> {
        let key = hearing_key(&self.config.prefix);
        let (_, breaker) = self.shards.for_key(&key);
        let lease = super::millis(self.hub.hearing_lease().lease()).max(1);
        let channel = self.hub.own_channel();
        // Optional: a refusal (an ACL without the hash commands) is handled by the caller,
        // not reported as a problem with the settings.
        let renewed: i64 = self
            .call_optional(&breaker, |mut connection| {
                let mut invocation = self.scripts.hearing.prepare_invoke();
                invocation
                    .key(key.as_str())
                    .arg("renew")
                    .arg(self.hub.replica())
                    .arg(lease)
                    .arg(channel.as_str())
                    .arg(message);
                async move { invocation.invoke_async(&mut connection).await }
            })
            .await?;
        Ok(renewed == 1)
    }

    /// See [`crate::shared::store::SharedStore::ask_acknowledgements`]: `k <id> <replica>`
    /// on the prefix's channel from `near`'s master (after the write's notice, on the
    /// same node: a cluster's bus keeps the two in order), then the registry's list.
    pub(super) async fn ask_acknowledgements(
        &self,
        near: &str,
        acks: &Acknowledgements,
    ) -> Result<Vec<Hearer>, StoreError> {
        let (address, breaker) = self.shards.for_key(near);
        let ask = format!("k {} {}", acks.id(), self.hub.replica());
        self.call_through(&breaker, |connection| {
            publish(
                connection,
                address.clone(),
                self.channel.clone(),
                ask.clone(),
            )
        })
        .await?;
        let key = hearing_key(&self.config.prefix);
        let (_, breaker) = self.shards.for_key(&key);
        let lease = self.hub.hearing_lease().lease();
        // Entries that ended up to four leases ago still count: a server clock stepped
        // ahead ends them early by the step, while the leases they stand for run on.
        let grace_ms = super::millis(lease * 4).max(1);
        let listed: Vec<redis::Value> = self
            .call_optional(&breaker, |mut connection| {
                let mut invocation = self.scripts.hearing.prepare_invoke();
                invocation.key(key.as_str()).arg("list").arg(grace_ms);
                async move { invocation.invoke_async(&mut connection).await }
            })
            .await?;
        let received = StoreInstant::now();
        match hearers_of(&listed, received, lease) {
            Some(Listed::Hearers(hearers)) => Ok(hearers),
            Some(Listed::Young) => Err(StoreError::Backend(
                "the hearing registry began less than a lease ago: it may miss a replica".into(),
            )),
            None => Err(StoreError::Backend(format!(
                "the hearing script answered {listed:?}"
            ))),
        }
    }
}

/// What the registry's list says.
enum Listed {
    Hearers(Vec<Hearer>),
    /// The registry began less than a lease ago (or says not when): a replica that
    /// renewed into the one it replaced may be missing from it.
    Young,
}

/// `{ now, since, replica, until, … }`, each listed replica's lease ending here no sooner
/// than this replica's own lease from `received` (a lease runs at most that long from its
/// last renewal, which came before the reply), or later when its entry says so (a replica
/// with a longer lease): as long after `received` as it was after the server's `now`.
fn hearers_of(listed: &[redis::Value], received: StoreInstant, lease: Duration) -> Option<Listed> {
    let number = |value: &redis::Value| match value {
        redis::Value::Int(n) => Some(*n),
        _ => None,
    };
    let [now, since, entries @ ..] = listed else {
        return None;
    };
    let (now, since) = (number(now)?, number(since)?);
    let lease_ms = i64::try_from(lease.as_millis()).unwrap_or(i64::MAX);
    if since < 0 || since > now.saturating_sub(lease_ms) {
        return Some(Listed::Young);
    }
    if entries.len() % 2 != 0 {
        return None;
    }
    let hearers = entries
        .chunks(2)
        .map(|pair| {
            let replica = redis::from_redis_value::<String>(pair[0].clone()).ok()?;
            let left = u64::try_from(number(&pair[1])?.saturating_sub(now)).unwrap_or(0);
            Some(Hearer {
                replica,
                ends: received + Duration::from_millis(left).max(lease),
            })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Listed::Hearers(hearers))
}

/// `PUBLISH channel message` on the master at `address` (any node when it is `""`; a
/// cluster forwards it to every node).
async fn publish(
    connection: Connection,
    address: String,
    channel: String,
    message: String,
) -> RedisResult<()> {
    let mut command = redis::cmd("PUBLISH");
    command.arg(channel).arg(message);
    let _receivers: i64 = connection.on_master(address, command).await?;
    Ok(())
}
