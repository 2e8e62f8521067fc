#!/usr/bin/env bash
# Installs what the test suite needs on top of what running memtrial needs (scripts/setup.sh,
# which it runs first): run as root on Debian/Ubuntu. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh

packages=(
  # Test fixtures: C programs built static and dynamic, Python helpers, process tools.
  gcc libc6-dev python3 procps
  # Program variants: a C fixture linked with -ljemalloc (jemalloc linked, not preloaded).
  libjemalloc-dev
  # The HTML report test renders it in a headless browser.
  chromium
  # Server-trial tests: a Rack app on puma; the Ruby probe's tests (GC.stat, YJIT, fork).
  ruby puma ruby-rack
  # Worker-trial tests: a real Sidekiq on a real redis.
  redis-server ruby-sidekiq
  # The require probe's tests: Debian's Rails booting `require "rails/all"`.
  ruby-rails
  # JVM probe tests: java, javac and jcmd (Native Memory Tracking).
  openjdk-17-jdk-headless
  # Exporter tests: a real Prometheus scraping `memtrial exporter`, promtool checks.
  prometheus
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup-tests: need root to install: ${missing[*]} (run: sudo $0)" >&2
    exit 1
  fi
  echo "setup-tests: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# `memtrial kube`'s YAML is checked offline against the Kubernetes JSON schemas that PyPI's
# kubernetes-validate bundles (tests/it/kube.rs), in a venv of its own.
venv=/opt/memtrial-test-venv
kv_version=1.37.0
if ! "$venv/bin/kubernetes-validate" --version 2>/dev/null | grep -q "$kv_version"; then
  if ! /usr/bin/python3 -c 'import venv, ensurepip' 2>/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
  fi
  echo "setup-tests: installing kubernetes-validate $kv_version in $venv" >&2
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install -q "kubernetes-validate==$kv_version"
fi
# The Kubernetes tests (tests/it/kube_cluster.rs) start a single-node cluster: Debian's etcd,
# containerd, runc, CNI plugins and umoci, and Kubernetes built from source through the Go
# module proxy into /var/cache/memtrial-k8s — once per machine (about 10 minutes of CPU on
# 2 cores, niced; later runs find it built).
if [ "$(id -u)" -eq 0 ]; then
  ./scripts/k8s.sh build
  # The Debian packages the tests' images are made of (scripts/k8s-image.sh), once.
  ./scripts/k8s-image.sh fetch
else
  echo "setup-tests: not root: the Kubernetes tests need root and scripts/k8s.sh build" >&2
fi
echo "setup-tests: ready for cargo test" >&2
