#!/bin/sh
# SPDX-License-Identifier: MIT
# Host side of the kernel-interop guest test: boots the guests with
# cm-kernel.sh (tests 2-4), then checks test 5: the MADs libcep captured in
# the client guest during test 2 decode cleanly in tshark (no malformed
# packet, no expert error; REQ with the rdma_cm IP header, REP, RTU, DREQ or
# DREP, and the REJ of the unused port).
#   cm-kernel-test.sh RUN_DIR CM_GUEST_BINARY
# Exit 0 pass, 1 fail, 77 skip (reason on stderr).
set -u
here=$(cd "$(dirname "$0")" && pwd)
run=$1
bin=$2
rm -rf "$run"
"$here/guestbed.sh" run -o "$run" "$here/cm-kernel.sh" "$here/cm-kernel.sh" -- "$bin"
rc=$?
[ $rc = 0 ] || exit $rc
pcap=$run/kclient.pcap
if ! command -v tshark >/dev/null; then
	echo "cm-kernel-test: SKIP: tests 2-4 passed, but tshark is not installed:" \
		"capture $pcap not decoded (test 5)" >&2
	exit 77
fi
fail=0
bad=$(tshark -r "$pcap" -Y '_ws.malformed || _ws.expert.severity >= 0x00600000' 2>/dev/null) ||
	{ echo "tshark failed: $bad"; fail=1; }
[ -z "$bad" ] || { echo "tshark reports malformed or erroneous frames:"; echo "$bad"; fail=1; }
tshark -r "$pcap" 2>/dev/null
fields=$(tshark -r "$pcap" -T fields -E separator=' ' -e infiniband.mad.attributeid \
	-e infiniband.cm.req.serviceid.dport -e infiniband.cm.req.ip_cm.sip4 \
	-e infiniband.cm.req.ip_cm.dip4 -e infiniband.cm.rej.reason 2>/dev/null)
echo "$fields"
want() {
	echo "$fields" | grep -qE "$1" || { echo "capture lacks $2"; fail=1; }
}
# Wireshark prints the port and the reason in hex: 7471 = 0x1d2f, 7472 = 0x1d30.
want '^0x0010 0x1d2f 10\.77\.0\.1 10\.77\.0\.2' "a REQ to port 7471 with the IP CM header 10.77.0.1 -> 10.77.0.2"
want '^0x0013' "a REP"
want '^0x0014' "an RTU"
want '^0x001[56]' "a DREQ or DREP"
want '^0x0010 0x1d30 10\.77\.0\.1 10\.77\.0\.2' "the REQ to port 7472"
want '^0x0012 +0x0008$' "a REJ with reason 8"
n=$(echo "$fields" | grep -c .)
[ "$n" -ge 7 ] || { echo "only $n frames captured"; fail=1; }
[ $fail = 0 ] && echo "cm-kernel-test: capture of test 2 decodes cleanly ($n frames)"
exit $fail
