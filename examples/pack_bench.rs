//! Pack/unpack throughput of the datatype engine on eight common layouts.
//!
//! ```text
//! cargo run --release --example pack_bench
//! ../shared/reference-bench/run.sh pack      # MPICH, Open MPI and hand-written C, same types
//! scripts/pack_compare.py 20                 # both, in interleaved rounds, as medians
//! scripts/pack_compare.py --paired 5         # mpx and each reference in one process
//! scripts/pack_compare.py --paired-two-buffers 2
//! ```
//!
//! Prints one JSON line per datatype, `{"type", "bytes", "pack_GBps",
//! "unpack_GBps", "memcpy_GBps"}`, best of seven trials, with the same types,
//! sizes, repetitions per trial and best-of as the two C programs of
//! `shared/reference-bench`. Like `manual_bench.c` (the hand-written loops),
//! it packs from and unpacks into one buffer; `pack_bench.c` (MPICH, Open
//! MPI) unpacks into a second one, which packing did not bring into the
//! caches (see docs/PERFORMANCE.md, "Packing and unpacking"). Every type is built through the public datatype
//! API and packed through the public pack/unpack API.
//!
//! `pack_bench --paired LIB [TYPE]` (Unix) measures mpx against a
//! reference in the same process: `LIB` is `scripts/pack_reference.c` built
//! as a shared object (the hand-written loops, or `MPI_Pack`/`MPI_Unpack`
//! of MPICH or Open MPI). For each type (or only `TYPE`) it first checks
//! that both pack and unpack the same bytes, then alternates the two on the
//! same buffers, trial by trial, so where the buffers landed in the caches
//! is the same for both. Each line has `{"type", "bytes", "pack_GBps",
//! "unpack_GBps", "ref_pack_GBps", "ref_unpack_GBps"}`, best of 15 trials,
//! and `pack_ratio`/`unpack_ratio`: the median over the 15 trials of mpx's
//! throughput over the reference's in that trial. `--paired-two-buffers`
//! unpacks into a second buffer, as `pack_bench.c` does, instead of the one
//! packed from.
//!
//! Measured figures, with the reference run beside them, are in
//! docs/PERFORMANCE.md, "Packing and unpacking" (the README keeps a
//! summary).

use std::hint::black_box;
use std::time::Instant;

use mpx::{Datatype, Order, Region, RegionMut};

const N: i64 = 1 << 20;

/// One benchmark type: `count` items of `datatype` in a buffer of `span` bytes.
struct Case {
    name: &'static str,
    datatype: Datatype,
    count: u64,
    span: usize,
}

/// Builds a benchmark type: its datatype, the count of items packed, and
/// the bytes of memory they span.
type Build = fn() -> mpx::Result<(Datatype, u64, usize)>;

/// A 128^3 cube of doubles, in bytes; its x face is one double every 1 KiB,
/// its y face 128 runs of 1 KiB.
const CUBE: usize = 128 * 128 * 128 * 8;

/// The eight types of `shared/reference-bench/pack_bench.c`, in its order.
const TYPES: [(&str, Build); 8] = [
    ("contiguous_1M_double", || Ok((Datatype::contiguous(N, &Datatype::double())?, 1, N as usize * 8))),
    ("vector_stride2_double", || Ok((Datatype::vector(N, 1, 2, &Datatype::double())?, 1, N as usize * 16))),
    ("vector_block8_stride16_double", || Ok((Datatype::vector(N / 8, 8, 16, &Datatype::double())?, 1, N as usize * 16))),
    ("vector_xyz_of_xyzw_float", || Ok((Datatype::vector(N / 4, 3, 4, &Datatype::float())?, 1, N as usize * 4))),
    ("struct_int_double_char3_x1M", || {
        // An array of C structs {int id; double x; char tag[3];}: 24-byte stride, 15 useful bytes.
        let fields = [Datatype::int(), Datatype::double(), Datatype::char()];
        let s = Datatype::structure(&[1, 1, 3], &[0, 8, 16], &fields)?;
        Ok((Datatype::resized(0, 24, &s)?, (N / 2) as u64, N as usize / 2 * 24))
    }),
    ("subarray_128cube_xface_double", || {
        Ok((Datatype::subarray(&[128; 3], &[128, 128, 1], &[0, 0, 5], Order::C, &Datatype::double())?, 1, CUBE))
    }),
    ("subarray_128cube_yface_double", || {
        Ok((Datatype::subarray(&[128; 3], &[128, 1, 128], &[0, 5, 0], Order::C, &Datatype::double())?, 1, CUBE))
    }),
    ("indexed_irregular_64k_blocks", || {
        // 64k blocks of 1..7 doubles at scattered displacements, from pack_bench.c's 32-bit LCG.
        let (mut lens, mut disps) = (Vec::new(), Vec::new());
        let (mut off, mut seed) = (0i64, 12345u32);
        for _ in 0..65536 {
            seed = seed.wrapping_mul(1103515245).wrapping_add(12345);
            let len = 1 + ((seed >> 16) % 7) as i64;
            lens.push(len);
            disps.push(off);
            off += len + 1 + ((seed >> 8) % 5) as i64;
        }
        Ok((Datatype::indexed(&lens, &disps, &Datatype::double())?, 1, (off as usize + 8) * 8))
    }),
];

/// Builds the benchmark type `name` with `build`, right before it is
/// measured, as the C programs build theirs (each allocates a type's
/// buffers after building it and frees them before the next type), so
/// the allocator reuses memory between types in a similar pattern. It is
/// not the same pattern: Rust's start-up allocations, and mpx's compiled
/// programs, shift where the buffers land. Placement matters: whether a
/// cube face's rows cross page boundaries moves its figures by a tenth in
/// every program.
fn build_case(name: &'static str, build: Build) -> mpx::Result<Case> {
    let (datatype, count, span) = build()?;
    Ok(Case { name, datatype: datatype.commit(), count, span })
}

/// Repetitions per trial, as in the C programs: about 200 MB moved.
fn repetitions(bytes: usize) -> usize {
    ((2e8 / (bytes as f64 + 1.0)) as usize + 1).min(2000)
}

/// Seconds per call of `op`, timed over `reps` calls.
fn time_per_call(reps: usize, mut op: impl FnMut()) -> f64 {
    let start = Instant::now();
    for _ in 0..reps {
        op();
    }
    start.elapsed().as_secs_f64() / reps as f64
}

fn mpx_pack(case: &Case, mem: &[u8], packed: &mut [u8]) {
    let src = Region::new(black_box(mem));
    case.datatype.pack_into(src, case.count, packed, &mut 0).expect("pack");
    black_box(packed);
}

fn mpx_unpack(case: &Case, packed: &[u8], mem: &mut [u8]) {
    let mut position = 0;
    case.datatype.unpack_from(black_box(packed), &mut position, RegionMut::new(mem), case.count).expect("unpack");
    black_box(mem);
}

fn bench(case: &Case) {
    let bytes = case.datatype.pack_size(case.count).expect("benchmark types are small");
    // As in manual_bench.c, one buffer is packed from and unpacked into.
    let mut mem = vec![1u8; case.span];
    let mut packed = vec![2u8; bytes];
    let mut copy = vec![0u8; bytes];
    let reps = repetitions(bytes);
    let (mut best_pack, mut best_unpack, mut best_copy) = (f64::MAX, f64::MAX, f64::MAX);
    for _ in 0..7 {
        best_pack = best_pack.min(time_per_call(reps, || mpx_pack(case, &mem, &mut packed)));
        best_unpack = best_unpack.min(time_per_call(reps, || mpx_unpack(case, &packed, &mut mem)));
        best_copy = best_copy.min(time_per_call(reps, || {
            copy.copy_from_slice(black_box(&packed));
            black_box(&mut copy);
        }));
    }
    // Freed in manual_bench.c's order: the allocator then places the next
    // case's buffers as it does there.
    drop(mem);
    drop(packed);
    drop(copy);
    let gbps = |secs: f64| bytes as f64 / secs / 1e9;
    println!(
        "{{\"type\":\"{}\",\"bytes\":{bytes},\"pack_GBps\":{:.2},\"unpack_GBps\":{:.2},\"memcpy_GBps\":{:.2}}}",
        case.name,
        gbps(best_pack),
        gbps(best_unpack),
        gbps(best_copy)
    );
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [] => {
            for (name, build) in TYPES {
                bench(&build_case(name, build)?);
            }
        }
        [flag, library, only @ ..] if flag.starts_with("--paired") && only.len() <= 1 => {
            let chosen: Vec<_> = TYPES.into_iter().filter(|(t, _)| only.iter().all(|name| t == name)).collect();
            if chosen.is_empty() {
                return Err(format!("no benchmark type is named {}", only[0]).into());
            }
            match flag.as_str() {
                "--paired" => paired::run(&chosen, library, false)?,
                "--paired-two-buffers" => paired::run(&chosen, library, true)?,
                _ => return Err(format!("unknown option {flag}").into()),
            }
        }
        _ => return Err("usage: pack_bench [(--paired | --paired-two-buffers) REFERENCE.so [TYPE]]".into()),
    }
    Ok(())
}

#[cfg(unix)]
mod paired {
    //! mpx and a reference library, alternately on the same buffers.

    use super::{black_box, build_case, mpx_pack, mpx_unpack, repetitions, time_per_call, Build};
    use std::ffi::{c_char, CStr, CString};

    type Prepare = unsafe extern "C" fn(*const c_char) -> usize;
    type Pack = unsafe extern "C" fn(*const u8, *mut u8, usize);
    type Unpack = unsafe extern "C" fn(*const u8, usize, *mut u8);

    /// The three entry points of `scripts/pack_reference.c`.
    struct Reference {
        prepare: Prepare,
        pack: Pack,
        unpack: Unpack,
    }

    impl Reference {
        fn load(path: &str) -> Result<Self, String> {
            let path = CString::new(path).map_err(|e| e.to_string())?;
            // SAFETY: dlopen/dlsym/dlerror are called with valid C strings;
            // the symbols are the functions pack_reference.c defines with
            // exactly these signatures. RTLD_GLOBAL lets an MPI library's
            // plugins find its symbols; the library is never unloaded.
            unsafe {
                let handle = libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL);
                if handle.is_null() {
                    return Err(CStr::from_ptr(libc::dlerror()).to_string_lossy().into_owned());
                }
                let symbol = |name: &CStr| {
                    let f = libc::dlsym(handle, name.as_ptr());
                    if f.is_null() {
                        Err(format!("{path:?} has no {name:?}"))
                    } else {
                        Ok(f)
                    }
                };
                Ok(Reference {
                    prepare: std::mem::transmute::<*mut libc::c_void, Prepare>(symbol(c"ref_prepare")?),
                    pack: std::mem::transmute::<*mut libc::c_void, Pack>(symbol(c"ref_pack")?),
                    unpack: std::mem::transmute::<*mut libc::c_void, Unpack>(symbol(c"ref_unpack")?),
                })
            }
        }
    }

    const TRIALS: usize = 15;

    /// Runs `mpx` and `reference` on the buffer `out` one after the other,
    /// in the order given; returns their results as `[mpx, reference]`.
    fn pair(
        mpx_first: bool,
        out: &mut [u8],
        mpx: impl FnOnce(&mut [u8]) -> f64,
        reference: impl FnOnce(&mut [u8]) -> f64,
    ) -> [f64; 2] {
        if mpx_first {
            let m = mpx(out);
            [m, reference(out)]
        } else {
            let r = reference(out);
            [mpx(out), r]
        }
    }

    pub fn run(types: &[(&'static str, Build)], library: &str, two_buffers: bool) -> Result<(), String> {
        let reference = Reference::load(library)?;
        for &(name, build) in types {
            let case = &build_case(name, build).map_err(|e| e.to_string())?;
            let bytes = case.datatype.pack_size(case.count).expect("benchmark types are small");
            let c_name = CString::new(case.name).expect("names have no NUL");
            // SAFETY: a C string; returns the reference's packed size.
            let reference_bytes = unsafe { (reference.prepare)(c_name.as_ptr()) };
            if reference_bytes != bytes {
                return Err(format!("{}: the reference packs {reference_bytes} bytes, mpx {bytes}", case.name));
            }
            let mut mem: Vec<u8> = (0..case.span).map(|i| (i * 7 + i / 251) as u8).collect();
            // Where unpacking writes: `mem` itself, or, as pack_bench.c
            // does, a second buffer whose lines packing did not bring in.
            // Filled, as pack_bench.c fills its, so no trial pays its page faults.
            let mut second = if two_buffers { vec![3u8; case.span] } else { Vec::new() };
            let mut packed = vec![0u8; bytes];
            let mut reference_packed = vec![0u8; bytes];
            let ref_pack = |mem: &[u8], packed: &mut [u8]| {
                // SAFETY: `mem` spans the type's typemap and `packed` holds
                // `bytes` bytes, as the reference's own program allocates them.
                unsafe { (reference.pack)(black_box(mem).as_ptr(), packed.as_mut_ptr(), bytes) };
                black_box(packed);
            };
            let ref_unpack = |packed: &[u8], mem: &mut [u8]| {
                // SAFETY: as for `ref_pack`, the other way.
                unsafe { (reference.unpack)(black_box(packed).as_ptr(), bytes, mem.as_mut_ptr()) };
                black_box(mem);
            };
            mpx_pack(case, &mem, &mut packed);
            ref_pack(&mem, &mut reference_packed);
            if packed != reference_packed {
                return Err(format!("{}: mpx and the reference pack different bytes", case.name));
            }
            let (mut unpacked, mut reference_unpacked) = (vec![0u8; case.span], vec![0u8; case.span]);
            mpx_unpack(case, &packed, &mut unpacked);
            ref_unpack(&packed, &mut reference_unpacked);
            if unpacked != reference_unpacked {
                return Err(format!("{}: mpx and the reference unpack different bytes", case.name));
            }
            drop((unpacked, reference_unpacked));

            let reps = repetitions(bytes);
            let mut times = Vec::with_capacity(TRIALS); // [mpx pack, ref pack, mpx unpack, ref unpack]
            for trial in 0..TRIALS {
                // Alternate which goes first, so neither always follows the other.
                let mpx_first = trial % 2 == 0;
                let [mpx_p, ref_p] = pair(
                    mpx_first,
                    &mut packed,
                    |out| time_per_call(reps, || mpx_pack(case, &mem, out)),
                    |out| time_per_call(reps, || ref_pack(&mem, out)),
                );
                let dst = if two_buffers { &mut second } else { &mut mem };
                let [mpx_u, ref_u] = pair(
                    mpx_first,
                    dst,
                    |out| time_per_call(reps, || mpx_unpack(case, &packed, out)),
                    |out| time_per_call(reps, || ref_unpack(&packed, out)),
                );
                times.push([mpx_p, ref_p, mpx_u, ref_u]);
            }
            let best = |i: usize| bytes as f64 / times.iter().map(|t| t[i]).fold(f64::MAX, f64::min) / 1e9;
            let median_ratio = |mpx: usize, reference: usize| {
                let mut ratios: Vec<f64> = times.iter().map(|t| t[reference] / t[mpx]).collect();
                ratios.sort_by(f64::total_cmp);
                ratios[ratios.len() / 2]
            };
            println!(
                "{{\"type\":\"{}\",\"bytes\":{bytes},\"pack_GBps\":{:.2},\"unpack_GBps\":{:.2},\
                 \"ref_pack_GBps\":{:.2},\"ref_unpack_GBps\":{:.2},\"pack_ratio\":{:.3},\"unpack_ratio\":{:.3}}}",
                case.name,
                best(0),
                best(2),
                best(1),
                best(3),
                median_ratio(0, 1),
                median_ratio(2, 3)
            );
        }
        Ok(())
    }
}

#[cfg(not(unix))]
mod paired {
    pub fn run(_: &[(&'static str, super::Build)], _: &str, _: bool) -> Result<(), String> {
        Err("--paired loads a shared object and needs a Unix system".into())
    }
}
