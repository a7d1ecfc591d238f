//! Listing a cache's entries for `invalidate_all`: `SCAN` on every master of a cluster
//! (from a fresh slot map), or on the one server.
use super::connection::Connection;
use super::Client;
use crate::shared::keys::EntryKey;
use crate::shared::store::{Scan, ScanFailure, StoreError};
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::RedisResult;

impl Client {
    /// Every entry with a key matching `pattern`, each once, from every master (or from
    /// `only` these). A cluster's masters are read from a fresh `CLUSTER SLOTS` first: a
    /// scan that skipped a master would leave its entries behind. A master that cannot be
    /// scanned does not stop the others; it is named in the answer.
    pub(super) async fn entries(&self, pattern: &str, only: Option<&[String]>) -> Scan {
        let masters = match (self.connection(), only) {
            (_, Some(only)) => only.to_vec(),
            (Some(Connection::Cluster(_)), None) => match self.masters().await {
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
            // One server (a master the Sentinels name, found on the first call).
            (_, None) => vec![String::new()],
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
    connection: Connection,
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
    connection.on_master(address, command).await
}
