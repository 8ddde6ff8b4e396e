#!/bin/sh
# SPDX-License-Identifier: MIT
# The packages as a user gets them: build libcep0, libcep-dev, cep-utils,
# cepd and cep-rdmacm with dpkg-buildpackage (debian/, meson -Dtests=false), unpack them into a
# scratch root (dpkg-deb -x, nothing installed on this machine), and from
# that root only: build the quick-start examples the package ships with
# pkg-config (PKG_CONFIG_SYSROOT_DIR), run them against the packaged
# libcep.so.0 (hello_cepd's two processes through the packaged cepd),
# open `man cep_cm_connect`, run cepdump, and load an
# unmodified librdmacm program (rping) on the packaged private
# librdmacm.so.1 through the packaged cep-rdmacm; cepd's systemd units
# (socket activation) verify and name the packaged cepd; every document a packaged
# man page names is in a package; lintian finds nothing to say.
# Usage: check_packages.sh SOURCE_ROOT WORK_DIR PROJECT_VERSION
set -eu
src=$1 work=$2 version=$3
fail() { echo "FAIL: $*" >&2; exit 1; }

rm -rf "$work"
mkdir -p "$work/src" "$work/root"
work=$(cd "$work" && pwd)
root=$work/root

# 1. The source as a clone would have it, plus uncommitted edits.
if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	git -C "$src" ls-files -co --exclude-standard | while IFS= read -r f; do
		[ -e "$src/$f" ] && printf '%s\n' "$f"
	done | (cd "$src" && cpio -pdm --quiet "$work/src")
else
	tar -C "$src" --exclude='./build*' --exclude='./obj-*' -cf - . | tar -C "$work/src" -xf -
fi
[ "$(cd "$work/src" && dpkg-parsechangelog -S Version)" = "$version" ] ||
	fail "debian/changelog is at $(cd "$work/src" && dpkg-parsechangelog -S Version), meson.build at $version"

# 2. Build the binary packages.
start=$(date +%s)
if ! (cd "$work/src" && DEB_BUILD_OPTIONS="nocheck parallel=$(nproc)" \
		dpkg-buildpackage -b -us -uc) >"$work/build.log" 2>&1; then
	tail -40 "$work/build.log" >&2
	fail "dpkg-buildpackage failed (log: $work/build.log)"
fi
echo "packages built in $(($(date +%s) - start)) s:"
arch=$(dpkg --print-architecture)
for p in libcep0 libcep-dev cep-utils cepd cep-rdmacm; do
	deb=$work/${p}_${version}_$arch.deb
	[ -f "$deb" ] || fail "$p was not built"
	echo "  $(basename "$deb"): $(dpkg-deb -f "$deb" Depends)"
	dpkg-deb -x "$deb" "$root"
done
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
libdir=$root/usr/lib/$multiarch

# 3. What is installed, and what is not.
for f in "$libdir/libcep.so.0" usr/include/cep/cep.h usr/include/cep/version.h \
	 usr/bin/cepdump usr/share/man/man7/libcep.7.gz usr/share/man/man1/cepdump.1.gz \
	 usr/share/man/man3/cep_cm_connect.3.gz usr/share/doc/libcep-dev/examples/hello_channel.c \
	 "$libdir/libcep/librdmacm.so.1" usr/bin/cep-rdmacm usr/share/man/man1/cep-rdmacm.1.gz; do
	case $f in /*) ;; *) f=$root/$f ;; esac
	[ -e "$f" ] || fail "${f#"$root"} is not in any package"
done
for f in cep-storm cep-bench cep-stress; do
	[ ! -e "$root/usr/bin/$f" ] || fail "$f is installed (demos need -Dinstall_demos=true)"
done
dpkg-deb -f "$work/libcep0_${version}_$arch.deb" Depends | grep -q liburcu ||
	fail "libcep0 does not depend on liburcu"

# librdmacm on libcep stays out of the loader's path (it must never shadow
# the system's librdmacm) and out of the shlibs database.
for f in "$libdir/librdmacm.so.1" "$libdir/librdmacm.so" "$libdir/libcep/librdmacm.so"; do
	[ ! -e "$f" ] || fail "${f#"$root"} is installed (the private librdmacm belongs in libcep/ only)"
done
dpkg-deb -I "$work/cep-rdmacm_${version}_$arch.deb" shlibs >/dev/null 2>&1 &&
	fail "cep-rdmacm declares shlibs for its private librdmacm.so.1"
dpkg-deb -f "$work/cep-rdmacm_${version}_$arch.deb" Depends | grep -q libibumad ||
	fail "cep-rdmacm does not depend on libibumad"

# 4. pkg-config from the scratch root: libcep's own flags only.
export PKG_CONFIG_SYSROOT_DIR="$root" PKG_CONFIG_LIBDIR="$libdir/pkgconfig"
export PKG_CONFIG_ALLOW_SYSTEM_CFLAGS=1 PKG_CONFIG_ALLOW_SYSTEM_LIBS=1
cflags=$(pkg-config --cflags libcep)
libs=$(pkg-config --libs libcep)
echo "pkg-config --cflags libcep: $cflags"
echo "pkg-config --libs libcep: $libs"
[ "$(echo $cflags)" = "-I$root/usr/include" ] || fail "Cflags carry more than libcep's -I: $cflags"
[ "$(pkg-config --modversion libcep)" = "$version" ] || fail "libcep.pc version"

# 5. The quick start, built from the packaged examples against the root
# only (-MD proves every <cep/...> header came from it) and run against the
# packaged library; hello_cepd below, with the packaged cepd.
mkdir -p "$work/qs"
for ex in hello_callback hello_channel hello_cepd; do
	# shellcheck disable=SC2086
	cc -std=c11 -Wall -Wextra -Werror -pedantic -MD -MF "$work/qs/$ex.d" $cflags \
		"$root/usr/share/doc/libcep-dev/examples/$ex.c" $libs -o "$work/qs/$ex" ||
		fail "$ex does not build against the packages"
	if tr ' \\' '\n\n' <"$work/qs/$ex.d" | grep '/cep/' | grep -v "^$root/"; then
		fail "$ex used libcep headers from outside the scratch root (above)"
	fi
	LD_LIBRARY_PATH=$libdir ldd "$work/qs/$ex" | grep -q "libcep.so.0 => $libdir/" ||
		fail "$ex does not load the packaged libcep.so.0"
	[ "$ex" != hello_cepd ] || continue
	LD_LIBRARY_PATH=$libdir "$work/qs/$ex" >"$work/qs/$ex.out" 2>&1 ||
		{ cat "$work/qs/$ex.out" >&2; fail "$ex failed against the packages"; }
	echo "$ex: $(tail -1 "$work/qs/$ex.out")"
done

# 5b. hello_cepd as docs/quickstart.md runs it: the packaged cepd on an
# in-process fabric (`cepd --fabric 2`, on a socket of this test's; ready
# once `cepd --stats` is answered), the server until it listens, then the
# client; both must finish, and cepd stop cleanly.
sock=$work/qs/cepd.sock
LD_LIBRARY_PATH=$libdir "$root/usr/sbin/cepd" --fabric 2 --socket "$sock" \
	>"$work/qs/cepd.out" 2>&1 &
cepd_pid=$!
trap 'kill $cepd_pid 2>/dev/null || true' EXIT
i=0
until LD_LIBRARY_PATH=$libdir "$root/usr/sbin/cepd" --stats --socket "$sock" >/dev/null 2>&1; do
	i=$((i + 1))
	[ $i -lt 100 ] || { cat "$work/qs/cepd.out" >&2; fail "the packaged cepd did not come up"; }
	sleep 0.1
done
CEP_SERVICE=$sock LD_LIBRARY_PATH=$libdir "$work/qs/hello_cepd" server >"$work/qs/server.out" 2>&1 &
server_pid=$!
i=0
until grep -q '^server: listening' "$work/qs/server.out"; do
	i=$((i + 1))
	[ $i -lt 100 ] || { cat "$work/qs/server.out" >&2; fail "hello_cepd server did not listen"; }
	sleep 0.1
done
CEP_SERVICE=$sock LD_LIBRARY_PATH=$libdir "$work/qs/hello_cepd" client >"$work/qs/client.out" 2>&1 ||
	{ cat "$work/qs/client.out" "$work/qs/server.out" >&2; fail "hello_cepd client failed against the packages"; }
wait $server_pid ||
	{ cat "$work/qs/server.out" >&2; fail "hello_cepd server failed against the packages"; }
kill $cepd_pid
wait $cepd_pid || { cat "$work/qs/cepd.out" >&2; fail "the packaged cepd did not stop cleanly"; }
trap - EXIT
echo "hello_cepd: $(tail -1 "$work/qs/client.out") / $(tail -1 "$work/qs/server.out")"

# 6. man cep_cm_connect, from the packaged pages.
export MANPATH="$root/usr/share/man" MANWIDTH=80 LC_ALL=C.UTF-8
page=$(man -w cep_cm_connect) || fail "man -w cep_cm_connect"
case $page in "$root"/*) ;; *) fail "man cep_cm_connect found $page, not the package's" ;; esac
man cep_cm_connect 2>&1 | grep -q 'int cep_cm_connect(struct cep_cm_id \*id' ||
	fail "man cep_cm_connect does not show its synopsis"
man 7 libcep | grep -q 'THREADING MODEL' || fail "man 7 libcep"
man 1 cepdump | grep -q -- '--flow' || fail "man 1 cepdump"
echo "man cep_cm_connect: $page -> $(man cep_cm_connect | head -1 | tr -s ' ')"

# 6b. A man page that sends the reader to a document names one a package
# installs: every /usr/share/doc/... path in a packaged page exists in the
# root, and a source path (docs/NAME.md) only where NAME.md is installed.
links=0
for gz in "$root"/usr/share/man/man*/*.gz; do
	text=$(zcat "$gz" | sed 's/\\-/-/g; s/\\f\[[A-Z]*\]//g; s/\\f[A-Z]//g')
	for p in $(printf '%s\n' "$text" | grep -o '/usr/share/doc/[A-Za-z0-9_./+-]*[A-Za-z0-9_/]'); do
		links=$((links + 1))
		[ -e "$root$p" ] || fail "$(basename "$gz" .gz) names $p, which no package installs"
	done
	for d in $(printf '%s\n' "$text" | grep -o '\bdocs/[a-z_-]*\.md' | sed 's|docs/||'); do
		links=$((links + 1))
		ls "$root"/usr/share/doc/*/"$d" >/dev/null 2>&1 ||
			fail "$(basename "$gz" .gz) names docs/$d, which no package installs"
	done
done
[ "$links" -gt 0 ] || fail "no packaged man page names a document (the check found nothing)"
echo "man pages: $links links to documents, all installed"

# 7. The packaged tool runs.
"$root/usr/bin/cepdump" --help >/dev/null || fail "cepdump --help"
# 8. librdmacm on libcep: the packaged wrapper names the installed private
# directory; pointed at the root's copy (CEP_RDMACM_LIBDIR), it makes an
# unmodified rdma_cm program (rdmacm-utils' rping, when installed here)
# load the packaged librdmacm.so.1, every symbol version resolved.
[ "$("$root/usr/bin/cep-rdmacm" --libdir)" = "/usr/lib/$multiarch/libcep" ] ||
	fail "cep-rdmacm --libdir: $("$root/usr/bin/cep-rdmacm" --libdir)"
objdump -p "$libdir/libcep/librdmacm.so.1" | grep -q 'SONAME *librdmacm.so.1$' ||
	fail "the packaged librdmacm.so.1 has no SONAME librdmacm.so.1"
man 1 cep-rdmacm | grep -q -- '--libdir' || fail "man 1 cep-rdmacm"
if [ -x /usr/bin/rping ]; then
	CEP_RDMACM_LIBDIR=$libdir/libcep LD_BIND_NOW=1 LD_LIBRARY_PATH=$libdir \
		"$root/usr/bin/cep-rdmacm" ldd -r /usr/bin/rping >"$work/rping.ldd" 2>&1 ||
		{ cat "$work/rping.ldd" >&2; fail "ldd -r rping through cep-rdmacm"; }
	grep -q "librdmacm.so.1 => $libdir/libcep/librdmacm.so.1" "$work/rping.ldd" ||
		{ cat "$work/rping.ldd" >&2; fail "rping does not load the packaged librdmacm.so.1"; }
	! grep -q 'not found\|undefined symbol\|version .* not found' "$work/rping.ldd" ||
		{ cat "$work/rping.ldd" >&2; fail "rping does not resolve against the packaged librdmacm.so.1"; }
	echo "cep-rdmacm rping: $(grep librdmacm "$work/rping.ldd" | tr -s ' \t' ' ')"
else
	echo "cep-rdmacm: rping not installed here (rdmacm-utils): the load check is skipped"
fi

# 8b. cepd: the packaged units start the packaged binary on the first
# connection to /run/cep/cepd.sock (a listening SOCK_SEQPACKET socket, mode
# 0666: cepd authenticates every client itself), systemd-analyze finds
# nothing wrong with them, and the maintainer scripts enable the socket.
unitdir=
for d in lib/systemd/system usr/lib/systemd/system; do
	[ -e "$root/$d/cepd.service" ] && unitdir=$root/$d
done
[ -n "$unitdir" ] || fail "cepd.service is not in any package"
[ -e "$unitdir/cepd.socket" ] || fail "cepd.socket is not in any package"
[ -x "$root/usr/sbin/cepd" ] || fail "/usr/sbin/cepd is not in any package"
[ -e "$root/usr/share/man/man8/cepd.8.gz" ] || fail "cepd(8) is not in any package"
[ -x "$root/etc/init.d/cepd" ] || fail "cepd's init script (other init systems) is not in any package"
grep -qx 'ListenSequentialPacket=/run/cep/cepd.sock' "$unitdir/cepd.socket" ||
	fail "cepd.socket does not listen on /run/cep/cepd.sock (SOCK_SEQPACKET)"
grep -qx 'SocketMode=0666' "$unitdir/cepd.socket" || fail "cepd.socket is not mode 0666"
grep -q '^ExecStart=/usr/sbin/cepd\b' "$unitdir/cepd.service" ||
	fail "cepd.service does not start /usr/sbin/cepd"
dpkg-deb -e "$work/cepd_${version}_$arch.deb" "$work/cepd.ctrl"
grep -q 'cepd.socket' "$work/cepd.ctrl/postinst" || fail "cepd's postinst does not enable cepd.socket"
if command -v systemd-analyze >/dev/null; then
	# The units as installed, ExecStart pointed at the root's binary.
	mkdir -p "$work/units"
	cp "$unitdir/cepd.socket" "$work/units/"
	sed "s|/usr/sbin/cepd|$root/usr/sbin/cepd|" "$unitdir/cepd.service" >"$work/units/cepd.service"
	(cd "$work/units" && systemd-analyze verify --man=no ./cepd.socket ./cepd.service) \
		>"$work/units/verify.txt" 2>&1 ||
		{ cat "$work/units/verify.txt" >&2; fail "systemd-analyze verify cepd.socket cepd.service"; }
	echo "cepd units: $(basename "$unitdir/cepd.socket") $(basename "$unitdir/cepd.service") verified"
else
	echo "cepd units: systemd-analyze not installed, not verified"
fi

# 9. lintian, pedantic tags included: nothing to report. An override goes
# in debian/*.lintian-overrides only where lintian is wrong, with the reason.
if command -v lintian >/dev/null; then
	lintian --pedantic -I -E \
		"$work"/*.changes >"$work/lintian.txt" 2>&1 || true
	if grep -q '^[EWIPX]: ' "$work/lintian.txt"; then
		cat "$work/lintian.txt" >&2
		fail "lintian reports the tags above"
	fi
	echo "lintian: clean ($(grep -c '^N: ' "$work/lintian.txt" || true) notes)"
else
	fail "lintian is not installed (./scripts/deps.sh installs it)"
fi
echo "packages OK"
