#!/bin/sh
# SPDX-License-Identifier: MIT
# Run a planted-bug cep-stress and pass only if the bug was caught: a
# sanitizer report or an invariant violation, with a non-zero exit. A
# harness that passes a planted bug is a defect, so a clean run fails.
# EXPECT_REPORT (an extended regex), if set, must also match the output:
# the bug must be caught by that particular check.
# Usage: expect-failure.sh CEP-STRESS-BINARY [args...]
set -u
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$@" >"$log" 2>&1
rc=$?
tail -n 40 "$log"
if [ $rc -eq 0 ]; then
	echo "expect-failure: planted bug NOT caught (exit 0)" >&2
	exit 1
fi
if [ -n "${EXPECT_REPORT:-}" ] && ! grep -qE "$EXPECT_REPORT" "$log"; then
	echo "expect-failure: caught, but not by the check required ($EXPECT_REPORT)" >&2
	exit 1
fi
if grep -qE 'VIOLATION|ERROR: AddressSanitizer|ERROR: LeakSanitizer|WARNING: ThreadSanitizer|runtime error:' "$log"; then
	what=$(grep -oE 'VIOLATION \[[^]]*\]|ERROR: (Address|Leak)Sanitizer: [a-z-]+|WARNING: ThreadSanitizer: [a-z -]+|runtime error' "$log" | head -1)
	echo "expect-failure: planted bug caught (exit $rc): $what"
	exit 0
fi
echo "expect-failure: exit $rc without a recognised report" >&2
exit 1
