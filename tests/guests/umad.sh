#!/bin/sh
# SPDX-License-Identifier: MIT
# Guest script for the umad transport test (argument: the umad-guest binary).
# Phase 1: a sends CM MADs through libcep's umad transport, b echoes them
# (no ib_cm anywhere). Phase 2: b loads the kernel CM (and b's own open must
# now fail with EBUSY); a sends a REQ for an unknown service and expects
# REJ reason 8.
set -eu
. "$GB_LIB"
bin=$1
count=${2:-20}
gb_rxe_up
echo "rxe0 up: gid[1] $(gb_gid 1)"
if [ "$GB_NAME" = b ]; then
	rm -f /tmp/echo-ready
	"$bin" echo rxe0 "$GB_IP" "$GB_PEER_IP" $((count + 1)) /tmp/echo-ready &
	pid=$!
	end=$(( $(date +%s) + 60 ))
	until [ -e /tmp/echo-ready ]; do
		kill -0 $pid 2>/dev/null || break
		[ "$(date +%s)" -lt "$end" ] || { echo "echo server not ready"; kill $pid; exit 1; }
		sleep 0.02
	done
	gb_signal echo-ready
	# a says when its pings are over; an echo server still running then
	# missed MADs (and must not keep b up until its own deadline).
	rc=0
	gb_wait ping-done 300 || rc=1
	end=$(( $(date +%s) + 20 ))
	while kill -0 $pid 2>/dev/null && [ "$(date +%s)" -lt "$end" ]; do sleep 0.02; done
	kill $pid 2>/dev/null && { echo "echo server still running after ping"; rc=1; }
	wait $pid || rc=1
	echo "echo phase: rc $rc"
	modprobe ib_cm
	"$bin" busy rxe0 "$GB_IP" "$GB_PEER_IP" || rc=1
	gb_signal kcm-ready
	gb_wait reqrej-done 300 || rc=1
	exit $rc
fi
rc=0
gb_wait echo-ready 300
timeout 300 "$bin" ping rxe0 "$GB_IP" "$GB_PEER_IP" "$count" || rc=1
gb_signal ping-done
gb_wait kcm-ready 300
timeout 300 "$bin" reqrej rxe0 "$GB_IP" "$GB_PEER_IP" || rc=1
gb_signal reqrej-done
exit $rc
