#!/bin/sh
# SPDX-License-Identifier: MIT
# Guest script of bench/rdmacm-cmtime.sh: Debian's cmtime, unmodified, on
# libcep's librdmacm.so.1 and on the kernel's rdma_cm, alternately for each
# count (libcep with no kernel CM loaded; then ib_cm, iw_cm, rdma_cm,
# rdma_ucm loaded and unloaded again). a runs the client, b the server.
# Args: cep-rdmacm wrapper, counts. Prints "BENCH <cm> n=<n>: <line>" for
# every line of the client's output, and the CPU time of both processes.
set -u
. "$GB_LIB"
wrap=$1
shift
counts=$*
ulimit -n 1048576 2>/dev/null || ulimit -n 65536
gb_rxe_up || exit 1
kernel_cm() { # load | unload
	if [ "$1" = load ]; then
		modprobe -a ib_cm iw_cm rdma_cm rdma_ucm
	else
		modprobe -r rdma_ucm rdma_cm iw_cm ib_cm
	fi
}
# cputime PID: user+system seconds of a finished child (from /proc before wait)
rc=0
for n in $counts; do
	for cm in libcep kernel; do
		w=$wrap
		if [ $cm = kernel ]; then
			w=
			kernel_cm load || { echo "modprobe failed"; exit 1; }
		fi
		tag=$cm-$n
		if [ "$GB_NAME" = b ]; then
			CEP_RDMACM_READY=$GB_SHARE/b.ready-$tag timeout 3000 $w cmtime \
				>/tmp/server-$tag.out 2>&1 &
			pid=$!
			if [ $cm = kernel ]; then
				until rdma resource show cm_id 2>/dev/null | grep -q "state LISTEN.*:7471"; do
					kill -0 $pid 2>/dev/null || break
					sleep 0.02
				done
				gb_signal ready-$tag
			fi
			gb_wait done-$tag 3000 || rc=1
			# The server never exits by itself: its CPU time, then stop it.
			c=$(pgrep -x cmtime | head -n1)
			[ -n "$c" ] && echo "BENCH $cm n=$n: server cpu $(awk '{ printf "user %.2f s system %.2f s", $14 / 100, $15 / 100 }' /proc/$c/stat)"
			kill $pid 2>/dev/null
			wait $pid
			grep -i "error\|fail" /tmp/server-$tag.out | sed "s/^/BENCH $cm n=$n: server: /"
		else
			gb_wait ready-$tag 600 || { rc=1; continue; }
			/usr/bin/time -f "client cpu user %U s system %S s wall %e s maxrss %M KiB" \
				timeout 3000 $w cmtime -s "$GB_PEER_IP" -c "$n" >/tmp/client-$tag.out 2>&1 ||
				{ echo "BENCH $cm n=$n: cmtime exit $?"; rc=1; }
			sed "s/^/BENCH $cm n=$n: /" /tmp/client-$tag.out
			gb_signal done-$tag
		fi
		if [ $cm = kernel ]; then
			# both guests unload only once both processes are gone
			gb_signal unloading-$tag
			gb_wait unloading-$tag 600
			kernel_cm unload || { echo "rmmod failed"; rc=1; }
		fi
	done
done
exit $rc
