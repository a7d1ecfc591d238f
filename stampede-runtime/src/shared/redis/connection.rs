//! The connections under a store: one Redis server or one Redis Cluster.
//!
//! Both run the same scripts through one [`Connection`]: a single node's
//! `ConnectionManager`, or the `redis` crate's cluster client, which routes each EVALSHA
//! by its first key's slot, follows MOVED and ASK, and loads a script on every master
//! after NOSCRIPT. Notices need no cluster client: see [`super::notices`] for why a
//! subscriber listens on one node.
use super::access::{Access, Target};
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterConfig;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{Client, Cmd, Pipeline, ProtocolVersion, RedisError, RedisFuture, RedisResult, Value};
use std::time::Duration;
use tokio::sync::mpsc;

/// A multiplexed connection to either target; cheap to clone.
#[derive(Clone)]
pub(crate) enum Connection {
    Node(ConnectionManager),
    Cluster(ClusterConnection),
    /// The simulated server of a simulation of the fleet.
    #[cfg(feature = "simulation")]
    Model(crate::shared::model::network::Link),
}

/// How the client itself retries inside one call; the store's deadline bounds it all.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Patience {
    /// The store's deadline for one call (see [`super::call`]).
    pub(crate) response_timeout: Duration,
    /// How long establishing a connection (TCP, TLS, HELLO) may take. It runs in the
    /// background of the calls that wait on it, each of which still gives up at its own
    /// response timeout, so a slow handshake fails calls without being abandoned.
    pub(crate) connect_timeout: Duration,
}

impl Patience {
    /// The client's own response timeout: past the store's deadline and the grace in
    /// which a late answer is still awaited, so the client never calls a late answer lost.
    fn backstop(self) -> Duration {
        self.response_timeout * (super::call::LATE_GRACE + 2)
    }
}

impl Connection {
    /// Connects lazily: only settings the client refuses fail here. `None` for a master
    /// the Sentinels name, which is found by asking them (see [`super::sentinel`]).
    pub(crate) fn open(access: &Access, patience: Patience) -> RedisResult<Option<Self>> {
        match &access.target {
            Target::Node(info) => Self::node(access.client(info)?, patience).map(Some),
            Target::Cluster(nodes) => {
                // MOVED and ASK replies count as retries in this client, so it needs a
                // few: a slot moving under a call costs two (ASK, then MOVED).
                let client = (access.cluster_client(nodes))
                    .retries(4)
                    .min_retry_wait(5)
                    .max_retry_wait(50)
                    .connection_timeout(patience.connect_timeout)
                    .response_timeout(patience.backstop())
                    .build()?;
                Ok(Some(Self::Cluster(
                    client.get_pending_async_connection_with_config(
                        ClusterConfig::new()
                            .set_connection_timeout(patience.connect_timeout)
                            .set_response_timeout(patience.backstop()),
                    ),
                )))
            }
            Target::Sentinel(_) => Ok(None),
            #[cfg(feature = "simulation")]
            Target::Model(world, replica) => Ok(Some(Self::Model(world.link(replica)))),
        }
    }

    /// A lazy connection to one server through `client`.
    pub(crate) fn node(client: Client, patience: Patience) -> RedisResult<Self> {
        let manager = ConnectionManager::new_lazy_with_config(client, node_config(patience))?;
        Ok(Self::Node(manager))
    }
}

/// `host:port` of a master's address; `None` for `""` (any node, or a single server).
fn host_port(address: &str) -> Option<(String, u16)> {
    address
        .rsplit_once(':')
        .and_then(|(host, port)| Some((host.to_owned(), port.parse().ok()?)))
}

impl Connection {
    /// Sends `command` to the master at `address`, or to the one server when it is `""`.
    pub(crate) async fn on_master<T: redis::FromRedisValue>(
        mut self,
        address: String,
        command: redis::Cmd,
    ) -> RedisResult<T> {
        match (&mut self, host_port(&address)) {
            (Connection::Cluster(cluster), Some((host, port))) => {
                let reply = cluster
                    .route_command(
                        command,
                        RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host, port }),
                    )
                    .await?;
                Ok(redis::from_redis_value(reply)?)
            }
            _ => command.query_async(&mut self).await,
        }
    }
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Node(connection) => connection.req_packed_command(cmd),
            Self::Cluster(connection) => connection.req_packed_command(cmd),
            #[cfg(feature = "simulation")]
            Self::Model(link) => {
                let command = crate::shared::model::network::arguments(cmd);
                Box::pin(link.call(command))
            }
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Node(connection) => connection.req_packed_commands(pipeline, offset, count),
            Self::Cluster(connection) => connection.req_packed_commands(pipeline, offset, count),
            #[cfg(feature = "simulation")]
            Self::Model(link) => Box::pin(async move {
                // One request each, in order, on the one connection: as Redis runs a
                // pipeline (not atomically).
                let mut replies = Vec::new();
                for command in pipeline.cmd_iter() {
                    let arguments = crate::shared::model::network::arguments(command);
                    replies.push(link.call(arguments).await?);
                }
                Ok(replies.into_iter().skip(offset).take(count).collect())
            }),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Node(connection) => connection.get_db(),
            Self::Cluster(connection) => connection.get_db(),
            #[cfg(feature = "simulation")]
            Self::Model(_) => 0,
        }
    }
}

/// Where the notice subscription can listen: a node (through its client), or the
/// simulated server.
#[derive(Clone)]
pub(crate) enum Endpoint {
    Redis(Box<Client>),
    #[cfg(feature = "simulation")]
    Model(std::sync::Arc<crate::shared::model::network::World>, String),
}

/// The notice subscription's connection (a handle on it: it is multiplexed).
#[derive(Clone)]
pub(crate) enum Listener {
    Redis(ConnectionManager),
    #[cfg(feature = "simulation")]
    Model(crate::shared::model::network::Subscription),
}

impl Listener {
    /// A lazy connection to `endpoint` that forwards its pushes (messages, subscription
    /// changes, disconnections) to `pushes` and subscribes again after a reconnect.
    pub(crate) fn open(
        endpoint: Endpoint,
        patience: Patience,
        pushes: mpsc::UnboundedSender<redis::PushInfo>,
    ) -> Result<Self, RedisError> {
        match endpoint {
            Endpoint::Redis(client) => Ok(Self::Redis(subscriber(*client, patience, pushes)?)),
            #[cfg(feature = "simulation")]
            Endpoint::Model(world, replica) => {
                Ok(Self::Model(world.subscription(&replica, pushes)))
            }
        }
    }

    pub(crate) async fn subscribe(&mut self, channels: &[String]) -> RedisResult<()> {
        match self {
            Self::Redis(connection) => connection.subscribe(channels).await,
            #[cfg(feature = "simulation")]
            Self::Model(subscription) => {
                let channels = channels.iter().map(|c| c.as_bytes().to_vec()).collect();
                subscription.subscribe(channels).await
            }
        }
    }

    pub(crate) async fn unsubscribe(&mut self, channels: &[String]) -> RedisResult<()> {
        match self {
            Self::Redis(connection) => connection.unsubscribe(channels).await,
            #[cfg(feature = "simulation")]
            Self::Model(subscription) => {
                let channels = channels.iter().map(|c| c.as_bytes().to_vec()).collect();
                subscription.unsubscribe(channels).await
            }
        }
    }

    /// `PING`: whether the connection answers.
    pub(crate) async fn ping(&mut self) -> RedisResult<()> {
        match self {
            Self::Redis(connection) => redis::cmd("PING").query_async(connection).await,
            #[cfg(feature = "simulation")]
            Self::Model(subscription) => subscription.ping().await,
        }
    }

    /// `CLIENT SETNAME name`.
    pub(crate) async fn set_name(&mut self, name: &str) -> RedisResult<()> {
        match self {
            Self::Redis(connection) => {
                let mut command = redis::cmd("CLIENT");
                command.arg("SETNAME").arg(name);
                command.query_async(connection).await
            }
            #[cfg(feature = "simulation")]
            Self::Model(subscription) => subscription.ping().await,
        }
    }
}

fn node_config(patience: Patience) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_response_timeout(Some(patience.backstop()))
        .set_connection_timeout(Some(patience.connect_timeout))
        .set_number_of_retries(1)
}

/// A lazy RESP3 connection through `client` (one node's) that forwards its pushes
/// (messages, subscription changes, disconnections) to `pushes` and subscribes again
/// after a reconnect.
pub(crate) fn subscriber(
    client: Client,
    patience: Patience,
    pushes: mpsc::UnboundedSender<redis::PushInfo>,
) -> Result<ConnectionManager, RedisError> {
    let info = client.get_connection_info().clone();
    let resp3 = info.clone().set_redis_settings(
        info.redis_settings()
            .clone()
            .set_protocol(ProtocolVersion::RESP3),
    );
    // The TLS parameters `client` was built with live in the address, so they stay.
    ConnectionManager::new_lazy_with_config(
        Client::open(resp3)?,
        node_config(patience)
            .set_push_sender(pushes)
            .set_automatic_resubscription(),
    )
}
