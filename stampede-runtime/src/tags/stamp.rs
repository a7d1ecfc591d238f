//! One entry's side of tags: the versions it was stored with, and whether they are
//! still current.
use super::TagBook;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The versions of one entry's tags when it was stored.
pub(crate) struct TagStamp {
    pub(super) tags: Box<[(Arc<str>, u64)]>,
    /// The book's count of moves when these versions were last found current.
    pub(super) checked: AtomicU64,
    pub(super) book: Arc<TagBook>,
    /// Stored while the shared store could not be read, so tags it did not know could not
    /// be read either: served without them (the copy is kept only for the degraded bound),
    /// but retired by this replica's own invalidations and by versions it learns later.
    pub(super) unverified: bool,
}

impl fmt::Debug for TagStamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.tags.iter().map(|(tag, version)| (tag, version)))
            .finish()
    }
}

impl TagStamp {
    /// A stamp of versions read from the shared store, to be checked before it is served.
    pub(crate) fn recorded(book: &Arc<TagBook>, tags: Vec<(Arc<str>, u64)>) -> Arc<Self> {
        Arc::new(TagStamp {
            tags: tags.into_boxed_slice(),
            checked: AtomicU64::new(0),
            book: book.clone(),
            unverified: false,
        })
    }

    pub(crate) fn tags(&self) -> &[(Arc<str>, u64)] {
        &self.tags
    }

    /// Whether no tag of the entry moved past its version: the hit path's question. A tag
    /// the book does not know (on a shared store, after the book was reset) is not
    /// current: the entry is read again from the store, where the tag is looked up.
    #[inline]
    pub(crate) fn current(&self) -> bool {
        let moves = self.book.moves.load(Ordering::Acquire);
        if self.checked.load(Ordering::Relaxed) >= moves {
            return true;
        }
        self.book.check(self) == Verdict::Current
    }
}

/// What the book says of an entry's versions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    Current,
    Retired,
    /// Tags the book does not know: read their versions from the shared store first.
    Unknown(Vec<Arc<str>>),
}
