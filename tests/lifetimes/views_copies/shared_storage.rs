//! 004 "Quick Test for Shared Storage" (one test per line).

use super::*;

#[test]
fn quick_test_view_minus_one_shares_storage() {
    let _g = lock();
    let x = x34();
    assert!(shares_storage(&x, &x.view(&[-1]).unwrap()));
}

#[test]
fn quick_test_clone_does_not_share_storage() {
    let _g = lock();
    let x = x34();
    assert!(!shares_storage(&x, &x.deep_clone().unwrap()));
}

#[test]
fn quick_test_transpose_shares_storage() {
    let _g = lock();
    let x = x34();
    assert!(shares_storage(&x, &x.t().unwrap()));
}

#[test]
fn quick_test_contiguous_of_contiguous_shares_storage() {
    let _g = lock();
    let x = x34();
    assert!(shares_storage(&x, &x.contiguous().unwrap()));
}
