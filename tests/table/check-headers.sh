#!/bin/sh
# SPDX-License-Identifier: MIT
# Compile every public header of include/cep alone with strict C11 flags.
# Usage: check-headers.sh INCLUDE_DIR CC [GENERATED_INCLUDE_DIR]
# (the build's include dir, where <cep/version.h> is generated)
set -eu
inc=$1
cc=${2:-cc}
gen=${3:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
n=0
set -- "$inc"/cep/*.h
[ -z "$gen" ] || set -- "$@" "$gen"/cep/*.h
for h in "$@"; do
	name=$(basename "$h")
	printf '#include <cep/%s>\nint main(void) { return 0; }\n' "$name" > "$tmp/t.c"
	if ! "$cc" -std=c11 -Wall -Wextra -Werror -pedantic -I"$inc" ${gen:+-I"$gen"} -c "$tmp/t.c" -o "$tmp/t.o"; then
		echo "FAIL: cep/$name does not compile alone" >&2
		fail=1
	fi
	n=$((n + 1))
done
echo "$n headers checked"
[ "$n" -gt 0 ] && exit $fail
