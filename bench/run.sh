#!/bin/sh
# SPDX-License-Identifier: MIT
# The full benchmark run behind docs/benchmarks.md: a release build, every
# cep-bench subcommand with its default sizes (medians of 5), JSON lines,
# then the plots and markdown tables. Takes several minutes.
# usage: bench/run.sh [OUTDIR]   (default bench-results; BUILD=dir to reuse a build)
set -eu
cd "$(dirname "$0")/.."
out=${1:-bench-results}
build=${BUILD:-build-bench-rel}
[ -f "$build/build.ninja" ] || meson setup -Dbuildtype=release "$build" >/dev/null
ninja -C "$build" bench/cep-bench >/dev/null
mkdir -p "$out"
{
	echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "kernel: $(uname -sr)"
	lscpu | grep -E '^(Model name|CPU\(s\)|Thread|Core|Socket|L[123])' || true
	grep MemTotal /proc/meminfo
	echo "compiler: $(cc --version | head -1)"
	echo "liburcu: $(pkg-config --modversion liburcu-cds)"
	echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$out/machine.txt"
for sub in table connect dispatch scale; do
	echo "== cep-bench $sub --json" >&2
	"$build/bench/cep-bench" "$sub" --json > "$out/$sub.jsonl"
done
# rculfhash's lazy resize: 1,000,000 entries into tables that start at 1024
# buckets and must grow, against the same tables created at full size.
echo "== cep-bench table, 1M entries, 1024 initial buckets vs presized" >&2
for b in 1024 1048576; do
	"$build/bench/cep-bench" table --json --impl libcep,rculfhash,mutex --mix 100/0/0 \
		--threads 1 --size 1000000 --initial-buckets $b --reps 3
done > "$out/resize.jsonl"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/machine.txt"
python3 bench/plot.py "$out" "$out"/table.jsonl "$out"/connect.jsonl \
	"$out"/dispatch.jsonl "$out"/scale.jsonl
python3 bench/plot.py --tables-only "$out/resize.md" "$out"/resize.jsonl
