use super::*;
use proptest::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Profile {
    name: String,
    visits: u64,
    tags: Vec<String>,
}

fn header() -> Header {
    Header {
        fresh_until_ms: 1_700_000_001_000,
        stale_until_ms: 1_700_000_002_000,
        keep_until_ms: 1_700_000_003_000,
        loaded_at_ms: 1_700_000_000_000,
        delta: 0.25,
        fence: 7,
        source_version: Some(u64::MAX),
    }
}

fn profile() -> Profile {
    Profile {
        name: "ada".into(),
        visits: 3,
        tags: vec!["a".into(), "b".into()],
    }
}

#[test]
fn an_envelope_round_trips_with_its_header() {
    let wire = Wire::default();
    let bytes = wire.encode(&header(), &[], &profile()).unwrap();
    assert_eq!(&bytes[..4], b"STPD");
    assert_eq!(&bytes[54..74], b"18446744073709551615");
    assert_eq!(
        bytes[74..82],
        super::fingerprint::of::<Profile>().to_be_bytes()
    );
    assert_eq!(
        wire.decode::<Profile>(&bytes).unwrap(),
        (header(), vec![], profile())
    );
    let absent = Header {
        source_version: None,
        ..header()
    };
    let bytes = wire.encode(&absent, &[], &profile()).unwrap();
    assert_eq!(wire.decode::<Profile>(&bytes).unwrap().0, absent);
}

#[test]
fn unknown_versions_and_foreign_bytes_are_errors() {
    let wire = Wire::default();
    let mut bytes = wire.encode(&header(), &[], &profile()).unwrap();
    // Older formats differ in layout: a newer build misses on them rather than guessing.
    for old_or_future in [1, 2, 4] {
        bytes[4] = old_or_future;
        assert_eq!(
            wire.decode::<Profile>(&bytes),
            Err(WireError::UnknownVersion(old_or_future))
        );
    }
    assert_eq!(
        wire.decode::<Profile>(b"hello world"),
        Err(WireError::NotAnEnvelope)
    );
    assert_eq!(
        wire.decode::<Profile>(b"ST"),
        Err(WireError::Truncated { len: 2 })
    );
}

#[test]
fn truncated_values_are_errors() {
    let wire = Wire::default();
    let bytes = wire.encode(&header(), &[], &profile()).unwrap();
    for len in 0..bytes.len() {
        assert!(
            wire.decode::<Profile>(&bytes[..len]).is_err(),
            "{len} bytes decoded"
        );
    }
}

#[test]
fn values_over_the_limit_are_refused_both_ways() {
    let small = Wire::new(16);
    let big = Profile {
        name: "x".repeat(64),
        ..profile()
    };
    assert!(matches!(
        small.encode(&header(), &[], &big),
        Err(WireError::Oversized { .. })
    ));
    let bytes = Wire::default().encode(&header(), &[], &big).unwrap();
    assert!(matches!(
        small.decode::<Profile>(&bytes),
        Err(WireError::Oversized { .. })
    ));
}

#[test]
fn a_value_of_another_type_is_an_error() {
    let wire = Wire::default();
    let bytes = wire.encode(&header(), &[], &profile()).unwrap();
    assert!(wire.decode::<u8>(&bytes).is_err());
    assert!(wire
        .decode::<(String, u64, Vec<String>, u8)>(&bytes)
        .is_err());
    let bytes = wire.encode(&header(), &[], &"text".to_string()).unwrap();
    assert!(wire.decode::<Profile>(&bytes).is_err());
}

mod old {
    #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
    pub struct Price {
        pub net: u64,
        pub gross: u64,
    }
}
mod new {
    #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
    pub struct Price {
        pub gross: u64,
        pub net: u64,
    }
}

#[test]
fn bytes_that_would_decode_as_another_type_are_refused_by_the_fingerprint() {
    let wire = Wire::default();
    // bincode alone reads these without complaint, and wrongly.
    let swapped = wire
        .encode(
            &header(),
            &[],
            &old::Price {
                net: 100,
                gross: 119,
            },
        )
        .unwrap();
    let body = &swapped[HEADER_LEN..];
    assert_eq!(
        decode_value::<new::Price>(body).unwrap().0,
        new::Price {
            gross: 100,
            net: 119
        }
    );
    assert!(matches!(
        wire.decode::<new::Price>(&swapped),
        Err(WireError::OtherType { .. })
    ));
    let number = wire.encode(&header(), &[], &5u64).unwrap();
    assert_eq!(decode_value::<u8>(&number[HEADER_LEN..]).unwrap().0, 5);
    assert!(matches!(
        wire.decode::<u8>(&number),
        Err(WireError::OtherType { .. })
    ));
    // The same shape still reads.
    assert_eq!(
        wire.decode::<old::Price>(&swapped).unwrap().2,
        old::Price {
            net: 100,
            gross: 119
        }
    );
}

#[test]
fn a_length_prefix_claiming_gigabytes_is_an_error_not_an_allocation() {
    let wire = Wire::default();
    for empty in [
        wire.encode(&header(), &[], &Vec::<u8>::new()),
        wire.encode(&header(), &[], &String::new()),
    ] {
        let mut bytes = empty.unwrap();
        bytes.truncate(HEADER_LEN);
        // Varint tag 253 + u64: a vector of 2^62 bytes.
        bytes.push(253);
        bytes.extend_from_slice(&(1u64 << 62).to_le_bytes());
        assert!(wire.decode::<Vec<u8>>(&bytes).is_err());
        assert!(wire.decode::<String>(&bytes).is_err());
    }
}

#[test]
fn a_length_prefix_longer_than_the_body_is_refused_before_allocating() {
    let wire = Wire::default();
    let mut bytes = wire.encode(&header(), &[], &String::new()).unwrap();
    bytes.truncate(HEADER_LEN);
    // Varint tag 252 + u32: 512 MiB claimed by a body of a few bytes. Refused by the
    // limit, not by running out of bytes after allocating what was claimed.
    bytes.push(252);
    bytes.extend_from_slice(&(512u32 << 20).to_be_bytes());
    // (A `Vec<u8>` is a serde sequence: serde caps what it reserves up front.)
    let error = wire.decode::<String>(&bytes).unwrap_err();
    let WireError::Value(reason) = error else {
        panic!("{error:?}")
    };
    assert!(reason.contains("LimitExceeded"), "{reason}");
}

#[test]
fn values_with_many_strings_up_to_the_maximum_still_decode() {
    let wire = Wire::new(DEFAULT_MAX_VALUE_BYTES);
    let value: Vec<String> = (0..100_000).map(|i| format!("{i:070}")).collect();
    let bytes = wire.encode(&header(), &[], &value).unwrap();
    assert!(bytes.len() > 1 << 20, "spans more than one limit step");
    assert_eq!(wire.decode::<Vec<String>>(&bytes).unwrap().2, value);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let wire = Wire::default();
        let _ = wire.decode::<Profile>(&bytes);
        let _ = wire.decode::<String>(&bytes);
        let _ = wire.decode::<Vec<u64>>(&bytes);
    }

    #[test]
    fn arbitrary_bodies_behind_a_valid_header_never_panic(body in proptest::collection::vec(any::<u8>(), 0..200)) {
        let wire = Wire::default();
        let mut bytes = wire.encode(&header(), &[], &()).unwrap();
        bytes.extend_from_slice(&body);
        let _ = wire.decode::<Profile>(&bytes);
        let _ = wire.decode::<Vec<String>>(&bytes);
    }

    #[test]
    fn mutated_envelopes_never_panic(
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        cut in any::<prop::sample::Index>(),
    ) {
        let wire = Wire::default();
        let mut bytes = wire.encode(&header(), &[], &profile()).unwrap();
        for (at, byte) in flips {
            let at = at.index(bytes.len());
            bytes[at] = byte;
        }
        let len = cut.index(bytes.len() + 1);
        if let Ok((header, _, _)) = wire.decode::<Profile>(&bytes[..len]) {
            prop_assert!(header.fresh_until_ms <= header.stale_until_ms);
        }
    }

    #[test]
    fn any_header_round_trips(
        mut deadlines in proptest::array::uniform4(any::<u64>()),
        delta in 0.0f64..1e9,
        fence in any::<u64>(),
        source_version in proptest::option::of(any::<u64>()),
    ) {
        deadlines[..3].sort_unstable();
        let header = Header {
            fresh_until_ms: deadlines[0],
            stale_until_ms: deadlines[1],
            keep_until_ms: deadlines[2],
            loaded_at_ms: deadlines[3],
            delta,
            fence,
            source_version,
        };
        let wire = Wire::default();
        let bytes = wire.encode(&header, &[], &profile()).unwrap();
        prop_assert_eq!(wire.decode::<Profile>(&bytes).unwrap(), (header, vec![], profile()));
    }
}

#[test]
fn tags_travel_between_the_header_and_the_value() {
    let wire = Wire::default();
    let tags: Vec<(std::sync::Arc<str>, u64)> = vec![
        ("tenant:7".into(), 1_764_800_000_000_123),
        ("prices\0x".into(), 0),
    ];
    let bytes = wire.encode(&header(), &tags, &profile()).unwrap();
    assert_eq!(bytes[53] & 4, 4);
    assert_eq!(
        wire.decode::<Profile>(&bytes).unwrap(),
        (header(), tags.clone(), profile())
    );
    // Cut anywhere inside the tags: an error, never a panic or a value.
    for len in HEADER_LEN..HEADER_LEN + 40 {
        assert!(
            wire.decode::<Profile>(&bytes[..len]).is_err(),
            "{len} bytes decoded"
        );
    }
    // A tag count that claims more than the bytes hold.
    let mut lying = bytes.clone();
    lying[HEADER_LEN] = 0x7f;
    assert!(wire.decode::<Profile>(&lying).is_err());
}
