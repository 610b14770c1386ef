//! The borrow checker enforces MPI's buffer rules: a buffer given to a
//! nonblocking operation cannot be touched while its request is alive.

#[test]
fn buffers_are_borrowed_until_completion() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui_requests/*.rs");
}
