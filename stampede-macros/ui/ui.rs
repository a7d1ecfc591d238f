//! Compile-fail cases: one mistake each, with the message a user sees. (The forms that
//! must compile are integration tests, `tests/compiles/` at the workspace's root, so that
//! trybuild only type-checks.) The `.stderr` files are this toolchain's output; after a
//! deliberate change to a message, refresh them with
//! `TRYBUILD=overwrite cargo test -p stampede-macros-ui` and read the diff.
#[test]
fn ui() {
    one_set_of_flags();
    trybuild::TestCases::new().compile_fail("fail/*.rs");
}

/// trybuild checks its project twice: once for the dependencies, once for the cases with
/// one more flag (`--diagnostic-width=140`). Cargo fingerprints flags, so every dependency
/// was checked twice. `CARGO_ENCODED_RUSTFLAGS` (which trybuild leaves alone, and which
/// Cargo prefers to the flags trybuild passes as configuration) gives both builds trybuild's
/// own flags at once, so the second build reuses the first. Width 140 is also rustc's
/// default when its output is not a terminal, so the messages are the same either way.
/// Flags of the caller's own (e.g. for coverage) win: then nothing is set.
fn one_set_of_flags() {
    if std::env::var_os("RUSTFLAGS").is_some()
        || std::env::var_os("CARGO_ENCODED_RUSTFLAGS").is_some()
    {
        return;
    }
    let flags = [
        "--cfg",
        "trybuild",
        "--verbose",
        "-A",
        "dead_code",
        "--diagnostic-width=140",
    ];
    // SAFETY: this binary's only test sets the variable before trybuild starts any thread
    // or process; nothing else reads the environment meanwhile.
    unsafe { std::env::set_var("CARGO_ENCODED_RUSTFLAGS", flags.join("\x1f")) };
}
