use super::CacheIf;

#[test]
fn a_predicate_decides_for_its_own_value_type_only() {
    let some = CacheIf::new::<Option<u32>>(Option::is_some);
    assert!(some.keeps(&Some(1u32)));
    assert!(!some.keeps(&None::<u32>));
    assert!(some.keeps(&7u64), "another type is not its to refuse");
}
