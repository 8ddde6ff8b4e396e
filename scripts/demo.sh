#!/bin/sh
# SPDX-License-Identifier: MIT
# Install what is missing, build libcep (release), and run the main demo:
# a connection storm between two simulated nodes on the in-process fabric.
# Arguments go to cep-storm (e.g. --count 10000 --workers 2 --loss 0.2).
set -eu
cd "$(dirname "$0")/.."
./scripts/deps.sh
dir=build-release
if [ ! -f "$dir/build.ninja" ]; then
	CC=gcc meson setup "$dir" -Dbuildtype=release >/dev/null
fi
ninja -C "$dir" >/dev/null
exec "./$dir/examples/cep-storm" "$@"
