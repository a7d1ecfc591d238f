use super::*;

fn names(tags: &[&str]) -> Vec<Arc<str>> {
    tags.iter().map(|&tag| Arc::from(tag)).collect()
}

#[test]
fn an_entry_stays_current_until_one_of_its_tags_moves() {
    let book = TagBook::new(false);
    let stamp = book.stamp(&names(&["a", "b"]), book.moves()).unwrap();
    assert!(stamp.current());
    book.invalidate_here("c");
    assert!(stamp.current(), "another tag moved");
    book.invalidate_here("b");
    assert!(!stamp.current());
    // Stored after the move: current again.
    let after = book.stamp(&names(&["a", "b"]), book.moves()).unwrap();
    assert!(after.current());
}

#[test]
fn a_load_that_began_before_a_move_of_its_tag_is_refused() {
    let book = TagBook::new(false);
    let began = book.moves();
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
    assert!(book.stamp(&names(&["a"]), book.moves()).is_ok());
}

#[test]
fn a_shared_book_asks_for_tags_it_does_not_know() {
    let book = TagBook::new(true);
    let began = book.moves();
    assert_eq!(
        book.stamp(&names(&["a", "b"]), began).unwrap_err(),
        Refusal::Unknown(names(&["a", "b"]))
    );
    book.learn("a", 10, false, false);
    book.learn("b", 0, false, false);
    let stamp = book.stamp(&names(&["a", "b"]), began).unwrap();
    assert_eq!(stamp.tags(), &[("a".into(), 10), ("b".into(), 0)]);
    // A notice of a newer version retires it, and fences out loads begun before.
    book.learn("a", 11, true, false);
    assert!(!stamp.current());
    assert_eq!(
        book.stamp(&names(&["a"]), began).unwrap_err(),
        Refusal::Moved
    );
    // An older version heard late changes nothing.
    let now = book.moves();
    book.learn("a", 9, false, false);
    assert!(book.stamp(&names(&["a"]), now).is_ok());
}

#[test]
fn an_owed_tag_retires_its_entries_until_the_store_takes_it() {
    let book = TagBook::new(true);
    book.learn("a", 10, false, false);
    let stamp = book.stamp(&names(&["a"]), book.moves()).unwrap();
    book.owe("a");
    assert!(!stamp.current());
    assert!(book.has_owed());
    assert_eq!(
        book.stamp(&names(&["a"]), book.moves()).unwrap_err(),
        Refusal::Moved
    );
    // A reset forgets what it knows, not what it owes.
    book.reset();
    assert_eq!(book.owed(), names(&["a"]));
    book.learn("a", 20, true, true);
    assert!(!book.has_owed());
    let after = book.stamp(&names(&["a"]), book.moves()).unwrap();
    assert_eq!(after.tags(), &[("a".into(), 20)]);
    assert!(!stamp.current(), "recorded 10, the tag is at 20");
}

#[test]
fn after_a_reset_every_version_is_asked_again_and_earlier_loads_refused() {
    let book = TagBook::new(true);
    book.learn("a", 10, false, false);
    let began = book.moves();
    let stamp = book.stamp(&names(&["a"]), began).unwrap();
    book.reset();
    assert_eq!(book.check(&stamp), Verdict::Unknown(names(&["a"])));
    assert!(!stamp.current());
    book.learn("a", 10, false, false);
    assert_eq!(
        book.stamp(&names(&["a"]), began).unwrap_err(),
        Refusal::Moved
    );
    assert!(stamp.current(), "the same version, read again");
}

#[test]
fn forgotten_records_fence_out_only_the_loads_that_began_before_them() {
    let book = TagBook::new(false);
    let early = book.moves();
    for tag in 0..=PRUNE_ABOVE {
        book.invalidate_here(&format!("t{tag}"));
    }
    let late = book.moves();
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
