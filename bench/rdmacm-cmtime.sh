#!/bin/sh
# SPDX-License-Identifier: MIT
# cmtime over libcep's librdmacm.so.1 against cmtime over the kernel's
# rdma_cm, same two Soft-RoCE guests, same run (docs/benchmarks.md, section
# "librdmacm on libcep: cmtime"). For each round and count the guests run
# libcep, then the kernel CM, alternately.
#   bench/rdmacm-cmtime.sh BUILD_DIR [COUNT...]     (default: 1000 10000)
# Prints cmtime's per-step tables of both, each guest's CPU time by kind,
# and a summary: median total ms per step over the rounds and the ratio
# kernel / libcep. Exit 77 when the guests cannot run (reason on stderr).
# Environment: BENCH_ROUNDS (default 3), GUESTBED_MEM (default 2048 MiB:
# 10,000 RC QPs and 20,000 CQs per guest), GUESTBED_TIMEOUT (default
# 10800 s), BENCH_RUN (run directory).
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=${1:?usage: bench/rdmacm-cmtime.sh BUILD_DIR [COUNT...]}
shift
counts=${*:-1000 10000}
rounds=${BENCH_ROUNDS:-3}
wrap=$(cd "$build" && pwd)/tools/cep-rdmacm/cep-rdmacm
cost=$(cd "$build" && pwd)/tests/guests/rdmacm-verbs-cost
[ -x "$wrap" ] && [ -x "$cost" ] ||
	{ echo "rdmacm-cmtime.sh: $wrap or $cost missing (build with rdma support)" >&2; exit 1; }
run=${BENCH_RUN:-$(mktemp -d /tmp/cep-rdmacm-cmtime.XXXXXX)}
mkdir -p "$run"
GUESTBED_MEM=${GUESTBED_MEM:-2048} GUESTBED_TIMEOUT=${GUESTBED_TIMEOUT:-10800} \
	"$here/../tests/guests/guestbed.sh" run -o "$run" \
	"$here/rdmacm-cmtime-guest.sh" "$here/rdmacm-cmtime-guest.sh" -- "$wrap" "$cost" "$rounds" $counts \
	>"$run/bed.out" 2>&1
rc=$?
grep -h "^BENCH" "$run/a.log" "$run/b.log" 2>/dev/null
sed -n '/^verbs cost/,/^ibv_destroy_cq\|^2 x (ibv_destroy/p' "$run/a.log"
[ $rc = 0 ] || { tail -40 "$run/bed.out" >&2; exit $rc; }
for n in $counts; do
	echo
	echo "n=$n: cmtime total ms per step, median of $rounds rounds (min-max); ratio = kernel / libcep"
	awk -v n=$n '
	function median(s,   k, v, i, j, t) {
		k = split(s, v, " ")
		for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (v[j] + 0 < v[i] + 0) { t = v[i]; v[i] = v[j]; v[j] = t }
		lo[s] = v[1]; hi[s] = v[k]
		return k % 2 ? v[(k + 1) / 2] : (v[k / 2] + v[k / 2 + 1]) / 2
	}
	$1 == "BENCH" && $3 == ("n=" n) {
		cm = $2; line = $0; sub("^BENCH [a-z]+ n=[0-9]+ r=[0-9]+: ", "", line)
		if (line ~ /cpu|librdmacm/) next
		split(line, f, ":")
		step = f[1]; gsub(/ +$/, "", step)
		if (split(f[2], v, " ") >= 4 && step != "step") {
			t[cm, step] = t[cm, step] " " v[1]
			if (!(step in seen)) { seen[step] = 1; order[++k] = step }
		}
	}
	END {
		printf "%-14s %24s %24s %7s\n", "step", "kernel", "libcep", "ratio"
		for (i = 1; i <= k; i++) {
			s = order[i]; a = median(t["kernel", s]); b = median(t["libcep", s])
			printf "%-14s %9.1f (%6.0f-%6.0f) %9.1f (%6.0f-%6.0f) %7s\n", s,
				a, lo[t["kernel", s]], hi[t["kernel", s]], b, lo[t["libcep", s]], hi[t["libcep", s]],
				(b > 0 ? sprintf("%.2f", a / b) : "-")
		}
	}' "$run/a.log" "$run/b.log"
done
echo "run directory: $run"
