use super::*;
use proptest::prelude::*;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

fn encode<K: Serialize + ?Sized>(key: &K) -> String {
    EntryKey::new("stampede", "user-profile", 1, key)
        .unwrap()
        .value()
        .to_owned()
}

#[test]
fn strings_integers_and_tuples_of_them_stay_readable() {
    assert_eq!(
        encode(&("acme", 42u64)),
        "stampede:3:{user-profile:v1:acme:42}"
    );
    assert_eq!(
        encode(&"alice@example.com"),
        "stampede:3:{user-profile:v1:alice@example.com}"
    );
    assert_eq!(encode(&-7i32), "stampede:3:{user-profile:v1:-7i32}");
}

#[test]
fn separators_braces_and_the_escape_char_are_escaped() {
    assert_eq!(
        encode(&"a:b{c}%d"),
        "stampede:3:{user-profile:v1:a%3Ab%7Bc%7D%25d}"
    );
    let key = EntryKey::new("my{app}", "na:me", 2, &"x").unwrap();
    assert_eq!(key.value(), "my%7Bapp%7D:3:{na%3Ame:v2:x}");
}

#[test]
fn strings_that_read_as_numbers_are_marked() {
    #[derive(Serialize)]
    #[serde(untagged)]
    enum Either {
        Text(String),
        Number(u64),
    }
    let text = encode(&Either::Text("42".into()));
    let number = encode(&Either::Number(42));
    assert_ne!(text, number);
    assert_eq!(text, "stampede:3:{user-profile:v1:'42}");
}

#[test]
fn a_unit_variant_and_a_string_of_its_name_encode_apart() {
    #[derive(Debug, PartialEq, Serialize)]
    enum Role {
        Admin,
    }
    #[derive(Debug, PartialEq, Serialize)]
    #[serde(untagged)]
    enum Principal {
        Role(Role),
        Name(String),
    }
    assert_injective(&[
        Principal::Role(Role::Admin),
        Principal::Name("Admin".into()),
        Principal::Name("!Admin".into()),
    ]);
}

#[test]
fn compound_shapes_get_unambiguous_forms() {
    #[derive(Serialize)]
    struct Query {
        tenant: String,
        page: Option<u32>,
    }
    #[derive(Serialize)]
    enum Role {
        Admin,
        User(u64),
        Pair(u8, u8),
        Named { id: u8 },
    }
    let body = |k: String| k["stampede:3:{user-profile:v1:".len()..k.len() - 1].to_owned();
    assert_eq!(body(encode(&())), "()");
    assert_eq!(body(encode(&None::<u8>)), "~");
    assert_eq!(body(encode(&Some("a"))), "+a");
    assert_eq!(body(encode(&vec![1u64, 2])), "[1,2]");
    assert_eq!(body(encode(&(1u64, (2u64, 3u8)))), "1:(2,3u8)");
    assert_eq!(body(encode(&(1u64,))), "(1)");
    assert_eq!(
        body(encode(&Query {
            tenant: "acme".into(),
            page: Some(2)
        })),
        "Query(tenant=acme,page=+2u32)"
    );
    assert_eq!(body(encode(&Role::Admin)), "!Role.Admin");
    assert_eq!(body(encode(&Role::User(7))), "!Role.User(7)");
    assert_eq!(body(encode(&Role::Pair(1, 2))), "!Role.Pair(1u8,2u8)");
    assert_eq!(body(encode(&Role::Named { id: 3 })), "!Role.Named(id=3u8)");
    assert_eq!(body(encode(&1.0f64)), "1.0");
    assert_eq!(body(encode(&1.0f32)), "1.0f32");
    assert_eq!(body(encode(&'a')), "'a'");
    assert_eq!(body(encode(&RawBytes(&[0, 255]))), "#00ff");
}

/// `&[u8]` serializes as a sequence; bytes need `serialize_bytes`.
struct RawBytes(&'static [u8]);

impl Serialize for RawBytes {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(self.0)
    }
}

#[test]
fn map_entries_are_sorted_so_hash_order_does_not_matter() {
    let forward: HashMap<String, u8> = (0..32).map(|i| (format!("k{i}"), i)).collect();
    let sorted: BTreeMap<String, u8> = forward.clone().into_iter().collect();
    assert_eq!(encode(&forward), encode(&sorted));
}

#[cfg(feature = "redis")]
#[test]
fn derived_keys_share_the_value_keys_cluster_slot() {
    let key = EntryKey::new("stampede", "user-profile", 1, &("a{b}c", "}{", 42)).unwrap();
    let slot = cluster_slot(key.value());
    for derived in [key.lease(), key.fence()] {
        assert!(derived.starts_with(key.value()));
        assert_eq!(cluster_slot(&derived), slot, "{derived}");
    }
    // The hash tag is the whole entry, not a fragment an escaped brace could cut short.
    assert_eq!(
        hash_tag(key.value()),
        &key.value()["stampede:3:{".len()..key.value().len() - 1]
    );
}

#[cfg(feature = "redis")]
#[test]
fn the_slot_function_matches_redis_cluster() {
    // From the Redis Cluster specification: CRC16 of "123456789" is 0x31C3 (below 16384,
    // so also its slot).
    assert_eq!(cluster_slot("123456789"), 0x31C3);
    assert_eq!(
        cluster_slot("{user1000}.following"),
        cluster_slot("{user1000}.followers")
    );
}

#[cfg(feature = "redis")]
/// The text Redis Cluster hashes: between the first `{` and the next `}` if not empty.
fn hash_tag(key: &str) -> &str {
    if let Some(open) = key.find('{')
        && let Some(len) = key[open + 1..].find('}')
        && len > 0
    {
        return &key[open + 1..open + 1 + len];
    }
    key
}

#[cfg(feature = "redis")]
/// The slot the cluster connection routes `key` to (the one implementation).
fn cluster_slot(key: &str) -> u16 {
    crate::shared::redis::cluster::slot(key.as_bytes())
}

/// A key type exercising every serde shape, with strings drawn from the structural
/// characters so that naive joins would collide.
#[derive(Debug, Clone, PartialEq, Serialize)]
enum Shape {
    Unit,
    Text(String),
    Number(i64),
    Float(f64),
    Flag(bool),
    Maybe(Option<String>),
    Pair(String, String),
    Nested((String, String), String),
    Other(String, (String, String)),
    List(Vec<String>),
    Record { a: String, b: Option<u8> },
    Map(BTreeMap<String, String>),
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
enum Loose {
    Text(String),
    Number(i64),
    Small(u8),
    Big(u64),
    Wide(u128),
    Float(f64),
    Single(f32),
    Letter(char),
    Flag(bool),
    Unit(()),
    Maybe(Option<String>),
    List(Vec<String>),
    Map(BTreeMap<String, String>),
    Id(Id),
    OtherId(OtherId),
    Marker(Marker),
    Empty(Empty),
    At(At),
    Elsewhere(Elsewhere),
    Bytes(Bytes),
    Tuple((String,)),
    Nothing([u8; 0]),
}

#[derive(Debug, Clone, PartialEq, Serialize)]
struct Id(u64);
#[derive(Debug, Clone, PartialEq, Serialize)]
struct OtherId(u64);
#[derive(Debug, Clone, PartialEq, Serialize)]
struct Marker;
#[derive(Debug, Clone, PartialEq, Serialize)]
struct Empty {}
#[derive(Debug, Clone, PartialEq, Serialize)]
struct At {
    x: u64,
}
#[derive(Debug, Clone, PartialEq, Serialize)]
struct Elsewhere {
    x: u64,
}

/// Bytes through `serialize_bytes`, owned.
#[derive(Debug, Clone, PartialEq)]
struct Bytes(Vec<u8>);

impl Serialize for Bytes {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(&self.0)
    }
}

fn tricky() -> impl Strategy<Value = String> {
    proptest::string::string_regex(
        "[:{}%,()\\[\\]=~+'# a0-9.e\\-]{0,5}|[\\x00-\\x7f]{0,3}|\\PC{0,3}",
    )
    .unwrap()
}

fn shape() -> impl Strategy<Value = Shape> {
    prop_oneof![
        Just(Shape::Unit),
        tricky().prop_map(Shape::Text),
        any::<i64>().prop_map(Shape::Number),
        any::<f64>().prop_map(Shape::Float),
        any::<bool>().prop_map(Shape::Flag),
        proptest::option::of(tricky()).prop_map(Shape::Maybe),
        (tricky(), tricky()).prop_map(|(a, b)| Shape::Pair(a, b)),
        (tricky(), tricky(), tricky()).prop_map(|(a, b, c)| Shape::Nested((a, b), c)),
        (tricky(), tricky(), tricky()).prop_map(|(a, b, c)| Shape::Other(a, (b, c))),
        proptest::collection::vec(tricky(), 0..4).prop_map(Shape::List),
        (tricky(), proptest::option::of(any::<u8>())).prop_map(|(a, b)| Shape::Record { a, b }),
        proptest::collection::btree_map(tricky(), tricky(), 0..3).prop_map(Shape::Map),
    ]
}

fn loose() -> impl Strategy<Value = Loose> {
    prop_oneof![
        tricky().prop_map(Loose::Text),
        (-100i64..100).prop_map(Loose::Number),
        prop_oneof![
            Just(1.0),
            Just(-0.0),
            Just(0.0),
            Just(f64::INFINITY),
            Just(1e5)
        ]
        .prop_map(Loose::Float),
        any::<bool>().prop_map(Loose::Flag),
        Just(Loose::Unit(())),
        proptest::option::of(tricky()).prop_map(Loose::Maybe),
        proptest::collection::vec(tricky(), 0..3).prop_map(Loose::List),
        proptest::collection::btree_map(tricky(), tricky(), 0..2).prop_map(Loose::Map),
        prop_oneof![
            (0u8..3).prop_map(Loose::Small),
            (0u64..3).prop_map(Loose::Big),
            (0u128..3).prop_map(Loose::Wide),
            prop_oneof![Just(1.0f32), Just(f32::INFINITY)].prop_map(Loose::Single),
            proptest::char::range('0', 'b').prop_map(Loose::Letter),
        ],
        prop_oneof![
            (0u64..3).prop_map(|id| Loose::Id(Id(id))),
            (0u64..3).prop_map(|id| Loose::OtherId(OtherId(id))),
            Just(Loose::Marker(Marker)),
            Just(Loose::Empty(Empty {})),
            (0u64..3).prop_map(|x| Loose::At(At { x })),
            (0u64..3).prop_map(|x| Loose::Elsewhere(Elsewhere { x })),
            proptest::collection::vec(any::<u8>(), 0..2).prop_map(|b| Loose::Bytes(Bytes(b))),
            tricky().prop_map(|text| Loose::Tuple((text,))),
            Just(Loose::Nothing([])),
        ],
    ]
}

/// Encodes every value and fails if two unequal values share an encoding.
fn assert_injective<K: Serialize + PartialEq + std::fmt::Debug>(keys: &[K]) {
    let mut seen: HashMap<String, &K> = HashMap::new();
    for key in keys {
        let encoded = encode(key);
        if let Some(earlier) = seen.insert(encoded.clone(), key) {
            // NaN != NaN, yet every NaN is the same key; compare encodings of equal floats.
            let same = earlier == key || format!("{earlier:?}") == format!("{key:?}");
            assert!(same, "{earlier:?} and {key:?} both encode as {encoded}");
        }
    }
}

const OPEN: char = '{';
const CLOSE: char = '}';

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn distinct_keys_never_encode_alike(keys in proptest::collection::vec((shape(), tricky()), 1..64)) {
        assert_injective(&keys);
        let shapes: Vec<Shape> = keys.iter().map(|(shape, _)| shape.clone()).collect();
        assert_injective(&shapes);
    }

    #[test]
    fn untagged_values_of_one_type_never_encode_alike(keys in proptest::collection::vec(loose(), 1..64)) {
        assert_injective(&keys);
    }
}

/// Every pair of serde shapes that differ only in type, name or kind, written apart.
#[test]
fn values_serde_tells_apart_by_type_or_name_encode_apart() {
    use Loose::*;
    assert_injective(&[
        Small(1),
        Big(1),
        Wide(1),
        Number(1),
        Float(1.0),
        Single(1.0),
        Letter('1'),
        Text("1".into()),
        Letter('a'),
        Text("a".into()),
        Text("1u8".into()),
        Text("'a'".into()),
        Id(self::Id(1)),
        OtherId(self::OtherId(1)),
        Marker(self::Marker),
        Empty(self::Empty {}),
        Unit(()),
        At(self::At { x: 1 }),
        Elsewhere(self::Elsewhere { x: 1 }),
        List(Vec::new()),
        Map(BTreeMap::new()),
        Bytes(self::Bytes(Vec::new())),
        Nothing([]),
        Tuple(("x".into(),)),
        Text("x".into()),
    ]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn naive_joins_that_collide_stay_apart(a in tricky(), b in tricky(), c in tricky()) {
        let left = encode(&((a.clone(), b.clone()), c.clone()));
        let right = encode(&(a.clone(), (b.clone(), c.clone())));
        prop_assert_ne!(left, right);
        let joined = format!("{a}:{b}");
        if (a.as_str(), b.as_str()) != (joined.as_str(), "") {
            prop_assert_ne!(encode(&(a.clone(), b.clone())), encode(&(joined, String::new())));
        }
    }

    #[test]
    fn encoded_keys_keep_one_hash_tag_and_printable_ascii(shape in shape()) {
        let key = EntryKey::new("stampede", "n", 1, &shape).unwrap();
        let value = key.value();
        prop_assert!(value.bytes().all(|b| b.is_ascii_graphic()), "{}", value);
        let (open, close) = (value.matches(OPEN).count(), value.matches(CLOSE).count());
        prop_assert_eq!((open, close), (1, 1));
        prop_assert!(value.ends_with(CLOSE), "{}", value);
    }
}

#[test]
fn every_stored_key_of_an_entry_names_that_entry() {
    for key in ["plain", "with } brace", "{tag}", "a:b", "lease"] {
        let entry = EntryKey::new("pre*fix", "na?me", 3, key).unwrap();
        for stored in [entry.value().to_owned(), entry.lease(), entry.fence()] {
            let found = EntryKey::of_stored(&stored).unwrap();
            assert_eq!(found.value(), entry.value(), "{stored}");
        }
    }
    assert!(EntryKey::of_stored("stampede:no-tag").is_none());
    assert!(EntryKey::of_stored("stampede:3:{a:v0:1}:other").is_none());
}

#[test]
fn the_cache_pattern_escapes_glob_syntax_in_prefix_and_name() {
    assert_eq!(
        EntryKey::cache_pattern("stampede", "user-profile", 2),
        "stampede:3:{user-profile:v2:*"
    );
    assert_eq!(
        EntryKey::cache_pattern("p*", "a?b\\c^", 0),
        "p\\*:3:{a\\?b\\\\c\\^:v0:*"
    );
}
