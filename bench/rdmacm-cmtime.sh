#!/bin/sh
# SPDX-License-Identifier: MIT
# cmtime over libcep's librdmacm.so.1 against cmtime over the kernel's
# rdma_cm, same two Soft-RoCE guests, same run (docs/benchmarks.md, section
# "librdmacm on libcep: cmtime"). For each count the guests run libcep,
# then the kernel CM, alternately.
#   bench/rdmacm-cmtime.sh BUILD_DIR [COUNT...]     (default: 1000 10000)
# Prints cmtime's per-step tables of both and a side-by-side summary; exit
# 77 when the guests cannot run (reason on stderr). Environment:
#   GUESTBED_MEM (default 2048 MiB: 10,000 RC QPs and 20,000 CQs per guest),
#   GUESTBED_TIMEOUT (default 3600 s), BENCH_RUN (run directory).
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=${1:?usage: bench/rdmacm-cmtime.sh BUILD_DIR [COUNT...]}
shift
counts=${*:-1000 10000}
wrap=$(cd "$build" && pwd)/tools/cep-rdmacm/cep-rdmacm
[ -x "$wrap" ] || { echo "rdmacm-cmtime.sh: $wrap missing (build with rdma support)" >&2; exit 1; }
run=${BENCH_RUN:-$(mktemp -d /tmp/cep-rdmacm-cmtime.XXXXXX)}
mkdir -p "$run"
GUESTBED_MEM=${GUESTBED_MEM:-2048} GUESTBED_TIMEOUT=${GUESTBED_TIMEOUT:-3600} \
	"$here/../tests/guests/guestbed.sh" run -o "$run" \
	"$here/rdmacm-cmtime-guest.sh" "$here/rdmacm-cmtime-guest.sh" -- "$wrap" $counts \
	>"$run/bed.out" 2>&1
rc=$?
grep -h "^BENCH" "$run/a.log" "$run/b.log" 2>/dev/null
[ $rc = 0 ] || { tail -40 "$run/bed.out" >&2; exit $rc; }
# One table per count: total ms of each step, libcep and kernel, and the ratio.
for n in $counts; do
	echo
	echo "n=$n: cmtime total ms per step (kernel / libcep = how many times faster libcep is)"
	awk -v n=$n '
	$1 == "BENCH" && $3 == "n=" n ":" {
		cm = $2; line = $0; sub("^BENCH [a-z]+ n=[0-9]+: ", "", line)
		split(line, f, ":")
		step = f[1]; gsub(/ +$/, "", step)
		if (split(f[2], v, " ") >= 4 && step != "step") {
			t[cm, step] = v[1]
			if (!(step in seen)) { seen[step] = 1; order[++k] = step }
		}
	}
	END {
		printf "%-14s %12s %12s %8s\n", "step", "kernel", "libcep", "ratio"
		for (i = 1; i <= k; i++) {
			s = order[i]; a = t["kernel", s]; b = t["libcep", s]
			printf "%-14s %12s %12s %8s\n", s, a, b, (a != "" && b > 0) ? sprintf("%.2f", a / b) : "-"
		}
	}' "$run/a.log"
done
echo "run directory: $run"
