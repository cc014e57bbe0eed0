#!/usr/bin/env bash
# Builds the guest that the kernel scenarios boot: Debian bookworm's own
# 6.1 kernel, soft-iWARP (siw.ko) built out of tree from the same kernel's
# source (Debian sets "# CONFIG_RDMA_SIW is not set"), and an initramfs
# holding a debootstrap'd bookworm minbase with the kernel NFS server and
# client tools plus the guest scripts of scripts/kernel/guest.
#
# Each step is skipped when its output is already under $KERNEL_DIR (see
# common.sh); the initramfs is rebuilt when a guest script changed.
#
# The kernel ABI (6.1.0-N-amd64) is picked at run time: the newest N for
# which the archive serves linux-headers-6.1.0-N-amd64 and a linux-image
# (signed or -unsigned) of exactly the version of linux-source-6.1, so that
# siw.ko is built from the running kernel's own source. KERNEL_ABI=6.1.0-N-amd64
# pins one instead (the build fails, saying so, when the archive lacks it).
set -euo pipefail
. "$(dirname "$0")/common.sh"
[ "$(id -u)" = 0 ] || kdie "build-guest.sh needs root (apt, debootstrap, chroot)"

HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$KERNEL_DIR"/{dl,out}
cd "$KERNEL_DIR"

apt_updated=0
apt_update() { [ "$apt_updated" = 1 ] || { apt-get update -qq; apt_updated=1; }; }
install_pkgs() {
    DEBIAN_FRONTEND=noninteractive apt-get install -o DPkg::Lock::Timeout=600 -y -qq --no-install-recommends "$@" >/dev/null \
        || { apt_update; DEBIAN_FRONTEND=noninteractive apt-get install -o DPkg::Lock::Timeout=600 -y -qq --no-install-recommends "$@" >/dev/null; }
}
need=()
for t in debootstrap:debootstrap cpio:cpio zstd:zstd xz:xz-utils gcc:gcc make:make; do
    command -v "${t%%:*}" >/dev/null || need+=("${t#*:}")
done
[ -f /usr/include/stdio.h ] || need+=(libc6-dev)
if [ ${#need[@]} -gt 0 ]; then klog "installing ${need[*]}"; install_pkgs "${need[@]}"; fi

candidate() { apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ {print $2}'; }

# 1. The kernel ABI ------------------------------------------------------------
if [ -s abi ] && [ -z "${KERNEL_ABI:-}" ]; then
    ABI=$(cat abi)
else
    [ -n "$(candidate linux-source-6.1)" ] || apt_update
    SRCVER=$(candidate linux-source-6.1)
    [ -n "$SRCVER" ] && [ "$SRCVER" != "(none)" ] || kdie "apt offers no linux-source-6.1 (is the $KERNEL_SUITE archive in sources.list?)"
    ABI=""
    if [ -n "${KERNEL_ABI:-}" ]; then
        cands=$KERNEL_ABI
    else
        cands=$(apt-cache search --names-only '^linux-headers-6\.1\.0-[0-9]+-amd64$' | awk '{print $1}' \
            | sed 's/^linux-headers-//' | sort -t- -k2,2nr)
    fi
    for a in $cands; do
        [ "$(candidate "linux-headers-$a")" = "$SRCVER" ] || continue
        if [ "$(candidate "linux-image-$a")" = "$SRCVER" ]; then IMG=linux-image-$a
        elif [ "$(candidate "linux-image-$a-unsigned")" = "$SRCVER" ]; then IMG=linux-image-$a-unsigned
        else continue; fi
        ABI=$a; break
    done
    [ -n "$ABI" ] || kdie "no kernel ABI ${KERNEL_ABI:-6.1.0-*-amd64} whose linux-image and linux-headers are at linux-source-6.1's version $SRCVER (apt-cache policy linux-image-${KERNEL_ABI:-6.1.0-N-amd64}); set KERNEL_ABI to one the archive serves"
    echo "$ABI" > abi.tmp && mv abi.tmp abi
    klog "kernel ABI $ABI ($IMG, linux-source-6.1 $SRCVER)"
fi

fetch_deb() { # fetch_deb PACKAGE-GLOB PACKAGE...
    local glob=$1; shift
    if [ -z "$(find dl -maxdepth 1 -name "$glob" | head -1)" ]; then
        for p in "$@"; do
            (cd dl && apt-get download "$p" >/dev/null 2>&1) && break
            apt_update
            (cd dl && apt-get download "$p" >/dev/null 2>&1) && break
        done
    fi
    find dl -maxdepth 1 -name "$glob" | head -1
}

# 2. siw.ko ----------------------------------------------------------------------
if [ ! -f siw/siw.ko ] || [ "$(cat siw/abi 2>/dev/null)" != "$ABI" ]; then
    klog "building siw.ko for $ABI"
    [ -d "/usr/src/linux-headers-$ABI" ] || install_pkgs "linux-headers-$ABI" \
        || kdie "cannot install linux-headers-$ABI"
    SRCDEB=$(fetch_deb 'linux-source-6.1_*.deb' linux-source-6.1)
    [ -n "$SRCDEB" ] || kdie "cannot download linux-source-6.1"
    rm -rf siw && mkdir -p siw/src
    # Only the siw driver is taken out of the 140 MB source tarball.
    dpkg-deb --fsys-tarfile "$SRCDEB" | tar -xO ./usr/src/linux-source-6.1.tar.xz | xz -d -T0 \
        | tar -x -C siw/src --strip-components=5 linux-source-6.1/drivers/infiniband/sw/siw
    make -s -C "/usr/src/linux-headers-$ABI" M="$KERNEL_DIR/siw/src" CONFIG_RDMA_SIW=m modules \
        > siw/build.log 2>&1 || { tail -30 siw/build.log >&2; kdie "siw.ko did not build (siw/build.log)"; }
    strip --strip-debug -o siw/siw.ko siw/src/siw.ko
    echo "$ABI" > siw/abi
fi

# 3. The kernel image --------------------------------------------------------------
if [ ! -f "kernel/boot/vmlinuz-$ABI" ]; then
    DEB=$(fetch_deb "linux-image-${ABI}_*.deb" "linux-image-$ABI")
    [ -n "$DEB" ] || DEB=$(fetch_deb "linux-image-${ABI}-unsigned_*.deb" "linux-image-$ABI-unsigned")
    [ -n "$DEB" ] || kdie "cannot download linux-image-$ABI"
    klog "unpacking $DEB"
    rm -rf kernel && mkdir kernel && dpkg-deb -x "$DEB" kernel
fi

# 4. Root file system (debootstrap, cached) ------------------------------------------
PKGS=nfs-kernel-server,nfs-common,rpcbind,iproute2,kmod,procps,util-linux,coreutils
if [ ! -f rootfs/.complete ]; then
    klog "debootstrap $KERNEL_SUITE minbase (+ $PKGS)"
    rm -rf rootfs.tmp
    debootstrap --variant=minbase --include="$PKGS" "$KERNEL_SUITE" rootfs.tmp "$KERNEL_MIRROR" \
        > debootstrap.log 2>&1 || { tail -20 debootstrap.log >&2; kdie "debootstrap failed (debootstrap.log)"; }
    touch rootfs.tmp/.complete
    rm -rf rootfs && mv rootfs.tmp rootfs
fi

# 5. initramfs (rebuilt when the kernel, siw.ko or a guest script changed) ------------
STAMP=$( (echo "$ABI"; sha256sum siw/siw.ko "$HERE"/guest/* ) | sha256sum | cut -c1-16)
if [ "$(cat out/stamp 2>/dev/null)" != "$STAMP" ] || [ ! -f out/initramfs.img ]; then
    klog "packing the initramfs"
    rm -rf stage && cp -a rootfs stage && rm -f stage/.complete
    M=stage/usr/lib/modules/$ABI
    mkdir -p "$M/extra"
    cp -a "kernel/lib/modules/$ABI/." "$M/"
    cp siw/siw.ko "$M/extra/siw.ko"
    chroot stage depmod "$ABI"
    # Keep only the modules the guest loads and what they depend on.
    WANT="virtio_pci virtio_net siw iw_cm ib_cm rdma_cm crc32c_generic libcrc32c rpcrdma nfs nfsv3 nfsd"
    # shellcheck disable=SC2086
    chroot stage modprobe -a -S "$ABI" --show-depends $WANT | awk '$1 == "insmod" {print $2}' \
        | sed 's|^/lib/|/usr/lib/|' | sort -u > keep.txt
    [ "$(wc -l < keep.txt)" -ge 10 ] || kdie "module dependencies not resolved"
    (cd stage && find "usr/lib/modules/$ABI/kernel" -name '*.ko*' | sed 's|^|/|' | sort) > all.txt
    comm -23 all.txt keep.txt | sed 's|^/|stage/|' | xargs -r rm -f
    rm -f keep.txt all.txt
    find "$M/kernel" -type d -empty -delete
    chroot stage depmod "$ABI"
    rm -rf stage/usr/share/{doc,man,info,locale,zoneinfo} stage/var/cache/apt/* stage/var/lib/apt/lists/*
    install -m 0755 "$HERE/guest/init" stage/init
    mkdir -p stage/kernel-harness
    install -m 0755 "$HERE"/guest/*.sh stage/kernel-harness/
    : > stage/etc/fstab
    (cd stage && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) \
        | zstd -q -T0 -10 > out/initramfs.img.tmp
    mv out/initramfs.img.tmp out/initramfs.img
    rm -rf stage
    echo "$STAMP" > out/stamp
fi
cp "kernel/boot/vmlinuz-$ABI" out/vmlinuz
klog "guest ready: $ABI, initramfs $(du -h out/initramfs.img | cut -f1)"
