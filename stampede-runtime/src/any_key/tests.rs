use super::*;
use std::collections::HashMap;

#[test]
fn a_key_is_found_by_a_plain_reference_and_only_its_own_type_matches() {
    let mut table: HashMap<AnyKey, &str> = HashMap::new();
    table.insert(AnyKey::new((7_u64, "tenant".to_string())), "seven");
    table.insert(AnyKey::new(7_u32), "a u32");
    let probe = (7_u64, "tenant".to_string());
    assert_eq!(table.get(&probe as &dyn DynKey), Some(&"seven"));
    assert_eq!(table.get(&7_u32 as &dyn DynKey), Some(&"a u32"));
    // Equal bits, another type: another key.
    assert_eq!(table.get(&7_u64 as &dyn DynKey), None);
    assert_eq!(
        table.get(&(8_u64, "tenant".to_string()) as &dyn DynKey),
        None
    );
}
