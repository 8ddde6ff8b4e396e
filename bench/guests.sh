#!/bin/sh
# SPDX-License-Identifier: MIT
# cep-bench's guest mode (docs/benchmarks.md, "Soft-RoCE guests: libcep vs
# kernel CM"): boots the two Soft-RoCE guests of tests/guests/guestbed.sh and
# measures connection setup + teardown between them, libcep over umad
# (tests/guests/cm-guest, RC QPs created and registered up front) and the
# kernel CM through cmtime (rdmacm-utils), on the same guests in one run.
#   bench/guests.sh BUILD_DIR [COUNT...]      (default counts: 1000)
# Prints the BENCH lines of both guests and a summary; exit 77 when the
# guests cannot run (reason on stderr), like the tests. Environment:
#   BENCH_WINDOW=16      libcep connections in flight (cmtime runs all at once)
#   BENCH_UNIQUE_TID=1   diagnostic: libcep with unique TIDs forced in the
#                        transport wrapper (what the engine's TID fix gives)
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=${1:?usage: bench/guests.sh BUILD_DIR [COUNT...]}
shift
counts=${*:-1000}
bin=$(cd "$build" && pwd)/tests/guests/cm-guest
[ -x "$bin" ] || { echo "guests.sh: $bin missing (build with rdma support)" >&2; exit 1; }
run=${BENCH_RUN:-$(mktemp -d /tmp/cep-bench-guests.XXXXXX)}
mkdir -p "$run"
GUESTBED_TIMEOUT=${GUESTBED_TIMEOUT:-1800} "$here/../tests/guests/guestbed.sh" run -o "$run" \
	"$here/guests-guest.sh" "$here/guests-guest.sh" -- "$bin" "${BENCH_WINDOW:-16}" \
	"${BENCH_UNIQUE_TID:-0}" $counts >"$run/bed.out" 2>&1
rc=$?
grep -h "^BENCH" "$run/a.log" "$run/b.log" 2>/dev/null
[ $rc = 0 ] || { tail -40 "$run/bed.out" >&2; exit $rc; }
echo "summary (connections per second, setup + teardown):"
for n in $counts; do
	l=$(sed -n "s/^BENCH libcep n=$n: .*released in \([0-9.]*\) s.*/\1/p" "$run/a.log")
	# cmtime: total(us) of "cm connect"/"connect" and "disconnect" (all
	# connections in flight at once).
	k=$(awk -v n=$n '$0 ~ "^BENCH cmtime n="n": " {
		sub("^BENCH cmtime n="n": ", "")
		if ($1 == "connect" && $2 == ":") c = $3
		if ($1 == "disconnect" && $2 == ":") d = $3
	} END { if (c != "" && d != "") printf "%.2f %.2f %.2f", c / 1000, d / 1000, (c + d) / 1000 }' "$run/a.log")
	set -- $k
	awk -v n=$n -v l="$l" -v c="${1:-}" -v d="${2:-}" -v t="${3:-}" 'BEGIN {
		if (l == "" || t == "") { print "n=" n ": missing figures (libcep " l ", cmtime " t ")"; exit 1 }
		printf "n=%d  libcep %.2f s = %.0f/s   kernel CM (cmtime) connect %.2f s + disconnect %.2f s = %.2f s = %.0f/s   ratio %.2f\n",
			n, l, n / l, c, d, t, n / t, t / l }'
done
echo "run directory: $run"
