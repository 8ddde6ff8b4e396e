#!/bin/sh
# SPDX-License-Identifier: MIT
# Host side of the conformance suite: boots the Soft-RoCE guest pair once
# (conform.sh runs the catalogue against libcep, then against the kernel
# CM), then compare.py turns the two transcripts into one verdict per
# scenario against expected.txt (docs/protocol.md, "Conformance").
#   conform-test.sh RUN_DIR PEER TARGET_LIBCEP TARGET_KERNEL
# Exit 0 pass, 1 fail, 77 skip (reason on stderr: no qemu, no kernel...).
set -u
here=$(cd "$(dirname "$0")" && pwd)
run=$1
shift
rm -rf "$run"
"$here/../guests/guestbed.sh" run -t 900 -o "$run" "$here/conform.sh" "$here/conform.sh" -- "$@"
rc=$?
[ $rc = 77 ] && exit 77
for cm in libcep kernel; do
	if ! grep -q '^# end' "$run/$cm.transcript" 2>/dev/null; then
		echo "conformance: the catalogue did not complete against $cm (see $run/peer-$cm.log)"
		tail -n 30 "$run/peer-$cm.log" 2>/dev/null
		exit 1
	fi
done
python3 "$here/compare.py" "$here/expected.txt" "$run/kernel.transcript" \
	"$run/libcep.transcript" --markdown "$run/verdicts.md"
crc=$?
echo "transcripts and logs: $run"
[ $rc = 0 ] || { echo "conformance: a guest failed (exit $rc)"; exit 1; }
exit $crc
