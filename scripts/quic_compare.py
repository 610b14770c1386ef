#!/usr/bin/env python3
"""mpx over QUIC beside raw quinn: `examples/quic_bench.rs` and its twin
`reference/quinn-raw` (`quinn-raw twin`), run alternately in one sitting.

    scripts/quic_compare.py [RUNS]            # default 2: builds both, runs each RUNS times
    scripts/quic_compare.py FILE...           # or: tables from saved JSON lines

Each run of either program prints, per arrangement (`procs` 1: both ranks in
one process; 2: two processes), the median over its rounds of each figure.
This prints, per figure, every run's median, the median over runs, the ratio
mpx / quinn of those, and the issue's targets: bandwidth >= 0.9 x quinn,
latency <= 1.2 x quinn, latency during a 256 MiB transfer <= 3 x idle (both
mpx's own). Saved lines go to target/quic_compare/ (`mpx-N.jsonl`,
`quinn-N.jsonl`).

Run it on an idle machine: it refuses to start while a cargo or rustc runs.
"""
import json, os, statistics, subprocess, sys

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
twin = os.path.join(root, "reference", "quinn-raw")


def busy():
    """Other compilers running (they would skew every figure)."""
    out = subprocess.run(["ps", "-eo", "pid,comm"], capture_output=True, text=True).stdout
    return [l.strip() for l in out.splitlines()[1:] if l.split()[-1] in ("cargo", "rustc")]


def udp_drops():
    """Datagrams the kernel dropped for want of socket buffer (Linux)."""
    try:
        with open("/proc/net/snmp") as f:
            rows = [l.split() for l in f if l.startswith("Udp:")]
        return int(rows[1][rows[0].index("RcvbufErrors")])
    except (OSError, ValueError, IndexError):
        return None


def run_all(runs):
    subprocess.run(["cargo", "build", "--quiet", "--release", "--example", "quic_bench"], cwd=root, check=True)
    subprocess.run(["cargo", "build", "--quiet", "--release"], cwd=twin, check=True)
    if busy():
        sys.exit(f"not measuring: a compiler is running ({'; '.join(busy())})")
    save = os.path.join(root, "target", "quic_compare")
    os.makedirs(save, exist_ok=True)
    progs = {
        "mpx": [os.path.join(root, "target", "release", "examples", "quic_bench")],
        "quinn": [os.path.join(twin, "target", "release", "quinn-raw"), "twin"],
    }
    files = []
    for n in range(1, runs + 1):
        for name, cmd in progs.items():
            before = udp_drops()
            text = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            after = udp_drops()
            path = os.path.join(save, f"{name}-{n}.jsonl")
            with open(path, "w") as f:
                f.write(text)
                if before is not None and after is not None:
                    f.write(json.dumps({"bench": "quic_run", "impl": name, "udp_rcvbuf_drops": after - before}) + "\n")
            files.append(path)
            print(f"# {name} run {n}: {path}", file=sys.stderr)
    return files


def load(files):
    """(impl, procs, test, bytes) -> [row of each run]"""
    rows, drops = {}, {}
    for path in files:
        with open(path) as f:
            for line in f:
                if line.startswith("{"):
                    r = json.loads(line)
                    if r.get("bench") == "quic":
                        rows.setdefault((r["impl"], r["procs"], r["test"], r["bytes"]), []).append(r)
                    elif r.get("bench") == "quic_run":
                        drops.setdefault(r["impl"], []).append(r["udp_rcvbuf_drops"])
    return rows, drops


def fmt(x):
    if x != x:
        return "n/a"
    return f"{x:.3g}" if x < 100 else f"{x:.0f}"


def table(rows, drops):
    figures = sorted({k[1:] for k in rows}, key=lambda k: (k[0], ["latency", "bandwidth", "latency_during_bulk"].index(k[1]), k[2]))
    print("| procs | figure | mpx (runs) | mpx | quinn (runs) | quinn | mpx / quinn | target |")
    print("|---|---|---|---|---|---|---|---|")
    for procs, test, size in figures:
        m, q = rows.get(("mpx", procs, test, size), []), rows.get(("quinn", procs, test, size), [])
        field = "gb_per_s" if test == "bandwidth" else "one_way_us"
        mv, qv = [r[field] for r in m], [r[field] for r in q]
        mmed = statistics.median(mv) if mv else float("nan")
        qmed = statistics.median(qv) if qv else float("nan")
        ratio = mmed / qmed if mv and qv else float("nan")
        if test == "latency":
            name, target = "8 B one-way, µs", f"≤ 1.2: {'met' if ratio <= 1.2 else 'missed'}"
        elif test == "bandwidth":
            name, target = f"{size >> 20} MiB, GB/s", f"≥ 0.9: {'met' if ratio >= 0.9 else 'missed'}"
        else:
            idle = statistics.median([r["idle_one_way_us"] for r in m]) if m else float("nan")
            qidle = statistics.median([r["idle_one_way_us"] for r in q]) if q else float("nan")
            name = "8 B one-way during 256 MiB, µs"
            target = f"mpx {mmed / idle:.0f}× idle, quinn {qmed / qidle:.0f}× (≤ 3×): {'met' if mmed <= 3 * idle else 'missed'}"
        runs = lambda v: " / ".join(fmt(x) for x in v)
        if ratio != ratio:
            target = target.split(":")[0] + ": n/a"
        print(f"| {procs} | {name} | {runs(mv)} | {fmt(mmed)} | {runs(qv)} | {fmt(qmed)} | {ratio:.2f} | {target} |")
    extra = [(k, r) for k, r in rows.items() if k[2] == "latency_during_bulk"]
    for (impl, procs, _, _), rs in sorted(extra):
        pings = " / ".join(str(int(r["pings"])) for r in rs)
        gbps = " / ".join(fmt(r["bulk_gb_per_s"]) for r in rs)
        print(f"# {impl}, procs {procs}, during the 256 MiB transfer: pings {pings}; transfer GB/s {gbps}")
    for impl, d in sorted(drops.items()):
        print(f"# {impl}: datagrams dropped by the kernel (UDP RcvbufErrors) per run: {' / '.join(map(str, d))}")


args = sys.argv[1:]
files = run_all(int(args[0]) if args else 2) if not args or args[0].isdigit() else args
table(*load(files))
