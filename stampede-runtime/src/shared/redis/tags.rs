//! Tag versions in Redis: one key per tag (`prefix:3:tag:{<tag>}`, so on a cluster each
//! tag's version lives on the master of its own slot and any replica can read it), raised
//! by the `tag` script, read with one `GET` per tag.
use super::{bump, Client};
use crate::shared::keys::tag_key;
use crate::shared::store::StoreError;
use std::sync::Arc;
use std::time::Duration;

/// Versions are exact in the scripts' numbers (doubles) below this.
const EXACT: u64 = 1 << 53;

impl Client {
    pub(super) async fn invalidate_tag(
        &self,
        tag: &str,
        keep: Duration,
    ) -> Result<u64, StoreError> {
        let key = tag_key(&self.config.prefix, tag);
        let keep = super::millis(keep).max(1);
        let (_, breaker) = self.shards.for_key(&key);
        let answer: String = self
            .call_through(&breaker, |mut connection| {
                let mut invocation = self.scripts.tag.prepare_invoke();
                invocation
                    .key(key.as_str())
                    .arg(keep)
                    .arg(self.channel.as_str())
                    .arg(self.hub.replica())
                    .arg(tag);
                async move { invocation.invoke_async(&mut connection).await }
            })
            .await?;
        bump(&self.counters.notices_sent);
        match answer.strip_prefix("memory ") {
            Some(_) => Err(StoreError::Backend(
                "Redis is out of memory: every replica was told of the tag, but its version could not be kept".into(),
            )),
            None => answer.parse().map_err(|_| {
                StoreError::Backend(format!("the tag script answered {answer:?}, not a version"))
            }),
        }
    }

    /// One `GET` per tag, all at once (on a cluster each goes to its own master).
    pub(super) async fn tag_versions(&self, tags: &[Arc<str>]) -> Result<Vec<u64>, StoreError> {
        let reads = tags.iter().map(|tag| async move {
            let key = tag_key(&self.config.prefix, tag);
            let (_, breaker) = self.shards.for_key(&key);
            let held: Option<String> = self
                .call_through(&breaker, |mut connection| {
                    let mut get = redis::cmd("GET");
                    get.arg(key.as_str());
                    async move { get.query_async(&mut connection).await }
                })
                .await?;
            // Anything but a version the script could have written (an operator's write)
            // is an error: entries carrying the tag are retired rather than served
            // unchecked, and the next invalidation writes over it.
            match held {
                None => Ok(0),
                Some(text) => text
                    .parse::<u64>()
                    .ok()
                    .filter(|&v| v < EXACT)
                    .ok_or_else(|| {
                        StoreError::Backend(format!("{key} holds {text:?}, not a tag version"))
                    }),
            }
        });
        futures_util::future::try_join_all(reads).await
    }
}
