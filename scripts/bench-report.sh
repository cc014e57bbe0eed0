#!/usr/bin/env bash
# Regenerates docs/benchmarks.md and its plots (docs/bench/*.svg): builds
# the release binaries, starts `rpcrdma serve` on 127.0.0.1, runs
# `rpcrdma bench --json` over RPC-over-RDMA and RPC over TCP for GET and PUT
# from 4 KiB to 16 MiB and for NULL latency, and writes the tables of the
# RDMA/TCP ratios, the exact commands, the machine, and SVG plots drawn by
# crates/bench-report (plotters). The previous page is replaced.
#
#   scripts/bench-report.sh                  # 3 rounds x 4 s per point: ~7 min
#   BENCH_SECONDS=1 BENCH_ROUNDS=1 scripts/bench-report.sh   # short run, ~1 min
#
# Run it on an otherwise idle machine: other load moves the ratios.
set -euo pipefail
cd "$(dirname "$0")/.."

BENCH_SECONDS="${BENCH_SECONDS:-4}"
BENCH_ROUNDS="${BENCH_ROUNDS:-3}"
OUT="${BENCH_OUT:-docs}"
TARGET="${CARGO_TARGET_DIR:-target}"

cargo build --release -q -p rpcrdma-cli -p bench-report
generated_by="scripts/bench-report.sh"
if [ "$BENCH_SECONDS" != 4 ] || [ "$BENCH_ROUNDS" != 3 ]; then
  generated_by="BENCH_SECONDS=$BENCH_SECONDS BENCH_ROUNDS=$BENCH_ROUNDS scripts/bench-report.sh"
fi
"$TARGET/release/bench-report" \
  --rpcrdma "$TARGET/release/rpcrdma" \
  --seconds "$BENCH_SECONDS" \
  --rounds "$BENCH_ROUNDS" \
  --out "$OUT" \
  --generated-by "$generated_by"
