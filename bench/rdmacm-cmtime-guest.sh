#!/bin/sh
# SPDX-License-Identifier: MIT
# Guest script of bench/rdmacm-cmtime.sh: Debian's cmtime, unmodified, on
# libcep's librdmacm.so.1 and on the kernel's rdma_cm, alternately (for
# each round and count, each stack in turn: "libcep", the CM in cmtime's
# process; "cepd", the same library attached to one cepd per guest, the
# node's CM service; "kernel", with ib_cm, iw_cm, rdma_cm, rdma_ucm loaded
# and unloaded again). a runs the client, b the server; a first times the
# verbs calls of a connection alone (rdmacm-verbs-cost). Args: cep-rdmacm
# wrapper, rdmacm-verbs-cost, cepd (or -), rounds, stacks ("libcep cepd
# kernel"), counts (COUNT, COUNT:ROUNDS: that count in the first ROUNDS
# rounds only, COUNT:ROUNDS:LIMIT: and each cmtime stopped after LIMIT s,
# default 3000). Prints
# "BENCH <cm> n=<n> r=<round>: <line>" for every line of the client's
# output, and for each guest its CPU time by kind over the run (ticks of
# /proc/stat: where the time went) and the cmtime process's CPU time,
# per thread (name, user and system ticks, voluntary and involuntary
# context switches: the wake-ups), and, when perf works in the guest
# (software events and the raw_syscalls tracepoint), each process's
# system calls and context switches.
set -u
. "$GB_LIB"
wrap=$1
cost=$2
cepd=$3
rounds=$4
stacks=$5
shift 5
counts=$*
ulimit -n 1048576 2>/dev/null || ulimit -n 65536
gb_rxe_up || exit 1
mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null
perf=
perf stat -e raw_syscalls:sys_enter -o /dev/null true 2>/dev/null &&
	perf="perf stat -x , -e task-clock,context-switches,raw_syscalls:sys_enter"
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
[ "$GB_NAME" = a ] && "$cost" rxe0 "$GB_PEER_IP" 200
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
r=1
while [ $r -le "$rounds" ]; do
for spec in $counts; do
	# COUNT[:ROUNDS[:LIMIT]]: LIMIT seconds for each cmtime (default 3000)
	n=${spec%%:*}
	nr=$(echo "$spec" | cut -s -d: -f2)
	lim=$(echo "$spec" | cut -s -d: -f3)
	lim=${lim:-3000}
	[ -z "$nr" ] || [ $r -le "$nr" ] || continue
	for cm in $stacks; do
		w=$wrap
		tag=$cm-$n-$r
		pre="BENCH $cm n=$n r=$r:"
		svc=
		export CEP_SERVICE=none
		if [ $cm = kernel ]; then
			w=
			kernel_cm load || { echo "modprobe failed"; exit 1; }
		elif [ $cm = cepd ]; then
			# The node's CM service: cmtime's library attaches to it.
			export CEP_SERVICE=/tmp/cepd-$tag.sock
			"$cepd" --socket "$CEP_SERVICE" --port rxe0:1 >/tmp/cepd-$tag.out 2>&1 &
			svc=$!
			i=0
			while [ ! -S "$CEP_SERVICE" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
			[ -S "$CEP_SERVICE" ] || { echo "$pre cepd did not start"; cat /tmp/cepd-$tag.out; rc=1; }
		fi
		if [ "$GB_NAME" = b ]; then
			c0=$(cpu)
			CEP_RDMACM_READY=$GB_SHARE/b.ready-$tag timeout $((lim + 60)) $w cmtime \
				>/tmp/server-$tag.out 2>&1 &
			pid=$!
			sp=
			if [ -n "$perf" ]; then
				sleep 0.5
				c=$(pgrep -x cmtime | head -n1)
				[ -n "$c" ] && { $perf -o /tmp/perf-server-$tag.txt -p "$c" & sp=$!; }
			fi
			if [ $cm = kernel ]; then
				gb_wait_cm_listen 7471 $pid 600 || echo "no kernel listener"
				gb_signal ready-$tag
			fi
			gb_wait done-$tag $((lim + 60)) || rc=1
			echo "$pre server guest cpu $(cpu_delta "$c0" "$(cpu)") (ticks)"
			# The server never exits by itself: its CPU time, then stop it.
			c=$(pgrep -x cmtime | head -n1)
			[ -n "$c" ] && echo "$pre server cpu $(awk '{ printf "user %.2f s system %.2f s", $14 / 100, $15 / 100 }' /proc/$c/stat)"
			[ -n "$c" ] && threads "$c" "$pre server"
			if [ -n "$sp" ]; then
				kill -INT $sp 2>/dev/null
				wait $sp
				sed -n "s/^\([0-9.]*\),[^,]*,\([^,]*\),.*/$pre server perf \2 \1/p" /tmp/perf-server-$tag.txt
			fi
			kill $pid 2>/dev/null
			wait $pid
			grep -i "error\|fail" /tmp/server-$tag.out | sed "s/^/$pre server: /"
		else
			gb_wait ready-$tag 600 || { rc=1; continue; }
			c0=$(cpu)
			CEP_RDMACM_STATS=1 /usr/bin/time -f "client cpu user %U s system %S s wall %e s maxrss %M KiB wakeups %w preempted %c" \
				timeout $lim $w ${perf:+$perf -o /tmp/perf-client-$tag.txt --} cmtime -s "$GB_PEER_IP" -c "$n" >/tmp/client-$tag.out 2>&1 ||
				{ echo "$pre cmtime exit $?"; rc=1; }
			[ -n "$perf" ] && sed -n "s/^\([0-9.]*\),[^,]*,\([^,]*\),.*/client perf \2 \1/p" /tmp/perf-client-$tag.txt >>/tmp/client-$tag.out
			echo "$pre client guest cpu $(cpu_delta "$c0" "$(cpu)") (ticks)"
			sed "s/^/$pre /" /tmp/client-$tag.out
			gb_signal done-$tag
		fi
		if [ -n "$svc" ]; then
			echo "$pre $GB_NAME cepd cpu $(awk '{ printf "user %.2f s system %.2f s", $14 / 100, $15 / 100 }' /proc/$svc/stat)"
			threads "$svc" "$pre $GB_NAME cepd"
			gb_signal cepd-stop-$tag
			gb_wait cepd-stop-$tag 600
			kill $svc 2>/dev/null
			wait $svc
		fi
		if [ $cm = kernel ]; then
			# both guests unload only once both processes are gone
			gb_signal unloading-$tag
			gb_wait unloading-$tag 600
			kernel_cm unload || { echo "rmmod failed"; rc=1; }
		fi
	done
done
r=$((r + 1))
done
exit $rc
