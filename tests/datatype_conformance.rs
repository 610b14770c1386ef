//! Every case of the conformance files (checked against MPICH, Open MPI and
//! the standard's typemap rules) through the same code as the
//! `conformance` example.

#[path = "../examples/conformance.rs"]
#[allow(dead_code)]
mod runner;

/// Every case of a vendored conformance file, which must hold `cases` of them.
fn all_cases_pass(file: &str, cases: usize) {
    let path = format!("{}/tests/data/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).expect("vendored conformance file");
    let file: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    let all = file["cases"].as_array().expect("cases");
    assert_eq!(all.len(), cases);
    let failures: Vec<String> = all
        .iter()
        .flat_map(|c| runner::check_case(c).into_iter().map(move |m| format!("{}: {m}", c["id"])))
        .collect();
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn all_conformance_cases_pass() {
    all_cases_pass("conformance_datatypes.json", 219);
}

/// The rest of the predefined types: wchar, long double, the complex and
/// Fortran types and their pair types.
#[test]
fn all_predefined_type_cases_pass() {
    all_cases_pass("conformance_datatypes_predefined.json", 92);
}

#[test]
fn a_wrong_expectation_is_reported() {
    let case = serde_json::json!({
        "id": "wrong", "type": {"vector": {"count": 2, "blocklength": 1, "stride": 3, "type": "short"}},
        "count": 2,
        "expect": {"size": 4, "extent": 9, "pack": {"size": 8, "runs": [[0, 2, 1], [6, 4, 1], [14, 2, 1]]}}
    });
    let mismatches = runner::check_case(&case);
    assert_eq!(mismatches.len(), 1, "{mismatches:?}");
    assert!(mismatches[0].starts_with("extent: expected 9, got 8"), "{mismatches:?}");
}

#[test]
fn unknown_leaves_fail_the_case_not_the_run() {
    let case = serde_json::json!({"id": "x", "type": {"contiguous": {"count": 2, "type": "quaternion"}},
                                  "count": 1, "expect": {"size": 8}});
    let mismatches = runner::check_case(&case);
    assert_eq!(mismatches.len(), 1);
    assert!(mismatches[0].contains("quaternion"));
}

#[test]
fn types_entirely_below_their_origin_are_measured() {
    let case = serde_json::json!({
        "id": "below", "type": {"hindexed": {"blocklengths": [1], "displacements_bytes": [-16], "type": "double"}},
        "count": 1,
        "expect": {"size": 8, "lb": -16, "ub": -8, "true_lb": -16, "pack": {"size": 8, "runs": [[-16, 8, 1]]},
                   "external32": {"size": 8, "runs": [[-9, 8, -1]]}}
    });
    assert_eq!(runner::check_case(&case), Vec::<String>::new());
}
