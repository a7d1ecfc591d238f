//! A replica's tag invalidations on the shared store, and the notices that keep the
//! runtime's tag book current (see `tags.rs` for what a tag's version means).
use super::Replica;
use crate::shared::store::{BreakerState, NoticeKind, StoreError, StoreEvent};
use crate::tags::{Heard, TagBook};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// How long a read of tag versions waits for notices to flow, at most.
const HEARING_WAIT: Duration = Duration::from_secs(1);
use std::sync::Arc;
use tokio::sync::broadcast;
use tokio::sync::broadcast::error::RecvError;

impl Replica {
    /// Moves `tag` for every replica: retired here at once, then its version raised in
    /// the store, which tells every replica. Owed from the start, so a call that is
    /// dropped midway, or that the store does not take, is sent again until the store
    /// takes it; meanwhile the tag stays retired here.
    pub(crate) async fn invalidate_tag(&self, tag: &str) -> Result<(), StoreError> {
        let ticket = self.tags.owe(tag);
        self.pending.store(true, Ordering::Release);
        // Outside Tokio the store's calls cannot run here: the replayer sends it.
        if tokio::runtime::Handle::try_current().is_err() {
            self.added.notify_one();
            return Err(StoreError::Unavailable);
        }
        match self.store.invalidate_tag(tag, self.tags.keep()).await {
            Ok(version) => {
                self.tags.learn(tag, version, Heard::Paid(ticket));
                Ok(())
            }
            Err(error) => {
                self.added.notify_one();
                Err(error)
            }
        }
    }

    /// The store's versions of `tags` (0 for a tag never invalidated), which the book
    /// then knows; an error also when the book was reset while they were read (the read
    /// may predate a move whose notice was missed).
    pub(crate) async fn tag_versions(&self, tags: &[Arc<str>]) -> Result<Vec<u64>, StoreError> {
        self.hearing_tags().await;
        let epoch = self.tags.epoch();
        let versions = self.store.tag_versions(tags).await?;
        for (tag, version) in tags.iter().zip(&versions) {
            if !self.tags.learn_read(tag, *version, epoch) {
                return Err(StoreError::Backend(
                    "the notice subscription changed while tags were read".into(),
                ));
            }
        }
        Ok(versions)
    }

    /// At start-up, waits (briefly: as long as a connection may take) until notices flow
    /// and the book has been reset for them. A version read before would be forgotten by
    /// that reset, and a load that read it would store nothing: a replica's first loads
    /// would not be shared. Later (a subscription lost and back) nothing waits: the loads
    /// of that moment are not stored, and Redis is likely unreachable anyway.
    async fn hearing_tags(&self) {
        let deadline = tokio::time::Instant::now() + HEARING_WAIT;
        loop {
            // Subscribed once, or Redis failing (its read will fail too): no wait.
            if self.tags.hearing() != 0 || self.store.stats().breaker != BreakerState::Closed {
                return;
            }
            if tokio::time::Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Sends the tag invalidations owed, each under the ticket it is owed with; one the
    /// store does not take is left for the next round, and the others still go.
    pub(super) async fn replay_tags(&self) -> Result<(), StoreError> {
        let mut failed = None;
        for (tag, ticket) in self.tags.owed() {
            match self.store.invalidate_tag(&tag, self.tags.keep()).await {
                Ok(version) => self.tags.learn(&tag, version, Heard::Paid(ticket)),
                Err(error) => failed = Some(error),
            }
        }
        failed.map_or(Ok(()), Err)
    }
}

/// Keeps `book` current from the store's notices: a tag's new version as it is announced,
/// and every version forgotten when notices may have been missed (the subscription
/// dropped, came back, or this listener fell behind).
pub(super) async fn keep_versions(book: Arc<TagBook>, mut events: broadcast::Receiver<StoreEvent>) {
    loop {
        match events.recv().await {
            Ok(StoreEvent::Notice(notice)) if notice.kind == NoticeKind::Tag => {
                book.learn(&notice.key, notice.fence, Heard::Moved);
            }
            Ok(StoreEvent::Notice(_)) => {}
            Ok(StoreEvent::Passage(passage)) => passage.taken(),
            Ok(StoreEvent::Subscribed(epoch)) => book.reset_for(epoch),
            Ok(StoreEvent::SubscriptionLost) | Err(RecvError::Lagged(_)) => book.reset(),
            Err(RecvError::Closed) => return,
        }
    }
}
