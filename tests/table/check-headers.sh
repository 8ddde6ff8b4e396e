#!/bin/sh
# SPDX-License-Identifier: MIT
# Compile every public header of include/cep alone with strict flags:
# C11 (-pedantic), or C++17 when asked (every header has extern "C" and
# must be usable from C++).
# Usage: check-headers.sh INCLUDE_DIR CC [GENERATED_INCLUDE_DIR [c|c++]]
# (the build's include dir, where <cep/version.h> is generated)
set -eu
inc=$1
cc=${2:-cc}
gen=${3:-}
lang=${4:-c}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
n=0
set -- "$inc"/cep/*.h
[ -z "$gen" ] || set -- "$@" "$gen"/cep/*.h
for h in "$@"; do
	name=$(basename "$h")
	if [ "$lang" = c++ ]; then
		printf '#include <cep/%s>\nint main() { return 0; }\n' "$name" > "$tmp/t.cc"
		src="-x c++ -std=c++17 $tmp/t.cc"
	else
		printf '#include <cep/%s>\nint main(void) { return 0; }\n' "$name" > "$tmp/t.c"
		src="-std=c11 $tmp/t.c"
	fi
	# shellcheck disable=SC2086
	if ! "$cc" $src -Wall -Wextra -Werror -pedantic -I"$inc" ${gen:+-I"$gen"} -c -o "$tmp/t.o"; then
		echo "FAIL: cep/$name does not compile alone ($lang)" >&2
		fail=1
	fi
	n=$((n + 1))
done
echo "$n headers checked ($lang)"
[ "$n" -gt 0 ] && exit $fail
