#!/usr/bin/env bash
# Installs what *running* memtrial needs on Debian/Ubuntu (run as root): the allocators it
# compares and a C compiler for its spawner, then builds target/release/memtrial. The tests
# need more: scripts/setup-tests.sh.
# Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

# A dpkg killed midway (an earlier run of this script, or of the suite, was) leaves packages
# half-configured, and apt refuses every install until they are finished.
finish_interrupted_dpkg() {
  [ "$(id -u)" -eq 0 ] || return 0
  if [ -n "$(ls -A /var/lib/dpkg/updates 2>/dev/null)" ] || [ -n "$(dpkg --audit 2>/dev/null)" ]; then
    echo "setup: finishing what an interrupted dpkg left (dpkg --configure -a)" >&2
    DEBIAN_FRONTEND=noninteractive dpkg --configure -a </dev/null >/dev/null
  fi
}
finish_interrupted_dpkg

# Installs the Debian packages given as arguments that are not installed yet.
install_missing() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: need root to install: ${missing[*]} (run: sudo $0)" >&2
    exit 1
  fi
  echo "setup: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# The allocators memtrial compares (glibc's malloc is always there), and the C compiler
# with glibc's static library that build.rs needs for the small spawner and the allocator
# probe memtrial embeds (without a C compiler the build fails, naming what to install);
# glibc's full symbol table, where `--probe cpu` finds malloc.c's internal functions.
install_missing libjemalloc2 libtcmalloc-minimal4 libmimalloc2.0 gcc libc6-dev libc6-dbg

if ! command -v cargo >/dev/null 2>&1; then
  for d in "$HOME/.cargo/bin" /root/.cargo/bin /usr/local/cargo/bin; do
    [ -x "$d/cargo" ] && export PATH="$d:$PATH" && break
  done
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo not found; install Rust 1.85 or newer (rustup, or your distribution's rustc/cargo)" >&2
  exit 1
fi

# Not --quiet: a first build compiles for several minutes, and cargo's own progress shows it.
echo "setup: building target/release/memtrial (a first build takes minutes on 2 cores)" >&2
cargo build --release --locked
echo "setup: ready — target/release/memtrial" >&2
