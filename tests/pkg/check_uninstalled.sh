#!/bin/sh
# SPDX-License-Identifier: MIT
# The quick start built against the build tree through the uninstalled
# pkg-config file alone (BUILD/meson-uninstalled/libcep-uninstalled.pc,
# made by src/meson.build), as a developer would before installing: its
# Cflags give every <cep/...> header from the source or the build tree
# (-MD shows which), its Libs the build's libcep.so, which the program
# loads and runs on. In a sanitizer build the program is compiled with
# the same -fsanitize, as the library needs its runtime.
# Usage: check_uninstalled.sh SOURCE_ROOT BUILD_ROOT SANITIZE CC...
set -eu
src=$1 build=$2 sanitize=$3
shift 3
fail() { echo "FAIL: $*" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

export PKG_CONFIG_PATH="$build/meson-uninstalled"
cflags=$(pkg-config --cflags libcep-uninstalled) || fail "pkg-config --cflags libcep-uninstalled"
libs=$(pkg-config --libs libcep-uninstalled) || fail "pkg-config --libs libcep-uninstalled"
echo "pkg-config --cflags libcep-uninstalled: $cflags"
echo "pkg-config --libs libcep-uninstalled: $libs"
san=
[ "$sanitize" = none ] || san=-fsanitize=$sanitize

# shellcheck disable=SC2086
"$@" -std=c11 -Wall -Wextra -Werror -pedantic $san -MD -MF "$work/hello_callback.d" $cflags \
	"$src/examples/hello_callback.c" $libs -o "$work/hello_callback" ||
	fail "hello_callback does not build with the uninstalled pkg-config file's flags"
headers=$(tr ' \\' '\n\n' <"$work/hello_callback.d" | grep '/cep/' || true)
[ -n "$headers" ] || fail "no <cep/...> header in the dependencies (the check found nothing)"
if printf '%s\n' "$headers" | grep -v -e "^$src/include/cep/" -e "^$build/include/cep/"; then
	fail "hello_callback used libcep headers from outside the source and build trees (above)"
fi
LD_LIBRARY_PATH=$build/src ldd "$work/hello_callback" | grep -q "libcep.so.0 => $build/src/" ||
	fail "hello_callback does not load the build's libcep.so.0"
LD_LIBRARY_PATH=$build/src "$work/hello_callback" >"$work/out" 2>&1 ||
	{ cat "$work/out" >&2; fail "hello_callback failed on the build's library"; }
echo "hello_callback: $(tail -1 "$work/out")"
