# The kernel scenarios (sourced by run.sh, which provides g, h, BIN, RUN,
# NS, CAP_PID and the addresses). Each function runs in a subshell with
# `set -e` and ends by printing "SCENARIO <name>: PASS|FAIL|SKIP ...".
# shellcheck shell=bash

GUEST=$KERNEL_GUEST_IP
HOST=$KERNEL_HOST_IP
HOST2=$KERNEL_HOST_IP2
verdict() { echo "SCENARIO $1: $2"; }
# fail NAME WHY: the verdict, and the scenario's end.
fail() { verdict "$1" "FAIL $2"; exit 1; }
# Whether the rpcrdma binary has subcommand $1.
has_cmd() { "$BIN/rpcrdma" "$1" --help >/dev/null 2>&1; }
host_sha() { sha256sum "$1" | cut -c1-64; }
guest_sha() { g "sha256sum '$1' | cut -c1-64"; }

# NFSv3 NULL over RPC-over-RDMA (svcrdma on siw) and over TCP.
scenario_null() {
    h "$BIN/kernel-peer" null --rdma "$GUEST:20049" --count 3 || fail null "NULL over RDMA"
    h "$BIN/kernel-peer" null --tcp "$GUEST:2049" --count 3 || fail null "NULL over TCP"
    verdict null "PASS NFSv3 NULL answered by the kernel over RDMA (no Reply chunk offered) and over TCP"
}

# 50 fresh connections to svcrdma, each with a NULL sent at once: all
# answered within 1 s (siw's passive-side window, RdmaConfig::first_reply_nudge).
scenario_first_call() {
    if [ "${KERNEL_SHOW_RACE:-0}" = 1 ]; then
        echo "without the zero-length RDMA Write (informational):"
        h "$BIN/kernel-peer" first-call "$GUEST:20049" --connections 20 --within-ms 1000 --no-nudge || true
    fi
    h "$BIN/kernel-peer" first-call "$GUEST:20049" --connections 50 --within-ms 1000 \
        || fail first-call "a first call was not answered within 1 s"
    verdict first-call "PASS 50 of 50 first calls answered within 1 s"
}

# Scenario 1: our NFS client (nfs3::client, driven by kernel-peer
# nfs-client) against the kernel's nfsd, over RDMA and over TCP; every
# content compared with sha256 in the guest.
scenario_nfs_client() {
    local d=$RUN/nfs-client; mkdir -p "$d"
    g 'set -e; cd /export
       awk "BEGIN { for (i = 0; i < 131072; i++) printf \"%07x\n\", i }" > big1m
       head -c 33 big1m > f33; head -c 100003 /dev/urandom > odd100003; head -c 4097 /dev/urandom > odd4097
       mkdir -p many; i=0; while [ $i -lt 2000 ]; do : > many/entry$i; i=$((i + 1)); done
       chmod -R a+rwX /export' >/dev/null || fail nfs-client "preparing /export in the guest"
    head -c 1048576 /dev/urandom > "$d/up1m"
    local t port
    for t in rdma tcp; do
        port=20049; [ $t = tcp ] && port=2049
        echo "--- over $t"
        h "$BIN/kernel-peer" nfs-client --transport $t --nfs "$GUEST:$port" --mount "$GUEST:20048" \
            --export /export --out "$d" --tag $t || fail nfs-client "$t: a step failed"
        for f in big1m f33 odd100003; do
            [ "$(host_sha "$d/$f")" = "$(guest_sha "/export/$f")" ] || fail nfs-client "$t: $f read differs"
        done
        [ "$(host_sha "$d/odd4097-tail")" = "$(g 'tail -c 97 /export/odd4097 | sha256sum | cut -c1-64')" ] \
            || fail nfs-client "$t: the read across EOF differs"
        for f in w-sync-$t w-unstable-$t; do
            [ "$(host_sha "$d/up1m")" = "$(guest_sha "/export/$f")" ] || fail nfs-client "$t: $f written differs"
        done
        [ "$(g "readlink /export/link-$t")" = big1m ] || fail nfs-client "$t: the symlink in the guest"
        g "! test -e /export/dir-$t" || fail nfs-client "$t: dir-$t still in the guest"
        echo "contents equal in the guest (sha256) over $t"
    done
    verdict nfs-client "PASS our NFSv3 client against the kernel's nfsd over RDMA and TCP; contents equal on both sides"
}

# Starts rpcrdma nfsd in the namespace, exporting $RUN/export on every
# address of the namespace (10.77.0.1 and 10.77.0.3); sets NFSD_PID.
start_nfsd() {
    mkdir -p "$RUN/export"
    chmod 0777 "$RUN/export"
    # Not through h: $! must be the server itself (ip netns exec execs it).
    ip netns exec "$NS" "$BIN/rpcrdma" nfsd --export "$RUN/export" --listen 0.0.0.0:20049 --tcp-listen 0.0.0.0:2049 \
        --mount-listen 0.0.0.0:20048 --no-root-squash > "$RUN/nfsd-$1.log" 2>&1 &
    NFSD_PID=$!
    for _ in $(seq 100); do grep -q listening "$RUN/nfsd-$1.log" && return 0; sleep 0.1; done
    cat "$RUN/nfsd-$1.log"; return 1
}

# Stops rpcrdma nfsd (SIGTERM: it syncs the export and exits).
stop_nfsd() {
    kill "$NFSD_PID" 2>/dev/null || return 0
    local i; for i in $(seq 100); do kill -0 "$NFSD_PID" 2>/dev/null || return 0; sleep 0.1; done
    kill -9 "$NFSD_PID" 2>/dev/null || true
}

# One pass of scenario 2 through a mount of PROTO (rdma|tcp) of SERVER at
# /mnt/h; TAG names its files; the 4 KiB dd moves MIB MiB.
kernel_client_pass() {
    local proto=$1 server=$2 tag=$3 mib4k=$4 port=20049
    [ "$proto" = tcp ] && port=2049
    g "mkdir -p /mnt/h && mount -t nfs -o vers=3,proto=$proto,port=$port,mountport=20048,mountproto=tcp,nolock $server:/ /mnt/h" \
        || { echo "mount failed"; return 1; }
    g 'grep " /mnt/h " /proc/mounts'
    local bs mib count
    for bs in 1M 4k; do
        mib=16 count=16
        [ $bs = 4k ] && { mib=$mib4k; count=$((mib4k * 256)); }
        g "set -e; head -c $((mib << 20)) /dev/urandom > /tmp/src
           dd if=/tmp/src of=/mnt/h/dd-$tag-$bs bs=$bs count=$count oflag=direct 2>&1 | tail -1
           dd if=/mnt/h/dd-$tag-$bs of=/tmp/back bs=$bs iflag=direct 2>&1 | tail -1
           [ \"\$(sha256sum < /tmp/src)\" = \"\$(sha256sum < /tmp/back)\" ]" || { echo "dd bs=$bs"; return 1; }
        [ "$(host_sha "$RUN/export/dd-$tag-$bs")" = "$(g "sha256sum < /tmp/src | cut -c1-64")" ] \
            || { echo "dd bs=$bs: host file differs"; return 1; }
    done
    g "set -e; cp /tmp/src /mnt/h/cp-$tag; cmp /tmp/src /mnt/h/cp-$tag" || { echo "cp"; return 1; }
    [ "$(host_sha "$RUN/export/cp-$tag")" = "$(g "sha256sum < /tmp/src | cut -c1-64")" ] || { echo "cp: host file differs"; return 1; }
    [ "$(g 'ls -l /mnt/h/many | grep -c entry')" = 2000 ] || { echo "ls -l of 2000 entries"; return 1; }
    g "set -e; cd /mnt/h; mkdir d-$tag; touch d-$tag/t; chmod 600 d-$tag/t
       [ \"\$(stat -c %a d-$tag/t)\" = 600 ]; mv d-$tag/t d-$tag/u; ln -s u d-$tag/l
       [ \"\$(readlink d-$tag/l)\" = u ]; printf 12345 > d-$tag/small
       [ \"\$(dd if=d-$tag/small bs=5 skip=1 2>/dev/null | wc -c)\" = 0 ]" || { echo "name operations"; return 1; }
    [ "$(readlink "$RUN/export/d-$tag/l")" = u ] && [ "$(stat -c %a "$RUN/export/d-$tag/u")" = 600 ] \
        || { echo "name operations not seen on the host"; return 1; }
    g "set -e; cd /mnt/h; rm d-$tag/l d-$tag/u d-$tag/small; rmdir d-$tag; ! test -e d-$tag" || { echo "rm/rmdir"; return 1; }
    if [ "$proto" = rdma ]; then
        # xprtrdma's line: "xprt: rdma" then port, bind, connect, connect
        # time, idle, sends, recvs, bad xids, req_u, bklog_u, then the
        # Read, Write and Reply chunk counts.
        local st; st=$(g "grep -A40 ' mounted on /mnt/h ' /proc/self/mountstats | grep -m1 'xprt:.*rdma'")
        echo "mountstats: $st"
        echo "$st" | awk '{ if ($13 > 0 && $14 > 0 && $15 > 0) exit 0; exit 1 }' \
            || { echo "Read/Write/Reply chunk counters not all above zero"; return 1; }
    fi
    g "umount /mnt/h"
}

# Scenario 2: the kernel's NFS client against rpcrdma nfsd. The 1 KiB
# inline pass mounts the second address, 10.77.0.3, because the kernel
# shares one transport among the mounts of a server address, and the
# rdma_max_inline_* sysctls apply only to a new transport. The 4 KiB dd
# moves 16 MiB in the first pass and 4 MiB in the others (4,096 RPCs of
# 4 KiB take about a minute each way in a TCG guest).
scenario_kernel_client() {
    has_cmd nfsd || { verdict kernel-client "SKIP the rpcrdma binary has no 'nfsd' subcommand yet"; return 0; }
    start_nfsd kernel-client || fail kernel-client "rpcrdma nfsd did not start"
    mkdir -p "$RUN/export/many"
    (cd "$RUN/export/many" && for i in $(seq 0 1999); do : > "entry$i"; done)
    local r=0
    kernel_client_pass rdma "$HOST" rdma 16 || r=1
    [ $r = 0 ] && { kernel_client_pass tcp "$HOST" tcp 4 || r=2; }
    if [ $r = 0 ]; then
        g 'echo 1024 > /proc/sys/sunrpc/rdma_max_inline_read; echo 1024 > /proc/sys/sunrpc/rdma_max_inline_write'
        kernel_client_pass rdma "$HOST2" inline1k 4 || r=3
        g 'echo 4096 > /proc/sys/sunrpc/rdma_max_inline_read; echo 4096 > /proc/sys/sunrpc/rdma_max_inline_write'
    fi
    stop_nfsd
    case $r in
        0) verdict kernel-client "PASS kernel client over RDMA, TCP, and RDMA with 1 KiB inline thresholds" ;;
        1) fail kernel-client "over RDMA" ;;
        2) fail kernel-client "over TCP" ;;
        3) fail kernel-client "over RDMA with rdma_max_inline_read/write 1024" ;;
    esac
}

# Scenario 3: the TCP connection under the kernel client's iWARP stream is
# cut (RST both ways, by a relay in the namespace) during a 64 MiB write
# and a 64 MiB read; the client reconnects and the data is intact.
scenario_cut() {
    has_cmd nfsd || { verdict cut "SKIP the rpcrdma binary has no 'nfsd' subcommand yet"; return 0; }
    start_nfsd cut || fail cut "rpcrdma nfsd did not start"
    ip netns exec "$NS" "$BIN/kernel-peer" cut-relay "$HOST:20050" "$HOST:20049" > "$RUN/relay.log" 2>&1 &
    local relay=$!
    
    sleep 0.5
    g "mkdir -p /mnt/c && mount -t nfs -o vers=3,proto=rdma,port=20050,mountport=20048,mountproto=tcp,nolock $HOST:${KERNEL_NFSD_PATH:-/} /mnt/c" \
        || fail cut "mount through the relay"
    g 'head -c 67108864 /dev/urandom > /tmp/src64; rm -f /tmp/dd.rc
       (dd if=/tmp/src64 of=/mnt/c/cut64 bs=1M oflag=direct > /tmp/dd.log 2>&1; echo $? > /tmp/dd.rc) &'
    local i
    for i in $(seq 600); do
        [ "$(stat -c %s "$RUN/export/cut64" 2>/dev/null || echo 0)" -ge 16777216 ] && break
        sleep 0.1
    done
    kill -USR1 "$relay"
    echo "cut the connection with $(stat -c %s "$RUN/export/cut64") bytes written"
    g 'i=0; while [ ! -f /tmp/dd.rc ] && [ $i -lt 1200 ]; do sleep 0.25; i=$((i + 1)); done; cat /tmp/dd.log; exit $(cat /tmp/dd.rc)' \
        || fail cut "dd did not complete after the cut"
    [ "$(host_sha "$RUN/export/cut64")" = "$(g 'sha256sum < /tmp/src64 | cut -c1-64')" ] || fail cut "written data differs after the cut"
    g 'rm -f /tmp/rd.rc; (dd if=/mnt/c/cut64 of=/tmp/back64 bs=1M iflag=direct > /tmp/rd.log 2>&1; echo $? > /tmp/rd.rc) &'
    sleep 1
    kill -USR1 "$relay"
    g 'i=0; while [ ! -f /tmp/rd.rc ] && [ $i -lt 1200 ]; do sleep 0.25; i=$((i + 1)); done; cat /tmp/rd.log; exit $(cat /tmp/rd.rc)' \
        || fail cut "read did not complete after the cut"
    g 'cmp /tmp/src64 /tmp/back64' || fail cut "read data differs after the cut"
    local cuts; cuts=$(grep -c '^connection ' "$RUN/relay.log")
    g 'umount /mnt/c'
    kill "$relay" 2>/dev/null || true
    stop_nfsd
    [ "$cuts" -ge 3 ] || fail cut "the client did not reconnect twice ($cuts connections)"
    verdict cut "PASS two cuts during 64 MiB transfers; $cuts connections; data intact"
}

# Scenario 4: the tap capture of everything before, judged by wire-check.
scenario_wire() {
    kill -INT "$CAP_PID" 2>/dev/null || true
    local i; for i in $(seq 50); do kill -0 "$CAP_PID" 2>/dev/null || break; sleep 0.1; done
    cat "$RUN/tcpdump.log"
    WIRE_CHECK_WORK_DIR=$RUN "$BIN/wire-check" "$RUN/tap.pcap" > "$RUN/wire-check.txt" 2>&1 \
        && { tail -3 "$RUN/wire-check.txt"; verdict wire "PASS $(grep -E '^wire oracle: ' "$RUN/wire-check.txt")"; return 0; }
    tail -40 "$RUN/wire-check.txt"
    fail wire "see $RUN/wire-check.txt"
}
