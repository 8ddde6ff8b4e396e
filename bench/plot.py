#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Turn cep-bench --json output into PNG plots with gnuplot (gnuplot-nox).

usage: bench/plot.py OUTDIR FILE.jsonl [FILE.jsonl ...]
       bench/plot.py --tables-only OUT.md FILE.jsonl [...]   (markdown only)

Writes, for whatever rows the files hold:
  table-<mix>.png  ops/s vs threads, one line per implementation
  connect.png      established/s and released/s vs workers
  dispatch.png     MADs/s vs workers, per number of feeder threads
  scale.png        bytes/CEP and connect rate vs live CEPs (log x)
  tables.md        the same rows as markdown tables (for docs/benchmarks.md)
The .dat files and .gp scripts stay next to the PNGs, so a plot can be
re-rendered or checked against the numbers it shows.
"""
import json
import os
import subprocess
import sys
from collections import defaultdict


def load(paths):
    rows = []
    for p in paths:
        with open(p) as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    sys.exit(f"{p}:{n}: not JSON: {e}")
    return rows


def gnuplot(outdir, name, script):
    gp = os.path.join(outdir, name + ".gp")
    with open(gp, "w") as f:
        f.write(script)
    subprocess.run(["gnuplot", name + ".gp"], check=True, cwd=outdir)
    print(os.path.join(outdir, name + ".png"))


HEAD = """set terminal pngcairo size 800,500 noenhanced font ",10"
set output '{png}'
set key {key}
set grid
"""


def plot_table(outdir, rows):
    by_mix = defaultdict(lambda: defaultdict(dict))  # mix -> impl -> threads -> row
    for r in rows:
        mix = r["mix"] + ("-miss" if r.get("lookup") == "miss" else "")
        by_mix[mix][r["impl"]][r["threads"]] = r
    for mix, impls in by_mix.items():
        safe = mix.replace("/", "-")
        plots = []
        for impl, pts in impls.items():
            dat = f"table-{safe}-{impl}.dat"
            with open(os.path.join(outdir, dat), "w") as f:
                f.write("# threads ops_per_s min max\n")
                for t in sorted(pts):
                    r = pts[t]
                    f.write(f"{t} {r['ops_per_s']} {r['ops_per_s_min']} {r['ops_per_s_max']}\n")
            plots.append(f"'{dat}' using 1:($2/1e6):($3/1e6):($4/1e6) "
                         f"with yerrorlines title '{impl}'")
        threads = sorted({t for pts in impls.values() for t in pts})
        reps = next(iter(next(iter(impls.values())).values()))["reps"]
        script = HEAD.format(png=f"table-{safe}.png", key="top left") + f"""
set title 'cep-bench table, mix {mix} (lookup/insert/delete %), median of {reps}, bars min..max'
set xlabel 'threads'
set ylabel 'million ops/s'
set xtics ({', '.join(str(t) for t in threads)})
set xrange [{min(threads) - 0.5}:{max(threads) + 0.5}]
set yrange [0:*]
plot {', '.join(plots)}
"""
        gnuplot(outdir, f"table-{safe}", script)


def plot_workers(outdir, rows, name, series, ylabel):
    rows = sorted(rows, key=lambda r: r["workers"])
    impls = sorted({r["impl"] for r in rows})
    plots = []
    for impl in impls:
        dat = f"{name}-{impl}.dat"
        pts = [r for r in rows if r["impl"] == impl]
        with open(os.path.join(outdir, dat), "w") as f:
            f.write("# workers " + " ".join(k for k, _ in series) + "\n")
            for r in pts:
                f.write(f"{r['workers']} " + " ".join(str(r[k]) for k, _ in series) + "\n")
        for col, (key, label) in enumerate(series, 2):
            plots.append(f"'{dat}' using 1:(${col}/1e3) with linespoints title '{impl} {label}'")
    workers = sorted({r["workers"] for r in rows})
    script = HEAD.format(png=f"{name}.png", key="bottom right") + f"""
set title 'cep-bench {name}, median of {rows[0]["reps"]}'
set xlabel 'workers'
set ylabel '{ylabel}'
set xtics ({', '.join(str(w) for w in workers)})
set xrange [{min(workers) - 0.5}:{max(workers) + 0.5}]
set yrange [0:*]
plot {', '.join(plots)}
"""
    gnuplot(outdir, name, script)


def plot_scale(outdir, rows):
    impls = sorted({r["impl"] for r in rows})
    plots = []
    for impl in impls:
        dat = f"scale-{impl}.dat"
        with open(os.path.join(outdir, dat), "w") as f:
            f.write("# live_ceps bytes_per_cep conn_per_s lookup_p50_us lookup_p99_us\n")
            for r in sorted((r for r in rows if r["impl"] == impl), key=lambda r: r["live_ceps"]):
                f.write(f"{r['live_ceps']} {r['bytes_per_cep']} {r['conn_per_s']} "
                        f"{r['lookup_p50_us']} {r['lookup_p99_us']}\n")
        plots.append(f"'{dat}' using 1:2 with linespoints title '{impl} bytes/CEP' axes x1y1")
        plots.append(f"'{dat}' using 1:($3/1e3) with linespoints dashtype 2 "
                     f"title '{impl} connect rate' axes x1y2")
    script = HEAD.format(png="scale.png", key="bottom left") + f"""
set title 'cep-bench scale, median of {rows[0]["reps"]}'
set logscale x
set xlabel 'live connections (CEPs per node)'
set ylabel 'bytes per CEP (malloc + libcep mappings)'
set y2label 'thousand connections/s (dashed)'
set ytics nomirror
set y2tics
set yrange [0:*]
set y2range [0:*]
plot {', '.join(plots)}
"""
    gnuplot(outdir, "scale", script)


def fmt(v):
    if v >= 1e6:
        return f"{v / 1e6:.2f} M"
    if v >= 1e3:
        return f"{v / 1e3:.1f} k"
    return f"{v:.3g}"


def md_tables(rows):
    kinds = defaultdict(list)
    for r in rows:
        kinds[r.get("bench")].append(r)
    out = []
    if kinds["table"]:
        ratios = {(r["impl"], r["threads"], r["mix"], r["lookup"], r.get("initial_buckets")): r
                  for r in kinds["table-ratio"]}
        libceps = sorted({r["impl"] for r in kinds["table-ratio"]})
        out.append("| mix | lookups | entries | initial buckets | threads | impl | ops/s median [min .. max] | p50 us | p99 us | p999 us | "
                   + " | ".join(f"{l} / impl" for l in libceps) + " |")
        out.append("|---|---|---|---|---|---|---|---|---|---|" + "---|" * len(libceps))
        order = []  # mixes in the order the run printed them
        for r in kinds["table"]:
            if (r["mix"], r["lookup"], r.get("initial_buckets")) not in order:
                order.append((r["mix"], r["lookup"], r.get("initial_buckets")))
        for r in sorted(kinds["table"], key=lambda r: (order.index((r["mix"], r["lookup"],
                                                                    r.get("initial_buckets"))),
                                                        r["threads"])):
            xs = []
            for l in libceps:
                x = ratios.get((l, r["threads"], r["mix"], r["lookup"], r.get("initial_buckets")),
                               {}).get("x_" + r["impl"])
                xs.append("" if x is None else f"{x:.2f}x")
            out.append(f"| {r['mix']} | {r['lookup']} | {r['size']:,} | {r.get('initial_buckets', 0):,} | "
                       f"{r['threads']} | {r['impl']} | "
                       f"{fmt(r['ops_per_s'])} [{fmt(r['ops_per_s_min'])} .. {fmt(r['ops_per_s_max'])}] | "
                       f"{r['p50_us']:.3f} | {r['p99_us']:.3f} | {r['p999_us']:.3f} | "
                       + " | ".join(xs) + " |")
        out.append(f"\n(medians of {kinds['table'][0]['reps']} runs of "
                   f"{kinds['table'][0]['duration_s']} s)\n")
    if kinds["connect"]:
        out.append("| impl | workers | established/s median [min .. max] | released/s | setup p50 us | p99 us | p999 us | MADs/s |")
        out.append("|---|---|---|---|---|---|---|---|")
        for r in sorted(kinds["connect"], key=lambda r: (r["impl"], r["workers"])):
            out.append(f"| {r['impl']} | {r['workers']} | {fmt(r['conn_per_s'])} [{fmt(r['conn_per_s_min'])} .. "
                       f"{fmt(r['conn_per_s_max'])}] | {fmt(r['rel_per_s'])} | {r['p50_us']:.0f} | "
                       f"{r['p99_us']:.0f} | {r['p999_us']:.0f} | {fmt(r['mads_per_s'])} |")
        r0 = kinds["connect"][0]
        out.append(f"\n(medians of {r0['reps']} storms of {r0['conns']} connections, "
                   f"{r0['window']} in flight)\n")
    if kinds["dispatch"]:
        out.append("| feeders | workers | MADs/s median [min .. max] | x 1 worker | feeder CPU | worker CPU | x 1 worker, receive side apart | handled |")
        out.append("|---|---|---|---|---|---|---|---|")
        for r in sorted(kinds["dispatch"], key=lambda r: (r.get("feeders", 1), r["workers"])):
            x = r.get("x_1_worker")
            xc = r.get("x_1_worker_cpu")
            out.append(f"| {r.get('feeders', 1)} | {r['workers']} | {fmt(r['mads_per_s'])} [{fmt(r['mads_per_s_min'])} .. "
                       f"{fmt(r['mads_per_s_max'])}] | {'' if x is None else f'{x:.2f}x'} | "
                       f"{r.get('feeder_cpu', 0):.2f} | {r.get('worker_cpu', 0):.2f} | "
                       f"{'' if xc is None else f'{xc:.2f}x'} | {100 * r['handled_ratio']:.1f}% |")
        out.append(f"\n(medians of {kinds['dispatch'][0]['reps']} runs of "
                   f"{kinds['dispatch'][0]['duration_s']} s; CPU in CPU-seconds per second)\n")
    if kinds["dispatch-queue"]:
        out.append("| queue | producers | MADs/s median [min .. max] | x ring |")
        out.append("|---|---|---|---|")
        for r in sorted(kinds["dispatch-queue"], key=lambda r: (r["producers"], r["impl"])):
            out.append(f"| {r['impl']} | {r['producers']} | {fmt(r['mads_per_s'])} "
                       f"[{fmt(r['mads_per_s_min'])} .. {fmt(r['mads_per_s_max'])}] | "
                       f"{r['x_ring']:.2f}x |")
        out.append(f"\n(medians of {kinds['dispatch-queue'][0]['reps']})\n")
    if kinds["scale"]:
        out.append("| impl | live connections | bytes per CEP | heap MiB (both nodes) | lookup p50 us | lookup p99 us | conn/s median [min .. max] | released/s | storm |")
        out.append("|---|---|---|---|---|---|---|---|---|")
        for r in sorted(kinds["scale"], key=lambda r: (r["impl"], r["live_ceps"])):
            out.append(f"| {r['impl']} | {r['live_ceps']:,} | {r['bytes_per_cep']:.0f} | {r['heap_mib']:.1f} | "
                       f"{r['lookup_p50_us']:.3f} | {r['lookup_p99_us']:.3f} | {fmt(r['conn_per_s'])} "
                       f"[{fmt(r['conn_per_s_min'])} .. {fmt(r['conn_per_s_max'])}] | "
                       f"{fmt(r['rel_per_s'])} | {r['conns']} |")
        out.append(f"\n(medians of {kinds['scale'][0]['reps']})\n")
    if kinds["memlat"]:
        out.append("| working set MiB | 4 KiB pages: ns per dependent load | huge pages (MADV_HUGEPAGE) |")
        out.append("|---|---|---|")
        for r in sorted(kinds["memlat"], key=lambda r: r["mib"]):
            out.append(f"| {r['mib']} | {r['ns_4k']:.1f} | {r['ns_huge']:.1f} |")
        out.append(f"\n(medians of {kinds['memlat'][0]['reps']})\n")
    out.append(targets(kinds))
    return "\n".join(out) + "\n"


DEFAULT = "libcep-ck"  # the default index (docs/architecture.md)


def targets(kinds):
    """Issue 12's targets, checked against these rows."""
    t = ["| target | measured | verdict |", "|---|---|---|"]

    def row(name, value, ok):
        t.append(f"| {name} | {value} | {'met' if ok else 'MISSED'} |")

    for r in kinds["table-ratio"]:
        if r["lookup"] != "hit" or r.get("initial_buckets", 0) < 1000000:
            continue
        own = "x_ck_rhs" if r["impl"] == "libcep-ck" else "x_rculfhash"
        if r["threads"] == 1 and r["mix"] == "100/0/0":
            if r["impl"] == DEFAULT and "x_mutex" in r:
                row(f"table, 1M, hit lookups, 1 thread: {r['impl']} >= 0.95x mutex map",
                    f"{r['x_mutex']:.2f}x", r["x_mutex"] >= 0.95)
            if own in r:
                row(f"table, 1M, hit lookups, 1 thread: {r['impl']} >= 0.9x its raw index",
                    f"{r[own]:.2f}x", r[own] >= 0.9)
        if r["threads"] == 2 and r["mix"] == "90/5/5":
            if r["impl"] == DEFAULT and "x_mutex" in r:
                row(f"table, 1M, 2 threads, 90/5/5: {r['impl']} >= 1.8x mutex map",
                    f"{r['x_mutex']:.2f}x", r["x_mutex"] >= 1.8)
            if r["impl"] == DEFAULT and "x_rculfhash" in r:
                row(f"table, 1M, 2 threads, 90/5/5: {r['impl']} >= 1.2x raw rculfhash",
                    f"{r['x_rculfhash']:.2f}x", r["x_rculfhash"] >= 1.2)
            if own in r:
                row(f"table, 1M, 2 threads, 90/5/5: {r['impl']} >= 0.9x its raw index",
                    f"{r[own]:.2f}x", r[own] >= 0.9)
    conn = {(r["impl"], r["workers"]): r for r in kinds["connect"]}
    for w in sorted({r["workers"] for r in kinds["connect"]}):
        d, p = conn.get((DEFAULT, w)), conn.get((DEFAULT + "-presized", w))
        if d:
            row(f"connect, default settings, {w} worker(s): >= 250,000 established/s",
                f"{d['conn_per_s']:,.0f}/s", d["conn_per_s"] >= 250000)
            row(f"connect, default settings, {w} worker(s): >= 250,000 released/s",
                f"{d['rel_per_s']:,.0f}/s", d["rel_per_s"] >= 250000)
            row(f"connect, default settings, {w} worker(s): p99 setup <= 1 ms",
                f"{d['p99_us'] / 1000:.2f} ms", d["p99_us"] <= 1000)
        if p:
            row(f"connect, presized, {w} worker(s): >= 300,000 established/s",
                f"{p['conn_per_s']:,.0f}/s", p["conn_per_s"] >= 300000)
        if d and p:
            x = d["conn_per_s"] / p["conn_per_s"]
            row(f"connect, 100,000 connections, {w} worker(s): default within 10% of presized",
                f"{x:.2f}x", x >= 0.9)
    for r in kinds["dispatch"]:
        if r["workers"] == 2 and "x_1_worker" in r:
            row(f"dispatch, {r.get('feeders', 1)} feeder(s): 2 workers >= 1.7x 1 worker (wall clock)",
                f"{r['x_1_worker']:.2f}x", r["x_1_worker"] >= 1.7)
            if "x_1_worker_cpu" in r:
                row(f"dispatch, {r.get('feeders', 1)} feeder(s): 2 workers >= 1.7x 1 worker, "
                    "receive side apart", f"{r['x_1_worker_cpu']:.2f}x", r["x_1_worker_cpu"] >= 1.7)
    by_impl = defaultdict(dict)
    for r in kinds["scale"]:
        by_impl[r["impl"]][r["live_ceps"]] = r
    d = by_impl.get(DEFAULT, {})
    if d:
        big, small = max(d), min(d)
        if big >= 1000000:
            row(f"scale ({DEFAULT}): bytes per CEP at {big:,} live <= 512",
                f"{d[big]['bytes_per_cep']:.0f} B", d[big]["bytes_per_cep"] <= 512)
        if big > small:
            x = d[big]["conn_per_s"] / d[small]["conn_per_s"]
            row(f"scale ({DEFAULT}): connect rate at {big:,} live >= 0.8x at {small:,}",
                f"{d[big]['conn_per_s']:,.0f} vs {d[small]['conn_per_s']:,.0f}/s ({x:.2f}x)",
                x >= 0.8)
        p = by_impl.get(DEFAULT + "-presized", {})
        if big in p:
            x = d[big]["conn_per_s"] / p[big]["conn_per_s"]
            row(f"scale: connect rate at {big:,} live, default within 10% of presized",
                f"{d[big]['conn_per_s']:,.0f} vs {p[big]['conn_per_s']:,.0f}/s ({x:.2f}x)",
                x >= 0.9)
    return "\n".join(t) + "\n" if len(t) > 2 else ""


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    if sys.argv[1] == "--tables-only":
        with open(sys.argv[2], "w") as f:
            f.write(md_tables(load(sys.argv[3:])))
        print(sys.argv[2])
        return
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    rows = load(sys.argv[2:])
    kinds = defaultdict(list)
    for r in rows:
        kinds[r.get("bench")].append(r)
    if kinds["table"]:
        plot_table(outdir, kinds["table"])
    if kinds["connect"]:
        plot_workers(outdir, kinds["connect"], "connect",
                     [("conn_per_s", "established/s"), ("rel_per_s", "released/s")],
                     'thousand connections/s')
    if kinds["dispatch"]:
        rows_f = [dict(r, impl=f"{r['impl']}-{r.get('feeders', 1)}feeder")
                  for r in kinds["dispatch"]]
        plot_workers(outdir, rows_f, "dispatch",
                     [("mads_per_s", "MADs/s")], 'thousand MADs/s')
    if kinds["scale"]:
        plot_scale(outdir, kinds["scale"])
    with open(os.path.join(outdir, "tables.md"), "w") as f:
        f.write(md_tables(rows))
    print(os.path.join(outdir, "tables.md"))


if __name__ == "__main__":
    main()
