use super::CacheErrors;
use std::time::Duration;

#[test]
fn a_predicate_keeps_errors_of_its_own_type_only() {
    let not_found = CacheErrors::new::<String>(Duration::from_secs(5), |e| e == "not found");
    assert!(not_found.keeps(&"not found".to_owned()));
    assert!(!not_found.keeps(&"timeout".to_owned()));
    assert!(!not_found.keeps(&7u32), "another type is never kept");
}
