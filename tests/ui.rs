//! Compile-time guarantees, proven by trybuild: every file in
//! `ui-tests/fail/` must fail to compile with exactly the error in its
//! `.stderr` (the toolchain is pinned in `rust-toolchain.toml` so the
//! messages are stable), and every file in `ui-tests/pass/` must compile and
//! run. Regenerate the expected output with `TRYBUILD=overwrite cargo test
//! --test ui` and read the diff.

#[test]
fn ui() {
    // trybuild builds the crate again in its own project, which does not
    // inherit Cargo.toml's [profile] tables. Without debug info that build is a
    // few hundred MB instead of several GB (a full-debuginfo link of a pass
    // case once ran a CI disk full). This test binary runs this one test, on
    // one thread, before trybuild spawns cargo, so setting the variable is safe.
    std::env::set_var("CARGO_PROFILE_DEV_DEBUG", "0");
    let t = trybuild::TestCases::new();
    t.compile_fail("ui-tests/fail/*.rs");
    t.pass("ui-tests/pass/*.rs");
}
