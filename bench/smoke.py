#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Smoke test for cep-bench: run one subcommand briefly with --json --quick
and check the output is well-formed (every line one JSON object with the
fields its bench promises, sane values, the expected rows). Not the speed."""
import json
import math
import subprocess
import sys

# Fields every row of a bench must carry, with their types.
NUM = (int, float)
COMMON = {"bench": str, "reps": int}
ROWS = {
    "table": {"impl": str, "threads": int, "mix": str, "lookup": str, "size": int,
              "ops_per_s": NUM, "ops_per_s_min": NUM, "ops_per_s_max": NUM,
              "p50_us": NUM, "p99_us": NUM, "p999_us": NUM, "hit_ratio": NUM,
              "duration_s": NUM},
    "table-ratio": {"impl": str, "threads": int, "mix": str, "lookup": str,
                    "x_rculfhash": NUM, "x_ck_rhs": NUM, "x_ck_ht": NUM, "x_rwlock": NUM,
                    "x_mutex": NUM},
    "connect": {"impl": str, "workers": int, "conns": int, "conn_per_s": NUM,
                "rel_per_s": NUM, "mads_per_s": NUM, "p50_us": NUM, "p99_us": NUM,
                "p999_us": NUM},
    "dispatch": {"impl": str, "workers": int, "feeders": int, "conns": int, "mads_per_s": NUM,
                 "mads_per_s_min": NUM, "mads_per_s_max": NUM, "handled_ratio": NUM,
                 "feeder_cpu": NUM, "worker_cpu": NUM},
    "dispatch-queue": {"impl": str, "producers": int, "mads_per_s": NUM, "x_ring": NUM},
    "memlat": {"mib": int, "ns_4k": NUM, "ns_huge": NUM},
    "scale": {"impl": str, "live_ceps": int, "bytes_per_cep": NUM, "heap_mib": NUM,
              "lookup_p50_us": NUM, "lookup_p99_us": NUM, "conn_per_s": NUM,
              "rel_per_s": NUM},
}
# Which row kinds each subcommand must print, and the keys that identify a row.
EXPECT = {
    "table": ("table", ("impl", "threads", "mix", "lookup")),
    "connect": ("connect", ("impl", "workers")),
    "dispatch": ("dispatch", ("impl", "feeders", "workers")),
    "scale": ("scale", ("impl", "live_ceps")),
    "memlat": ("memlat", ("mib",)),
}


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def check_row(row, lineno):
    kind = row.get("bench")
    if kind not in ROWS:
        fail(f"line {lineno}: unknown bench {kind!r}")
    for key, typ in {**COMMON, **ROWS[kind]}.items():
        if key not in row:
            fail(f"line {lineno}: {kind} row lacks {key!r}: {row}")
        val = row[key]
        if isinstance(val, bool) or not isinstance(val, typ):
            fail(f"line {lineno}: {key!r} has type {type(val).__name__}: {row}")
        if isinstance(val, float) and not math.isfinite(val):
            fail(f"line {lineno}: {key!r} not finite: {row}")
        if typ is NUM and val < 0:
            fail(f"line {lineno}: {key!r} negative: {row}")
    if row["reps"] < 1:
        fail(f"line {lineno}: reps < 1")
    for rate in ("ops_per_s", "conn_per_s", "rel_per_s", "mads_per_s"):
        if rate in row and kind != "scale" and not row[rate] > 0:
            fail(f"line {lineno}: {rate} is not positive: {row}")
    if "p50_us" in row and not row["p50_us"] <= row["p99_us"] <= row["p999_us"]:
        fail(f"line {lineno}: percentiles out of order: {row}")
    if kind == "table":
        if not row["ops_per_s_min"] <= row["ops_per_s"] <= row["ops_per_s_max"]:
            fail(f"line {lineno}: median outside [min, max]: {row}")
        if not 0 <= row["hit_ratio"] <= 1:
            fail(f"line {lineno}: hit_ratio out of range: {row}")
        # Hits are hits and misses are misses, but for races with deletes
        # and the odd random ID that exists.
        if row["lookup"] == "hit" and row["mix"].split("/")[0] != "0" and row["hit_ratio"] < 0.9:
            fail(f"line {lineno}: hit lookups mostly missed: {row}")
        if row["lookup"] == "miss" and row["hit_ratio"] > 0.01:
            fail(f"line {lineno}: miss lookups hit: {row}")
    if kind == "scale" and not row["bytes_per_cep"] > 0:
        fail(f"line {lineno}: bytes_per_cep not positive: {row}")


def main():
    if len(sys.argv) < 3:
        fail("usage: smoke.py CEP_BENCH SUBCOMMAND [extra args]")
    exe, sub = sys.argv[1], sys.argv[2]
    cmd = [exe, sub, "--json", "--quick", "--quiet"] + sys.argv[3:]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=290)
    if proc.returncode != 0:
        fail(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()}")
    lines = [l for l in proc.stdout.splitlines() if l.strip()]
    if not lines:
        fail("no output")
    want_kind, ident = EXPECT[sub]
    seen = set()
    for n, line in enumerate(lines, 1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            fail(f"line {n} is not JSON ({e}): {line!r}")
        if not isinstance(row, dict):
            fail(f"line {n} is not an object: {line!r}")
        check_row(row, n)
        if row["bench"] == want_kind:
            key = tuple(row[k] for k in ident)
            if key in seen:
                fail(f"line {n}: duplicate row {key}")
            seen.add(key)
    if not seen:
        fail(f"no {want_kind} rows")
    if sub == "table":
        impls = {k[0] for k in seen}
        if impls != {"libcep-ck", "libcep-rculfhash", "rculfhash", "ck_rhs", "ck_ht", "rwlock",
                     "mutex"}:
            fail(f"table impls {sorted(impls)}")
        threads = {k[1] for k in seen}
        if threads != {1, 2}:
            fail(f"table threads {sorted(threads)}")
        mixes = {(k[2], k[3]) for k in seen}
        if len(mixes) < 4 or len(seen) != len(impls) * len(threads) * len(mixes):
            fail(f"table rows incomplete: {sorted(seen)}")
        ratios = [json.loads(l) for l in lines if '"table-ratio"' in l]
        if len(ratios) != 2 * len(threads) * len(mixes):  # one per libcep index
            fail(f"{len(ratios)} ratio rows for {len(threads) * len(mixes)} cells")
    if sub == "connect" and {k[1] for k in seen} != {1, 2}:
        fail(f"{sub} workers {sorted(k[1] for k in seen)}")
    if sub == "dispatch":
        if {(k[1], k[2]) for k in seen} != {(1, 1), (1, 2), (2, 1), (2, 2)}:
            fail(f"dispatch feeders/workers {sorted(seen)}")
        queues = {(r["impl"], r["producers"]) for r in map(json.loads, lines)
                  if r["bench"] == "dispatch-queue"}
        if queues != {(q, p) for q in ("ring", "ck_ring", "wfcqueue") for p in (1, 2)}:
            fail(f"dispatch queue rows {sorted(queues)}")
    if sub in ("connect", "scale"):
        impls = {k[0] for k in seen}
        want = {"libcep-ck", "libcep-ck-presized"}
        if sub == "connect":
            want |= {"libcep-rculfhash", "libcep-rculfhash-presized", "libcep-ck-qsbr"}
        if impls != want:
            fail(f"{sub} impls {sorted(impls)}")
    if sub == "scale":
        if {k[1] for k in seen} != {1000, 10000} or len(seen) != 4:
            fail(f"scale rows {sorted(seen)}")
    if sub == "dispatch":
        for line in lines:
            row = json.loads(line)
            # every duplicate RTU reached the handler: none lost or unmatched
            if row["bench"] == "dispatch" and row["handled_ratio"] < 0.999:
                fail(f"dispatch MADs not handled: {row}")
    print(f"ok: {len(lines)} JSON lines, {len(seen)} {want_kind} rows")


if __name__ == "__main__":
    main()
