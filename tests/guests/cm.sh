#!/bin/sh
# SPDX-License-Identifier: MIT
# Guest script, libcep <-> libcep (tests 1 and 4 of docs/real-rdma.md): both
# guests run libcep's CM over umad (no ib_cm). b listens; a establishes and
# releases N connections with real RC QPs (RC send/receive on a sample),
# then one the server disconnects, one the server rejects (reason 28) and a
# REQ to a service nobody listens on (REJ 8). Args: cm-guest binary, N.
set -eu
. "$GB_LIB"
bin=$1
n=${2:-1000}
gb_rxe_up
echo "rxe0 up: gid[1] $(gb_gid 1)"
if [ "$GB_NAME" = b ]; then
	# cm-guest creates the ready flag itself once it listens.
	rc=0
	timeout 400 "$bin" server rxe0 "$GB_IP" "$GB_PEER_IP" "$n" "$GB_SHARE/b.server-ready" || rc=$?
	exit $rc
fi
gb_wait server-ready 300
rc=0
timeout 360 "$bin" client rxe0 "$GB_IP" "$GB_PEER_IP" "$n" || rc=$?
exit $rc
