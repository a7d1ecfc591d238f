//! Tags on a runtime: one invalidation for every entry carrying a tag, in every cache
//! built on the runtime (see `tags.rs` for how).
use super::Runtime;
use crate::config::backend::Kind;
use crate::error::Error;
use crate::tags::TagBook;
use std::sync::Arc;

impl Runtime {
    /// Retires every entry tagged `tag`, in every cache built on this runtime and, on a
    /// shared backend, on every replica. Its cost does not depend on how many entries
    /// carry the tag: nothing is scanned (each entry recorded its tags' versions when it
    /// was stored, and one whose tag moved since is never served again). A load running
    /// now whose value carries the tag answers its callers but is not stored, as with
    /// [`Cache::invalidate`](crate::Cache::invalidate).
    ///
    /// On a shared backend, once this returns no replica serves such an entry to a call
    /// that starts after the tag's notice reached it (well under a millisecond on a local
    /// network). [`Error::Backend`] when the shared store could not take it: it applied
    /// in this process, and it is sent again until the store takes it (meanwhile this
    /// replica serves no entry carrying the tag and stores none).
    ///
    /// ```
    /// use std::time::Duration;
    /// use stampede_runtime::{Cache, Policy, Runtime};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let runtime = Runtime::builder().build().unwrap();
    /// let policy = Policy::builder("prices").fresh(Duration::from_secs(60)).build().unwrap();
    /// // Keyed by (product, currency); every price of a product carries its tag.
    /// let prices: Cache<(u64, String), u64> = Cache::builder(policy)
    ///     .runtime(&runtime)
    ///     .tags(|key: &(u64, String), _price: &u64| [format!("product:{}", key.0)])
    ///     .build();
    /// prices.load((42, "EUR".into()), || async { Ok(990) }).await.unwrap();
    /// prices.load((42, "USD".into()), || async { Ok(1090) }).await.unwrap();
    /// runtime.invalidate_tag(format!("product:{}", 42)).await.unwrap();
    /// assert_eq!(prices.peek(&(42, "EUR".into())), None);
    /// assert_eq!(prices.peek(&(42, "USD".into())), None);
    /// # }
    /// ```
    pub async fn invalidate_tag(&self, tag: impl AsRef<str>) -> Result<(), Error> {
        self.move_tag(tag.as_ref(), "(every cache)".into(), false)
            .await
    }

    /// The versions of the tags of this runtime's caches.
    pub(crate) fn tag_book(&self) -> &Arc<TagBook> {
        &self.state.tags
    }

    /// Moves the tag `name` (a tag, or a tag scoped to one cache) here and, on a shared
    /// backend, for every replica; `cache` names who asked, in an error.
    /// With `acknowledged` (or under [`crate::acknowledged`]), on the tiered backend, it
    /// returns once no replica can serve an entry the move retired.
    pub(crate) async fn move_tag(
        &self,
        name: &str,
        cache: Arc<str>,
        acknowledged: bool,
    ) -> Result<(), Error> {
        let book = &self.state.tags;
        if !book.shared() {
            book.invalidate_here(name);
            return Ok(());
        }
        // A connection made earlier serves outside Tokio too: its replayer sends the tag.
        let connected = self
            .state
            .replica
            .get()
            .and_then(|replica| replica.as_ref().ok());
        let Some(replica) = self.replica().or(connected) else {
            // Nowhere to send it yet: retired here, owed until a connection is made.
            book.owe(name);
            return Err(Error::Backend {
                cache,
                message: "no connection to the shared store (none is made outside a Tokio runtime); applied in this process only".into(),
            });
        };
        replica.invalidate_tag(name).await.map_err(|error| Error::Backend {
            cache,
            message: format!("{error}; applied in this process and queued, sent again until the shared store takes it"),
        })?;
        // Under `acknowledged`, on a tiered fleet, once no replica serves an entry the
        // move retired.
        let tiered = self.state.config.backend_settings.kind == Kind::Tiered;
        if tiered && (acknowledged || crate::per_call::acknowledging()) {
            let tag_key = crate::shared::keys::tag_key(&replica.prefix, name);
            replica.wait_for_acknowledgements(&tag_key).await;
        }
        Ok(())
    }
}

/// [`Runtime::invalidate_tag`] on the process's runtime ([`Runtime::global`]). The tag is
/// a `&str` or a `String` (`invalidate_tag(format!("tenant:{tenant}"))`).
pub async fn invalidate_tag(tag: impl AsRef<str>) -> Result<(), Error> {
    match Runtime::global() {
        Ok(runtime) => runtime.invalidate_tag(tag).await,
        Err(error) => Err(Error::Config {
            cache: "(every cache)".into(),
            error,
        }),
    }
}
