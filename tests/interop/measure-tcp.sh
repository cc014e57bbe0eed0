#!/usr/bin/env bash
# Rough latency/throughput of `rpcrdma call` over TCP on loopback, with a
# baseline measured in the same run: a raw 16 MiB loopback TCP transfer
# (python sockets, no RPC). Usage:
#   tests/interop/measure-tcp.sh [path/to/rpcrdma]   (default: release build)
set -euo pipefail
BIN="${1:-target/release/rpcrdma}"
RUNS="${RUNS:-5}"
out=$(mktemp)
"$BIN" serve --tcp-listen 127.0.0.1:0 >"$out" &
pid=$!
trap 'kill $pid 2>/dev/null; rm -f "$out"' EXIT
for _ in $(seq 100); do grep -q listening "$out" && break; sleep 0.05; done
url="tcp://$(grep -o '127.0.0.1:[0-9]*' "$out")"
echo "server $url"

echo "== baseline: raw loopback TCP, 16 MiB one way (python), $RUNS runs"
python3 - "$RUNS" <<'PY'
import socket, sys, threading, time
N = 16 << 20
runs = int(sys.argv[1])
payload = bytes(N)
for _ in range(runs):
    srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
    def send():
        c, _ = srv.accept(); c.sendall(payload); c.close()
    t = threading.Thread(target=send); t.start()
    cli = socket.create_connection(srv.getsockname())
    buf = bytearray(N); view = memoryview(buf); got = 0
    start = time.perf_counter()
    while got < N:
        n = cli.recv_into(view[got:]);
        if n == 0: break
        got += n
    dt = time.perf_counter() - start
    t.join(); cli.close(); srv.close()
    print(f"raw 16 MiB: {dt*1e3:.2f} ms, {N/dt/2**20:.0f} MiB/s")
PY

for args in "null" "echo 4k" "get 4k" "echo 16MiB" "put 16MiB" "get 16MiB"; do
  echo "== rpcrdma call $args, $RUNS runs"
  for _ in $(seq "$RUNS"); do "$BIN" call "$url" $args | sed 's/.*latency/latency/'; done
done
