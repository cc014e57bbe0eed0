#!/usr/bin/env bash
# The transport targets measured with the product itself, as a user runs it:
# one `rpcrdma serve` process (RDMA and TCP listeners) and `rpcrdma bench
# --json` as a separate client process per measurement. Rounds alternate RDMA
# and TCP; medians and their ratios are printed, with the server's and the
# client's CPU time per GB (bulk) or per call (NULL).
#
#   scripts/bench-cli.sh                     # 5 rounds x 2 s, bulk at depth 4
#   ROUNDS=7 SECS=3 DEPTH=1 scripts/bench-cli.sh
#   PROCS="put null32" scripts/bench-cli.sh  # a subset: get put null1 null32
#   MPA_CRC=off scripts/bench-cli.sh         # RDMA without the MPA CRC (both ends)
#
# Client CPU is the bench process's own CLOCK_PROCESS_CPUTIME_ID (its JSON);
# server CPU is the serve process's utime + stime (/proc/PID/stat) over the
# same interval, so it includes the server's idle-time housekeeping too.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS="${ROUNDS:-5}"
SECS="${SECS:-2}"
DEPTH="${DEPTH:-4}"
SIZE="${SIZE:-1MiB}"
PROCS="${PROCS:-get put null1 null32}"
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

# utime + stime of the server, in clock ticks.
server_ticks() { awk '{print $14 + $15}' "/proc/$SERVER/stat"; }
TICK="$(getconf CLK_TCK)"

for r in $(seq 1 "$ROUNDS"); do
  for p in $PROCS; do
    case "$p" in
      get | put) args=(--proc "$p" --size "$SIZE" --depth "$DEPTH") ;;
      null1) args=(--proc null --depth 1) ;;
      null32) args=(--proc null --depth 32) ;;
      *) echo "unknown measurement $p" >&2; exit 2 ;;
    esac
    for t in rdma tcp; do
      port=$PORT_RDMA; extra=("${CRC_ARGS[@]}")
      [ "$t" = tcp ] && { port=$PORT_TCP; extra=(); }
      before="$(server_ticks)"
      json="$("$BIN" bench "${extra[@]}" "$t://127.0.0.1:$port" "${args[@]}" --seconds "$SECS" --json)"
      after="$(server_ticks)"
      python3 -c 'import json,sys; d=json.loads(sys.argv[1]); d["server_cpu_seconds"]=int(sys.argv[2])/int(sys.argv[3]); print(json.dumps(d))' \
        "$json" "$((after - before))" "$TICK" >>"$OUT/$p-$t.jsonl"
    done
  done
  echo "round $r/$ROUNDS done (load $(cut -d' ' -f1 /proc/loadavg))" >&2
done

python3 - "$OUT" "$SIZE" "$DEPTH" "$MPA_CRC" "$PROCS" <<'EOF'
import json, statistics, sys
out, size, depth, crc, procs = sys.argv[1:6]
def rows(p, t):
    rs = [json.loads(l) for l in open(f"{out}/{p}-{t}.jsonl")]
    bad = sum(r["errors"] for r in rs)
    if bad:
        sys.exit(f"{p} over {t}: {bad} errors")
    return rs
def med(rs, f):
    return statistics.median(f(r) for r in rs)
print(f"medians of the rounds; MPA CRC {crc}; bulk = {size} at depth {depth}")
print(f"{'':14} {'RDMA':>10} {'TCP':>10} {'ratio':>6}  {'client CPU R/T':>15} {'ratio':>6}  {'server CPU R/T':>15} {'ratio':>6}")
for p in procs.split():
    r, t = rows(p, "rdma"), rows(p, "tcp")
    if p in ("get", "put"):
        unit, per = "MB/s", lambda x: x["bytes"] / 1e9
        rate = lambda x: x["mb_per_sec"]
        cu = "s/GB"
    else:
        per = lambda x: x["ops"] / 1e6
        cu = "us/call"
        if p == "null1":
            unit, rate = "p50 us", lambda x: x["latency_us"]["p50"]
        else:
            unit, rate = "calls/s", lambda x: x["ops_per_sec"]
    rr, tr = med(r, rate), med(t, rate)
    rc, tc = med(r, lambda x: x["cpu_seconds"] / per(x)), med(t, lambda x: x["cpu_seconds"] / per(x))
    rs, ts = med(r, lambda x: x["server_cpu_seconds"] / per(x)), med(t, lambda x: x["server_cpu_seconds"] / per(x))
    label = f"{p.upper()} {unit}"
    print(f"{label:14} {rr:10.1f} {tr:10.1f} {rr/tr:6.2f}  {rc:7.3f}/{tc:<7.3f} {rc/tc:6.2f}  {rs:7.3f}/{ts:<7.3f} {rs/ts:6.2f}   ({cu})")
EOF
