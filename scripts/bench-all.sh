#!/usr/bin/env bash
# Every performance target in one run, in this order: the iwarp perf bench
# (IWARP_RUNS runs, default 7), the in-process transport bench
# (TRANSPORT_RUNS runs, default 3), and scripts/bench-cli.sh with the MPA CRC
# on (5 rounds) and off (3 rounds). Output also goes to target/bench-all-HHMM.log.
# Run on an otherwise idle machine: every baseline is measured in the same run,
# but a busy or noisy host moves the ratios (see README, Benchmarks).
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET="${CARGO_TARGET_DIR:-target}"
mkdir -p "$TARGET"
LOG="$TARGET/bench-all-$(date +%H%M).log"
exec > >(tee "$LOG") 2>&1
echo "== commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u +%FT%TZ), $(uptime)"
# The executable of one bench target (built if needed).
bench_exe() {
  cargo bench -p "$1" --bench "$2" --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json, sys
name = sys.argv[1]
exes = [j["executable"] for j in map(json.loads, sys.stdin)
        if j.get("reason") == "compiler-artifact" and j.get("executable") and j["target"]["name"] == name]
print(exes[-1])' "$2"
}
PERF=$(bench_exe iwarp perf)
TRANSPORT=$(bench_exe rpcrdma transport)
cargo build --release -q -p rpcrdma-cli
for i in $(seq 1 "${IWARP_RUNS:-7}"); do
  echo "== iwarp perf run $i (load $(cut -d' ' -f1-3 /proc/loadavg))"
  PERF_MIB=1024 PERF_ROUNDS=5 "$PERF" --bench 2>&1 | grep -E "GB/s|round trip|sndbuf|backend"
done
for i in $(seq 1 "${TRANSPORT_RUNS:-3}"); do
  echo "== transport run $i (load $(cut -d' ' -f1-3 /proc/loadavg))"
  BENCH_ROUNDS=3 "$TRANSPORT" --bench 2>&1 | tail -40
done
echo "== CLI, MPA CRC on (load $(cut -d' ' -f1-3 /proc/loadavg))"
ROUNDS=5 SECS=2 scripts/bench-cli.sh 2>&1 | tail -6
echo "== CLI, MPA CRC off (load $(cut -d' ' -f1-3 /proc/loadavg))"
MPA_CRC=off ROUNDS=3 SECS=2 scripts/bench-cli.sh 2>&1 | tail -6
echo "== done $(date -u +%T), $(uptime)"
