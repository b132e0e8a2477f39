//! Compile-time guarantees. Every file in `ui-tests/fail/` must fail to
//! compile with exactly the error in its `.stderr`, proven by trybuild (the
//! toolchain is pinned in `rust-toolchain.toml` so the messages are
//! stable); regenerate the expected output with `TRYBUILD=overwrite cargo
//! test --test ui` and read the diff. Every file in `ui-tests/pass/` must
//! compile and run: it is a module of this test binary, called below.
//!
//! With no pass case, trybuild runs `cargo check`, not `cargo build`, so it
//! never compiles the crate's code a second time (Note [ui checks] in
//! ARCHITECTURE.md). The structural rules of the source tree are checked
//! here too ([`architecture`]): they compile nothing, so they need no binary
//! of their own.

mod architecture;
mod layers;

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("ui-tests/fail/*.rs");
}

#[path = "../../ui-tests/pass/optim.rs"]
mod pass_optim;
#[path = "../../ui-tests/pass/scopes.rs"]
mod pass_scopes;
#[path = "../../ui-tests/pass/threads.rs"]
mod pass_threads;
#[path = "../../ui-tests/pass/views.rs"]
mod pass_views;

#[test]
fn pass_optim() {
    pass_optim::main();
}

#[test]
fn pass_scopes() -> tensorscope::Result<()> {
    pass_scopes::main()
}

#[test]
fn pass_threads() -> tensorscope::Result<()> {
    pass_threads::main()
}

#[test]
fn pass_views() -> tensorscope::Result<()> {
    pass_views::main()
}

/// Every pass case is called above: a new file in `ui-tests/pass/` without
/// a module here would never compile.
#[test]
fn every_pass_case_is_a_module() {
    let mut files: Vec<String> = std::fs::read_dir("ui-tests/pass")
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    files.sort();
    assert_eq!(files, ["optim.rs", "scopes.rs", "threads.rs", "views.rs"]);
}
