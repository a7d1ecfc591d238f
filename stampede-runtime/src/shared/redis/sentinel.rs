//! Following the master a set of Redis Sentinels names, through failovers.
//!
//! The master is found by asking the Sentinels (`SENTINEL get-master-addr-by-name`), the
//! one that answered last first, before the first call and then once a heartbeat. When
//! they name another address (a failover), the store's connection and its notice
//! subscription move there: calls in between fail like calls to a dead server (the
//! breaker, degraded mode), and the subscription's move is a lost subscription (copies
//! dropped, waits re-checked), since notices sent during the failover are lost.
//!
//! A publish whose read went to the old master is refused by the new one (its run id
//! differs, see `lua/prelude.lua`), and its fences are floored at the new master's
//! clock, so a fence the old master handed out is never handed out again.
//!
//! Only the Sentinels' answer is trusted, not the node's own: asking a node its role
//! takes `ROLE` or `INFO`, which least-privilege users do not have. A node the Sentinels
//! still name after it lost its role answers writes with READONLY, which fails the call
//! like an outage until the Sentinels name the new master.
use super::access::{Access, Sentinels};
use super::connection::{Connection, Patience};
use super::diagnosis::Cause;
use super::{background, Client};
use crate::shared::store::{BreakerState, StoreError};
use redis::aio::ConnectionManager;
use redis::{RedisError, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{PoisonError, Weak};
use std::time::Duration;

/// The Sentinels of one master, each behind a lazy connection.
pub(super) struct Follower {
    master: String,
    sentinels: Vec<(String, ConnectionManager)>,
    /// The Sentinel to ask first: the one that answered last.
    first: AtomicUsize,
}

impl Follower {
    pub(super) fn new(
        access: &Access,
        sentinels: &Sentinels,
        patience: Patience,
    ) -> redis::RedisResult<Self> {
        let connections = (sentinels.nodes.iter())
            .map(|info| {
                let client = access.sentinel_client(info)?;
                let config = redis::aio::ConnectionManagerConfig::new()
                    .set_response_timeout(Some(patience.response_timeout))
                    .set_connection_timeout(Some(patience.connect_timeout))
                    .set_number_of_retries(0);
                let manager = ConnectionManager::new_lazy_with_config(client, config)?;
                Ok((info.addr().to_string(), manager))
            })
            .collect::<redis::RedisResult<_>>()?;
        Ok(Follower {
            master: sentinels.master.clone(),
            sentinels: connections,
            first: AtomicUsize::new(0),
        })
    }

    /// The master's address as the first Sentinel to answer names it, each asked within
    /// `timeout`. The error names every Sentinel tried and what each said.
    async fn master(&self, timeout: Duration) -> Result<(String, u16), String> {
        let first = self.first.load(Ordering::Relaxed);
        let mut said = Vec::new();
        for turn in 0..self.sentinels.len() {
            let at = (first + turn) % self.sentinels.len();
            let (address, connection) = &self.sentinels[at];
            let mut command = redis::cmd("SENTINEL");
            command.arg("get-master-addr-by-name").arg(&self.master);
            let mut connection = connection.clone();
            let asked =
                tokio::time::timeout(timeout, command.query_async::<Value>(&mut connection));
            match asked.await {
                Ok(Ok(reply)) => match master_address(reply) {
                    Some(master) => {
                        self.first.store(at, Ordering::Relaxed);
                        return Ok(master);
                    }
                    None => said.push(format!(
                        "{address}: knows no master named `{}`",
                        self.master
                    )),
                },
                Ok(Err(error)) => said.push(format!("{address}: {error}")),
                Err(_) => said.push(format!("{address}: no answer within {timeout:?}")),
            }
        }
        Err(format!(
            "no Sentinel named the master `{}` ({}): check the Sentinels' addresses and the master's name in `url` (and `sentinel_username`/`sentinel_password` if they require a login)",
            self.master,
            said.join("; ")
        ))
    }
}

/// Asks the Sentinels where the master is once a heartbeat, and at once when a call to
/// the master failed, until the store is dropped.
pub(super) async fn keep_following(client: Weak<Client>) {
    loop {
        let Some(strong) = client.upgrade() else {
            return;
        };
        let _ = strong.follow_master().await;
        // While the master fails, a failover may be under way: ask more often.
        let period = match strong.shards.breaker("").state() {
            BreakerState::Closed => strong.config.heartbeat,
            _ => FOLLOW_AT_MOST_EVERY,
        };
        // Held while it waits: dropping the store aborts this task.
        let _ = tokio::time::timeout(period, strong.follow_now.notified()).await;
        // A failing master is asked about at most this often.
        tokio::time::sleep(FOLLOW_AT_MOST_EVERY).await;
    }
}

/// The least time between two searches for the master.
const FOLLOW_AT_MOST_EVERY: Duration = Duration::from_millis(100);

impl Client {
    /// Asks the Sentinels where the master is and, when it moved (or was not known),
    /// points the connection there. Whether it moved; `Ok(false)` when the target has no
    /// Sentinels.
    pub(super) async fn follow_master(&self) -> Result<bool, StoreError> {
        let Some(follower) = &self.follower else {
            return Ok(false);
        };
        let _one_search = self.finding.lock().await;
        let found = match follower.master(self.config.response_timeout).await {
            Ok(found) => found,
            Err(why) => {
                self.problems.saw(Cause::Sentinel, why.clone());
                return Err(StoreError::Backend(why));
            }
        };
        let mut master = self.master.lock().unwrap_or_else(PoisonError::into_inner);
        if master.as_ref() == Some(&found) {
            return Ok(false);
        }
        let patience = Patience {
            response_timeout: self.config.response_timeout,
            connect_timeout: self.config.connect_timeout,
        };
        let backend = |e: RedisError| StoreError::Backend(e.to_string());
        let client = (self.config.access)
            .client_at(&found.0, found.1)
            .map_err(backend)?;
        let store_runtime = background::handle();
        let _entered = store_runtime.enter();
        let connection = Connection::node(client, patience).map_err(backend)?;
        if let Some((host, port)) = master.as_ref() {
            tracing::warn!(target: "stampede", from = %format!("{host}:{port}"), to = %format!("{}:{}", found.0, found.1), "the Sentinels name another master (a failover): following it");
        }
        *self
            .connection
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Some(connection);
        *master = Some(found);
        self.moves.fetch_add(1, Ordering::Relaxed);
        // The failures that opened the breaker were the old master's.
        self.shards.breaker("").probe_now();
        Ok(true)
    }

    /// The master the Sentinels named last, as a client (for the subscription).
    pub(super) fn master_client(&self) -> Option<redis::Client> {
        let master = self.master.lock().unwrap_or_else(PoisonError::into_inner);
        let (host, port) = master.as_ref()?;
        self.config.access.client_at(host, *port).ok()
    }
}

/// `[host, port]`, or nil when the Sentinel does not know the master.
fn master_address(reply: Value) -> Option<(String, u16)> {
    let (host, port): (String, String) = redis::from_redis_value(reply).ok()?;
    Some((host, port.parse().ok()?))
}
