//! Dependencies inside mpx-core point one way: `pack` uses `datatype`, and
//! nothing in `datatype` names `pack` (the compiled programs a datatype
//! keeps sit in a type-erased slot that `pack` fills and reads).

use std::path::Path;

#[test]
fn datatype_does_not_name_pack() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("mpx-core/src/datatype");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap();
            for name in ["crate::pack", "super::pack", "Programs"] {
                assert!(!code.contains(name), "{}:{}: names {name}: {line}", path.display(), n + 1);
            }
            assert!(!line.contains("crate::pack"), "{}:{}: links to pack: {line}", path.display(), n + 1);
        }
        checked += 1;
    }
    assert!(checked >= 5, "found only {checked} files in {}", dir.display());
}
