//! Checks the datatype engine against a file of conformance cases.
//!
//! ```text
//! cargo run --release --example conformance -- tests/data/conformance_datatypes.json
//! ```
//!
//! Each case gives a constructor tree, a count and the values a correct MPI
//! datatype engine produces (the files in `tests/data` are copies of the
//! shared conformance sets, whose README describes the format). Its leaves are the names of predefined types as
//! [`Datatype::named`] takes them, so every predefined type of mpx is a
//! leaf the runner knows. The runner builds every case through the public API of mpx,
//! compares every expected field (size, bounds, true bounds, element count,
//! get_count, the pack and external32 byte maps, the decoded tree), prints
//! one line per mismatch, and ends with `N passed, M failed`. It exits with
//! status 1 if any case fails and 2 if the file cannot be read.
//!
//! Byte maps are measured, not computed: the runner fills a buffer covering
//! every byte the items touch with bytes that spell each byte's own offset
//! (one base-256 digit per pass), packs it, and reads the offsets back.

use std::process::ExitCode;

use mpx::{consts, Combiner, Datatype, DistArg, Distribution, Order, Region};
use serde_json::{json, Value};

fn main() -> ExitCode {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: conformance <FILE.json>");
        return ExitCode::from(2);
    };
    let file: Value = match std::fs::read_to_string(&path)
        .map_err(|e| e.to_string())
        .and_then(|s| serde_json::from_str(&s).map_err(|e| e.to_string()))
    {
        Ok(v) => v,
        Err(e) => {
            eprintln!("cannot read {path}: {e}");
            return ExitCode::from(2);
        }
    };
    let Some(cases) = file.get("cases").and_then(Value::as_array) else {
        eprintln!("{path}: no \"cases\" array");
        return ExitCode::from(2);
    };
    let (mut passed, mut failed) = (0, 0);
    for case in cases {
        let id = case.get("id").and_then(Value::as_str).unwrap_or("<no id>");
        let mismatches = check_case(case);
        if mismatches.is_empty() {
            passed += 1;
        } else {
            failed += 1;
            for m in mismatches {
                println!("FAIL {id}: {m}");
            }
        }
    }
    println!("{passed} passed, {failed} failed");
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Every mismatch of one case, as `field: expected X, got Y` lines.
pub fn check_case(case: &Value) -> Vec<String> {
    let dt = match case.get("type").ok_or("no type".to_string()).and_then(build) {
        Ok(t) => t,
        Err(e) => return vec![format!("type: cannot build: {e}")],
    };
    let count = case.get("count").and_then(Value::as_u64).unwrap_or(1);
    let Some(expect) = case.get("expect").and_then(Value::as_object) else {
        return vec!["expect: missing".into()];
    };
    let mut out = Vec::new();
    for (field, want) in expect {
        let got = match measure(&dt, count, field) {
            Ok(v) => v,
            Err(e) => json!(format!("error: {e}")),
        };
        if !same(field, want, &got) {
            out.push(format!("{field}: expected {want}, got {got}"));
        }
    }
    out
}

fn measure(dt: &Datatype, count: u64, field: &str) -> Result<Value, String> {
    Ok(match field {
        "size" => json!(dt.size()),
        "lb" => json!(dt.lb()),
        "ub" => json!(dt.ub()),
        "extent" => json!(dt.extent()),
        "true_lb" => json!(dt.true_lb()),
        "true_extent" => json!(dt.true_extent()),
        "elements" => json!(dt.get_elements(dt.size() * count)),
        "get_count" => json!(dt.get_count(dt.size() * count)),
        "pack" => byte_map(dt, count, false)?,
        "external32" => byte_map(dt, count, true)?,
        "decoded" => decode(dt),
        other => return Err(format!("unknown field {other}")),
    })
}

/// Compares an expected field with a measured one; byte maps compare as
/// expanded offset sequences.
fn same(field: &str, want: &Value, got: &Value) -> bool {
    match field {
        "pack" | "external32" => {
            want.get("size") == got.get("size") && expand(&want["runs"]) == expand(&got["runs"])
        }
        _ => want == got,
    }
}

fn expand(runs: &Value) -> Option<Vec<i64>> {
    let mut out = Vec::new();
    for run in runs.as_array()? {
        let r = run.as_array()?;
        let (start, len, step) = (r.first()?.as_i64()?, r.get(1)?.as_i64()?, r.get(2)?.as_i64()?);
        out.extend((0..len).map(|i| start + i * step));
    }
    Some(out)
}

/// Packs `count` items from a buffer whose bytes spell their own offsets and
/// returns where each packed byte came from, as greedy runs.
fn byte_map(dt: &Datatype, count: u64, external32: bool) -> Result<Value, String> {
    let last = (count.max(1) as i64 - 1) * dt.extent();
    // The buffer spans the bytes touched and the origin.
    let low = (dt.true_lb() + last.min(0)).min(0);
    let high = (dt.true_lb() + dt.true_extent() + last.max(0)).max(0);
    let span = usize::try_from(high - low).map_err(|e| e.to_string())?;
    if span > 1 << 28 {
        return Err(format!("span of {span} bytes is too large for a byte map"));
    }
    let origin = (-low) as usize;
    let size = if external32 { dt.pack_external_size(count) } else { dt.pack_size(count) }.map_err(|e| e.to_string())?;
    let digits = (1..).find(|d| span <= 1usize << (8 * d)).unwrap_or(8);
    let mut offsets = vec![0i64; size];
    for d in 0..digits {
        let mem: Vec<u8> = (0..span).map(|j| (j >> (8 * d)) as u8).collect();
        let region = Region::with_origin(&mem, origin).map_err(|e| e.to_string())?;
        let mut packed = vec![0u8; size];
        let result = if external32 {
            dt.pack_external(region, count, &mut packed, &mut 0)
        } else {
            dt.pack_into(region, count, &mut packed, &mut 0)
        };
        result.map_err(|e| e.to_string())?;
        for (o, b) in offsets.iter_mut().zip(&packed) {
            *o |= (*b as i64) << (8 * d);
        }
    }
    let mut runs: Vec<[i64; 3]> = Vec::new();
    for off in offsets.into_iter().map(|j| j + low) {
        match runs.last_mut() {
            Some([start, len, step]) if *len == 1 && (off - *start).abs() == 1 => {
                *step = off - *start;
                *len = 2;
            }
            Some([start, len, step]) if *len > 1 && off == *start + *len * *step => *len += 1,
            _ => runs.push([off, 1, 1]),
        }
    }
    Ok(json!({ "size": size, "runs": runs }))
}

// ----- building types from the case format ----------------------------------

type Built = Result<Datatype, String>;

fn build(v: &Value) -> Built {
    if let Some(name) = v.as_str() {
        return Datatype::named(name).ok_or_else(|| format!("unknown predefined type {name:?}"));
    }
    let obj = v.as_object().ok_or("a type is a name or an object")?;
    let (key, a) = obj.iter().next().ok_or("empty type object")?;
    let err = |e: mpx::Error| e.to_string();
    match key.as_str() {
        "contiguous" => Datatype::contiguous(int(a, "count")?, &sub(a)?).map_err(err),
        "vector" => Datatype::vector(int(a, "count")?, int(a, "blocklength")?, int(a, "stride")?, &sub(a)?).map_err(err),
        "hvector" => {
            Datatype::hvector(int(a, "count")?, int(a, "blocklength")?, int(a, "stride_bytes")?, &sub(a)?).map_err(err)
        }
        "indexed" => Datatype::indexed(&ints(a, "blocklengths")?, &ints(a, "displacements")?, &sub(a)?).map_err(err),
        "hindexed" => {
            Datatype::hindexed(&ints(a, "blocklengths")?, &ints(a, "displacements_bytes")?, &sub(a)?).map_err(err)
        }
        "indexed_block" => {
            Datatype::indexed_block(int(a, "blocklength")?, &ints(a, "displacements")?, &sub(a)?).map_err(err)
        }
        "hindexed_block" => {
            Datatype::hindexed_block(int(a, "blocklength")?, &ints(a, "displacements_bytes")?, &sub(a)?).map_err(err)
        }
        "struct" => {
            let types = a
                .get("types")
                .and_then(Value::as_array)
                .ok_or("struct needs types")?
                .iter()
                .map(build)
                .collect::<Result<Vec<_>, _>>()?;
            Datatype::structure(&ints(a, "blocklengths")?, &ints(a, "displacements_bytes")?, &types).map_err(err)
        }
        "subarray" => Datatype::subarray(
            &ints(a, "sizes")?,
            &ints(a, "subsizes")?,
            &ints(a, "starts")?,
            order(a)?,
            &sub(a)?,
        )
        .map_err(err),
        "darray" => {
            let distribs = strs(a, "distribs")?
                .iter()
                .map(|s| match s.as_str() {
                    "block" => Ok(Distribution::Block),
                    "cyclic" => Ok(Distribution::Cyclic),
                    "none" => Ok(Distribution::None),
                    other => Err(format!("unknown distribution {other:?}")),
                })
                .collect::<Result<Vec<_>, _>>()?;
            let dargs = a
                .get("dargs")
                .and_then(Value::as_array)
                .ok_or("darray needs dargs")?
                .iter()
                .map(|d| match (d.as_i64(), d.as_str()) {
                    (Some(k), _) => Ok(DistArg::Size(k)),
                    (_, Some("default")) => Ok(DistArg::Default),
                    _ => Err(format!("bad darg {d}")),
                })
                .collect::<Result<Vec<_>, _>>()?;
            Datatype::darray(
                int(a, "size")?,
                int(a, "rank")?,
                &ints(a, "gsizes")?,
                &distribs,
                &dargs,
                &ints(a, "psizes")?,
                order(a)?,
                &sub(a)?,
            )
            .map_err(err)
        }
        "resized" => Datatype::resized(int(a, "lb")?, int(a, "extent")?, &sub(a)?).map_err(err),
        "dup" => sub(a)?.dup().map_err(err),
        other => Err(format!("unknown constructor {other:?}")),
    }
}

fn sub(a: &Value) -> Built {
    build(a.get("type").ok_or("missing type")?)
}

fn int(a: &Value, k: &str) -> Result<i64, String> {
    a.get(k).and_then(Value::as_i64).ok_or_else(|| format!("missing integer {k}"))
}

fn ints(a: &Value, k: &str) -> Result<Vec<i64>, String> {
    a.get(k)
        .and_then(Value::as_array)
        .and_then(|v| v.iter().map(Value::as_i64).collect())
        .ok_or_else(|| format!("missing integer array {k}"))
}

fn strs(a: &Value, k: &str) -> Result<Vec<String>, String> {
    a.get(k)
        .and_then(Value::as_array)
        .and_then(|v| v.iter().map(|s| s.as_str().map(String::from)).collect())
        .ok_or_else(|| format!("missing string array {k}"))
}

fn order(a: &Value) -> Result<Order, String> {
    match a.get("order").and_then(Value::as_str) {
        Some("c") => Ok(Order::C),
        Some("fortran") => Ok(Order::Fortran),
        other => Err(format!("bad order {other:?}")),
    }
}

// ----- decoding back to the case format --------------------------------------

fn decode(dt: &Datatype) -> Value {
    let env = dt.envelope();
    if env.combiner == Combiner::Named {
        let name = dt.as_predefined().map_or("?", |p| p.name());
        return json!({ "combiner": "named", "name": name });
    }
    let c = match dt.contents() {
        Ok(c) => c,
        Err(e) => return json!(format!("error: {e}")),
    };
    let mut integers: Vec<Value> = c.integers.iter().map(|&i| json!(i)).collect();
    match env.combiner {
        Combiner::Subarray => {
            if let Some(last) = integers.last_mut() {
                *last = order_name(c.integers[c.integers.len() - 1]);
            }
        }
        Combiner::Darray => {
            let ndims = c.integers[2] as usize;
            for i in 0..ndims {
                integers[3 + ndims + i] = json!(match c.integers[3 + ndims + i] {
                    consts::DISTRIBUTE_BLOCK => "block",
                    consts::DISTRIBUTE_CYCLIC => "cyclic",
                    consts::DISTRIBUTE_NONE => "none",
                    _ => "?",
                });
                let darg = c.integers[3 + 2 * ndims + i];
                if darg == consts::DISTRIBUTE_DFLT_DARG {
                    integers[3 + 2 * ndims + i] = json!("default");
                }
            }
            let last = integers.len() - 1;
            integers[last] = order_name(c.integers[last]);
        }
        _ => {}
    }
    json!({
        "combiner": env.combiner.name(),
        "integers": integers,
        "addresses": c.addresses,
        "types": c.datatypes.iter().map(decode).collect::<Vec<_>>(),
    })
}

fn order_name(code: i64) -> Value {
    json!(match code {
        consts::ORDER_C => "c",
        consts::ORDER_FORTRAN => "fortran",
        _ => "?",
    })
}
