//! The notice subscription's connection and the heartbeat, both on the background threads.
//!
//! About once a second the heartbeat: in a cluster, reloads the slot map; PINGs every
//! master through its breaker (probing it when open, reconnecting while nobody calls,
//! which closes the client's reconnect gap); keeps the subscription up, subscribing again
//! (in a cluster, on the next node) when it dropped. Once per master it also reads the
//! eviction policy: one that may evict stampede's fences, leases and marks is warned of.
use super::access::{Access, Target};
use super::breaker::Breaker;
use super::connection::{Connection, Endpoint, Listener, Patience};
use crate::shared::store::StoreError;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{Client, PushKind, RedisError, RedisResult};
use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError, Weak};
use tokio::sync::mpsc;

/// Feeds the subscription's pushes to the hub until the store is dropped.
pub(super) async fn receive_pushes(
    client: Weak<super::Client>,
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
/// subscriber moves to the next one when its node does not let it subscribe. For a
/// master the Sentinels name, it follows the master.
pub(super) struct Subscriber {
    nodes: Vec<Endpoint>,
    at: usize,
    patience: Patience,
    pushes: mpsc::UnboundedSender<redis::PushInfo>,
    /// `None` until the Sentinels name a master.
    connection: Option<Listener>,
}

impl Subscriber {
    pub(super) fn open(
        access: &Access,
        patience: Patience,
        pushes: mpsc::UnboundedSender<redis::PushInfo>,
    ) -> Result<Self, StoreError> {
        let backend = |e: RedisError| StoreError::Backend(e.to_string());
        let nodes: Vec<Endpoint> = match &access.target {
            Target::Node(info) => {
                let client = access.client(info).map_err(backend)?;
                vec![Endpoint::Redis(Box::new(client))]
            }
            // Every node's client is made now, so moving on later cannot fail on one.
            Target::Cluster(nodes) => (nodes.iter())
                .map(|info| access.client(info).map(|c| Endpoint::Redis(Box::new(c))))
                .collect::<Result<_, _>>()
                .map_err(backend)?,
            // Listens on the master once the Sentinels name it.
            Target::Sentinel(_) => Vec::new(),
            #[cfg(feature = "simulation")]
            Target::Model(world, replica) => vec![Endpoint::Model(world.clone(), replica.clone())],
        };
        let connection = (nodes.first())
            .map(|node| Listener::open(node.clone(), patience, pushes.clone()))
            .transpose()
            .map_err(backend)?;
        Ok(Self {
            nodes,
            at: 0,
            patience,
            pushes,
            connection,
        })
    }

    /// A handle on the connection (it is multiplexed).
    pub(super) fn connection(&self) -> Option<Listener> {
        self.connection.clone()
    }

    /// Moves to the next node, if there is another.
    fn next_node(&mut self) {
        if self.nodes.len() < 2 {
            return;
        }
        self.at = (self.at + 1) % self.nodes.len();
        let node = self.nodes[self.at].clone();
        if let Ok(connection) = Listener::open(node, self.patience, self.pushes.clone()) {
            self.connection = Some(connection);
        }
    }

    /// Listens on `master` from now on (the Sentinels named it).
    fn follow(&mut self, master: Client) {
        let master = Endpoint::Redis(Box::new(master));
        match Listener::open(master.clone(), self.patience, self.pushes.clone()) {
            Ok(connection) => {
                self.nodes = vec![master];
                self.at = 0;
                self.connection = Some(connection);
            }
            Err(error) => {
                tracing::warn!(target: "stampede", %error, "cannot listen on the new master");
            }
        }
    }
}

/// Runs until the store is dropped; see the module's documentation.
///
/// Longer than a screen: one loop whose arms are the subscription's life (following the
/// master, beating, noticing silence, subscribing again).
pub(super) async fn heartbeat(client: Weak<super::Client>, mut subscriber: Subscriber) {
    let period = match client.upgrade() {
        Some(client) => client.config.heartbeat,
        None => return,
    };
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut first = true;
    let mut policies_read = HashSet::new();
    let mut naming = Naming::default();
    // The master's move the subscription follows (a master the Sentinels name).
    let mut following = 0;
    loop {
        ticks.tick().await;
        let Some(client) = client.upgrade() else {
            return;
        };
        client.hub.prune();
        client.unsubscribe_idle().await;
        let timeout = client.config.response_timeout;
        // A master the Sentinels name: ask where it is now, and move there after a
        // failover (the subscription too: notices sent meanwhile are lost, so it is a
        // lost subscription).
        let moves = client.moves.load(Ordering::Relaxed);
        if client.follower.is_some()
            && (moves != following || subscriber.connection.is_none())
            && let Some(master) = client.master_client()
        {
            following = moves;
            subscriber.follow(master);
            *client
                .listener
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = subscriber.connection();
            client.hub.set_subscribed(false);
        }
        if let Some(Connection::Cluster(connection)) = client.connection() {
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
        if !client.probed.load(Ordering::Relaxed) && client.probe_permissions().await {
            client.probed.store(true, Ordering::Relaxed);
        }
        naming.name(&client, &subscriber).await;
        let Some(mut connection) = subscriber.connection() else {
            continue;
        };
        if client.hub.is_subscribed() {
            let answered = tokio::time::timeout(timeout, connection.ping()).await;
            if !matches!(answered, Ok(Ok(()))) {
                // A black hole never disconnects; a silent subscription is a lost one.
                client.hub.set_subscribed(false);
            }
        } else {
            // The replica's own channel too (renewals of its hearing lease, the
            // acknowledgements owed to it), in the same command: both or neither.
            let channels = [client.channel.clone(), client.hub.own_channel()];
            let subscribed = tokio::time::timeout(timeout, connection.subscribe(&channels)).await;
            match subscribed {
                Ok(Ok(())) => client.hub.set_subscribed(true),
                failed => {
                    if let Ok(Err(error)) = &failed {
                        client.problems.judge(error);
                    }
                    subscriber.next_node();
                    *client
                        .listener
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner) = subscriber.connection();
                }
            }
        }
    }
}

/// `CLIENT SETNAME <client_name>-<replica>` on the store's connection and
/// `…-notices` on the subscription's, once a heartbeat (a reconnection forgets the
/// name). Managed services may refuse `CLIENT`: then it says so once and stops asking.
#[derive(Default)]
struct Naming {
    refused: bool,
}

impl Naming {
    async fn name(&mut self, client: &Arc<super::Client>, subscriber: &Subscriber) {
        if self.refused {
            return;
        }
        let name = format!(
            "{}-{}",
            client.config.access.client_name,
            client.hub.replica()
        );
        let breaker = client.shards.breaker("");
        let named = client
            .call_optional(&breaker, |connection| set_name(connection, name.clone()))
            .await;
        if let Err(StoreError::Backend(error)) = &named
            && super::diagnosis::refusal(error)
        {
            tracing::info!(target: "stampede", %error, "Redis refuses CLIENT SETNAME to this user: stampede's connections go unnamed (CLIENT LIST still shows lib-name=stampede)");
            self.refused = true;
            return;
        }
        if let Some(mut connection) = subscriber.connection() {
            let timeout = client.config.response_timeout;
            let name = format!("{name}-notices");
            let _ = tokio::time::timeout(timeout, connection.set_name(&name)).await;
        }
    }
}

/// `CLIENT SETNAME` on a single server or every master of a cluster.
async fn set_name(connection: Connection, name: String) -> RedisResult<()> {
    let mut command = redis::cmd("CLIENT");
    command.arg("SETNAME").arg(name);
    let mut connection = connection;
    command.query_async(&mut connection).await
}

/// Warns once per master when its memory limit and eviction policy can evict stampede's
/// keys: an evicted fence or lease fails closed (a publish refused, a load repeated), but
/// an evicted mark forgets an invalidation at a source version, and an evicted value is a
/// miss. `noeviction` (or no limit) is the safe setting; a server that refuses `CONFIG`
/// (a managed service) is not asked again, and says so once.
async fn warn_of_eviction(client: &super::Client, breaker: &Arc<Breaker>, master: &str) {
    let config = |parameter: &'static str| {
        let master = master.to_owned();
        move |connection: Connection| config_get(connection, master.clone(), parameter)
    };
    let (limit, policy) = (
        client.call_optional(breaker, config("maxmemory")).await,
        client
            .call_optional(breaker, config("maxmemory-policy"))
            .await,
    );
    let (Ok(limit), Ok(policy)) = (limit, policy) else {
        tracing::info!(target: "stampede", shard = %master, "Redis does not let this user read its eviction policy (CONFIG GET): make sure it is `noeviction`, or that stampede's keys cannot be evicted (see the fleet guide)");
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
