#!/bin/sh
# SPDX-License-Identifier: MIT
# Regenerate the ABI baseline abi/libcep.abi from the current tree, on
# purpose: after adding a function (in a new stanza of src/libcep.map, with
# its man page) or after a reviewed incompatible change (with a soname
# bump). The abi test of ./scripts/test.sh compares every build against
# this file. Builds libcep alone (gcc, -g, no tests) in build-abi/.
set -eu
cd "$(dirname "$0")/.."
./scripts/deps.sh
dir=build-abi
if [ -f "$dir/build.ninja" ]; then
	meson setup --reconfigure "$dir" -Dtests=false -Dbuildtype=debugoptimized >/dev/null
else
	CC=gcc meson setup "$dir" -Dtests=false -Dbuildtype=debugoptimized >/dev/null
fi
ninja -C "$dir" >/dev/null
lib=$(readlink -f "$dir/src/libcep.so")
sh tests/api/check_abi.sh dump "$PWD" "$PWD/$dir" "$lib"
git --no-pager diff --stat -- abi/libcep.abi 2>/dev/null || true
