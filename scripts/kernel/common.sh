# Shared settings of the kernel harness (sourced by the scripts beside it).
#
# Everything it builds or downloads lives under $KERNEL_DIR (default
# <repo>/target/kernel), so a second run reuses it:
#   dl/        the .debs (linux-image, linux-source)
#   abi        the kernel ABI chosen from what apt offers (e.g. 6.1.0-57-amd64)
#   siw/       siw.ko, built out of tree from linux-source against linux-headers
#   kernel/    the unpacked linux-image package
#   rootfs/    debootstrap output (bookworm minbase + NFS tools)
#   out/       vmlinuz and initramfs.img that qemu boots
#   runs/      one directory per run: guest console, control log, captures

KERNEL_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
KERNEL_DIR=${KERNEL_DIR:-$KERNEL_REPO/target/kernel}
KERNEL_SUITE=${KERNEL_SUITE:-bookworm}
KERNEL_MIRROR=${KERNEL_MIRROR:-http://deb.debian.org/debian}
# Addresses, only ever used inside the harness's own network namespace.
KERNEL_HOST_IP=10.77.0.1
# A second host-side address: a second NFS server address for the guest.
KERNEL_HOST_IP2=10.77.0.3
KERNEL_GUEST_IP=10.77.0.2
KERNEL_TAP=ktap0

klog() { printf '[kernel %4ds] %s\n' "$SECONDS" "$*" >&2; }
kdie() { printf '[kernel] FAIL: %s\n' "$*" >&2; exit 1; }

# Where our binaries come from: the dev profile, which the test suite's
# `cargo test --workspace` has built already.
kernel_bin_dir() { echo "${CARGO_TARGET_DIR:-$KERNEL_REPO/target}/debug"; }
