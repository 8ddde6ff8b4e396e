#!/bin/sh
# SPDX-License-Identifier: MIT
# Fail if libcep.so exports any defined symbol not named cep_*.
set -eu
lib=$1
syms=$(nm -D --defined-only "$lib" | awk '$2 != "A" { print $3 }' | sed 's/@.*//')
[ -n "$syms" ] || { echo "no symbols found in $lib" >&2; exit 1; }
bad=$(printf '%s\n' "$syms" | grep -v '^cep_' || true)
if [ -n "$bad" ]; then
	echo "non-cep_ symbols exported:" >&2
	printf '%s\n' "$bad" >&2
	exit 1
fi
echo "$(printf '%s\n' "$syms" | wc -l) symbols, all cep_*"
