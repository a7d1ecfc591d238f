//! Tags: one name that retires every entry carrying it, in every cache of a runtime (or of
//! one cache, scoped), at a cost that does not grow with the entries.
//!
//! Nothing is scanned. Each tag has a version that only rises, and each entry records the
//! versions of its tags when it is stored; an entry whose tag has moved past the version
//! it recorded is retired: never served, as if invalidated. A runtime keeps one
//! [`TagBook`]: the versions it knows and a count of moves, so a hit of a tagged entry
//! compares one number (the count its tags were last found current at) and looks at the
//! table only after some tag moved.
//!
//! A load that was running when one of its tags moved is fenced as an invalidated load
//! is: it answers its callers and stores nothing. Each load notes the count of moves when
//! it starts; a tag whose last move came after that refuses the store.
//!
//! On a shared store the versions live there (see `shared::redis::lua::tag`), the book
//! is kept current by the store's notices, and a tag the book does not know is read from
//! the store before an entry carrying it is served or stored. On the memory backend the
//! book is the only record, and a version is the count of moves itself.
use crate::clock::StoreInstant as Instant;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

mod stamp;
pub(crate) use stamp::{TagStamp, Verdict};

/// Records a memory book keeps before it looks for ones old enough to forget.
const PRUNE_ABOVE: usize = 4096;
/// Records a book of shared-store versions keeps at most: beyond, it forgets the older
/// half (each is read again when needed).
const SHARED_RECORDS: usize = 65_536;
/// How long the shared store keeps a tag's version after its last move, at least. An
/// entry stored before that move and living longer than this after it could be served
/// again once the version is gone, so it is long.
pub(crate) const STORE_KEEP: Duration = Duration::from_secs(30 * 24 * 60 * 60);
/// How long a book keeps a tag's record at least: a load that began before the move and
/// is still running refuses its store (see `floor`), and an entry older than this that
/// recorded the older version has expired.
const KEEP_AT_LEAST: Duration = Duration::from_secs(60);
/// A tag first read from the shared store when a load stores: a move this close before the
/// load called its origin (by the two clocks involved: the tag's Redis server and the one
/// the load read, or this host when it read none) may have come after, so the store is
/// refused. Covers the skew between those clocks when they are two: a cluster's masters,
/// or a server and this host. On one server both are its clock, and no margin is needed
/// (a margin there refused every load within a second of a move that its replica learned
/// by reading, not by notice: a replica started after the move loaded keys another had
/// stored under the new version).
pub(crate) const UNKNOWN_MARGIN: Duration = Duration::from_secs(1);

/// Separates a cache's name from a tag scoped to it.
const SCOPE: char = '\0';

/// A tag scoped to one cache (a handle's or [`Cache`](crate::Cache)'s `invalidate_tag`).
pub(crate) fn scoped(cache: &str, tag: &str) -> Arc<str> {
    format!("{cache}{SCOPE}{tag}").into()
}

/// When a load began: the book's count of moves, and the time (Unix microseconds) just
/// before its origin was called: the shared store's clock at its read when it read one,
/// else this host's. A version first read after the load began is ordered by that time,
/// give or take `margin`: the skew between that clock and the tag's server's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Began {
    pub(crate) count: u64,
    pub(crate) micros: u64,
    pub(crate) margin: Duration,
}

/// Why a load's entry may not be stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// One of its tags moved after the load began.
    Moved,
    /// Tags the book does not know: read their versions from the shared store first.
    Unknown(Vec<Arc<str>>),
}

/// How the book heard of a version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Heard {
    /// Read from the store: when it moved is told by the version alone.
    Read,
    /// A move, announced now (a notice): loads that began before refuse their store.
    Moved,
    /// The store's answer to this replica's own invalidation, owed under this ticket
    /// (see [`TagBook::owe`]): a move, and the end of that debt unless a later one
    /// is owed.
    Paid(u64),
}

/// The tag versions a runtime knows.
pub(crate) struct TagBook {
    /// Rises with every move of a version known here (and every reset): an entry found
    /// current at this count needs no look at the table.
    moves: AtomicU64,
    /// Read by every check of a stamp (hits after a move, concurrently), written by moves.
    table: RwLock<Table>,
    /// Versions come from a shared store: a tag not in the table is unknown, not unmoved.
    shared: bool,
    /// The subscription epoch of the last reset (0: none since the book was made).
    hearing: AtomicU64,
}

#[derive(Default)]
struct Table {
    known: BTreeMap<Arc<str>, Known>,
    /// A load that began before this count may have missed a move (the record was
    /// forgotten): it does not store.
    floor: u64,
    /// Records are kept at least this long (the longest entry lifetime of a cache using
    /// the book).
    keep: Duration,
    pruned_at: Option<Instant>,
    /// How many records are owed to the store.
    owing: usize,
    /// The last ticket [`TagBook::owe`] gave.
    tickets: u64,
    /// Raised by every reset: a read sent before one is not learned after it.
    epoch: u64,
}

#[derive(Debug, Clone, Copy)]
struct Known {
    version: u64,
    /// The count of moves at this tag's last move.
    moved: u64,
    /// Since when it is known at this version.
    at: Instant,
    /// The count of moves when this version was read from the store rather than heard
    /// of as a move (0: never): a load that began before cannot tell from the count
    /// whether the move came after it began.
    learned: u64,
    /// Invalidated here and not yet taken by the store, under this ticket (0: nothing
    /// owed): every entry carrying it is retired here, and no load stores one, until it is.
    owed: u64,
}

impl Known {
    fn new(version: u64, at: Instant) -> Self {
        Known {
            version,
            moved: 0,
            at,
            learned: 0,
            owed: 0,
        }
    }
}

impl TagBook {
    pub(crate) fn new(shared: bool) -> Arc<Self> {
        Arc::new(TagBook {
            moves: AtomicU64::new(1),
            table: RwLock::new(Table {
                keep: KEEP_AT_LEAST,
                ..Table::default()
            }),
            shared,
            hearing: AtomicU64::new(0),
        })
    }

    pub(crate) fn shared(&self) -> bool {
        self.shared
    }

    fn table(&self) -> RwLockWriteGuard<'_, Table> {
        self.table.write().unwrap_or_else(PoisonError::into_inner)
    }

    fn read(&self) -> RwLockReadGuard<'_, Table> {
        self.table.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The count of moves, which a load notes when it begins.
    pub(crate) fn moves(&self) -> u64 {
        self.moves.load(Ordering::Acquire)
    }

    /// Counts a move; the caller holds the table's write lock.
    fn bump(&self) -> u64 {
        self.moves.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// Records are kept at least as long as an entry of a cache using the book may live.
    pub(crate) fn keep_at_least(&self, lifetime: Duration) {
        let mut table = self.table();
        table.keep = table.keep.max(lifetime);
    }

    /// Moves `tag` on the memory backend: its version becomes the new count of moves.
    pub(crate) fn invalidate_here(&self, tag: &str) {
        let mut table = self.table();
        let moved = self.bump();
        let known = table
            .known
            .entry(tag.into())
            .or_insert(Known::new(0, Instant::now()));
        known.version = moved;
        known.moved = moved;
        known.at = Instant::now();
        self.prune(&mut table);
    }

    /// Retires `tag` here before the shared store has taken its invalidation (or when it
    /// could not): entries carrying it are not served and no load stores one until the
    /// store's answer is learned as [`Heard::Paid`] with the ticket this returns, and no
    /// later invalidation of the tag is owed.
    pub(crate) fn owe(&self, tag: &str) -> u64 {
        let mut table = self.table();
        let moved = self.bump();
        table.tickets += 1;
        let ticket = table.tickets;
        let known = table
            .known
            .entry(tag.into())
            .or_insert(Known::new(0, Instant::now()));
        let was_owed = known.owed != 0;
        known.moved = moved;
        known.owed = ticket;
        known.at = Instant::now();
        if !was_owed {
            table.owing += 1;
        }
        ticket
    }

    /// The notice subscription's epoch (see `SharedStore::hearing`) the book was last
    /// reset for: versions read once it is the store's current one are heard of again.
    pub(crate) fn hearing(&self) -> u64 {
        self.hearing.load(Ordering::Acquire)
    }

    /// Forgets every version known, as [`TagBook::reset`], for the subscription `epoch`.
    pub(crate) fn reset_for(&self, epoch: u64) {
        self.reset();
        self.hearing.store(epoch, Ordering::Release);
    }

    /// The book's reset epoch, for a read of versions to learn only if no reset came
    /// between (see [`TagBook::learn_read`]).
    pub(crate) fn epoch(&self) -> u64 {
        self.read().epoch
    }

    /// `version` of `tag`, read from the store by a read that began under `epoch`: not
    /// learned (`false`) if the book was reset since, as the read may predate a move whose
    /// notice was missed.
    pub(crate) fn learn_read(&self, tag: &str, version: u64, epoch: u64) -> bool {
        let mut table = self.table();
        if table.epoch != epoch {
            return false;
        }
        self.learn_locked(&mut table, tag, version, Heard::Read);
        true
    }

    /// A version of `tag` from the shared store, heard as `how`.
    pub(crate) fn learn(&self, tag: &str, version: u64, how: Heard) {
        let mut table = self.table();
        self.learn_locked(&mut table, tag, version, how);
    }

    fn learn_locked(&self, table: &mut Table, tag: &str, version: u64, how: Heard) {
        let now = Instant::now();
        let known = match table.known.get_mut(tag) {
            Some(known) => known,
            None => {
                let mut known = Known::new(version, now);
                // Counted, so loads that begin from now on are ordered by the count; one
                // that began before is ordered by the version's time instead.
                let count = self.bump();
                match how {
                    Heard::Read => known.learned = count,
                    Heard::Moved | Heard::Paid(_) => known.moved = count,
                }
                table.known.insert(tag.into(), known);
                self.prune(table);
                return;
            }
        };
        if version > known.version {
            known.version = version;
            known.at = now;
            // Entries found current at the older version look again.
            let moved = self.bump();
            match how {
                Heard::Read => known.learned = moved,
                Heard::Moved | Heard::Paid(_) => known.moved = moved,
            }
        }
        if let Heard::Paid(ticket) = how
            && known.owed == ticket
        {
            known.owed = 0;
            table.owing -= 1;
        }
    }

    /// The notices stopped or may have skipped some: every version known is in doubt.
    /// Forgets them (not the owed ones): each is read from the store again before an entry
    /// carrying it is served or stored, and a load that began before a version it reads
    /// then does not store (see [`TagBook::stamp`]), so the notices missed meanwhile cost
    /// nothing but those reads.
    pub(crate) fn reset(&self) {
        let mut table = self.table();
        table.known.retain(|_, known| known.owed != 0);
        table.epoch += 1;
        self.bump();
    }

    /// Whether any tag invalidation is owed to the shared store.
    pub(crate) fn has_owed(&self) -> bool {
        self.read().owing > 0
    }

    /// How long the shared store keeps a tag's version after its last move: at least
    /// [`STORE_KEEP`], and at least the longest an entry of a cache using the book may
    /// live.
    pub(crate) fn keep(&self) -> Duration {
        self.read().keep.max(STORE_KEEP)
    }

    /// The tags owed to the shared store, with their tickets.
    pub(crate) fn owed(&self) -> Vec<(Arc<str>, u64)> {
        let table = self.read();
        if table.owing == 0 {
            return Vec::new();
        }
        let owed = table.known.iter().filter(|(_, known)| known.owed != 0);
        owed.map(|(tag, known)| (tag.clone(), known.owed)).collect()
    }

    /// The versions to store an entry of `names` with, for a load that `began`; refused
    /// when a tag moved since (or the book cannot tell).
    pub(crate) fn stamp(
        self: &Arc<Self>,
        names: &[Arc<str>],
        began: Began,
    ) -> Result<Arc<TagStamp>, Refusal> {
        self.stamp_as(names, began, false)
    }

    /// [`TagBook::stamp`] for a value loaded while the shared store could not be read:
    /// tags the book does not know are recorded at 0 (a version learned later retires the
    /// entry), and the stamp is [unverified](TagStamp::unverified). Refused as a stamp is,
    /// for a tag owed or moved since the load began.
    pub(crate) fn stamp_unverified(
        self: &Arc<Self>,
        names: &[Arc<str>],
        began: Began,
    ) -> Result<Arc<TagStamp>, Refusal> {
        self.stamp_as(names, began, true)
    }

    fn stamp_as(
        self: &Arc<Self>,
        names: &[Arc<str>],
        began: Began,
        unverified: bool,
    ) -> Result<Arc<TagStamp>, Refusal> {
        let table = self.read();
        if began.count < table.floor {
            return Err(Refusal::Moved);
        }
        let margin = u64::try_from(began.margin.as_micros()).unwrap_or(u64::MAX);
        let mut tags = Vec::with_capacity(names.len());
        let mut unknown = Vec::new();
        for name in names {
            match table.known.get(name) {
                Some(known) if known.owed != 0 || known.moved > began.count => {
                    return Err(Refusal::Moved)
                }
                // Read from the store after the load began: when it moved is known only
                // by the version, the store's clock (in microseconds) at the move, which
                // must come before the origin was called, by a margin for the clocks.
                Some(known)
                    if known.learned > began.count
                        && known.version.saturating_add(margin) > began.micros =>
                {
                    return Err(Refusal::Moved)
                }
                Some(known) => tags.push((name.clone(), known.version)),
                None if self.shared && !unverified => unknown.push(name.clone()),
                None => tags.push((name.clone(), 0)),
            }
        }
        if !unknown.is_empty() {
            return Err(Refusal::Unknown(unknown));
        }
        Ok(Arc::new(TagStamp {
            tags: tags.into_boxed_slice(),
            checked: AtomicU64::new(self.moves()),
            book: self.clone(),
            unverified,
        }))
    }

    /// Looks up each of the stamp's tags; a current stamp remembers the count it was found
    /// current at.
    pub(crate) fn check(&self, stamp: &TagStamp) -> Verdict {
        let table = self.read();
        let moves = self.moves();
        let mut unknown = Vec::new();
        for (name, version) in stamp.tags.iter() {
            match table.known.get(name) {
                Some(known) if known.owed != 0 || known.version > *version => {
                    return Verdict::Retired
                }
                // The store has no version where the entry recorded one: the tag's key
                // expired or was lost, and with it any move since; retire rather than
                // serve unchecked.
                Some(known)
                    if self.shared && !stamp.unverified && known.version == 0 && *version > 0 =>
                {
                    return Verdict::Retired
                }
                Some(_) => {}
                None if self.shared && !stamp.unverified => unknown.push(name.clone()),
                None => {}
            }
        }
        if !unknown.is_empty() {
            return Verdict::Unknown(unknown);
        }
        stamp.checked.fetch_max(moves, Ordering::Relaxed);
        Verdict::Current
    }

    /// Forgets records so the book stays bounded; loads that began before a forgotten move
    /// refuse their store. On the memory backend a record goes once every entry that may
    /// have recorded an older version has expired; on a shared store any record may go
    /// (it is read again when needed), the oldest first, once there are too many.
    fn prune(&self, table: &mut Table) {
        let limit = if self.shared {
            SHARED_RECORDS
        } else {
            PRUNE_ABOVE
        };
        if table.known.len() <= limit {
            return;
        }
        let now = Instant::now();
        let keep = table.keep + KEEP_AT_LEAST;
        let old_enough = |known: &Known| now.saturating_duration_since(known.at) >= keep;
        let cutoff = if self.shared {
            // The newest of the older half.
            let mut ages: Vec<Instant> = table.known.values().map(|known| known.at).collect();
            let half = ages.len() / 2;
            *ages.select_nth_unstable(half).1
        } else {
            if table
                .pruned_at
                .is_some_and(|at| now.saturating_duration_since(at) < keep / 4)
            {
                return;
            }
            table.pruned_at = Some(now);
            now
        };
        let shared = self.shared;
        let mut floor = table.floor;
        table.known.retain(|_, known| {
            let forget = known.owed == 0
                && if shared {
                    known.at <= cutoff
                } else {
                    old_enough(known)
                };
            if forget {
                floor = floor.max(known.moved).max(known.learned);
            }
            !forget
        });
        table.floor = floor;
    }

    /// How many tag records the book holds.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.read().known.len()
    }
}

/// Now as Unix microseconds of this host's clock: when a load began, to compare with a
/// version first read from the shared store (see [`UNKNOWN_MARGIN`]).
pub(crate) fn wall_micros_ago(elapsed: Duration) -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .saturating_sub(elapsed);
    u64::try_from(now.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests;
