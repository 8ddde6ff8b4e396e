#!/bin/sh
# SPDX-License-Identifier: MIT
# Run fuzz-cm built with a planted bug and pass only if it reported the
# bug: a fuzz-cm VIOLATION, an AddressSanitizer / LeakSanitizer / UBSan
# report, or libFuzzer's per-input timeout (the bug corrupted an RCU queue
# or an index and an input hung, which cep-stress reports with its
# watchdog). A run that ends clean fails: the fuzzer missed the bug.
# Usage: expect-crash.sh FUZZER [libFuzzer arguments...]
set -u
log=$(mktemp)
trap 'rm -f "$log"' EXIT
t0=$(date +%s)
"$@" >"$log" 2>&1
rc=$?
t1=$(date +%s)
tail -n 30 "$log"
if [ $rc -eq 0 ]; then
	echo "expect-crash: planted bug NOT found (exit 0 after $((t1 - t0)) s)" >&2
	exit 1
fi
what=$(grep -oE 'fuzz-cm: VIOLATION[^:]*: .{0,60}|ERROR: (Address|Leak)Sanitizer: [a-z-]+|runtime error: .{0,40}|ERROR: libFuzzer: timeout' "$log" | head -1)
if [ -n "$what" ]; then
	echo "expect-crash: planted bug found in $((t1 - t0)) s (exit $rc): $what"
	exit 0
fi
echo "expect-crash: exit $rc without a recognised report" >&2
exit 1
