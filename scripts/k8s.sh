#!/usr/bin/env bash
# k8s.sh — a real single-node Kubernetes on this machine, for memtrial's tests and for
# trying docs/kube.md by hand: etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler and a kubelet on containerd, everything on 127.0.0.1 or the cluster's own
# bridge, no registry (images are built from local files and imported).
#
#   k8s.sh build                 install Debian's parts, build Kubernetes (once; cached)
#   k8s.sh up [--owner PID]      start a cluster; with --owner it is torn down when PID ends
#   k8s.sh env                   the cluster's environment (KUBECONFIG=… lines, for eval)
#   k8s.sh image NAME:TAG DIR    pack the root file system DIR as an image and import it
#   k8s.sh down                  stop everything; restore the host's sysctls and paths
#   k8s.sh -- COMMAND ARGS...    up, run COMMAND with the cluster's environment, down
#
# Exit status: 0 done; 2 bad usage; 3 the machine cannot run it (not root, a port in use,
# no cgroup v1/v2 memory controller); 4 the build failed (log named); 5 the cluster did not
# come up (the failing component's log shown, all kept in K8S_CACHE_DIR/failed-up-logs, the
# rest torn down); 6 another cluster of this script is up (k8s.sh down first); 7 `down` could
# not put everything back (what is left is named); with `--`, COMMAND's own status.
#
# Environment:
#   K8S_CACHE_DIR  where the build is cached (default /var/cache/memtrial-k8s)
#   K8S_RUN_DIR    the running cluster's state, removed by `down` (default /var/lib/memtrial-k8s)
#   K8S_KEEP_LOGS  a directory `down` copies the components' logs into first
#
# What the cluster changes on the host, and `down` restores: the kubelet's sysctls
# (vm.overcommit_memory, vm.panic_on_oom, kernel.panic, kernel.panic_on_oops,
# kernel.keys.root_maxkeys/maxbytes), the bridge plugin's net.ipv4.ip_forward, the bridge
# and its veths, the paths the kubelet and containerd always create (/var/log/containers,
# /var/log/pods, /var/lib/kubelet, /run/containerd, /run/netns, /var/lib/cni,
# /usr/libexec/kubernetes, /etc/cni, /opt/cni): each is removed only when `up` made it,
# and the kubelet's cgroups (kubepods). `down` checks it left the host as `up` found it.
set -euo pipefail

readonly K8S_VERSION=v1.34.4
readonly KSM_VERSION=v2.18.0
# The Go toolchain when this machine has none new enough (from the Go module proxy).
readonly GO_TOOLCHAIN=go1.24.13
readonly GO_MIN_MINOR=24
# Bump when the build or the pause image change: a new version builds a new cache entry.
readonly BUILD_REVISION=1
readonly DEBIAN_PARTS=(etcd-server containerd runc containernetworking-plugins umoci busybox-static gcc libc6-dev openssl)

readonly CACHE_ROOT=${K8S_CACHE_DIR:-/var/cache/memtrial-k8s}
readonly CACHE=$CACHE_ROOT/$K8S_VERSION-r$BUILD_REVISION
readonly RUN=${K8S_RUN_DIR:-/var/lib/memtrial-k8s}
readonly HERE=$(cd "$(dirname "$0")" && pwd -P)

die() { local rc=$1; shift; echo "k8s.sh: $*" >&2; exit "$rc"; }
say() { echo "k8s.sh: $*" >&2; }

usage() {
  sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0" >&2
  exit 2
}

need_root() {
  [[ $(id -u) -eq 0 ]] || die 3 "must run as root (it installs packages, starts a kubelet and changes cgroups)"
}

# ---------------------------------------------------------------- build
POLICY_MARK="# k8s.sh (memtrial): no service starts during its apt-get install"
apt_install_missing() {
  local missing=() p policy=/usr/sbin/policy-rc.d
  # Ours, left by a k8s.sh killed during its install (the build lock is held: no other
  # k8s.sh is installing): every service would stay stopped on every later install.
  if [[ -f $policy ]] && grep -qxF "$POLICY_MARK" "$policy"; then
    say "removing the $policy an interrupted install left"
    rm -f "$policy"
  fi
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  say "installing ${missing[*]} (once)"
  # Packages with a service (etcd's init script) must not start it: the cluster starts its
  # own, on its own ports and data directory.
  local made_policy=no
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\n%s\nexit 101\n' "$POLICY_MARK" >"$policy" && chmod 755 "$policy" && made_policy=yes
  fi
  local rc=0
  (
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq </dev/null && apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null
  ) >"$CACHE_ROOT/install.log" 2>&1 || rc=$?
  [[ $made_policy == yes ]] && rm -f "$policy"
  if ((rc != 0)); then
    tail -n 20 "$CACHE_ROOT/install.log" >&2
    die 4 "apt-get install ${missing[*]} failed (log: $CACHE_ROOT/install.log)"
  fi
}

# A Go new enough for Kubernetes $K8S_VERSION: this machine's, else the pinned toolchain
# from the Go module proxy (golang.org/toolchain), unpacked into the cache.
go_binary() {
  local g minor
  for g in "$(command -v go 2>/dev/null || true)" /usr/local/go/bin/go; do
    [[ -n $g && -x $g ]] || continue
    minor=$(GOTOOLCHAIN=local "$g" env GOVERSION 2>/dev/null | sed -n 's/^go1\.\([0-9]*\).*/\1/p')
    if [[ -n $minor ]] && ((minor >= GO_MIN_MINOR)); then echo "$g"; return 0; fi
  done
  local dir=$CACHE_ROOT/$GO_TOOLCHAIN
  if [[ ! -x $dir/bin/go ]]; then
    say "no Go 1.$GO_MIN_MINOR or newer here: fetching $GO_TOOLCHAIN from the Go module proxy (once)"
    local zip tmp
    tmp=$(mktemp -d "$CACHE_ROOT/.go.XXXXXX")
    zip="https://proxy.golang.org/golang.org/toolchain/@v/v0.0.1-$GO_TOOLCHAIN.linux-amd64.zip"
    curl -fsSL --retry 3 -o "$tmp/go.zip" "$zip" || die 4 "cannot fetch $zip"
    (cd "$tmp" && python3 -c 'import zipfile,sys; zipfile.ZipFile("go.zip").extractall(".")') ||
      die 4 "cannot unpack $zip"
    local root
    root=$(echo "$tmp"/golang.org/toolchain@*)
    chmod -R u+w "$root"
    chmod +x "$root"/bin/* "$root"/pkg/tool/*/*
    rm -rf "$dir"
    mv -T "$root" "$dir"
    rm -rf "$tmp"
  fi
  echo "$dir/bin/go"
}

# The build proper, in $1 (a scratch directory that becomes the cache entry).
build_into() {
  local out=$1 go work version_pkg ldflags minor m
  go=$(go_binary)
  export GOTOOLCHAIN=local GOFLAGS=-mod=mod GOPROXY=https://proxy.golang.org GOSUMDB=sum.golang.org
  export GOPATH=$CACHE_ROOT/go GOMODCACHE=$CACHE_ROOT/go/mod GOCACHE=$CACHE_ROOT/go/build
  export CGO_ENABLED=0
  mkdir -p "$out/bin" "$out/images"
  say "building Kubernetes $K8S_VERSION with $("$go" env GOVERSION) (niced; about 6 min on 2 free cores, 10 on one)"

  # The module's zip has no staging/ and only a stub vendor/: build it as an ordinary
  # module whose k8s.io/* staging modules come from the proxy at the matching v0.x.
  local src
  src=$("$go" mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  [[ -d $src ]] || { echo "no source directory for k8s.io/kubernetes@$K8S_VERSION"; return 1; }
  work=$out/src
  cp -R "$src" "$work"
  chmod -R u+w "$work"
  rm -rf "$work/vendor" "$work/go.work" "$work/go.work.sum"
  minor=${K8S_VERSION#v1.}
  # Every staging module's replace goes; the ones the build requires (all but the
  # sample-cli-plugin and sample-controller, which are not published at every version) are
  # required at the matching v0.x.
  local staging=() required=() edits=()
  mapfile -t staging < <(sed -n 's#^\s*\(k8s\.io/[a-z0-9-]*\) => \./staging/.*#\1#p' "$work/go.mod")
  ((${#staging[@]} > 20)) || { echo "unexpected go.mod: ${#staging[@]} staging replaces"; return 1; }
  for m in "${staging[@]}"; do
    edits+=(-dropreplace="$m")
    if grep -qE "^\s+${m//./\\.} v0\.0\.0" "$work/go.mod"; then
      required+=("$m")
      edits+=(-require="$m@v0.$minor")
    fi
  done
  (cd "$work" && "$go" mod edit "${edits[@]}")
  # Explicit module@version arguments: a bare `go mod download` leaves go.sum without them.
  (cd "$work" && "$go" mod download "${required[@]/%/@v0.$minor}")

  # The versions the binaries report (`kubectl version`, the node's kubeletVersion).
  local major=1 kminor=${minor%%.*} flags=()
  for version_pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=("-X $version_pkg.gitVersion=$K8S_VERSION" "-X $version_pkg.gitMajor=$major"
      "-X $version_pkg.gitMinor=$kminor" "-X $version_pkg.gitTreeState=clean"
      "-X $version_pkg.buildDate=1970-01-01T00:00:00Z")
  done
  ldflags="-s -w ${flags[*]}"
  (cd "$work" && nice -n 19 "$go" build -trimpath -tags selinux,notest,grpcnotrace \
    -ldflags "$ldflags" -o "$out/bin/" \
    ./cmd/kube-apiserver ./cmd/kube-controller-manager ./cmd/kube-scheduler ./cmd/kubelet ./cmd/kubectl)

  build_ksm "$go" "$out"
  rm -rf "$work"

  # The pause image (no registry): Kubernetes' own pause.c, static, as a one-file image.
  local pause=$out/pause
  mkdir -p "$pause/root"
  cp "$src/build/pause/linux/pause.c" "$pause/pause.c"
  gcc -Os -static -o "$pause/root/pause" "$pause/pause.c" -DVERSION="$K8S_VERSION"
  strip "$pause/root/pause"
  oci_archive "$pause/root" "$out/images/pause.tar" localhost/pause:3.10 /pause
  rm -rf "$pause"
  echo "$K8S_VERSION r$BUILD_REVISION" >"$out/ok"
}

# kube-state-metrics, built the same way (the restart and OOM-kill series judge reads), as
# a package of a small module that requires it: `go install …@version` would ask the proxy
# for the module's version list, which it refuses for this module.
build_ksm() {
  local go=$1 out=$2 ksm=$2/ksm
  mkdir -p "$ksm"
  printf 'module memtrial.local/ksm\n\ngo 1.24\n' >"$ksm/go.mod"
  (cd "$ksm" && "$go" mod edit -require="k8s.io/kube-state-metrics/v2@$KSM_VERSION" &&
    "$go" mod download "k8s.io/kube-state-metrics/v2@$KSM_VERSION" &&
    nice -n 19 "$go" build -trimpath -ldflags "-s -w" -o "$out/bin/kube-state-metrics" \
      k8s.io/kube-state-metrics/v2)
  rm -rf "$ksm"
}

# Packs the root file system $1 as an OCI image archive $2 named $3, whose entrypoint is $4
# when given (pods name their command).
oci_archive() {
  local root=$1 tar=$2 name=$3 entry=${4:-} tmp
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/k8s-oci.XXXXXX")
  umoci init --layout "$tmp/layout"
  umoci new --image "$tmp/layout:latest"
  umoci unpack --image "$tmp/layout:latest" "$tmp/bundle" >/dev/null
  cp -a "$root/." "$tmp/bundle/rootfs/"
  umoci repack --image "$tmp/layout:latest" "$tmp/bundle" >/dev/null
  umoci config --image "$tmp/layout:latest" ${entry:+--config.entrypoint "$entry"} --os linux --architecture amd64
  umoci gc --layout "$tmp/layout"
  # The name containerd's import gives the image (io.containerd.image.name), and its tag.
  (cd "$tmp/layout" && python3 - "$name" <<'PY'
import json, sys
name = sys.argv[1]
idx = json.load(open("index.json"))
for m in idx["manifests"]:
    a = m.setdefault("annotations", {})
    a["io.containerd.image.name"] = name
    a["org.opencontainers.image.ref.name"] = name.rsplit(":", 1)[1]
json.dump(idx, open("index.json", "w"))
PY
  )
  tar -C "$tmp/layout" -cf "$tar" .
  rm -rf "$tmp"
}

build() {
  need_root
  mkdir -p "$CACHE_ROOT"
  exec 8>"$CACHE_ROOT/.lock"
  flock 8
  apt_install_missing "${DEBIAN_PARTS[@]}"
  if [[ -f $CACHE/ok ]]; then exec 8>&-; return 0; fi
  rm -rf "$CACHE_ROOT"/.build.*
  local tmp log=$CACHE_ROOT/build.log t0=$SECONDS
  tmp=$(mktemp -d "$CACHE_ROOT/.build.XXXXXX")
  say "building into $CACHE (once; log: $log)"
  # A subshell of its own, not a condition: `set -e` holds inside it.
  local rc=0
  set +e
  (set -ex; build_into "$tmp") >"$log" 2>&1
  rc=$?
  set -e
  if ((rc != 0)); then
    tail -n 30 "$log" >&2
    die 4 "the build failed (log: $log; partial build in $tmp)"
  fi
  mv -T "$tmp" "$CACHE" # atomic: the cache exists only once complete
  # The Go caches are only needed to build again (a new version): about 3 GB.
  chmod -R u+w "$CACHE_ROOT/go" 2>/dev/null || true
  rm -rf "$CACHE_ROOT/go"
  # Cache entries of other versions.
  local d
  for d in "$CACHE_ROOT"/v*-r*; do [[ $d == "$CACHE" ]] || rm -rf "$d"; done
  say "built in $((SECONDS - t0)) s: $(du -sh "$CACHE" | cut -f1) in $CACHE"
  exec 8>&-
}


# ---------------------------------------------------------------- the cluster
readonly BIN=$CACHE/bin
readonly PKI=$RUN/pki
readonly LOGS=$RUN/logs
readonly STATE=$RUN/state
readonly SOCK=$RUN/containerd.sock
readonly BRIDGE=memtrial0
readonly POD_SUBNET=10.244.77.0/24
readonly NODE=127.0.0.1
readonly ETCD_PORT=2379 ETCD_PEER_PORT=2380 API_PORT=6443 KUBELET_PORT=10250
readonly KUBELET_HEALTHZ_PORT=10248 KSM_PORT=18080 KSM_TELEMETRY_PORT=18081
readonly SERVICE_RANGE=10.96.0.0/24
# What the kubelet (and the bridge plugin) set on the host: recorded by `up`, restored by `down`.
readonly SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.ip_forward)
# Paths the kubelet, containerd and the CNI plugins make whatever they are told: removed by
# `down` when `up` did not find them.
readonly HOST_PATHS=(/var/lib/kubelet /var/log/containers /var/log/pods /run/containerd
  /run/netns /var/run/netns /var/lib/cni /usr/libexec/kubernetes /etc/cni /opt/cni
  /opt/containerd /var/lib/containerd /etc/kubernetes)
readonly COMPONENTS=(etcd kube-apiserver containerd kube-controller-manager kube-scheduler kubelet kube-state-metrics)

kubectl_() { "$BIN/kubectl" --kubeconfig "$RUN/admin.kubeconfig" "$@"; }

run_lock() {
  mkdir -p "$CACHE_ROOT"
  exec 7>"$CACHE_ROOT/.run.lock"
  flock -w 300 7 || die 6 "another k8s.sh has held $CACHE_ROOT/.run.lock for 5 minutes: $(pgrep -af 'k8s\.sh' | head -3 | tr '\n' ';')"
}

# The start time of PID $1 (clock ticks since boot, /proc/PID/stat's 22nd field).
start_time() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  # shellcheck disable=SC2086  # its fields, one a word
  set -- $stat
  echo "${20}"
}
# A component's PID file holds its PID and start time: a PID the kernel gave to another
# process since (a cluster killed long ago, pid_max is 32768) is not the component.
component_pid() {
  local p t
  [[ -s $STATE/$1.pid ]] || return 1
  read -r p t <"$STATE/$1.pid" || true
  [[ -n $p ]] || return 1
  if [[ -n $t && $(start_time "$p" || true) != "$t" ]]; then
    return 1
  fi
  echo "$p"
}
# Whether PID $1 runs (a zombie does not: components are reaped by init, not by us).
running() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [[ ${stat%% *} != Z ]]
}
alive() { local p; p=$(component_pid "$1") && [[ -n $p ]] && running "$p"; }

# Starts component $1 (command $2…) in a session of its own, logging to $LOGS/$1.log.
start() {
  local name=$1
  shift
  # Not the locks' descriptors: a component must not hold them.
  setsid "$@" </dev/null >"$LOGS/$name.log" 2>&1 7>&- 8>&- &
  echo "$! $(start_time $! || true)" >"$STATE/$name.pid"
  disown $!
}

# Waits up to $2 seconds for command $3… to succeed; exit 5 naming component $1's log.
wait_for() {
  local name=$1 secs=$2
  shift 2
  local until=$((SECONDS + secs))
  while ! "$@" >/dev/null 2>&1; do
    if ! alive "$name"; then
      tail -n 20 "$LOGS/$name.log" >&2
      die 5 "$name exited while starting (its log is above)"
    fi
    if ((SECONDS >= until)); then
      tail -n 20 "$LOGS/$name.log" >&2
      die 5 "$name was not ready within ${secs}s (its log is above)"
    fi
    sleep 0.2
  done
}

port_free() { ! ss -Hltn "sport = :$1" | grep -q .; }

links() { ip -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | sort; }

# What `down` must put back: the sysctls' values, the paths that did not exist, the links.
snapshot_host() {
  local k p
  for k in "${SYSCTLS[@]}"; do echo "$k $(sysctl -n "$k")"; done >"$STATE/sysctls"
  for p in "${HOST_PATHS[@]}"; do [[ -e $p || -L $p ]] || echo "$p"; done >"$STATE/absent-paths"
  links >"$STATE/links"
}

# A key and a certificate signed by the cluster's CA: NAME CN O SAN (O and SAN may be "").
cert() {
  local name=$1 cn=$2 o=$3 san=$4 subj="/CN=$2"
  [[ -n $o ]] && subj="/O=$o/CN=$cn"
  openssl genrsa -out "$name.key" 2048 2>/dev/null
  openssl req -new -key "$name.key" -subj "$subj" -out "$name.csr" 2>/dev/null
  {
    echo "basicConstraints=CA:FALSE"
    if [[ -n $san ]]; then
      echo "subjectAltName=$san"
      echo "extendedKeyUsage=serverAuth,clientAuth"
    else
      echo "extendedKeyUsage=clientAuth"
    fi
  } >"$name.ext"
  openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
    -extfile "$name.ext" -out "$name.crt" 2>/dev/null
  rm -f "$name.csr" "$name.ext"
}

certs() {
  mkdir -p "$PKI"
  (
    cd "$PKI"
    openssl genrsa -out ca.key 2048 2>/dev/null
    openssl req -x509 -new -nodes -key ca.key -days 2 -subj "/CN=memtrial-k8s-ca" -out ca.crt 2>/dev/null
    cert apiserver kube-apiserver "" "IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
    cert admin admin system:masters ""
    cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters ""
    cert controller-manager system:kube-controller-manager "" ""
    cert scheduler system:kube-scheduler "" ""
    cert kubelet-client "system:node:$NODE" system:nodes ""
    cert kubelet "$NODE" "" "IP:127.0.0.1,DNS:localhost"
    cert ksm kube-state-metrics system:masters ""
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    chmod 600 ./*.key
  )
}

kubeconfig() {
  local file=$1 user=$2
  cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: memtrial
  cluster: {certificate-authority: $PKI/ca.crt, server: "https://127.0.0.1:$API_PORT"}
users:
- name: $user
  user: {client-certificate: $PKI/$user.crt, client-key: $PKI/$user.key}
contexts:
- name: memtrial
  context: {cluster: memtrial, user: $user, namespace: default}
current-context: memtrial
EOF
}

write_configs() {
  kubeconfig "$RUN/admin.kubeconfig" admin
  kubeconfig "$RUN/controller-manager.kubeconfig" controller-manager
  kubeconfig "$RUN/scheduler.kubeconfig" scheduler
  kubeconfig "$RUN/kubelet.kubeconfig" kubelet-client
  kubeconfig "$RUN/ksm.kubeconfig" ksm
  mkdir -p "$RUN/cni/net.d" "$RUN/cni/ipam" "$RUN/containerd/root" "$RUN/containerd/state" "$RUN/runc"
  cat >"$RUN/cni/net.d/10-memtrial.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "memtrial",
  "plugins": [{
    "type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
    "ipam": {"type": "host-local", "dataDir": "$RUN/cni/ipam",
             "ranges": [[{"subnet": "$POD_SUBNET"}]], "routes": [{"dst": "0.0.0.0/0"}]}
  }]
}
EOF
  cat >"$RUN/containerd.toml" <<EOF
version = 2
root = "$RUN/containerd/root"
state = "$RUN/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$SOCK.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$RUN/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/pause:3.10"
  # This VM lacks CAP_SYS_RESOURCE: the pause container's oom_score_adj of -998 cannot be
  # written, and every sandbox would fail; negative scores are clamped to 0 instead.
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$RUN/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$RUN/runc"
EOF
  cat >"$RUN/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: AlwaysAllow}
tlsCertFile: $PKI/kubelet.crt
tlsPrivateKeyFile: $PKI/kubelet.key
containerRuntimeEndpoint: unix://$SOCK
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
oomScoreAdj: 0
podLogsDir: $RUN/pod-logs
volumePluginDir: $RUN/volume-plugins
maxPods: 40
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
# No KUBE-FIREWALL, KUBE-KUBELET-CANARY, KUBE-IPTABLES-HINT chains: a kubelet makes them on
# the host's iptables and leaves them when it stops (a rule dropping traffic to 127.0.0.0/8
# from elsewhere among them); this node has no kube-proxy that would need them.
makeIPTablesUtilChains: false
EOF
}

import_image() {
  ctr --address "$SOCK" -n k8s.io images import "$1" >/dev/null
}

up() {
  need_root
  local owner=""
  while (($#)); do
    case $1 in
      --owner)
        (($# >= 2)) || usage
        owner=$2
        shift 2
        ;;
      *) usage ;;
    esac
  done
  [[ -z $owner || $owner =~ ^[0-9]+$ ]] || die 2 "--owner takes a PID, not '$owner'"
  [[ -f $CACHE/ok ]] || build
  run_lock
  if [[ -e $STATE/up ]]; then
    local c
    for c in "${COMPONENTS[@]}"; do
      alive "$c" && die 6 "a cluster is up already ($RUN): run 'k8s.sh down' first"
    done
  fi
  if [[ -d $RUN ]]; then
    say "clearing what a cluster that died left in $RUN"
    teardown || die 5 "cannot clear what a dead cluster left (above)"
  fi
  local p
  for p in $ETCD_PORT $ETCD_PEER_PORT $API_PORT $KUBELET_PORT $KUBELET_HEALTHZ_PORT $KSM_PORT $KSM_TELEMETRY_PORT; do
    port_free "$p" || die 3 "port $p on this machine is in use; the cluster needs it"
  done
  grep -qE ' - (cgroup .*memory|cgroup2 )' /proc/self/mountinfo || die 3 "no memory cgroup controller is mounted"
  if ip route | grep -q "^${POD_SUBNET%/*}"; then die 3 "the pod subnet $POD_SUBNET is routed here already"; fi
  local t0=$SECONDS
  mkdir -p "$RUN" "$LOGS" "$STATE"
  chmod 700 "$RUN"
  snapshot_host
  touch "$STATE/up"
  # A start that fails leaves nothing running: its logs are kept, the rest torn down.
  trap 'up_failed' EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  certs
  write_configs

  start etcd etcd --name memtrial --data-dir "$RUN/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "memtrial=http://127.0.0.1:$ETCD_PEER_PORT"
  wait_for etcd 30 curl -fsS "http://127.0.0.1:$ETCD_PORT/health"

  start kube-apiserver "$BIN/kube-apiserver" --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$API_PORT" \
    --endpoint-reconciler-type none --service-cluster-ip-range "$SERVICE_RANGE" \
    --client-ca-file "$PKI/ca.crt" --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
    --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority "$PKI/ca.crt" --kubelet-preferred-address-types Hostname,InternalIP \
    --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
    --service-account-issuer https://kubernetes.default.svc --authorization-mode Node,RBAC \
    --profiling=false --allow-privileged=true
  wait_for kube-apiserver 90 curl -fsS --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
    "https://127.0.0.1:$API_PORT/readyz"

  start containerd containerd --config "$RUN/containerd.toml"
  wait_for containerd 30 ctr --address "$SOCK" version
  import_image "$CACHE/images/pause.tar"

  start kube-controller-manager "$BIN/kube-controller-manager" --kubeconfig "$RUN/controller-manager.kubeconfig" \
    --leader-elect=false --secure-port 0 --use-service-account-credentials=true \
    --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
    --controllers '*,-cloud-node-lifecycle-controller,-service-lb-controller,-node-route-controller'
  start kube-scheduler "$BIN/kube-scheduler" --kubeconfig "$RUN/scheduler.kubeconfig" \
    --leader-elect=false --secure-port 0
  start kubelet "$BIN/kubelet" --config "$RUN/kubelet.yaml" --kubeconfig "$RUN/kubelet.kubeconfig" \
    --root-dir "$RUN/kubelet" --hostname-override "$NODE" --containerd "$SOCK"
  start kube-state-metrics "$BIN/kube-state-metrics" --kubeconfig "$RUN/ksm.kubeconfig" \
    --host 127.0.0.1 --port "$KSM_PORT" --telemetry-host 127.0.0.1 --telemetry-port "$KSM_TELEMETRY_PORT" \
    --resources pods,deployments,daemonsets,jobs,nodes,replicasets

  # Pods need their namespace's ServiceAccount: made now rather than when the
  # controller-manager's controller gets to it.
  kubectl_ create serviceaccount default >/dev/null 2>&1 || true
  wait_for kubelet 60 kubectl_ get node "$NODE"
  wait_for kubelet 60 kubectl_ wait --for=condition=Ready "node/$NODE" --timeout=1s
  wait_for kube-state-metrics 30 curl -fsS "http://127.0.0.1:$KSM_PORT/healthz"
  if [[ -n $owner ]]; then
    # The owner's end ends the cluster, however the owner ended.
    # shellcheck disable=SC2016  # expanded by the watchdog's own bash
    setsid bash -c 'while kill -0 "$1" 2>/dev/null && [[ -e $2 ]]; do sleep 1; done; [[ -e $2 ]] && exec "$3" down' \
      watchdog "$owner" "$STATE/up" "$HERE/k8s.sh" </dev/null >>"$CACHE_ROOT/watchdog.log" 2>&1 7>&- 8>&- &
  fi
  trap - EXIT INT TERM
  say "up in $((SECONDS - t0)) s: node $NODE Ready (Kubernetes $K8S_VERSION); state in $RUN"
  env_lines
}

up_failed() {
  local kept=$CACHE_ROOT/failed-up-logs
  rm -rf "$kept"
  [[ -d $LOGS ]] && cp -a "$LOGS" "$kept" && say "the components' logs are kept in $kept"
  teardown >/dev/null || say "tearing the failed start down left something (k8s.sh down names it)"
}

env_lines() {
  cat <<EOF
KUBECONFIG=$RUN/admin.kubeconfig
K8S_BIN=$BIN
K8S_CA=$PKI/ca.crt
K8S_CLIENT_CERT=$PKI/admin.crt
K8S_CLIENT_KEY=$PKI/admin.key
K8S_KUBELET=https://127.0.0.1:$KUBELET_PORT
K8S_KSM=http://127.0.0.1:$KSM_PORT
K8S_NODE=$NODE
K8S_POD_SUBNET=$POD_SUBNET
K8S_CONTAINERD=$SOCK
EOF
}

kubepods_procs() {
  find /sys/fs/cgroup/ -path '*/kubepods*' -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u
}

# Kills every process in the kubelet's cgroups (the pods' containers), in every hierarchy.
kill_pods() {
  local pids round
  for round in $(seq 20); do
    pids=$(kubepods_procs)
    [[ -z $pids ]] && return 0
    # shellcheck disable=SC2086  # one PID a word
    kill -KILL $pids 2>/dev/null || true
    sleep 0.1
  done
}

# The cluster's state is thrown away: its components are killed, not asked to stop.
stop_component() {
  local name=$1 pid i
  pid=$(component_pid "$name") || { rm -f "$STATE/$name.pid"; return 0; }
  kill -KILL "$pid" 2>/dev/null || true
  for i in $(seq 50); do
    running "$pid" || break
    sleep 0.1
  done
  rm -f "$STATE/$name.pid"
}

# The shims containerd started (they outlive it), found by the socket they report to.
shims() { pgrep -f "containerd-shim.* -address $SOCK" || true; }

unmount_under() {
  local m
  # Deepest first.
  while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
  done < <(awk '{print $5}' /proc/self/mountinfo | grep -E "^($1)(/|$)" | sort -r)
}

# Stops everything and puts the host back; what it could not is said (return 1).
teardown() {
  local c k v p l left=()
  rm -f "$STATE/up"
  if [[ -n ${K8S_KEEP_LOGS:-} && -d $LOGS ]]; then
    mkdir -p "$K8S_KEEP_LOGS" && cp -a "$LOGS/." "$K8S_KEEP_LOGS/" || true
  fi
  # Nothing new is scheduled or restarted; then the pods' processes go; then the rest.
  for c in kube-state-metrics kube-controller-manager kube-scheduler kubelet; do stop_component "$c"; done
  kill_pods
  stop_component containerd
  for p in $(shims); do kill -KILL "$p" 2>/dev/null || true; done
  kill_pods
  for c in kube-apiserver etcd; do stop_component "$c"; done
  unmount_under "${RUN//./\\.}|/run/containerd|/run/netns|/var/run/netns|/var/lib/kubelet"
  while read -r p; do rmdir "$p" 2>/dev/null || true; done < <(
    find /sys/fs/cgroup/ -depth -type d -path '*/kubepods*' 2>/dev/null)
  ip link del "$BRIDGE" 2>/dev/null || true
  # veths of pods whose network namespace outlived them.
  if [[ -s $STATE/links ]]; then
    for l in $(links | comm -13 "$STATE/links" -); do
      [[ $l == veth* ]] && { ip link del "$l" 2>/dev/null || true; }
    done
  fi
  if [[ -s $STATE/sysctls ]]; then
    while read -r k v; do
      [[ $(sysctl -n "$k") == "$v" ]] || sysctl -q -w "$k=$v" >/dev/null || true
    done <"$STATE/sysctls"
  fi
  if [[ -f $STATE/absent-paths ]]; then
    while read -r p; do
      if [[ -e $p || -L $p ]]; then rm -rf --one-file-system "$p" || true; fi
    done <"$STATE/absent-paths"
  fi
  # What is left that `up` did not find.
  if [[ -s $STATE/sysctls ]]; then
    while read -r k v; do
      [[ $(sysctl -n "$k") == "$v" ]] || left+=("sysctl $k is $(sysctl -n "$k"), was $v")
    done <"$STATE/sysctls"
  fi
  if [[ -f $STATE/absent-paths ]]; then
    while read -r p; do
      if [[ -e $p || -L $p ]]; then left+=("path $p"); fi
    done <"$STATE/absent-paths"
  fi
  if [[ -s $STATE/links ]]; then
    for l in $(links | comm -13 "$STATE/links" -); do left+=("network link $l"); done
  fi
  [[ -n $(find /sys/fs/cgroup/ -type d -path '*/kubepods*' 2>/dev/null | head -1) ]] && left+=("kubepods cgroups")
  [[ -n $(kubepods_procs) ]] && left+=("processes in kubepods cgroups")
  [[ -n $(shims) ]] && left+=("containerd shims: $(shims | tr '\n' ' ')")
  for c in "${COMPONENTS[@]}"; do alive "$c" && left+=("$c (pid $(component_pid "$c"))"); done
  awk '{print $5}' /proc/self/mountinfo | grep -qE "^(${RUN//./\\.})(/|$)" && left+=("mounts under $RUN")
  # What is left keeps $RUN, its record of what to put back: the next `down` (or `up`)
  # tries again from it.
  if ((${#left[@]})); then
    printf 'k8s.sh: left on the host: %s\n' "${left[@]}" >&2
    printf 'k8s.sh: %s is kept for the next down to try again\n' "$RUN" >&2
    return 1
  fi
  rm -rf --one-file-system "$RUN" 2>/dev/null || {
    printf 'k8s.sh: left on the host: %s\n' "$RUN" >&2
    return 1
  }
  return 0
}

down() {
  need_root
  run_lock
  if [[ ! -d $RUN ]]; then
    say "no cluster here ($RUN does not exist)"
    return 0
  fi
  local t0=$SECONDS
  teardown || die 7 "down: some of the cluster is left on the host (above)"
  say "down in $((SECONDS - t0)) s: the host is as up found it"
}

# Packs DIR as image NAME:TAG and imports it into the running cluster's containerd.
image() {
  need_root
  (($# == 2)) || usage
  local name=$1 dir=$2 tmp
  [[ $name == *:* ]] || die 2 "image: NAME must have a tag (NAME:TAG), not '$name'"
  [[ -d $dir ]] || die 2 "image: $dir is not a directory"
  [[ -S $SOCK ]] || die 5 "image: no cluster is up (k8s.sh up first)"
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/k8s-image.XXXXXX")
  oci_archive "$dir" "$tmp/image.tar" "$name"
  import_image "$tmp/image.tar"
  rm -rf "$tmp"
}

with_cluster() {
  (($#)) || usage
  local rc=0 line
  trap 'down >/dev/null || true' EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  while IFS= read -r line; do export "${line?}"; done < <(up)
  [[ -n ${KUBECONFIG:-} ]] || exit 5
  export PATH="$BIN:$PATH"
  "$@" </dev/null || rc=$?
  exit "$rc"
}

case ${1:-} in
  build)
    shift
    (($# == 0)) || usage
    build
    ;;
  up)
    shift
    up "$@"
    ;;
  down)
    shift
    (($# == 0)) || usage
    down
    ;;
  env)
    [[ -e $STATE/up ]] || die 5 "no cluster is up"
    env_lines
    ;;
  image)
    shift
    image "$@"
    ;;
  --)
    shift
    with_cluster "$@"
    ;;
  *) usage ;;
esac
