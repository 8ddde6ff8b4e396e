#!/bin/sh
# SPDX-License-Identifier: MIT
# Guest script of bench/guests.sh: connection setup + teardown rate between
# the two guests, libcep over umad first (no kernel CM loaded), then the
# kernel CM through cmtime (rdmacm-utils) after loading ib_cm/rdma_cm.
# Args: cm-guest binary, libcep window, unique-TID diagnostic (0/1), counts. a connects, b listens.
set -eu
. "$GB_LIB"
bin=$1
window=$2
diag=$3   # 1: CM_GUEST_UNIQUE_TID diagnostic (see cm-guest.c)
shift 3
counts=$*
BENCH_ENV=env
[ "$diag" = 1 ] && BENCH_ENV="env CM_GUEST_UNIQUE_TID=1"
gb_rxe_up
for n in $counts; do
	if [ "$GB_NAME" = b ]; then
		CM_GUEST_BENCH=1 CM_GUEST_SAMPLES=0 $BENCH_ENV timeout 900 "$bin" server rxe0 "$GB_IP" "$GB_PEER_IP" "$n" \
			"$GB_SHARE/b.lready-$n" >"/tmp/lserver-$n.out" 2>&1 || { cat "/tmp/lserver-$n.out"; exit 1; }
		gb_wait ldone-$n 900
	else
		gb_wait lready-$n 300
		CM_GUEST_BENCH=1 CM_GUEST_SAMPLES=0 CM_GUEST_WINDOW=$window $BENCH_ENV timeout 900 "$bin" client \
			rxe0 "$GB_IP" "$GB_PEER_IP" "$n" >"/tmp/lclient-$n.out" 2>&1 || { cat "/tmp/lclient-$n.out"; exit 1; }
		grep "connections established and released" "/tmp/lclient-$n.out" |
			sed "s/^/BENCH libcep n=$n: /"
		grep "DIAGNOSTIC" "/tmp/lclient-$n.out" | sed "s/^/BENCH libcep n=$n: /" || true
		grep "umad send failed" "/tmp/lclient-$n.out" | sed "s/^/BENCH libcep n=$n: /" || true
		gb_signal ldone-$n
	fi
done
# The kernel CM now (libcep's processes are gone, so the CM class is free).
modprobe ib_cm && modprobe rdma_cm && modprobe rdma_ucm
for n in $counts; do
	if [ "$GB_NAME" = b ]; then
		timeout 900 cmtime -b "$GB_IP" -c "$n" >"/tmp/kserver-$n.out" 2>&1 &
		pid=$!
		end=$(( $(date +%s) + 60 ))
		until rdma resource show cm_id 2>/dev/null | grep -q "state LISTEN.*:7471"; do
			kill -0 $pid 2>/dev/null || break
			[ "$(date +%s)" -lt "$end" ] || break
			sleep 0.02
		done
		gb_signal kready-$n
		gb_wait kdone-$n 900 || true
		kill $pid 2>/dev/null || true
		wait $pid || true
		sed "s/^/BENCH cmtime-server n=$n: /" "/tmp/kserver-$n.out"
	else
		gb_wait kready-$n 300
		timeout 900 cmtime -s "$GB_PEER_IP" -c "$n" >"/tmp/kclient-$n.out" 2>&1 || echo "cmtime client exit $?"
		sed "s/^/BENCH cmtime n=$n: /" "/tmp/kclient-$n.out"
		gb_signal kdone-$n
	fi
done
