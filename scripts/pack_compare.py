#!/usr/bin/env python3
"""Pack/unpack throughput of mpx beside MPICH, Open MPI and hand-written C.

Runs `pack_bench` and the three reference programs of
../shared/reference-bench (built the way its run.sh builds them) in
interleaved rounds, so every program sees the same machine conditions, then
prints per type the median over rounds of each program's figures and mpx's
ratio to the best of the three references (pack / unpack):

    cargo build --release --example pack_bench
    scripts/pack_compare.py [ROUNDS]          # default 8; docs/PERFORMANCE.md quotes 20

Single rounds vary by a third on a shared VM (cache placement of the
buffers, neighbours); medians over interleaved rounds are what
docs/PERFORMANCE.md quotes.

    scripts/pack_compare.py --paired [ROUNDS]   # default 5

measures each reference in the same process as mpx instead
(`pack_bench --paired`, with scripts/pack_reference.c built as a shared
object against each library): both run alternately on the same buffers, so
placement cancels out of their ratio. Prints, per type, the median over
rounds of each reference's ratio (mpx / reference, itself a median over 15
paired trials) and the lowest of the three. `--paired-two-buffers` does the
same with unpacking into a second buffer, as pack_bench.c does.
"""
import json, os, random, statistics, subprocess, sys, tempfile

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
ref = os.path.join(root, "..", "shared", "reference-bench")
args = sys.argv[1:]
modes = [a for a in args if a in ("--paired", "--paired-two-buffers")]
paired = modes[0] if modes else None
args = [a for a in args if a not in modes]
rounds = int(args[0]) if args else (5 if paired else 8)

out = tempfile.mkdtemp()
def build(cmd, **kw):
    subprocess.run(cmd, check=True, **kw)
build(["cargo", "build", "--quiet", "--release", "--example", "pack_bench"], cwd=root)
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
mpx = os.path.join(root, "target", "release", "examples", "pack_bench")

if paired:
    source = os.path.join(here, "pack_reference.c")
    build(["gcc", "-O3", "-shared", "-fPIC", "-Wno-unused-function", "-DMANUAL", f"-I{ref}", source, "-o", f"{out}/manual.so"])
    build(["mpicc.mpich", "-O2", "-shared", "-fPIC", source, "-o", f"{out}/mpich.so"])
    build(["mpicc.openmpi", "-O2", "-shared", "-fPIC", source, "-o", f"{out}/openmpi.so"])
    references = ["mpich", "openmpi", "manual"]
    ratios = {}  # (reference, type) -> [(pack ratio, unpack ratio)]
    types = []
    for r in range(rounds):
        for name in references:
            text = subprocess.run([mpx, paired, f"{out}/{name}.so"], check=True,
                                  capture_output=True, text=True, env=env).stdout
            for row in (json.loads(line) for line in text.splitlines() if line.startswith("{")):
                if row["type"] not in types:
                    types.append(row["type"])
                ratios.setdefault((name, row["type"]), []).append((row["pack_ratio"], row["unpack_ratio"]))
        print(f"round {r + 1}/{rounds} done", file=sys.stderr)
    print(f"mpx / reference in one process ({paired}), medians of {rounds} rounds, pack / unpack")
    print("| type | MPICH | Open MPI | hand-written C | lowest |")
    print("|---|---|---|---|---|")
    for t in types:
        med = {n: [statistics.median(v[i] for v in ratios[(n, t)]) for i in (0, 1)] for n in references}
        cells = [f"{med[n][0]:.2f} / {med[n][1]:.2f}" for n in references]
        low = [min(med[n][i] for n in references) for i in (0, 1)]
        print(f"| {t} | " + " | ".join(cells) + f" | {low[0]:.2f} / {low[1]:.2f} |")
    sys.exit(0)

build(["mpicc.mpich", "-O2", f"{ref}/pack_bench.c", "-o", f"{out}/mpich"])
build(["mpicc.openmpi", "-O2", f"{ref}/pack_bench.c", "-o", f"{out}/openmpi"])
build(["gcc", "-O3", f"{ref}/manual_bench.c", "-o", f"{out}/manual"])

programs = {
    "mpx": [mpx],
    "mpich": [f"{out}/mpich"],
    "openmpi": [f"{out}/openmpi"],
    "manual": [f"{out}/manual"],
}
figures = {}  # (program, type) -> [(pack, unpack)]
types = None
names = list(programs)
order = random.Random(6)  # seeded: a rerun runs the same orders
for r in range(rounds):
    # A fresh order each round, so no program always runs right after the
    # same one (what the last process freed is what the next one gets).
    order.shuffle(names)
    for name in names:
        cmd = programs[name]
        text = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
        rows = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
        printed = [row["type"] for row in rows]
        if types is None:
            types = printed
        if printed != types:
            sys.exit(f"{name} printed types {printed}, expected {types}")
        for row in rows:
            figures.setdefault((name, row["type"]), []).append((row["pack_GBps"], row["unpack_GBps"]))
    print(f"round {r + 1}/{rounds} done", file=sys.stderr)

def median(name, t, i):
    return statistics.median(v[i] for v in figures[(name, t)])

print(f"medians of {rounds} interleaved rounds, GB/s pack / unpack")
print("| type | mpx | MPICH | Open MPI | hand-written C | mpx / best |")
print("|---|---|---|---|---|---|")
for t in types:
    cells = [f"{median(n, t, 0):.1f} / {median(n, t, 1):.1f}" for n in programs]
    ratio = [median("mpx", t, i) / max(median(n, t, i) for n in programs if n != "mpx") for i in (0, 1)]
    print(f"| {t} | " + " | ".join(cells) + f" | {ratio[0]:.2f} / {ratio[1]:.2f} |")
