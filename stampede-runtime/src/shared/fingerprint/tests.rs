#![expect(dead_code, reason = "shapes traced through `Deserialize`, never built")]
use super::*;
use serde::Deserialize;

mod before {
    #[derive(serde::Deserialize)]
    pub struct Profile {
        pub name: String,
        pub visits: u64,
    }
}
mod swapped {
    #[derive(serde::Deserialize)]
    pub struct Profile {
        pub visits: u64,
        pub name: String,
    }
}
mod widened {
    #[derive(serde::Deserialize)]
    pub struct Profile {
        pub name: String,
        pub visits: u128,
    }
}
mod moved {
    #[derive(serde::Deserialize)]
    pub struct Profile {
        pub name: String,
        pub visits: u64,
    }
}

#[derive(Deserialize)]
enum Status {
    Active { since: u64 },
    Gone,
}

#[derive(Deserialize)]
enum StatusRenamed {
    Active { since: u64 },
    Deleted,
}

#[test]
fn a_changed_definition_changes_the_fingerprint() {
    let base = of::<before::Profile>();
    assert_eq!(base, of::<before::Profile>(), "stable within a process");
    assert_ne!(base, of::<swapped::Profile>(), "fields reordered");
    assert_ne!(base, of::<widened::Profile>(), "a field widened");
    assert_ne!(of::<String>(), of::<u64>());
    assert_ne!(of::<Vec<u8>>(), of::<String>());
    assert_ne!(of::<Option<u64>>(), of::<u64>());
    assert_ne!(of::<Status>(), of::<StatusRenamed>(), "a variant renamed");
}

#[test]
fn the_same_shape_agrees_wherever_the_type_lives() {
    // What a new build of the same code computes: the module path is not part of it.
    assert_eq!(of::<before::Profile>(), of::<moved::Profile>());
}

#[test]
fn every_variant_is_part_of_the_shape() {
    assert!(shape::<Status>().contains("Gone"));
    assert!(shape::<Status>().contains("since"));
}

#[test]
fn a_type_that_cannot_be_traced_falls_back_to_its_name() {
    struct Picky;
    impl<'de> Deserialize<'de> for Picky {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let text = String::deserialize(d)?;
            if text == "yes" {
                Ok(Picky)
            } else {
                Err(serde::de::Error::custom("not yes"))
            }
        }
    }
    assert!(
        shape::<Picky>().starts_with("type "),
        "{}",
        shape::<Picky>()
    );
}

#[test]
fn the_hash_is_fixed() {
    // A change here changes every fingerprint a fleet has written.
    assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
    assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
}
