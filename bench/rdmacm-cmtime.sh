#!/bin/sh
# SPDX-License-Identifier: MIT
# cmtime over libcep's librdmacm.so.1 against cmtime over the kernel's
# rdma_cm, same two Soft-RoCE guests, same run (docs/benchmarks.md, section
# "librdmacm on libcep: cmtime"). For each round and count the guests run
# libcep, then the kernel CM, alternately.
#   bench/rdmacm-cmtime.sh BUILD_DIR [COUNT[:ROUNDS]...]   (default: 1000 10000)
# A COUNT:ROUNDS runs that count in the first ROUNDS rounds only (e.g.
# "1000 10000:1": three rounds at 1,000 and one at 10,000, one boot;
# COUNT:ROUNDS:LIMIT also stops each cmtime of that count after LIMIT s,
# default 3000).
# Prints cmtime's per-step tables of both, each guest's CPU time by kind,
# and a summary: median total ms per step over the rounds and the ratio
# kernel / libcep. Exit 77 when the guests cannot run (reason on stderr).
# Stacks: "libcep" (the CM in cmtime's process), "cepd" (the same library
# attached to the node's CM service, one cepd per guest, when the build has
# cepd) and "kernel"; BENCH_STACKS chooses (default: all three).
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
cepd=$(cd "$build" && pwd)/src/service/cepd
if [ -x "$cepd" ]; then
	stacks=${BENCH_STACKS:-libcep cepd kernel}
else
	cepd=-
	stacks=${BENCH_STACKS:-libcep kernel}
fi
[ -x "$wrap" ] && [ -x "$cost" ] ||
	{ echo "rdmacm-cmtime.sh: $wrap or $cost missing (build with rdma support)" >&2; exit 1; }
run=${BENCH_RUN:-$(mktemp -d /tmp/cep-rdmacm-cmtime.XXXXXX)}
mkdir -p "$run"
GUESTBED_MEM=${GUESTBED_MEM:-2048} GUESTBED_TIMEOUT=${GUESTBED_TIMEOUT:-10800} \
	"$here/../tests/guests/guestbed.sh" run -o "$run" \
	"$here/rdmacm-cmtime-guest.sh" "$here/rdmacm-cmtime-guest.sh" -- "$wrap" "$cost" "$cepd" "$rounds" "$stacks" $counts \
	>"$run/bed.out" 2>&1
rc=$?
grep -h "^BENCH" "$run/a.log" "$run/b.log" 2>/dev/null
sed -n '/^verbs cost/,/^ibv_destroy_cq\|^2 x (ibv_destroy/p' "$run/a.log"
# A run that failed (a cmtime stopped at its limit, a guest's error)
# still gets its tables: what completed, and the failure, are the result.
[ $rc = 0 ] || tail -40 "$run/bed.out" >&2
for spec in $counts; do
	n=${spec%%:*}
	nr=$rounds
	sr=$(echo "$spec" | cut -s -d: -f2)
	[ -z "$sr" ] || { [ "$sr" -lt "$rounds" ] && nr=$sr; }
	echo
	echo "n=$n: cmtime total ms per step, median of $nr rounds (min-max); ratio = kernel / stack"
	awk -v n=$n -v stacks="$stacks" '
	function median(s,   k, v, i, j, t) {
		k = split(s, v, " ")
		for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (v[j] + 0 < v[i] + 0) { t = v[i]; v[i] = v[j]; v[j] = t }
		lo[s] = v[1]; hi[s] = v[k]
		return k % 2 ? v[(k + 1) / 2] : (v[k / 2] + v[k / 2 + 1]) / 2
	}
	$1 == "BENCH" && $3 == ("n=" n) {
		cm = $2; r = $4; sub(/:$/, "", r); line = $0; sub("^BENCH [a-z]+ n=[0-9]+ r=[0-9]+: ", "", line)
		# busy CPU of both guests: "client|server guest cpu user U system S irq+softirq I idle D (ticks)"
		if (line ~ /^(client|server) guest cpu /) {
			split(line, g, " ")
			busy[cm, r] += g[5] + g[7] + g[9]
			next
		}
		if (line ~ /cpu|librdmacm|cepd/) next
		split(line, f, ":")
		step = f[1]; gsub(/ +$/, "", step)
		# total ms first; cmtime may print max and min run together
		# ("103505.50103105224.00"): three columns then, not four
		if (split(f[2], v, " ") >= 3 && v[1] ~ /^[0-9.]+$/ && step != "step") {
			t[cm, step] = t[cm, step] " " v[1]
			if (!(step in seen)) { seen[step] = 1; order[++k] = step }
		}
	}
	END {
		ns = split(stacks, st, " ")
		printf "%-14s", "step"
		for (j = 1; j <= ns; j++) printf " %24s%s", st[j], (st[j] == "kernel" ? "" : "   ratio")
		printf "\n"
		for (i = 1; i <= k; i++) {
			s = order[i]; a = median(t["kernel", s])
			printf "%-14s", s
			for (j = 1; j <= ns; j++) {
				b = median(t[st[j], s])
				printf " %9.1f (%6.0f-%6.0f)", b, lo[t[st[j], s]], hi[t[st[j], s]]
				if (st[j] != "kernel") printf " %7s", (b > 0 && a > 0 ? sprintf("%.2f", a / b) : "-")
			}
			printf "\n"
		}
		# USER_HZ 100: a tick is 10 ms
		printf "%-14s", "busy ms/conn"
		for (j = 1; j <= ns; j++) {
			l = ""
			for (r2 = 1; r2 <= 99; r2++) if ((st[j], "r=" r2) in busy) l = l " " busy[st[j], "r=" r2] * 10 / n
			b = (l == "" ? 0 : median(l))
			printf " %9.2f (%6.2f-%6.2f)", b, lo[l], hi[l]
			if (st[j] != "kernel") {
				kl = ""
				for (r2 = 1; r2 <= 99; r2++) if (("kernel", "r=" r2) in busy) kl = kl " " busy["kernel", "r=" r2] * 10 / n
				a = (kl == "" ? 0 : median(kl))
				printf " %7s", (a > 0 ? sprintf("%.2f", b / a) : "-")
			}
		}
		printf "   (both guests; ratio = stack / kernel)\n"
	}' "$run/a.log" "$run/b.log"
done
echo "run directory: $run"
exit $rc
