//! Every case of the conformance file (checked against MPICH, Open MPI and
//! the standard's typemap rules) through the same code as the
//! `conformance` example.

#[path = "../examples/conformance.rs"]
#[allow(dead_code)]
mod runner;

#[test]
fn all_conformance_cases_pass() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/conformance_datatypes.json"))
        .expect("vendored conformance file");
    let file: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    let cases = file["cases"].as_array().expect("cases");
    assert_eq!(cases.len(), 219);
    let failures: Vec<String> = cases
        .iter()
        .flat_map(|c| runner::check_case(c).into_iter().map(move |m| format!("{}: {m}", c["id"])))
        .collect();
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
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
