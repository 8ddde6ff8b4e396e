#!/bin/sh
# SPDX-License-Identifier: MIT
# Guest script for the bed's smoke test: rxe on both guests, then RC traffic
# with ibv_rc_pingpong (b serves, a connects) over the RoCE v2 GIDs (index 1).
set -eu
. "$GB_LIB"
iters=${1:-20}
gb_rxe_up
echo "rxe0 up: gid[1] $(gb_gid 1)"
out=/tmp/pingpong.out
if [ "$GB_NAME" = b ]; then
	timeout 120 ibv_rc_pingpong -d rxe0 -g 1 -n "$iters" >"$out" 2>&1 &
	pid=$!
	gb_wait_tcp_listen 18515
	gb_signal pingpong-listen
	rc=0; wait $pid || rc=$?
else
	gb_wait pingpong-listen
	rc=0; timeout 120 ibv_rc_pingpong -d rxe0 -g 1 -n "$iters" "$GB_PEER_IP" >"$out" 2>&1 || rc=$?
fi
cat "$out"
[ "$rc" = 0 ] || { echo "ibv_rc_pingpong exited $rc"; exit 1; }
grep -q "remote address: .*GID ::ffff:$GB_PEER_IP" "$out" || { echo "peer GID not seen"; exit 1; }
grep -q "^[0-9]* bytes in .* = .*Mbit/sec" "$out" || { echo "no throughput line"; exit 1; }
grep -q "^$iters iters in " "$out" || { echo "not $iters iterations"; exit 1; }
echo "rc-smoke: OK"
