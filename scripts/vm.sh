#!/usr/bin/env bash
# vm.sh — run a command inside a small virtual machine (KVM where the machine has
# it, else qemu's software emulation) whose kernel uses cgroup v2 only (unified hierarchy, every controller on v2), and hand back the
# command's standard output, standard error and exit status.
#
#   vm.sh [--share DIR]... -- COMMAND ARGS...
#
# Every --share DIR (and the current directory) appears inside the VM at the
# same absolute path (virtio-9p); COMMAND runs in the current directory, as
# root, with standard input from /dev/null.
#
# Exit status: COMMAND's own; 125 when vm.sh or the VM failed (the message
# says what); 77 when VM_ACCEL=kvm and this machine has no usable KVM.
#
# Environment:
#   VM_TIMEOUT    seconds before qemu is killed (default 600)
#   VM_BOOT_TIMEOUT  seconds for the guest to reach its init (default 180); a boot
#                 that hangs before is stopped and tried once more
#   VM_MEMORY     guest memory (default 2G)     VM_CPUS  guest CPUs (default 2)
#   VM_ACCEL      kvm: KVM or exit 77; tcg: software emulation; auto (default):
#                 KVM where it can boot a stock kernel, else software emulation
#   VM_CACHE_DIR  where the image is cached (default /var/cache/memtrial-vm)
#   VM_KEEP       keep the scratch directory (console log etc.) for debugging
#
# The first run installs qemu and debootstrap with apt-get and builds a Debian
# 12 root file system with Debian's own kernel into the cache; later runs only
# boot it. The guest's disk is opened with snapshot=on: nothing a run writes
# to / survives it, only what it writes into shared directories.
set -euo pipefail

# Bump when GUEST_PACKAGES or the guest's stage-1 init change: a new version
# builds a new cache entry (old ones can be deleted by hand).
readonly IMAGE_VERSION=2
readonly SUITE=bookworm
readonly GUEST_PACKAGES=(
  linux-image-amd64 kmod util-linux procps iproute2 python3
  libjemalloc2 libtcmalloc-minimal4 libmimalloc2.0
)
readonly CACHE_ROOT=${VM_CACHE_DIR:-/var/cache/memtrial-vm}
readonly CACHE=$CACHE_ROOT/$SUITE-v$IMAGE_VERSION
readonly VM_TIMEOUT=${VM_TIMEOUT:-600}
readonly VM_BOOT_TIMEOUT=${VM_BOOT_TIMEOUT:-180}
readonly VM_MEMORY=${VM_MEMORY:-2G}
readonly VM_CPUS=${VM_CPUS:-2}
readonly VM_ACCEL=${VM_ACCEL:-auto}
readonly SCRATCH_TAG=vmsh           # 9p tag of the per-run scratch directory
readonly SCRATCH_GUEST=/.vmsh       # where the guest mounts it

die() { echo "vm.sh: $*" >&2; exit 125; }

usage() {
  echo "usage: vm.sh [--share DIR]... -- COMMAND ARGS..." >&2
  exit 125
}

# ---------------------------------------------------------------- arguments
shares=()
while (($#)); do
  case $1 in
    --share) (($# >= 2)) || usage; shares+=("$2"); shift 2 ;;
    --share=*) shares+=("${1#--share=}"); shift ;;
    --) shift; break ;;
    -h | --help) sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;;
    *) usage ;;
  esac
done
(($#)) || usage
[[ $VM_TIMEOUT =~ ^[0-9]+$ ]] || die "VM_TIMEOUT must be a number of seconds, not '$VM_TIMEOUT'"
[[ $VM_BOOT_TIMEOUT =~ ^[0-9]+$ ]] || die "VM_BOOT_TIMEOUT must be a number of seconds, not '$VM_BOOT_TIMEOUT'"

# Why KVM cannot run a stock kernel here, or nothing when it can. Besides a
# missing /dev/kvm: some sandboxes expose a /dev/kvm backed by PVM (kvm_pvm:
# no vmx/svm CPU flag), which only boots PVM-enabled guest kernels; Debian's
# kernel hangs there at 100% CPU before printing anything.
kvm_problem() {
  if [[ ! -e /dev/kvm ]]; then
    echo "/dev/kvm is missing (no KVM on this machine)"
  elif [[ ! -r /dev/kvm || ! -w /dev/kvm ]]; then
    echo "/dev/kvm is not readable and writable by $(id -un)"
  elif ! grep -qwE 'vmx|svm' /proc/cpuinfo; then
    echo "/dev/kvm has no hardware virtualisation behind it (no vmx/svm CPU flag$([[ -d /sys/module/kvm_pvm ]] && echo ', kvm_pvm'))"
  fi
}
# shellcheck disable=SC2054  # commas belong to qemu's option syntax
case $VM_ACCEL in
  kvm)
    problem=$(kvm_problem)
    if [[ -n $problem ]]; then echo "vm.sh: skipped: $problem" >&2; exit 77; fi
    accel_args=(-enable-kvm -cpu host) ;;
  tcg) accel_args=(-accel tcg,thread=multi -cpu max) ;;
  auto)
    if [[ -z $(kvm_problem) ]]; then
      accel_args=(-enable-kvm -cpu host)
    else
      accel_args=(-accel tcg,thread=multi -cpu max)
    fi ;;
  *) die "VM_ACCEL must be auto, kvm or tcg, not '$VM_ACCEL'" ;;
esac

# ---------------------------------------------------------------- host set-up
apt_install() {
  # Non-interactive install of Debian packages on the host.
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq </dev/null
  apt-get install -y -qq --no-install-recommends "$@" </dev/null
}

ensure_host_tools() {
  local need=()
  command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
  command -v mkfs.ext4 >/dev/null || need+=(e2fsprogs)
  command -v flock >/dev/null || need+=(util-linux)
  if [[ ! -f $CACHE/ok ]]; then
    command -v debootstrap >/dev/null || need+=(debootstrap)
  fi
  ((${#need[@]} == 0)) && return 0
  echo "vm.sh: installing ${need[*]} (once)" >&2
  local log=$CACHE_ROOT/install.log
  mkdir -p "$CACHE_ROOT"
  apt_install "${need[@]}" >"$log" 2>&1 ||
    { tail -n 20 "$log" >&2; die "apt-get install ${need[*]} failed (log: $log)"; }
}

# The Debian mirror the host's apt uses for $SUITE (from its enabled sources).
host_mirror() {
  local uri
  uri=$(apt-cache policy 2>/dev/null |
    awk -v s="$SUITE/main" '$3 == s && $2 ~ /^https?:\/\// { print $2; exit }')
  echo "${uri:-http://deb.debian.org/debian}"
}

# The guest's stage-1 init, installed into the image as /memtrial-init. It only
# mounts the per-run scratch share and hands over to the run's own script
# (guest.sh, written by write_guest_script), so the image rarely changes.
stage1_init() {
  cat <<EOF
#!/bin/sh
# memtrial VM stage-1 init (written by vm.sh, image version $IMAGE_VERSION)
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH
mountpoint -q /proc || mount -t proc proc /proc
mountpoint -q /sys || mount -t sysfs sysfs /sys
mountpoint -q /dev || mount -t devtmpfs devtmpfs /dev
modprobe -q 9pnet_virtio && modprobe -q 9p
mkdir -p $SCRATCH_GUEST
if ! mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 $SCRATCH_TAG $SCRATCH_GUEST; then
  echo "memtrial-init: cannot mount the scratch share" >&2
  echo o >/proc/sysrq-trigger
fi
exec /bin/bash $SCRATCH_GUEST/guest.sh
EOF
}

build_image() {
  mkdir -p "$CACHE_ROOT"
  # One build at a time; whoever waited here finds the finished cache.
  exec 9>"$CACHE_ROOT/.lock"
  flock 9
  if [[ -f $CACHE/ok ]]; then exec 9>&-; return 0; fi
  # Leftovers of interrupted builds and images of other versions. A build killed inside
  # debootstrap or its chroot left the tree's proc, sys and dev mounted: those go first
  # (deepest first), and rm stays on the cache's file system whatever is still mounted.
  local m
  while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
  done < <(awk '{print $5}' /proc/self/mountinfo | grep -F "$CACHE_ROOT/" | sort -r)
  rm -rf --one-file-system "$CACHE" "$CACHE_ROOT"/.build.* "$CACHE_ROOT/$SUITE"-v*

  local tmp mirror mib kdir log=$CACHE_ROOT/build.log
  tmp=$(mktemp -d "$CACHE_ROOT/.build.XXXXXX")
  mirror=$(host_mirror)
  echo "vm.sh: building the VM image in $CACHE from $mirror (once; log: $log)" >&2
  local rc=0
  set +e
  (
    set -ex
    debootstrap --variant=minbase --components=main \
      --include="$(IFS=,; echo "${GUEST_PACKAGES[*]}")" \
      "$SUITE" "$tmp/root" "$mirror"
    stage1_init >"$tmp/root/memtrial-init"
    chmod 755 "$tmp/root/memtrial-init"
    echo memtrial-vm >"$tmp/root/etc/hostname"
    : >"$tmp/root/etc/fstab"
    # A small initrd (only what mounting a virtio disk needs, plus 9p) boots
    # faster than Debian's MODULES=most one, notably under software emulation.
    sed -i 's/^MODULES=.*/MODULES=list/' "$tmp/root/etc/initramfs-tools/initramfs.conf"
    printf '%s\n' virtio_pci virtio_blk ext4 9pnet_virtio 9p >>"$tmp/root/etc/initramfs-tools/modules"
    # Drop the modules of hardware a qemu guest never has (about 200 MB).
    kdir=$(echo "$tmp"/root/lib/modules/*)
    rm -rf "$kdir"/kernel/sound "$kdir"/kernel/drivers/{gpu,media,infiniband,iio,usb,staging,bluetooth,hwmon,net/wireless,net/ethernet}
    chroot "$tmp/root" depmod -a "$(basename "$kdir")"
    chroot "$tmp/root" update-initramfs -u -k all
    # The kernel and initrd are booted directly by qemu (-kernel/-initrd).
    cp "$tmp"/root/boot/vmlinuz-* "$tmp/vmlinuz"
    cp "$tmp"/root/boot/initrd.img-* "$tmp/initrd.img"
    basename "$tmp"/root/boot/vmlinuz-* | sed 's/^vmlinuz-//' >"$tmp/kernel-release"
    rm -rf "$tmp"/root/var/cache/apt/archives/*.deb "$tmp"/root/var/lib/apt/lists/*
    # ext4 image sized to the tree plus room for the run's writes (which go to
    # a throw-away qemu snapshot anyway).
    mib=$(du -sm "$tmp/root" | cut -f1)
    mkfs.ext4 -q -F -L memtrial-root -d "$tmp/root" "$tmp/rootfs.img" "$((mib * 5 / 4 + 256))M"
    rm -rf "$tmp/root"
    echo "$IMAGE_VERSION" >"$tmp/ok"
  ) >"$log" 2>&1
  rc=$?
  set -e
  if ((rc != 0)); then
    tail -n 20 "$log" >&2
    die "building the VM image failed (log: $log; partial build in $tmp)"
  fi
  mv -T "$tmp" "$CACHE"   # atomic: the cache exists only once complete
  exec 9>&-
}

ensure_host_tools
[[ -f $CACHE/ok ]] || build_image

# ---------------------------------------------------------------- the run
# Directories to share: --share ones plus the working directory, canonical,
# parents before children, without duplicates.
cwd=$(pwd -P)
declare -a dirs=()
for d in "${shares[@]}"; do
  r=$(realpath -e -- "$d" 2>/dev/null) || die "--share $d: no such directory"
  [[ -d $r ]] || die "--share $d: not a directory"
  [[ $r != / ]] || die "--share /: cannot share the root directory"
  dirs+=("$r")
done
cwd_shared=no
for r in "${dirs[@]}"; do
  [[ $cwd == "$r" || $cwd == "$r"/* ]] && cwd_shared=yes
done
[[ $cwd == / || $cwd_shared == yes ]] || dirs+=("$cwd")
if ((${#dirs[@]})); then
  mapfile -t dirs < <(printf '%s\n' "${dirs[@]}" | LC_ALL=C sort -u)
fi

# What a vm.sh killed midway left (SIGKILL skips its EXIT trap): its qemu, which runs on
# until VM_TIMEOUT and takes both cores from whatever runs next, and its scratch directory.
# A scratch directory whose owner is gone is removed, its qemu (named by the pidfile, and
# only if that process is a qemu of this directory) killed first; each is said.
remove_left_scratch() {
  local d owner qpid
  for d in "${TMPDIR:-/tmp}"/vmsh.*; do
    [[ -f $d/owner ]] || continue
    owner=$(<"$d/owner")
    [[ -d /proc/${owner%% *} && $(cut -d' ' -f22 "/proc/${owner%% *}/stat" 2>/dev/null) == "${owner#* }" ]] && continue
    qpid=$(cat "$d/qemu.pid" 2>/dev/null || true)
    if [[ $qpid =~ ^[0-9]+$ ]] && tr '\0' ' ' <"/proc/$qpid/cmdline" 2>/dev/null | grep -qF "$d/"; then
      kill -KILL "$qpid" 2>/dev/null && echo "vm.sh: killed qemu $qpid, left running by a vm.sh that was killed ($d)" >&2
    fi
    [[ -n ${VM_KEEP:-} ]] || { rm -rf "$d" && echo "vm.sh: removed $d, left by a vm.sh that was killed" >&2; }
  done
}
remove_left_scratch

scratch=$(mktemp -d "${TMPDIR:-/tmp}/vmsh.XXXXXX")
# The owner (PID and start time), for a later vm.sh to tell this one's leftovers.
echo "$$ $(cut -d' ' -f22 /proc/$$/stat)" >"$scratch/owner"
qemu_pid=
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
  [[ -n $qemu_pid ]] && kill "$qemu_pid" 2>/dev/null
  if [[ -n ${VM_KEEP:-} ]]; then echo "vm.sh: kept $scratch" >&2; else rm -rf "$scratch"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The run's stage-2 init, executed by /memtrial-init from the scratch share.
write_guest_script() {
  local i
  {
    cat <<EOF
#!/bin/bash
# memtrial VM stage-2 init (written by vm.sh for one run)
set -u
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C.UTF-8 TERM=dumb
S=$SCRATCH_GUEST
cat /proc/uptime >"\$S/booted"
poweroff() { sync; echo o >/proc/sysrq-trigger; sleep 10; }
fail() { echo "\$*" >"\$S/guest-error"; poweroff; }
9p() { mkdir -p "\$2" && mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 "\$1" "\$2"; }

# cgroup v2 at the usual place, every controller enabled for child cgroups.
mount -t cgroup2 -o nsdelegate cgroup2 /sys/fs/cgroup || fail "cannot mount cgroup2"
for c in \$(cat /sys/fs/cgroup/cgroup.controllers); do
  echo "+\$c" >/sys/fs/cgroup/cgroup.subtree_control || fail "cannot enable the \$c controller"
done
mkdir -p /dev/pts /dev/shm
mountpoint -q /dev/pts || mount -t devpts -o gid=5,mode=620 devpts /dev/pts
mountpoint -q /dev/shm || mount -t tmpfs -o mode=1777 tmpfs /dev/shm
mountpoint -q /run || mount -t tmpfs -o mode=755 tmpfs /run
mount -t tmpfs -o mode=1777 tmpfs /tmp || fail "cannot mount /tmp"
ip link set lo up || fail "cannot bring up lo"
hostname memtrial-vm
ln -sf /proc/self/fd /dev/fd 2>/dev/null

# Shared directories, at the host's paths.
EOF
    for i in "${!dirs[@]}"; do
      printf '9p s%d %q || fail %q\n' "$i" "${dirs[$i]}" "cannot mount the share ${dirs[$i]}"
    done
    printf 'cd %q || fail %q\n' "$cwd" "cannot enter $cwd"
    # What runs, every 20 s, for a run that times out to show where it stood.
    # shellcheck disable=SC2016  # expanded by the guest
    echo '( while sleep 20; do { cat /proc/uptime; ps -eo pid,ppid,stat,etimes,wchan:24,args --forest; } >"$S/ps.new" 2>&1 && mv "$S/ps.new" "$S/ps.txt"; done ) &'
    printf '%q ' "$@"
    # shellcheck disable=SC2016  # $S is expanded by the guest
    printf '<%s >"$S/stdout" 2>"$S/stderr"\n' /dev/null
    cat <<'EOF'
echo $? >"$S/rc"
poweroff
EOF
  } >"$scratch/guest.sh"
}
write_guest_script "$@"
: >"$scratch/stdout"
: >"$scratch/stderr"

# quiet/loglevel=4 keep the console to warnings (an OOM kill, a hung task); panic=-1 with -no-reboot ends qemu
# should the guest's init ever die.
kernel_cmdline="root=/dev/vda rw rootfstype=ext4 fsck.mode=skip init=/memtrial-init"
kernel_cmdline+=" console=ttyS0 quiet loglevel=4 panic=-1"
kernel_cmdline+=" systemd.unified_cgroup_hierarchy=1 cgroup_no_v1=all"
qemu_args=(
  "${accel_args[@]}" -m "$VM_MEMORY" -smp "$VM_CPUS"
  -nodefaults -nographic -monitor none -serial "file:$scratch/console.log"
  -nic none -no-reboot -pidfile "$scratch/qemu.pid"
  -kernel "$CACHE/vmlinuz" -initrd "$CACHE/initrd.img"
  -append "$kernel_cmdline"
  -drive "file=$CACHE/rootfs.img,format=raw,if=virtio,snapshot=on"
  -virtfs "local,path=${scratch//,/,,},mount_tag=$SCRATCH_TAG,security_model=passthrough"
)
for i in "${!dirs[@]}"; do
  qemu_args+=(-virtfs "local,path=${dirs[$i]//,/,,},mount_tag=s$i,security_model=passthrough")
done

# One boot, its output streamed while it runs (each tail stops once qemu is gone).
# Sets qemu_rc. `--foreground` keeps timeout and qemu in this script's process group:
# without it timeout makes a group of its own, and a killed suite's group (CI's, or
# kill_suite.py's SIGKILL) left qemu running until VM_TIMEOUT.
boot() {
  timeout --foreground --kill-after=10 "$VM_TIMEOUT" qemu-system-x86_64 "${qemu_args[@]}" \
    </dev/null >"$scratch/qemu.log" 2>&1 &
  qemu_pid=$!
  tail -q -n +1 --pid="$qemu_pid" -f "$scratch/stdout" &
  tail_out=$!
  tail -q -n +1 --pid="$qemu_pid" -f "$scratch/stderr" >&2 &
  tail_err=$!
  # A guest that has not reached its init within VM_BOOT_TIMEOUT hung while booting
  # (seen once under software emulation: a run killed at VM_TIMEOUT with no output): qemu
  # is stopped and the caller boots again. Past its init, only VM_TIMEOUT applies.
  local waited=0
  boot_hung=no
  while [[ ! -e $scratch/booted ]] && kill -0 "$qemu_pid" 2>/dev/null; do
    if ((waited >= VM_BOOT_TIMEOUT)); then
      boot_hung=yes
      kill "$qemu_pid" 2>/dev/null || true
      break
    fi
    sleep 1
    waited=$((waited + 1))
  done
  qemu_rc=0
  wait "$qemu_pid" || qemu_rc=$?
  qemu_pid=
  wait "$tail_out" "$tail_err" || true
}
boot
if [[ $boot_hung == yes ]]; then
  echo "vm.sh: the guest did not reach its init within ${VM_BOOT_TIMEOUT}s (VM_BOOT_TIMEOUT); its console:" >&2
  tr -d '\r' <"$scratch/console.log" | tail -n 15 | sed 's/^/vm.sh: console: /' >&2
  echo "vm.sh: booting it once more" >&2
  : >"$scratch/console.log"
  boot
  [[ $boot_hung == yes ]] && die "the guest did not reach its init within ${VM_BOOT_TIMEOUT}s twice (console: above)"
fi

if ((qemu_rc == 124 || qemu_rc == 137)); then
  # Where it stood: the console's last lines (boot or the guest's kernel messages) and
  # how far the command got (its output so far was streamed above).
  tr -d '\r' <"$scratch/console.log" | tail -n 25 | sed 's/^/vm.sh: console: /' >&2
  if [[ -s $scratch/booted ]]; then
    echo "vm.sh: the guest reached its init $(cut -d' ' -f1 "$scratch/booted") s after boot; what ran there last (uptime, then ps):" >&2
    [[ -s $scratch/ps.txt ]] && grep -v ' \\_ \[' "$scratch/ps.txt" | sed 's/^/vm.sh: ps: /' >&2 || true
  fi
  echo "vm.sh: the command's standard output had $(wc -l <"$scratch/stdout") lines, its last: $(tail -n 1 "$scratch/stdout")" >&2
  die "the VM timed out after ${VM_TIMEOUT}s (VM_TIMEOUT) and qemu was killed"
fi
if ((qemu_rc != 0)); then
  sed 's/^/vm.sh: qemu: /' "$scratch/qemu.log" | tail -n 10 >&2
  die "qemu failed with exit status $qemu_rc"
fi
if [[ -s $scratch/guest-error ]]; then
  die "VM set-up failed: $(cat "$scratch/guest-error")"
fi
if [[ ! -s $scratch/rc ]]; then
  tr -d '\r' <"$scratch/console.log" | tail -n 15 | sed 's/^/vm.sh: console: /' >&2
  die "the VM stopped without reporting the command's exit status (console above)"
fi
rc=$(<"$scratch/rc")
[[ $rc =~ ^[0-9]+$ ]] || die "the VM reported a malformed exit status '$rc'"
exit "$rc"
