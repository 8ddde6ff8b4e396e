#!/bin/sh
# SPDX-License-Identifier: MIT
# Guest script, libcep <-> kernel CM (tests 2, 3, 4 and the capture of 5):
# a runs libcep's CM over umad, b the kernel's ib_cm/rdma_cm with
# rdmacm-utils. Phase 1: rdma_server on b accepts a libcep client (a), which
# also sends a REQ to a port nobody listens on (REJ 8); a captures its MADs
# to /gb/kclient.pcap. Phase 2: rdma_client on b connects to a libcep
# listener on a. Arg: the cm-guest binary.
set -eu
. "$GB_LIB"
bin=$1
if [ "$GB_NAME" = b ]; then
	gb_rxe_up ib_cm rdma_cm rdma_ucm
	echo "rxe0 up (kernel CM): gid[1] $(gb_gid 1)"
	rc=0
	timeout 100 stdbuf -oL rdma_server >/tmp/rdma_server.out 2>&1 &
	pid=$!
	# Ready when its rdma_cm id listens on port 7471 (rdma tool, no sleeps).
	end=$(( $(date +%s) + 60 ))
	until rdma resource show cm_id 2>/dev/null | grep -q "state LISTEN.*:7471"; do
		kill -0 $pid 2>/dev/null || { echo "rdma_server exited early"; break; }
		[ "$(date +%s)" -lt "$end" ] || { echo "rdma_server not listening"; break; }
		sleep 0.02
	done
	rdma resource show cm_id || true
	gb_signal kserver-listen
	wait $pid || rc=1
	cat /tmp/rdma_server.out
	rdma statistic show link rxe0/1 || true
	grep -q "^rdma_server: end 0" /tmp/rdma_server.out || { echo "rdma_server failed"; rc=1; }
	gb_wait kclient-done 300 || rc=1
	# Phase 2: the libcep listener on a.
	gb_wait lserver-ready 300 || exit 1
	timeout 60 stdbuf -oL rdma_client -s "$GB_PEER_IP" >/tmp/rdma_client.out 2>&1 || { echo "rdma_client exit $?"; rc=1; }
	cat /tmp/rdma_client.out
	rdma statistic show link rxe0/1 || true
	grep -q "^rdma_client: end 0" /tmp/rdma_client.out || { echo "rdma_client failed"; rc=1; }
	gb_signal rdma-client-done
	exit $rc
fi
gb_rxe_up
echo "rxe0 up (libcep CM): gid[1] $(gb_gid 1)"
rc=0
gb_wait kserver-listen 300
timeout 100 "$bin" kclient rxe0 "$GB_IP" "$GB_PEER_IP" "$GB_SHARE/kclient.pcap" || rc=1
rdma statistic show link rxe0/1 || true
gb_signal kclient-done
timeout 100 "$bin" kserver rxe0 "$GB_IP" "$GB_PEER_IP" "$GB_SHARE/a.lserver-ready" || rc=1
gb_wait rdma-client-done 60 || rc=1
exit $rc
