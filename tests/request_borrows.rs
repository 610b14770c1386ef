//! The borrow checker enforces MPI's buffer rules where they still apply: a
//! receive buffer (and a started persistent request's buffer) cannot be
//! touched while its request is alive. A send packs its data when it
//! starts, so its buffer is free again at once (see tests/api.rs).

#[test]
fn buffers_are_borrowed_until_completion() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui_requests/*.rs");
}
