#!/usr/bin/env bash
# k8s-image.sh — root file systems for images built without a Docker engine or a registry,
# from Debian 12's own packages; `scripts/k8s.sh image NAME:TAG DIR` packs one and imports it
# into the cluster.
#
#   k8s-image.sh base DIR               an application base: Debian's libc6, libgcc-s1,
#                                       libstdc++6 and busybox-static (/bin/sh, cp, …) —
#                                       nothing of memtrial
#   k8s-image.sh memtrial BINARY DIR    what docker/Dockerfile builds: the base with
#                                       /opt/memtrial/memtrial (BINARY, stripped of its debug
#                                       information), the catalog's allocator libraries from
#                                       Debian's libjemalloc2, libtcmalloc-minimal4 and
#                                       libmimalloc2.0 in /opt/memtrial/lib, and the allocator
#                                       probe at /opt/memtrial/libmemtrial-probe.so
#   k8s-image.sh fetch                  download those packages only (scripts/setup-tests.sh)
#
# DIR must not exist or be empty. The packages are fetched with apt-get download into
# K8S_CACHE_DIR (default /var/cache/memtrial-k8s)/debs once. Exit status: 0 done; 2 bad
# usage; 4 a package could not be had.
set -euo pipefail

readonly CACHE_ROOT=${K8S_CACHE_DIR:-/var/cache/memtrial-k8s}
readonly DEBS=$CACHE_ROOT/debs
readonly BASE_PACKAGES=(libc6 libgcc-s1 libstdc++6 busybox-static)
readonly ALLOCATOR_PACKAGES=(libjemalloc2 libtcmalloc-minimal4 libmimalloc2.0)
# The catalog's libraries, as docker/Dockerfile copies them.
readonly ALLOCATOR_LIBS=(libjemalloc.so.2 libtcmalloc_minimal.so.4 libmimalloc.so.2)

die() {
  local rc=$1
  shift
  echo "k8s-image.sh: $*" >&2
  exit "$rc"
}
usage() {
  sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0" >&2
  exit 2
}

# The .deb of each package (this machine's apt candidate), downloaded once.
debs() {
  mkdir -p "$DEBS"
  local p v f
  for p in "$@"; do
    v=$(apt-cache policy "$p" | awk '/Candidate:/{print $2}')
    [[ -n $v && $v != "(none)" ]] || die 4 "no Debian package $p here (apt-get update?)"
    f=$(find "$DEBS" -maxdepth 1 -name "${p}_${v//:/%3a}_*.deb" | head -1)
    if [[ -z $f ]]; then
      (cd "$DEBS" && apt-get download -q "$p=$v" </dev/null >/dev/null 2>&1) ||
        die 4 "apt-get download $p=$v failed"
      f=$(find "$DEBS" -maxdepth 1 -name "${p}_${v//:/%3a}_*.deb" | head -1)
      [[ -n $f ]] || die 4 "apt-get download $p=$v wrote no .deb"
    fi
    echo "$f"
  done
}

base() {
  local dir=$1 deb a
  mkdir -p "$dir"
  [[ -z $(ls -A "$dir") ]] || die 2 "$dir is not empty"
  for deb in $(debs "${BASE_PACKAGES[@]}"); do dpkg-deb -x "$deb" "$dir"; done
  rm -rf "$dir/usr/share/doc" "$dir/usr/share/lintian" "$dir/usr/share/man" "$dir/usr/share/locale"
  # busybox-static installs /bin/busybox only: the applets a pod's command needs.
  for a in sh cp cat ls sleep echo mkdir rm env head tail grep; do
    [[ -e $dir/bin/$a ]] || ln -s busybox "$dir/bin/$a"
  done
  mkdir -p "$dir/tmp" "$dir/etc" "$dir/proc" "$dir/sys" "$dir/dev"
  chmod 1777 "$dir/tmp"
  echo 'root:x:0:0:root:/root:/bin/sh' >"$dir/etc/passwd"
  echo 'nobody:x:65534:65534:nobody:/nonexistent:/bin/sh' >>"$dir/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$dir/etc/group"
}

memtrial() {
  local bin=$1 dir=$2 deb tmp l
  [[ -x $bin ]] || die 2 "$bin is not an executable"
  base "$dir"
  mkdir -p "$dir/opt/memtrial/lib"
  tmp=$(mktemp -d)
  for deb in $(debs "${ALLOCATOR_PACKAGES[@]}"); do dpkg-deb -x "$deb" "$tmp"; done
  for l in "${ALLOCATOR_LIBS[@]}"; do
    cp -L "$tmp"/usr/lib/*-linux-gnu/"$l" "$dir/opt/memtrial/lib/$l"
  done
  rm -rf "$tmp"
  # The debug information is most of the release binary (94 of the release binary's 109 MB): every pod's init
  # container copies it.
  strip -o "$dir/opt/memtrial/memtrial" "$bin"
  "$dir/opt/memtrial/memtrial" probe-library --out "$dir/opt/memtrial/libmemtrial-probe.so" >/dev/null
  chmod -R a+rX "$dir/opt/memtrial"
}

case ${1:-} in
  base)
    (($# == 2)) || usage
    base "$2"
    ;;
  memtrial)
    (($# == 3)) || usage
    memtrial "$2" "$3"
    ;;
  fetch)
    (($# == 1)) || usage
    debs "${BASE_PACKAGES[@]}" "${ALLOCATOR_PACKAGES[@]}" >/dev/null
    ;;
  *) usage ;;
esac
