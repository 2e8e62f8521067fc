#!/usr/bin/env bash
# Installs everything memtrial and its test suite need on Debian/Ubuntu (run as root),
# then builds memtrial. Safe to run again: it only installs what is missing.
set -euo pipefail

packages=(
  # The allocators memtrial compares.
  libjemalloc2 libtcmalloc-minimal4 libmimalloc2.0
  # Test fixtures: C programs built static and dynamic, Python helpers, process tools.
  gcc libc6-dev python3 procps
  # The HTML report test renders it in a headless browser.
  chromium
  # Server-trial tests: a Rack app on puma.
  puma ruby-rack
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: need root to install: ${missing[*]} (run: sudo $0)" >&2
    exit 1
  fi
  echo "setup: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
  for d in "$HOME/.cargo/bin" /root/.cargo/bin /usr/local/cargo/bin; do
    [ -x "$d/cargo" ] && export PATH="$d:$PATH" && break
  done
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo not found; install Rust 1.85 or newer (rustup, or your distribution's rustc/cargo)" >&2
  exit 1
fi

cd "$(dirname "$0")/.."
cargo build --release --locked --quiet
echo "setup: ready — target/release/memtrial" >&2
