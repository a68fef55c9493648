#!/usr/bin/env bash
# GCC's own libgomp testsuite for the installed gcc, from Debian's source package of that
# gcc: fetched with `apt-get source` (a deb-src entry is added when missing), unpacked
# once into a cache (only libgomp's testsuite, headers and include/gomp-constants.h,
# a few MB), never copied into this tree. Prints the cache directory that holds
# gcc-X.Y.Z/libgomp/testsuite.
# Usage: scripts/gcc-testsuite.sh          (LOCKSTEP_CACHE: where the cache lives)
set -euo pipefail
cache=${LOCKSTEP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lockstep}/gcc-testsuite
ver=$(gcc -dumpfullversion)
major=${ver%%.*}
pkg=gcc-$major
debver=$(dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null) ||
  { echo "gcc-testsuite: Debian package $pkg is not installed (gcc $ver)" >&2; exit 77; }
dest=$cache/$debver
if [ -d "$dest/gcc-$ver/libgomp/testsuite/libgomp.c" ]; then
  echo "$dest"
  exit 0
fi
command -v apt-get >/dev/null || { echo "gcc-testsuite: no apt-get on this machine" >&2; exit 77; }

# a deb-src entry for the suites the binary packages come from
if ! grep -rqs '^Types:.*deb-src\|^deb-src ' /etc/apt/sources.list /etc/apt/sources.list.d/; then
  src=/etc/apt/sources.list.d/lockstep-deb-src.sources
  for f in /etc/apt/sources.list.d/debian.sources; do
    [ -f "$f" ] && sed 's/^Types: deb$/Types: deb-src/' "$f" >"$src"
  done
  if [ ! -s "$src" ]; then
    grep -h '^deb ' /etc/apt/sources.list 2>/dev/null | sed 's/^deb /deb-src /' \
      >/etc/apt/sources.list.d/lockstep-deb-src.list
    rm -f "$src"
  fi
  apt-get update -qq >&2
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# the installed revision, else (the archive moved on) the one the archive has now: the
# same upstream gcc, the same testsuite
( cd "$work" && apt-get source --download-only -qq "$pkg=$debver" >&2 ) || {
  apt-get update -qq >&2
  ( cd "$work" && apt-get source --download-only -qq "$pkg=$debver" >&2 ) ||
    ( cd "$work" && apt-get source --download-only -qq "$pkg" >&2 )
}
orig=$(ls "$work"/*.orig.tar.* | head -1)
inner=$(tar tf "$orig" | grep -E "/gcc-$ver(-dfsg)?\.tar\.[a-z]+$" | head -1)
[ -n "$inner" ] || { echo "gcc-testsuite: no gcc-$ver tarball inside $orig" >&2; exit 1; }
mkdir -p "$work/out"
tar xf "$orig" -O "$inner" | tar xJf - -C "$work/out" --wildcards \
  "gcc-$ver/libgomp/testsuite/libgomp.c/*" "gcc-$ver/libgomp/testsuite/libgomp.c-c++-common/*" \
  "gcc-$ver/libgomp/*.h" "gcc-$ver/include/gomp-constants.h"
mkdir -p "$cache"
rm -rf "$dest"
mv "$work/out" "$dest"
echo "$dest"
