#!/bin/sh
# SPDX-License-Identifier: MIT
# Guest script of bench/rdmacm-cmtime.sh: Debian's cmtime, unmodified, on
# each stack in turn, and the floor (for each round and count, each stack
# in turn: "libcep", the CM in cmtime's process; "cepd", the same library
# attached to one cepd per guest, the node's CM service; "kernel", with
# ib_cm, iw_cm, rdma_cm, rdma_ucm loaded and unloaded again; "floor",
# bench/cmtime-floor: the same QPs, verbs calls and 256-byte messages over
# UDP, no CM). a runs the client, b the server; a first times the verbs
# calls of a connection alone (rdmacm-verbs-cost, when built).
# Args: cep-rdmacm wrapper, rdmacm-verbs-cost (or -), cepd (or -),
# cmtime-floor (or -), rounds, stacks ("libcep cepd kernel floor"), the
# counts that get a counting round ("" for none), counts (COUNT,
# COUNT:ROUNDS: that count in the first ROUNDS rounds only,
# COUNT:ROUNDS:LIMIT: and each client stopped after LIMIT s, default 3000).
#
# Two kinds of round, every line tagged "BENCH <stack> n=<n> r=<round>:":
# - timed rounds (r=1, 2, ...): nothing traces or counts the processes.
#   The client's output (cmtime's per-step table), each guest's CPU time by
#   kind over the run (ticks of /proc/stat, USER_HZ 100), the client's and
#   server's (and each cepd's) CPU time, per thread too (name, user and
#   system ticks, voluntary and involuntary context switches). The client
#   guest's CPU counts from the client's start to its end, the server
#   guest's from the moment the server listens to the client's end.
# - one counting round per stack for each count named (r=count), before
#   the timed rounds (it warms each stack's files up too): perf stat of
#   the client, the server and each cepd with task-clock, context-switches
#   and the raw_syscalls:sys_enter tracepoint, which puts every system
#   call of the guest on the tracing path and slows most the stack that
#   makes most of them: its times are not used. No perf in the guest (or
#   no tracefs), no counting round.
# While the client runs, the server's guest runs nothing but the server
# (and perf, counting): it waits for the client's end in a TCP accept the
# client's guest connects to. (A poll starts processes, dear under TCG:
# gb_wait's date and sleep every 20 ms kept an idle guest 83% busy on a
# host under a load of 6, a sleep every 0.25 s 38%.)
set -u
. "$GB_LIB"
wrap=$1
cost=$2
cepd=$3
floor=$4
rounds=$5
stacks=$6
counting=$7
shift 7
counts=$*
ulimit -n 1048576 2>/dev/null || ulimit -n 65536
gb_rxe_up || exit 1
mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null
perf=
perf stat -e raw_syscalls:sys_enter -o /dev/null true 2>/dev/null &&
	perf="perf stat -x , -e task-clock,context-switches,raw_syscalls:sys_enter"
[ -n "$perf" ] || [ -z "$counting" ] ||
	echo "BENCH note: perf cannot count system calls in this guest: no counting round"
# threads PID PREFIX: one line per thread of PID.
threads() {
	for t in /proc/$1/task/*; do
		awk -v p="$2" -v f="$t/status" '{
			name = $2; sub(/^\(/, "", name); sub(/\)$/, "", name)
			v = nv = 0
			while ((getline l < f) > 0) {
				if (l ~ /^voluntary_ctxt_switches/) { split(l, x, ":"); v = x[2] + 0 }
				if (l ~ /^nonvoluntary_ctxt_switches/) { split(l, x, ":"); nv = x[2] + 0 }
			}
			printf "%s thread %s user %d system %d (ticks) wakeups %d preempted %d\n", p, name, $14, $15, v, nv
		}' "$t/stat" 2>/dev/null
	done
}
# the TCP port on which the server's guest waits for the client's end
donep=7999
donehex=$(printf '%04X' $donep)
# tcp_listening: a socket listens on that port (shell built-ins only)
tcp_listening() {
	local l
	while read -r l; do
		case $l in *":$donehex 00000000:0000 0A "*) return 0;; esac
	done </proc/net/tcp
	return 1
}
# peer_flag FLAG SECONDS: the peer's FLAG, polled every 0.25 s.
peer_flag() {
	i=$(($2 * 4))
	while [ ! -e "$GB_SHARE/$GB_PEER.$1" ]; do
		[ -e "$GB_SHARE/$GB_PEER.rc" ] && { echo "peer $GB_PEER exited waiting for $1"; return 1; }
		i=$((i - 1))
		[ $i -gt 0 ] || { echo "timed out waiting for $1"; return 1; }
		sleep 0.25
	done
}
# perf_lines FILE PREFIX: "PREFIX perf <event> <count>" for each counter.
perf_lines() {
	sed -n "s/^\([0-9.]*\),[^,]*,\([^,]*\),.*/$2 perf \2 \1/p" "$1"
}
[ "$GB_NAME" = a ] && [ -x "$cost" ] && "$cost" rxe0 "$GB_PEER_IP" 200
kernel_cm() { # load | unload
	if [ "$1" = load ]; then
		modprobe -a ib_cm iw_cm rdma_cm rdma_ucm
	else
		modprobe -r rdma_ucm rdma_cm iw_cm ib_cm
	fi
}
cpu() { awk '/^cpu / { print $2 + $3, $4, $7 + $8, $5 + $6 }' /proc/stat; }
cpu_delta() { # before after -> "user U system S irq I idle D"
	set -- $1 $2
	echo "user $(($5 - $1)) system $(($6 - $2)) irq+softirq $(($7 - $3)) idle $(($8 - $4))"
}
rc=0
# run CM N LIMIT ROUND COUNTING: one client-server run of stack CM.
run() {
	local cm=$1 n=$2 lim=$3 round=$4 w=$wrap prog=cmtime tag pre svc= svcperf= p= c c0 pid sp dw i
	tag=$cm-$n-$round
	pre="BENCH $cm n=$n r=$round:"
	[ "$5" = 1 ] && p=$perf
	export CEP_SERVICE=none
	case $cm in
	kernel)
		w=
		kernel_cm load || { echo "modprobe failed"; exit 1; };;
	floor)
		w=
		prog=cmtime-floor;;
	cepd)
		# The node's CM service: cmtime's library attaches to it.
		export CEP_SERVICE=/tmp/cepd-$tag.sock
		"$cepd" --socket "$CEP_SERVICE" --port rxe0:1 >/tmp/cepd-$tag.out 2>&1 &
		svc=$!
		i=0
		while [ ! -S "$CEP_SERVICE" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
		[ -S "$CEP_SERVICE" ] || { echo "$pre cepd did not start"; cat /tmp/cepd-$tag.out; rc=1; }
		[ -n "$p" ] && { $p -o /tmp/perf-cepd-$tag.txt -p $svc & svcperf=$!; };;
	esac
	if [ "$GB_NAME" = b ]; then
		if [ $cm = floor ]; then
			timeout $((lim + 60)) "$floor" -R /tmp/ready-$tag >/tmp/server-$tag.out 2>&1 &
		else
			CEP_RDMACM_STATS=1 CEP_RDMACM_READY=/tmp/ready-$tag \
				timeout $((lim + 60)) $w cmtime >/tmp/server-$tag.out 2>&1 &
		fi
		pid=$!
		# the server listens: the kernel's rdma_cm shows its id; libcep's
		# library and the floor create the ready file
		if [ $cm = kernel ]; then
			gb_wait_cm_listen 7471 $pid 600 || echo "$pre no kernel listener"
		else
			i=0
			while [ ! -e /tmp/ready-$tag ] && kill -0 $pid 2>/dev/null && [ $i -lt 12000 ]; do
				sleep 0.05
				i=$((i + 1))
			done
			[ -e /tmp/ready-$tag ] || echo "$pre the server did not start listening"
		fi
		c=$(pgrep -x $prog | head -n1)
		sp=
		if [ -n "$p" ] && [ -n "$c" ]; then
			$p -o /tmp/perf-server-$tag.txt -p "$c" &
			sp=$!
			sleep 1 # perf attaches before the first REQ
		fi
		# The client's guest says it is done by connecting here: the wait
		# costs this guest nothing while the client runs.
		timeout $((lim + 60)) /bin/busybox nc -l -p $donep </dev/null >/dev/null 2>&1 &
		dw=$!
		i=0
		until tcp_listening || [ $i -ge 200 ]; do sleep 0.05; i=$((i + 1)); done
		# the server guest's CPU from the moment its server listens (its
		# start-up is in the process's CPU, not in the guest's)
		c0=$(cpu)
		gb_signal ready-$tag
		wait $dw || { echo "$pre the client's end was not seen"; rc=1; }
		echo "$pre server guest cpu $(cpu_delta "$c0" "$(cpu)") (ticks)"
		# The server never exits by itself: its CPU time, then stop it.
		[ -n "$c" ] && echo "$pre server cpu $(awk '{ printf "user %.2f s system %.2f s", $14 / 100, $15 / 100 }' /proc/$c/stat)"
		[ -n "$c" ] && threads "$c" "$pre server"
		# libcep's counters (CEP_RDMACM_STATS: SIGUSR1 prints them; the
		# server never reaches exit), after the CPU figures above
		if [ -n "$c" ] && [ -n "$w" ]; then
			kill -USR1 "$c" 2>/dev/null
			i=0
			until grep -q "^librdmacm (libcep)" /tmp/server-$tag.out || [ $i -ge 40 ]; do
				sleep 0.05
				i=$((i + 1))
			done
		fi
		if [ -n "$sp" ]; then
			kill -INT $sp 2>/dev/null
			wait $sp
			perf_lines /tmp/perf-server-$tag.txt "$pre server"
		fi
		kill $pid 2>/dev/null
		wait $pid
		grep "^librdmacm (libcep) .*MADs sent" /tmp/server-$tag.out | sed "s/^/$pre server: /"
		grep -v "^librdmacm (libcep) .*MADs sent" /tmp/server-$tag.out | grep -i "error\|fail" |
			sed "s/^/$pre server: /"
	else
		peer_flag ready-$tag 600 || { rc=1; return; }
		c0=$(cpu)
		[ $cm = floor ] && prog=$floor
		# perf (counting round) runs the program itself, inside the wrapper
		CEP_RDMACM_STATS=1 /usr/bin/time -f "client cpu user %U s system %S s wall %e s maxrss %M KiB wakeups %w preempted %c" \
			timeout $lim $w ${p:+$p -o /tmp/perf-client-$tag.txt --} $prog -s "$GB_PEER_IP" -c "$n" \
			>/tmp/client-$tag.out 2>&1 ||
			{ echo "$pre client exit $?"; rc=1; }
		[ -n "$p" ] && perf_lines /tmp/perf-client-$tag.txt client >>/tmp/client-$tag.out
		echo "$pre client guest cpu $(cpu_delta "$c0" "$(cpu)") (ticks)"
		sed "s/^/$pre /" /tmp/client-$tag.out
		/bin/busybox nc -w 30 "$GB_PEER_IP" $donep </dev/null >/dev/null 2>&1 ||
			echo "$pre the server's guest was not waiting"
	fi
	if [ -n "$svc" ]; then
		echo "$pre $GB_NAME cepd cpu $(awk '{ printf "user %.2f s system %.2f s", $14 / 100, $15 / 100 }' /proc/$svc/stat)"
		threads "$svc" "$pre $GB_NAME cepd"
		# its CM's MADs by kind (the MRAs of a run: issue 27)
		"$cepd" --stats --socket "$CEP_SERVICE" 2>&1 | grep '^mads port ' |
			sed "s/^/$pre $GB_NAME cepd /"
		gb_signal cepd-stop-$tag
		peer_flag cepd-stop-$tag 600
		if [ -n "$svcperf" ]; then
			kill -INT $svcperf 2>/dev/null
			wait $svcperf
			perf_lines /tmp/perf-cepd-$tag.txt "$pre $GB_NAME cepd"
		fi
		kill $svc 2>/dev/null
		wait $svc
	fi
	if [ $cm = kernel ]; then
		# both guests unload only once both processes are gone
		gb_signal unloading-$tag
		peer_flag unloading-$tag 600
		kernel_cm unload || { echo "rmmod failed"; rc=1; }
	fi
}
# spec COUNT[:ROUNDS[:LIMIT]] -> n, nr (rounds of that count, empty: all), lim
spec() {
	n=${1%%:*}
	nr=$(echo "$1" | cut -s -d: -f2)
	lim=$(echo "$1" | cut -s -d: -f3)
	lim=${lim:-3000}
}
if [ -n "$perf" ]; then
	for s in $counts; do
		spec "$s"
		case " $counting " in *" $n "*) ;; *) continue;; esac
		for cm in $stacks; do run $cm $n $lim count 1; done
	done
fi
r=1
while [ $r -le "$rounds" ]; do
	for s in $counts; do
		spec "$s"
		[ -z "$nr" ] || [ $r -le "$nr" ] || continue
		for cm in $stacks; do run $cm $n $lim $r 0; done
	done
	r=$((r + 1))
done
exit $rc
