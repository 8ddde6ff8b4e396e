#!/bin/sh
# SPDX-License-Identifier: MIT
# Compile every public header of include/cep alone with strict C11 flags.
# Usage: check-headers.sh INCLUDE_DIR CC
set -eu
inc=$1
cc=${2:-cc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
n=0
for h in "$inc"/cep/*.h; do
	name=$(basename "$h")
	printf '#include <cep/%s>\nint main(void) { return 0; }\n' "$name" > "$tmp/t.c"
	if ! "$cc" -std=c11 -Wall -Wextra -Werror -pedantic -I"$inc" -c "$tmp/t.c" -o "$tmp/t.o"; then
		echo "FAIL: cep/$name does not compile alone" >&2
		fail=1
	fi
	n=$((n + 1))
done
echo "$n headers checked"
[ "$n" -gt 0 ] && exit $fail
