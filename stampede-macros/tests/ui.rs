//! Compile-fail cases: one mistake each, with the message a user sees. (The forms that
//! must compile are integration tests, `tests/compiles/` at the workspace's root, so that
//! trybuild only type-checks.) The `.stderr` files are this toolchain's output; after a
//! deliberate change to a message, refresh them with
//! `TRYBUILD=overwrite cargo test -p stampede-macros --test ui` and read the diff.
#[test]
fn ui() {
    trybuild::TestCases::new().compile_fail("tests/ui/fail/*.rs");
}
