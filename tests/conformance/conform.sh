#!/bin/sh
# SPDX-License-Identifier: MIT
# Guest script of the conformance suite (both guests; see conform-test.sh).
# a: the scripted peer, no ib_cm. b: the application under test, first on
# libcep (ib_cm not loaded: libcep owns the CM class on QP1), then, after
# modprobe ib_cm rdma_cm rdma_ucm, on the kernel CM. One boot, both runs.
# Args: PEER TARGET_LIBCEP TARGET_KERNEL. Logs and transcripts in /gb.
set -eu
. "$GB_LIB"
peer=$1
tlibcep=$2
tkernel=$3

# run_target NAME BINARY: start it, wait until it listens for the peer.
run_target() {
	rm -f "/tmp/$1.ready"
	timeout 600 "$2" rxe0 "$GB_IP" "$GB_PEER_IP" "/tmp/$1.ready" >"/gb/target-$1.log" 2>&1 &
	tpid=$!
	end=$(( $(date +%s) + 60 ))
	until [ -e "/tmp/$1.ready" ]; do
		kill -0 $tpid 2>/dev/null || { echo "target $1 exited early"; tail -n 20 "/gb/target-$1.log"; return 1; }
		[ "$(date +%s)" -lt "$end" ] || { echo "target $1 not ready"; return 1; }
		sleep 0.02
	done
	gb_signal "target-$1"
}

if [ "$GB_NAME" = b ]; then
	gb_rxe_up
	echo "rxe0 up (libcep CM, no ib_cm): gid[1] $(gb_gid 1)"
	rc=0
	run_target libcep "$tlibcep" || exit 1
	wait $tpid || { echo "libcep target exit $?"; rc=1; }
	tail -n 3 /gb/target-libcep.log
	gb_wait peer-libcep-done 600 || exit 1
	modprobe ib_cm && modprobe iw_cm && modprobe rdma_cm && modprobe rdma_ucm ||
		{ echo "cannot load the kernel CM"; exit 1; }
	echo "kernel CM loaded"
	run_target kernel "$tkernel" || exit 1
	wait $tpid || { echo "kernel target exit $?"; rc=1; }
	tail -n 3 /gb/target-kernel.log
	gb_wait peer-kernel-done 600 || rc=1
	exit $rc
fi
gb_rxe_up
echo "rxe0 up (peer, no ib_cm): gid[1] $(gb_gid 1)"
# A second address of the peer's port: rxe gives it a second RoCE GID, the
# source of the forged-address scenario.
alt_ip=10.77.0.11
ip addr add "$alt_ip/24" dev eth0
rc=0
for cm in libcep kernel; do
	gb_wait "target-$cm" 300 || exit 1
	timeout 500 "$peer" rxe0 "$GB_IP" "$GB_PEER_IP" "/gb/$cm.transcript" "$alt_ip" \
		>"/gb/peer-$cm.log" 2>&1 ||
		{ echo "peer against $cm: exit $?"; rc=1; }
	tail -n 2 "/gb/peer-$cm.log"
	gb_signal "peer-$cm-done"
done
exit $rc
