#!/usr/bin/env bash
# The Linux kernel as a peer: Debian bookworm's 6.1 kernel in qemu, with
# soft-iWARP (siw) on its NIC, against this workspace's RPC-over-RDMA stack.
#
#   scripts/kernel/run.sh                 every scenario
#   scripts/kernel/run.sh null first-call one or more scenarios
#   scripts/kernel/run.sh shell           boot the guest and keep it up for
#                                         debugging (prints how to reach it)
#   KEEP=1 scripts/kernel/run.sh ...      keep the guest up after the scenarios
#
# Scenarios (scenarios.sh): null, first-call, nfs-client, kernel-client,
# cut, wire. Each ends with "SCENARIO <name>: PASS|FAIL|SKIP <why>"; the run
# ends with "kernel: N passed, N failed, N skipped" and exits non-zero when
# one failed.
#
# Needs root, /dev/net/tun and network namespaces; installs qemu-system-x86,
# tcpdump and tshark with apt when they are missing. When it cannot run it
# fails under CI=true and otherwise skips (exit 0), naming what is missing.
#
# The guest's NIC is a tap inside a network namespace this script creates
# and always deletes; our binaries run inside that namespace (host side
# 10.77.0.1, guest 10.77.0.2). Nothing touches the host's own interfaces.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/common.sh"
cd "$KERNEL_REPO"
T0=$SECONDS

# --- Can it run here? --------------------------------------------------------------
cannot() {
    if [ "${CI:-}" = true ]; then
        echo "kernel scenarios: FAIL: cannot run: $*" >&2; exit 1
    fi
    echo "kernel scenarios: SKIP: cannot run here: $*" >&2
    exit 0
}
[ "$(id -u)" = 0 ] || cannot "not root (network namespace, tap, debootstrap)"
[ -c /dev/net/tun ] || cannot "no /dev/net/tun"
command -v ip >/dev/null || cannot "no ip (iproute2)"
need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
command -v tcpdump >/dev/null || need+=(tcpdump)
command -v tshark >/dev/null || need+=(tshark)
if [ ${#need[@]} -gt 0 ]; then
    klog "installing ${need[*]}"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -o DPkg::Lock::Timeout=600 \
        -y -qq --no-install-recommends "${need[@]}" >/dev/null; } || cannot "cannot install ${need[*]} with apt"
fi
command -v qemu-system-x86_64 >/dev/null || cannot "no qemu-system-x86_64"
probe_ns=kprobe-$$
ip netns add "$probe_ns" 2>/dev/null || cannot "cannot create a network namespace (ip netns add)"
ip netns del "$probe_ns"

# --- Artifacts ------------------------------------------------------------------------
"$HERE/build-guest.sh"
klog "building kernel-peer, rpcrdma and wire-check"
cargo build -q -p kernel-peer -p rpcrdma-cli -p wire-check
BIN=$(kernel_bin_dir)
T_BUILD=$((SECONDS - T0))

# --- Namespace, tap, capture, guest ----------------------------------------------------
RUN=$KERNEL_DIR/runs/$(date -u +%Y%m%dT%H%M%S)-$$
mkdir -p "$RUN"
ln -sfn "$RUN" "$KERNEL_DIR/runs/latest"
NS=kharness-$$
QEMU_PID='' CAP_PID=''
cleanup() {
    set +e
    for p in $CAP_PID; do kill -INT "$p" 2>/dev/null; done
    [ -n "$QEMU_PID" ] && kill "$QEMU_PID" 2>/dev/null
    sleep 0.5
    [ -n "$QEMU_PID" ] && kill -9 "$QEMU_PID" 2>/dev/null
    # Whatever else still runs in the namespace was started by a scenario.
    for p in $(ip netns pids "$NS" 2>/dev/null); do kill "$p" 2>/dev/null; done
    sleep 0.5
    for p in $(ip netns pids "$NS" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
    ip netns del "$NS" 2>/dev/null
    wait 2>/dev/null
}
trap cleanup EXIT
trap 'exit 130' INT TERM
ip netns add "$NS"
ip -n "$NS" link set lo up
ip -n "$NS" tuntap add dev "$KERNEL_TAP" mode tap
ip -n "$NS" addr add "$KERNEL_HOST_IP/24" dev "$KERNEL_TAP"
ip -n "$NS" addr add "$KERNEL_HOST_IP2/24" dev "$KERNEL_TAP"
ip -n "$NS" link set "$KERNEL_TAP" up
ip netns exec "$NS" tcpdump -i "$KERNEL_TAP" -s 0 -U -w "$RUN/tap.pcap" 2>"$RUN/tcpdump.log" &
CAP_PID=$!
# boot ACCEL CPU: starts qemu in the namespace; sets QEMU_PID.
boot() {
    rm -f "$RUN/console.log"
    ip netns exec "$NS" qemu-system-x86_64 -machine pc -accel "$1" -cpu "$2" -smp 2 -m "${KERNEL_MEM:-1536}" \
        -display none -monitor none -no-reboot -nodefaults \
        -kernel "$KERNEL_DIR/out/vmlinuz" -initrd "$KERNEL_DIR/out/initramfs.img" \
        -append "console=ttyS0 panic=-1 quiet harness.ip=$KERNEL_GUEST_IP/24 harness.peer=$KERNEL_HOST_IP" \
        -serial "file:$RUN/console.log" \
        -chardev "socket,id=ctl,path=$RUN/ctl.sock,server=on,wait=off" -serial chardev:ctl \
        -netdev "tap,id=n0,ifname=$KERNEL_TAP,script=no,downscript=no" \
        -device virtio-net-pci,netdev=n0,mac=52:54:00:77:00:02 > "$RUN/qemu-$1.log" 2>&1 &
    QEMU_PID=$!
}
T_BOOT0=$SECONDS
ACCEL=tcg
# KVM when /dev/kvm is usable: qemu must not fail at once (nested KVM
# without all of the host CPU's MSRs makes it abort), else TCG.
if [ "${KERNEL_ACCEL:-auto}" != tcg ] && [ -r /dev/kvm ] && [ -w /dev/kvm ]; then
    boot kvm host
    sleep 3
    if kill -0 "$QEMU_PID" 2>/dev/null; then ACCEL=kvm; else
        klog "KVM unusable ($(head -1 "$RUN/qemu-kvm.log")): TCG"
    fi
fi
[ "$ACCEL" = kvm ] || boot tcg max
klog "booting the guest ($ACCEL) in namespace $NS; logs in $RUN"
for _ in $(seq 1200); do
    grep -a -q 'HARNESS ready' "$RUN/console.log" 2>/dev/null && break
    kill -0 "$QEMU_PID" 2>/dev/null || { cat "$RUN/qemu-$ACCEL.log" >&2; kdie "qemu exited during boot"; }
    sleep 0.25
done
grep -a -q 'HARNESS ready' "$RUN/console.log" || { tail -30 "$RUN/console.log" >&2; kdie "the guest did not come up within 300 s"; }
T_BOOT=$((SECONDS - T_BOOT0))
grep -a 'HARNESS' "$RUN/console.log" | tr -d '\r' >&2
if grep -a -q 'HARNESS ERROR' "$RUN/console.log"; then kdie "the guest reported an error (above)"; fi
klog "guest up in ${T_BOOT}s"

# Guest and namespace access for the scenarios and for debugging.
g() { "$BIN/kernel-peer" guest --socket "$RUN/ctl.sock" --timeout "${GTIMEOUT:-300}" -- "$*"; }
h() { ip netns exec "$NS" "$@"; }
cat > "$RUN/env.sh" <<EOT
# source this file to reach the guest: g 'CMD' runs CMD in the guest, h CMD in the namespace
g() { "$BIN/kernel-peer" guest --socket "$RUN/ctl.sock" --timeout \${GTIMEOUT:-300} -- "\$*"; }
h() { ip netns exec "$NS" "\$@"; }
EOT

if [ "${1:-}" = shell ]; then
    echo "guest up; in another shell: . $RUN/env.sh; then g 'cat /proc/fs/nfsd/portlist' or h ip addr."
    echo "guest console: $RUN/console.log. Press Enter (or send SIGTERM) to stop it and delete the namespace."
    read -r _ || sleep infinity
    exit 0
fi

. "$HERE/scenarios.sh"
SCENARIOS=("$@")
[ ${#SCENARIOS[@]} -gt 0 ] || SCENARIOS=(null first-call nfs-client kernel-client cut wire)
PASSED=0 FAILED=0 SKIPPED=0
for s in "${SCENARIOS[@]}"; do
    fn="scenario_${s//-/_}"
    declare -F "$fn" >/dev/null || kdie "no scenario '$s'"
    echo
    echo "===== scenario $s"
    t=$SECONDS
    set +e
    ( set -e; "$fn" ) 2>&1 | tee "$RUN/scenario-$s.log"
    set -e
    v=$(grep -a "^SCENARIO $s: " "$RUN/scenario-$s.log" | tail -1)
    case "$v" in
        "SCENARIO $s: PASS"*) PASSED=$((PASSED + 1)) ;;
        "SCENARIO $s: SKIP"*) SKIPPED=$((SKIPPED + 1)) ;;
        *) FAILED=$((FAILED + 1)); [ -n "$v" ] || echo "SCENARIO $s: FAIL (no verdict)" ;;
    esac
    echo "(scenario $s took $((SECONDS - t)) s)"
done

g 'dmesg' > "$RUN/dmesg.txt" 2>&1 || true
echo
echo "kernel timings: artifacts and build ${T_BUILD}s, boot ${T_BOOT}s, total $((SECONDS - T0))s; logs in $RUN"
grep -a -h '^SCENARIO ' "$RUN"/scenario-*.log || true
echo "kernel: $PASSED passed, $FAILED failed, $SKIPPED skipped"
if [ "${KEEP:-0}" = 1 ]; then
    echo "KEEP=1: guest up; . $RUN/env.sh to reach it; Enter to stop."
    read -r _ || sleep infinity
fi
[ "$FAILED" = 0 ]
