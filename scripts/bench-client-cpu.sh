#!/usr/bin/env bash
# Client CPU per GB and throughput of GET/PUT 1 MiB over RPC-over-RDMA vs our
# RPC over TCP, measured in the same run with the CLI: one `rpcrdma serve`
# process, and `rpcrdma bench --json` as a separate client process (its CPU
# is CLOCK_PROCESS_CPUTIME_ID of the client alone). Rounds alternate RDMA and
# TCP; medians and their ratios are printed.
#
#   scripts/bench-client-cpu.sh            # 5 rounds x 3 s, depth 4
#   ROUNDS=7 SECS=2 DEPTH=1 scripts/bench-client-cpu.sh
#   MPA_CRC=off scripts/bench-client-cpu.sh # RDMA without the MPA CRC (both ends)
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS="${ROUNDS:-5}"
SECS="${SECS:-3}"
DEPTH="${DEPTH:-4}"
SIZE="${SIZE:-1MiB}"
PORT_RDMA="${PORT_RDMA:-20449}"
PORT_TCP="${PORT_TCP:-20450}"
MPA_CRC="${MPA_CRC:-on}"
CRC_ARGS=()
[ "$MPA_CRC" = off ] && CRC_ARGS=(--no-mpa-crc)

cargo build --release -q -p rpcrdma-cli
BIN="${CARGO_TARGET_DIR:-target}/release/rpcrdma"
OUT="$(mktemp -d)"
"$BIN" serve "${CRC_ARGS[@]}" --listen "127.0.0.1:$PORT_RDMA" --tcp-listen "127.0.0.1:$PORT_TCP" >"$OUT/serve.log" 2>&1 &
SERVER=$!
trap 'kill "$SERVER" 2>/dev/null; wait "$SERVER" 2>/dev/null; rm -rf "$OUT"' EXIT
for _ in $(seq 1 100); do grep -q listening "$OUT/serve.log" && break; sleep 0.1; done
grep -q listening "$OUT/serve.log" || { cat "$OUT/serve.log" >&2; exit 1; }

for r in $(seq 1 "$ROUNDS"); do
  for proc in get put; do
    for t in rdma tcp; do
      port=$PORT_RDMA; extra=("${CRC_ARGS[@]}")
      [ "$t" = tcp ] && { port=$PORT_TCP; extra=(); }
      "$BIN" bench "${extra[@]}" "$t://127.0.0.1:$port" --proc "$proc" --size "$SIZE" --depth "$DEPTH" \
        --seconds "$SECS" --json >>"$OUT/$proc-$t.jsonl"
    done
  done
  echo "round $r/$ROUNDS done (load $(cut -d' ' -f1 /proc/loadavg))" >&2
done

python3 - "$OUT" "$SIZE" "$DEPTH" "$MPA_CRC" <<'EOF'
import json, statistics, sys
out, size, depth, crc = sys.argv[1:5]
def med(proc, t, key):
    rows = [json.loads(l) for l in open(f"{out}/{proc}-{t}.jsonl")]
    bad = sum(r["errors"] for r in rows)
    if bad:
        sys.exit(f"{proc} over {t}: {bad} errors")
    return statistics.median(r[key] for r in rows)
print(f"{size} at depth {depth}, MPA CRC {crc}, medians; client CPU = the bench process alone")
print(f"{'':6} {'RDMA MB/s':>10} {'TCP MB/s':>10} {'ratio':>6}   {'RDMA CPU s/GB':>13} {'TCP CPU s/GB':>12} {'ratio':>6}")
for proc in ("get", "put"):
    rm, tm = med(proc, "rdma", "mb_per_sec"), med(proc, "tcp", "mb_per_sec")
    rc, tc = med(proc, "rdma", "cpu_sec_per_gb"), med(proc, "tcp", "cpu_sec_per_gb")
    print(f"{proc.upper():6} {rm:10.0f} {tm:10.0f} {rm/tm:6.2f}   {rc:13.3f} {tc:12.3f} {rc/tc:6.2f}")
EOF
