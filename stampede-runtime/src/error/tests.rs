use super::*;

/// Every fresh hit of a function returning `Result<V, stampede::Error>` writes one of
/// these; a rare variant's details go behind a box rather than into every `Result`.
#[test]
fn the_error_stays_small() {
    assert!(
        std::mem::size_of::<Error>() <= 56,
        "{} bytes",
        std::mem::size_of::<Error>()
    );
    assert_eq!(
        std::mem::size_of::<Result<String, Error>>(),
        std::mem::size_of::<Error>()
    );
}
