//! The notice subscription's connection and the heartbeat, both on the store's thread.
//!
//! About once a second the heartbeat: in a cluster, reloads the slot map; PINGs every
//! master through its breaker (probing it when open, reconnecting while nobody calls,
//! which closes the client's reconnect gap); keeps the subscription up, subscribing again
//! (in a cluster, on the next node) when it dropped. Once per master it also reads the
//! eviction policy: one that may evict stampede's fences, leases and marks is warned of.
use super::breaker::Breaker;
use super::connection::{self, Connection, Patience, Target};
use super::Inner;
use crate::remote::store::StoreError;
use redis::aio::ConnectionManager;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{PushKind, RedisError, RedisResult};
use std::collections::HashSet;
use std::sync::{Arc, Weak};
use tokio::sync::mpsc;

/// Feeds the subscription's pushes to the hub until the store is dropped.
pub(super) async fn receive_pushes(
    inner: Weak<Inner>,
    mut pushes: mpsc::UnboundedReceiver<redis::PushInfo>,
) {
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
pub(super) struct Subscriber {
    urls: Vec<String>,
    at: usize,
    patience: Patience,
    pushes: mpsc::UnboundedSender<redis::PushInfo>,
    connection: ConnectionManager,
}

impl Subscriber {
    pub(super) fn open(
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

/// Runs until the store is dropped; see the module's documentation.
pub(super) async fn heartbeat(inner: Weak<Inner>, mut subscriber: Subscriber) {
    let period = match inner.upgrade() {
        Some(inner) => inner.config.heartbeat,
        None => return,
    };
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut first = true;
    let mut policies_read = HashSet::new();
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
            let pinged = inner
                .call_through(&breaker, |connection| ping(connection, master.clone()))
                .await;
            match pinged {
                Err(error) if first => {
                    tracing::warn!(target: "stampede", shard = %master, %error, "Redis is unreachable at start-up: values stay in each replica's memory until it answers");
                }
                Ok(()) if policies_read.insert(master.clone()) => {
                    warn_of_eviction(&inner, &breaker, &master).await;
                }
                _ => {}
            }
        }
        first = false;
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

/// Warns once per master when its memory limit and eviction policy can evict stampede's
/// keys: an evicted fence or lease fails closed (a publish refused, a load repeated), but
/// an evicted mark forgets an invalidation at a source version, and an evicted value is a
/// miss. `noeviction` (or no limit) is the safe setting; a server that refuses `CONFIG`
/// (a managed service) is not asked again.
async fn warn_of_eviction(inner: &Inner, breaker: &Arc<Breaker>, master: &str) {
    let config = |parameter: &'static str| {
        let master = master.to_owned();
        move |connection: Connection| config_get(connection, master.clone(), parameter)
    };
    let (Ok(limit), Ok(policy)) = (
        inner.call_through(breaker, config("maxmemory")).await,
        inner
            .call_through(breaker, config("maxmemory-policy"))
            .await,
    ) else {
        return;
    };
    if limit != "0" && policy != "noeviction" {
        tracing::warn!(
            target: "stampede",
            shard = %master,
            maxmemory = %limit,
            maxmemory_policy = %policy,
            "Redis may evict stampede's keys when full: an evicted source-version mark forgets a late invalidation; use maxmemory-policy noeviction (see the fleet documentation)"
        );
    }
}

/// `host:port` of a master's address; `None` for `""` (any node, or a single server).
pub(super) fn host_port(address: &str) -> Option<(String, u16)> {
    address
        .rsplit_once(':')
        .and_then(|(host, port)| Some((host.to_owned(), port.parse().ok()?)))
}

/// Sends `command` to the master at `address`, or to the one server when it is `""`.
async fn on_master<T: redis::FromRedisValue>(
    mut connection: Connection,
    address: String,
    command: redis::Cmd,
) -> RedisResult<T> {
    match (&mut connection, host_port(&address)) {
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

/// PING the master at `address`, or any node when it is `""`.
async fn ping(connection: Connection, address: String) -> RedisResult<()> {
    let pong: String = on_master(connection, address, redis::cmd("PING")).await?;
    drop(pong);
    Ok(())
}

/// One `CONFIG GET` value of the master at `address`.
async fn config_get(
    connection: Connection,
    address: String,
    parameter: &'static str,
) -> RedisResult<String> {
    let mut command = redis::cmd("CONFIG");
    command.arg("GET").arg(parameter);
    let pair: Vec<String> = on_master(connection, address, command).await?;
    Ok(pair.into_iter().nth(1).unwrap_or_default())
}
