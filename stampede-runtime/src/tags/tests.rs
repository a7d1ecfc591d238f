use super::*;

/// A load beginning now.
fn now(book: &TagBook) -> Began {
    Began {
        count: book.moves(),
        micros: wall_micros_ago(Duration::ZERO),
        margin: UNKNOWN_MARGIN,
    }
}

fn names(tags: &[&str]) -> Vec<Arc<str>> {
    tags.iter().map(|&tag| Arc::from(tag)).collect()
}

#[test]
fn an_entry_stays_current_until_one_of_its_tags_moves() {
    let book = TagBook::new(false);
    let stamp = book.stamp(&names(&["a", "b"]), now(&book)).unwrap();
    assert!(stamp.current());
    book.invalidate_here("c");
    assert!(stamp.current(), "another tag moved");
    book.invalidate_here("b");
    assert!(!stamp.current());
    // Stored after the move: current again.
    let after = book.stamp(&names(&["a", "b"]), now(&book)).unwrap();
    assert!(after.current());
}

#[test]
fn a_load_that_began_before_a_move_of_its_tag_is_refused() {
    let book = TagBook::new(false);
    let began = now(&book);
    book.invalidate_here("other");
    assert!(
        book.stamp(&names(&["a"]), began).is_ok(),
        "only its own tags count"
    );
    book.invalidate_here("a");
    assert_eq!(
        book.stamp(&names(&["a"]), began).unwrap_err(),
        Refusal::Moved
    );
    assert!(book.stamp(&names(&["a"]), now(&book)).is_ok());
}

#[test]
fn a_shared_book_asks_for_tags_it_does_not_know() {
    let book = TagBook::new(true);
    let began = now(&book);
    assert_eq!(
        book.stamp(&names(&["a", "b"]), began).unwrap_err(),
        Refusal::Unknown(names(&["a", "b"]))
    );
    book.learn("a", 10, Heard::Read);
    book.learn("b", 0, Heard::Read);
    let stamp = book.stamp(&names(&["a", "b"]), began).unwrap();
    assert_eq!(stamp.tags(), &[("a".into(), 10), ("b".into(), 0)]);
    // A notice of a newer version retires it, and fences out loads begun before.
    book.learn("a", 11, Heard::Moved);
    assert!(!stamp.current());
    assert_eq!(
        book.stamp(&names(&["a"]), began).unwrap_err(),
        Refusal::Moved
    );
    // An older version heard late changes nothing.
    let now = now(&book);
    book.learn("a", 9, Heard::Read);
    assert!(book.stamp(&names(&["a"]), now).is_ok());
}

#[test]
fn an_owed_tag_retires_its_entries_until_the_store_takes_it() {
    let book = TagBook::new(true);
    book.learn("a", 10, Heard::Read);
    let stamp = book.stamp(&names(&["a"]), now(&book)).unwrap();
    let ticket = book.owe("a");
    assert!(!stamp.current());
    assert!(book.has_owed());
    assert_eq!(
        book.stamp(&names(&["a"]), now(&book)).unwrap_err(),
        Refusal::Moved
    );
    // A reset forgets what it knows, not what it owes.
    book.reset();
    assert_eq!(book.owed(), vec![("a".into(), ticket)]);
    book.learn("a", 20, Heard::Paid(ticket));
    assert!(!book.has_owed());
    let after = book.stamp(&names(&["a"]), now(&book)).unwrap();
    assert_eq!(after.tags(), &[("a".into(), 20)]);
    assert!(!stamp.current(), "recorded 10, the tag is at 20");
}

#[test]
fn after_a_reset_every_version_is_asked_again() {
    let book = TagBook::new(true);
    book.learn("a", 10, Heard::Read);
    let began = now(&book);
    let stamp = book.stamp(&names(&["a"]), began).unwrap();
    book.reset();
    assert_eq!(book.check(&stamp), Verdict::Unknown(names(&["a"])));
    assert_eq!(
        book.stamp(&names(&["a"]), began).unwrap_err(),
        Refusal::Unknown(names(&["a"]))
    );
    assert!(!stamp.current());
    book.learn("a", 10, Heard::Read);
    assert!(stamp.current(), "the same version, read again");
    book.learn("a", 12, Heard::Read);
    assert!(
        !stamp.current(),
        "a version missed while the notices were down"
    );
}

#[test]
fn forgotten_records_fence_out_only_the_loads_that_began_before_them() {
    let book = TagBook::new(false);
    let early = now(&book);
    for tag in 0..=PRUNE_ABOVE {
        book.invalidate_here(&format!("t{tag}"));
    }
    let late = now(&book);
    {
        // Old enough to forget: every record, as if the longest entry lifetime passed.
        let mut table = book.table();
        let long_ago = Instant::now() - Duration::from_secs(3600);
        table
            .known
            .values_mut()
            .for_each(|known| known.at = long_ago);
        table.pruned_at = None;
    }
    book.invalidate_here("trigger");
    assert!(book.len() < 10, "{} records kept", book.len());
    assert_eq!(
        book.stamp(&names(&["t1"]), early).unwrap_err(),
        Refusal::Moved
    );
    assert!(book.stamp(&names(&["t1"]), late).is_ok());
}

#[test]
fn a_scoped_tag_is_its_own_name() {
    assert_ne!(scoped("prices", "a"), Arc::from("a"));
    assert_ne!(scoped("prices", "a"), scoped("profiles", "a"));
}

#[test]
fn a_version_read_after_a_load_began_counts_by_its_time() {
    let book = TagBook::new(true);
    let began = now(&book);
    let micros = |ago: Duration| wall_micros_ago(ago);
    // Moved long before the load began: the load stores.
    book.learn("old", micros(Duration::from_secs(60)), Heard::Read);
    assert!(book.stamp(&names(&["old"]), began).is_ok());
    // Moved just now, after the load began (or too close to tell): refused.
    book.learn("new", micros(Duration::ZERO), Heard::Read);
    assert_eq!(
        book.stamp(&names(&["new"]), began).unwrap_err(),
        Refusal::Moved
    );
    // A load that began once the book knew it stores.
    assert!(book.stamp(&names(&["new"]), now(&book)).is_ok());
    // Its notice arriving after the read changes nothing for loads begun before.
    book.learn("new", micros(Duration::ZERO) - 5, Heard::Moved);
    assert_eq!(
        book.stamp(&names(&["new"]), began).unwrap_err(),
        Refusal::Moved
    );
}

#[test]
fn a_later_invalidation_stays_owed_when_an_earlier_one_is_answered() {
    let book = TagBook::new(true);
    let first = book.owe("a");
    let second = book.owe("a");
    book.learn("a", 10, Heard::Paid(first));
    assert!(book.has_owed(), "the second was not taken yet");
    assert_eq!(book.owed(), vec![("a".into(), second)]);
    book.learn("a", 11, Heard::Paid(second));
    assert!(!book.has_owed());
}

#[test]
fn a_read_sent_before_a_reset_is_not_learned_after_it() {
    let book = TagBook::new(true);
    let epoch = book.epoch();
    book.reset();
    assert!(!book.learn_read("a", 10, epoch));
    assert!(book.learn_read("a", 10, book.epoch()));
}

#[test]
fn a_version_gone_from_the_store_retires_entries_that_recorded_one() {
    let book = TagBook::new(true);
    book.learn("a", 10, Heard::Read);
    let stamp = book.stamp(&names(&["a"]), now(&book)).unwrap();
    book.reset();
    book.learn("a", 0, Heard::Read);
    assert_eq!(book.check(&stamp), Verdict::Retired);
}

#[test]
fn a_shared_book_forgets_its_oldest_records_beyond_its_bound() {
    let book = TagBook::new(true);
    let early = now(&book);
    for tag in 0..=SHARED_RECORDS {
        book.learn(&format!("t{tag}"), 1, Heard::Moved);
    }
    assert!(
        book.len() <= SHARED_RECORDS / 2 + 2,
        "{} records",
        book.len()
    );
    assert_eq!(
        book.stamp(&names(&["t0"]), early).unwrap_err(),
        Refusal::Moved
    );
}

#[test]
fn a_stamp_made_while_the_store_is_unreachable_is_served_without_unknown_tags() {
    let book = TagBook::new(true);
    book.learn("known", 10, Heard::Read);
    let began = now(&book);
    let stamp = book
        .stamp_unverified(&names(&["known", "unknown"]), began)
        .unwrap();
    assert_eq!(stamp.tags(), &[("known".into(), 10), ("unknown".into(), 0)]);
    assert!(stamp.current(), "served for the degraded bound");
    // A version learned later, or this replica's own invalidation, retires it.
    book.learn("unknown", 5, Heard::Read);
    assert!(!stamp.current());
    let other = book
        .stamp_unverified(&names(&["known"]), now(&book))
        .unwrap();
    book.owe("known");
    assert!(!other.current());
    assert_eq!(
        book.stamp_unverified(&names(&["known"]), began)
            .unwrap_err(),
        Refusal::Moved
    );
}
