//! Compile-time guarantees, proven by trybuild: every file in
//! `ui-tests/fail/` must fail to compile with exactly the error in its
//! `.stderr` (the toolchain is pinned in `rust-toolchain.toml` so the
//! messages are stable), and every file in `ui-tests/pass/` must compile and
//! run. Regenerate the expected output with `TRYBUILD=overwrite cargo test
//! --test ui` and read the diff.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("ui-tests/fail/*.rs");
    t.pass("ui-tests/pass/*.rs");
}
