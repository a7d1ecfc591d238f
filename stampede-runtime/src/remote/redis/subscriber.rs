//! The notice subscription's connection and the heartbeat, both on the store's threads.
//!
//! About once a second the heartbeat: in a cluster, reloads the slot map; PINGs every
//! master through its breaker (probing it when open, reconnecting while nobody calls,
//! which closes the client's reconnect gap); keeps the subscription up, subscribing again
//! (in a cluster, on the next node) when it dropped. Once per master it also reads the
//! eviction policy: one that may evict stampede's fences, leases and marks is warned of.
use super::breaker::Breaker;
use super::connection::{self, Connection, Patience, Target};
use super::Client;
use crate::remote::store::StoreError;
use redis::aio::ConnectionManager;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{PushKind, RedisError, RedisResult};
use std::collections::HashSet;
use std::sync::{Arc, PoisonError, Weak};
use tokio::sync::mpsc;

/// Feeds the subscription's pushes to the hub until the store is dropped.
pub(super) async fn receive_pushes(
    client: Weak<Client>,
    mut pushes: mpsc::UnboundedReceiver<redis::PushInfo>,
) {
    while let Some(push) = pushes.recv().await {
        let Some(client) = client.upgrade() else {
            return;
        };
        match push.kind {
            PushKind::Message => {
                if let Some(payload) = push.data.into_iter().nth(1)
                    && let Ok(payload) = redis::from_redis_value::<Vec<u8>>(payload)
                {
                    client.hub.deliver(&payload);
                }
            }
            PushKind::Subscribe => {
                // Only the prefix's channel says the subscription is up. A bucket's
                // channel is confirmed by the reply to the load's own SUBSCRIBE, which
                // knows the connection and the epoch it was sent under: a push may come
                // from a connection already replaced (a cluster's subscriber moved on).
                let channel = push.data.into_iter().next();
                let channel = channel.and_then(|name| redis::from_redis_value::<String>(name).ok());
                if channel.as_deref() == Some(client.channel.as_str()) {
                    client.hub.set_subscribed(true);
                }
            }
            PushKind::Disconnection => client.hub.set_subscribed(false),
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

    /// A handle on the connection (it is multiplexed).
    pub(super) fn connection(&self) -> ConnectionManager {
        self.connection.clone()
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
pub(super) async fn heartbeat(client: Weak<Client>, mut subscriber: Subscriber) {
    let period = match client.upgrade() {
        Some(client) => client.config.heartbeat,
        None => return,
    };
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut first = true;
    let mut policies_read = HashSet::new();
    loop {
        ticks.tick().await;
        let Some(client) = client.upgrade() else {
            return;
        };
        client.hub.prune();
        client.unsubscribe_idle().await;
        let timeout = client.config.response_timeout;
        if let Connection::Cluster(connection) = &client.connection {
            let mut connection = connection.clone();
            let slots = connection.route_command(
                redis::cmd("CLUSTER").arg("SLOTS").to_owned(),
                RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
            );
            if let Ok(Ok(reply)) = tokio::time::timeout(timeout, slots).await {
                client.shards.update(&reply);
            }
        }
        for master in client.shards.masters() {
            let breaker = client.shards.breaker(&master);
            let pinged = client
                .call_through(&breaker, |connection| ping(connection, master.clone()))
                .await;
            match pinged {
                Err(error) if first => {
                    tracing::warn!(target: "stampede", shard = %master, %error, "Redis is unreachable at start-up: values stay in each replica's memory until it answers");
                }
                Ok(()) if policies_read.insert(master.clone()) => {
                    warn_of_eviction(&client, &breaker, &master).await;
                }
                _ => {}
            }
        }
        first = false;
        if *client.hub.subscription().borrow() {
            let ping = redis::cmd("PING");
            let answered =
                tokio::time::timeout(timeout, ping.query_async::<()>(&mut subscriber.connection))
                    .await;
            if !matches!(answered, Ok(Ok(()))) {
                // A black hole never disconnects; a silent subscription is a lost one.
                client.hub.set_subscribed(false);
            }
        } else {
            let channel = client.channel.clone();
            let subscribed =
                tokio::time::timeout(timeout, subscriber.connection.subscribe(&channel)).await;
            if matches!(subscribed, Ok(Ok(()))) {
                client.hub.set_subscribed(true);
            } else {
                subscriber.next_node();
                *client
                    .listener
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = subscriber.connection();
            }
        }
    }
}

/// Warns once per master when its memory limit and eviction policy can evict stampede's
/// keys: an evicted fence or lease fails closed (a publish refused, a load repeated), but
/// an evicted mark forgets an invalidation at a source version, and an evicted value is a
/// miss. `noeviction` (or no limit) is the safe setting; a server that refuses `CONFIG`
/// (a managed service) is not asked again.
async fn warn_of_eviction(client: &Client, breaker: &Arc<Breaker>, master: &str) {
    let config = |parameter: &'static str| {
        let master = master.to_owned();
        move |connection: Connection| config_get(connection, master.clone(), parameter)
    };
    let (Ok(limit), Ok(policy)) = (
        client.call_through(breaker, config("maxmemory")).await,
        client
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

/// PING the master at `address`, or any node when it is `""`.
async fn ping(connection: Connection, address: String) -> RedisResult<()> {
    let pong: String = connection.on_master(address, redis::cmd("PING")).await?;
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
    let pair: Vec<String> = connection.on_master(address, command).await?;
    Ok(pair.into_iter().nth(1).unwrap_or_default())
}
