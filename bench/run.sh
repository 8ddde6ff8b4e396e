#!/bin/sh
# SPDX-License-Identifier: MIT
# The full benchmark run behind docs/benchmarks.md, one command: a release
# build, every cep-bench subcommand with its default sizes (medians of 5),
# JSON lines, the resize comparison, liburcu's lazy-resize diagnostic, the
# machine's memory latency, perf profiles (if perf works), then the plots
# and markdown tables. About 30 minutes on an idle 2-CPU machine.
# usage: bench/run.sh [OUTDIR]   (default bench-results; BUILD=dir to reuse a build)
set -eu
cd "$(dirname "$0")/.."
out=${1:-bench-results}
build=${BUILD:-build-bench-rel}
[ -f "$build/build.ninja" ] || meson setup -Dbuildtype=release "$build" >/dev/null
ninja -C "$build" bench/cep-bench bench/cep-lfht-lazy >/dev/null
bench="$build/bench/cep-bench"
mkdir -p "$out/profiles"
{
	echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
	echo "kernel: $(uname -sr)"
	lscpu | grep -E '^(Model name|CPU\(s\)|Thread|Core|Socket|L[123])' || true
	grep MemTotal /proc/meminfo
	echo "transparent huge pages: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null)"
	echo "compiler: $(cc --version | head -1)"
	echo "liburcu: $(pkg-config --modversion liburcu-cds)"
	echo "ck: $(pkg-config --modversion ck 2>/dev/null || echo unknown)"
	echo "uptime before: $(uptime)"
} > "$out/machine.txt"

echo "== cep-bench memlat" >&2
"$bench" memlat --json > "$out/memlat.jsonl"
for sub in table connect dispatch scale; do
	echo "== cep-bench $sub --json" >&2
	"$bench" "$sub" --json > "$out/$sub.jsonl"
done
# Default sizing: 1,000,000 entries into tables that start at 1024 buckets
# and must grow, against the same tables created at full size. Raw
# rculfhash keeps liburcu's lazy AUTO_RESIZE|ACCOUNTING, libcep's indexes
# size themselves.
echo "== cep-bench table, 1M entries, 1024 initial buckets vs presized" >&2
for b in 1024 1048576; do
	"$bench" table --json --impl libcep-ck,libcep-rculfhash,rculfhash,ck_rhs,mutex \
		--mix 100/0/0 --threads 1 --size 1000000 --initial-buckets $b --reps 3
done > "$out/resize.jsonl"
# Why liburcu's lazy resize left the index small (a diagnostic, one table).
echo "== cep-lfht-lazy" >&2
{
	"$build/bench/cep-lfht-lazy" --entries 1000000
	echo
	"$build/bench/cep-lfht-lazy" --entries 1000000 --stall 20
} > "$out/lfht-lazy.txt"

# Where the time goes: cpu-clock profiles, top symbols (skipped without perf).
profile() { # name, cep-bench arguments...
	name=$1
	shift
	if perf record -F 999 -o "$out/profiles/$name.data" "$bench" "$@" --quiet \
		> "$out/profiles/$name.out" 2>/dev/null; then
		perf report -i "$out/profiles/$name.data" --stdio --no-children --sort symbol \
			2>/dev/null | grep -v '^#' | grep -v '^$' | head -30 > "$out/profiles/$name.txt"
		perf report -i "$out/profiles/$name.data" --stdio --sort pid 2>/dev/null \
			| grep -v '^#' | grep -v '^$' | head -12 > "$out/profiles/$name-threads.txt"
	fi
	rm -f "$out/profiles/$name.data"
}
if perf record -o /dev/null true >/dev/null 2>&1; then
	echo "== perf profiles" >&2
	profile table-libcep-ck table --impl libcep-ck --threads 1 --mix 100/0/0 --reps 1 --duration 3
	profile table-mutex table --impl mutex --threads 1 --mix 100/0/0 --reps 1 --duration 3
	profile table-libcep-ck-2t table --impl libcep-ck --threads 2 --mix 90/5/5 --reps 1 --duration 3
	profile connect-libcep-ck connect --impl libcep-ck --threads 1 --reps 1
	profile connect-libcep-ck-2w connect --impl libcep-ck --threads 2 --reps 1
	profile dispatch-2w dispatch --threads 2 --reps 1 --duration 3
fi
echo "uptime after: $(uptime)" >> "$out/machine.txt"

python3 bench/plot.py "$out" "$out"/table.jsonl "$out"/connect.jsonl \
	"$out"/dispatch.jsonl "$out"/scale.jsonl
python3 bench/plot.py --tables-only "$out/resize.md" "$out"/resize.jsonl
python3 bench/plot.py --tables-only "$out/memlat.md" "$out"/memlat.jsonl
