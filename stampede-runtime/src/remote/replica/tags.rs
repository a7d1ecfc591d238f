//! A replica's tag invalidations on the shared store, and the notices that keep the
//! runtime's tag book current (see `tags.rs` for what a tag's version means).
use super::Remote;
use crate::remote::store::{NoticeKind, StoreError, StoreEvent};
use crate::tags::TagBook;
use std::sync::Arc;
use tokio::sync::broadcast;
use tokio::sync::broadcast::error::RecvError;

impl Remote {
    /// Moves `tag` for every replica: retired here at once, then its version raised in
    /// the store, which tells every replica. When the store does not take it, it stays
    /// retired here and is owed: sent again until the store takes it.
    pub(crate) async fn invalidate_tag(&self, tag: &str) -> Result<(), StoreError> {
        self.tags.owe(tag);
        match self.store.invalidate_tag(tag, self.tags.keep()).await {
            Ok(version) => {
                self.tags.learn(tag, version, true, true);
                Ok(())
            }
            Err(error) => {
                let owed = self.owed();
                self.still_pending(&owed);
                self.added.notify_one();
                Err(error)
            }
        }
    }

    /// The store's versions of `tags` (0 for a tag never invalidated), which the book
    /// then knows.
    pub(crate) async fn tag_versions(&self, tags: &[Arc<str>]) -> Result<Vec<u64>, StoreError> {
        let versions = self.store.tag_versions(tags).await?;
        for (tag, version) in tags.iter().zip(&versions) {
            self.tags.learn(tag, *version, false, false);
        }
        Ok(versions)
    }

    /// Sends the tag invalidations owed; stops at the first the store does not take.
    pub(super) async fn replay_tags(&self) -> Result<(), StoreError> {
        for tag in self.tags.owed() {
            let version = self.store.invalidate_tag(&tag, self.tags.keep()).await?;
            self.tags.learn(&tag, version, true, true);
        }
        Ok(())
    }
}

/// Keeps `book` current from the store's notices: a tag's new version as it is announced,
/// and every version forgotten when notices may have been missed (the subscription
/// dropped, came back, or this listener fell behind).
pub(super) async fn keep_versions(book: Arc<TagBook>, mut events: broadcast::Receiver<StoreEvent>) {
    loop {
        match events.recv().await {
            Ok(StoreEvent::Notice(notice)) if notice.kind == NoticeKind::Tag => {
                book.learn(&notice.key, notice.fence, true, false);
            }
            Ok(StoreEvent::Notice(_)) => {}
            Ok(StoreEvent::SubscriptionLost | StoreEvent::Subscribed(_))
            | Err(RecvError::Lagged(_)) => book.reset(),
            Err(RecvError::Closed) => return,
        }
    }
}
