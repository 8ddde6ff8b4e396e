#!/bin/sh
# SPDX-License-Identifier: MIT
# cmtime over libcep's librdmacm.so.1 against cmtime over the kernel's
# rdma_cm, and the floor under both, same two Soft-RoCE guests, same run
# (docs/benchmarks.md, section "librdmacm on libcep: cmtime"). For each
# round and count the guests run each stack in turn.
#   bench/rdmacm-cmtime.sh BUILD_DIR [COUNT[:ROUNDS[:LIMIT]]...]   (default: 1000 10000)
# A COUNT:ROUNDS runs that count in the first ROUNDS rounds only (e.g.
# "1000 10000:1": three rounds at 1,000 and one at 10,000, one boot;
# COUNT:ROUNDS:LIMIT also stops each client of that count after LIMIT s,
# default 3000).
# Stacks: "libcep" (the CM in cmtime's process), "cepd" (the same library
# attached to the node's CM service, one cepd per guest, when the build has
# cepd), "kernel", and "floor" (bench/cmtime-floor: cmtime's QPs, verbs
# calls and 256-byte REQ/REP/RTU/DREQ/DREP over UDP, no CM; when built);
# BENCH_STACKS chooses (default: all four).
# Rounds: the timed rounds run with nothing tracing the processes; before
# them, each count named in BENCH_COUNTING (default: every count; "" for
# none) gets one counting round per stack (r=count in the logs), in which
# perf stat counts each process's context switches and system calls
# through the raw_syscalls tracepoint, which slows every system call.
# Prints cmtime's per-step tables of every run, each guest's CPU time by
# kind, and per count a summary (bench/rdmacm-cmtime-summary.awk): median
# total ms per step and the ratio kernel / stack; CPU per connection of
# both guests, each guest and each process, and the same above the floor,
# with ratios to the kernel's; context switches and system calls per
# connection of each process from the counting round. Exit 0 when every
# run completed, 1 when one failed, 77 when the guests cannot run (reason
# on stderr).
# Environment: BENCH_ROUNDS (default 3), BENCH_STACKS, BENCH_COUNTING,
# GUESTBED_MEM (default 2048 MiB: 10,000 RC QPs and 20,000 CQs per guest),
# GUESTBED_TIMEOUT (default 10800 s), BENCH_RUN (run directory).
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=${1:?usage: bench/rdmacm-cmtime.sh BUILD_DIR [COUNT...]}
shift
counts=${*:-1000 10000}
rounds=${BENCH_ROUNDS:-3}
b=$(cd "$build" && pwd)
wrap=$b/tools/cep-rdmacm/cep-rdmacm
cost=$b/tests/guests/rdmacm-verbs-cost
cepd=$b/src/service/cepd
floor=$b/bench/cmtime-floor
[ -x "$cost" ] || cost=-
all=libcep
if [ -x "$cepd" ]; then all="$all cepd"; else cepd=-; fi
all="$all kernel"
if [ -x "$floor" ]; then all="$all floor"; else floor=-; fi
stacks=${BENCH_STACKS:-$all}
[ -x "$wrap" ] ||
	{ echo "rdmacm-cmtime.sh: $wrap missing (build with rdma support)" >&2; exit 1; }
case " $stacks " in *" floor "*)
	[ "$floor" != - ] || { echo "rdmacm-cmtime.sh: $b/bench/cmtime-floor missing" >&2; exit 1; };;
esac
counting=
for spec in $counts; do counting="$counting ${spec%%:*}"; done
counting=${BENCH_COUNTING-$counting}
run=${BENCH_RUN:-$(mktemp -d /tmp/cep-rdmacm-cmtime.XXXXXX)}
mkdir -p "$run"
GUESTBED_MEM=${GUESTBED_MEM:-2048} GUESTBED_TIMEOUT=${GUESTBED_TIMEOUT:-10800} \
	"$here/../tests/guests/guestbed.sh" run -o "$run" \
	"$here/rdmacm-cmtime-guest.sh" "$here/rdmacm-cmtime-guest.sh" -- \
	"$wrap" "$cost" "$cepd" "$floor" "$rounds" "$stacks" "$counting" $counts \
	>"$run/bed.out" 2>&1
rc=$?
[ $rc = 77 ] && { grep "SKIP" "$run/bed.out" >&2; exit 77; }
grep -h "^BENCH" "$run/a.log" "$run/b.log" 2>/dev/null
sed -n '/^verbs cost/,/^ibv_destroy_cq\|^2 x (ibv_destroy/p' "$run/a.log"
# A run that failed (a client stopped at its limit, a guest's error)
# still gets its tables: what completed, and the failure, are the result.
[ $rc = 0 ] || tail -40 "$run/bed.out" >&2
for spec in $counts; do
	echo
	awk -v n="${spec%%:*}" -v stacks="$stacks" -f "$here/rdmacm-cmtime-summary.awk" \
		"$run/a.log" "$run/b.log"
done
echo "run directory: $run"
exit $rc
