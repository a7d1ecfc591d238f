//! Compile-fail cases (one mistake each, with the message a user sees) and pass cases
//! (every option and placement). The `.stderr` files are this toolchain's output; after a
//! deliberate change to a message, refresh them with `TRYBUILD=overwrite cargo test --test ui`
//! and read the diff.
#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/fail/*.rs");
    cases.pass("tests/ui/pass/*.rs");
}
