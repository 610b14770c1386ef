//! `#[derive(MpiType)]` rejects, at compile time and with an error on the
//! offending field or attribute, every type whose memory a datatype cannot
//! describe.

#[test]
fn rejected_shapes() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
