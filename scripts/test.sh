#!/usr/bin/env bash
# The whole test suite of rpcrdma, runnable on a fresh machine with only the
# Rust toolchain: installs the system packages the interop and wire-oracle
# tests need, then runs lints, every unit/property/integration test, and a
# bounded run of every cargo-fuzz target.
#
#   scripts/test.sh            # everything
#   FUZZ_SECONDS=0 scripts/test.sh   # skip the fuzz runs (local iteration)
set -euo pipefail
cd "$(dirname "$0")/.."

FUZZ_SECONDS="${FUZZ_SECONDS:-15}"

step() { printf '\n==> %s\n' "$*"; }

# --- 1. System packages (Debian) -------------------------------------------
need=()
command -v tshark  >/dev/null 2>&1 || need+=(tshark)
command -v dumpcap >/dev/null 2>&1 || need+=(wireshark-common)
command -v rpcinfo >/dev/null 2>&1 || need+=(rpcbind)
command -v rpcgen  >/dev/null 2>&1 || need+=(rpcsvc-proto)
[ -f /usr/include/tirpc/rpc/rpc.h ] || need+=(libtirpc-dev)
command -v cc      >/dev/null 2>&1 || need+=(gcc)
if [ "${#need[@]}" -gt 0 ]; then
  step "installing system packages: ${need[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

# --- 2. Lints ------------------------------------------------------------------
step "cargo fmt --check"
cargo fmt --all -- --check
step "cargo clippy --workspace --all-targets -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

# --- 3. Tests --------------------------------------------------------------------
step "cargo test --workspace"
cargo test --workspace 2>&1 | tee target/test-output.txt

# --- 4. Fuzz targets (bounded) ------------------------------------------------
if [ "$FUZZ_SECONDS" != "0" ]; then
  if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    FUZZ_TC=(+nightly); FUZZ_SAN=()
  else
    # cargo-fuzz needs unstable rustc flags; without nightly, run it on the
    # stable compiler without a sanitizer.
    export RUSTC_BOOTSTRAP=1; FUZZ_TC=(); FUZZ_SAN=(-s none)
  fi
  if ! cargo fuzz --version >/dev/null 2>&1; then
    step "installing cargo-fuzz"
    cargo install cargo-fuzz --locked
  fi
  for dir in crates/*/fuzz; do
    [ -f "$dir/Cargo.toml" ] || continue
    crate_dir="$(dirname "$dir")"
    for target in $(cd "$crate_dir" && cargo "${FUZZ_TC[@]}" fuzz list); do
      step "fuzz $crate_dir::$target for ${FUZZ_SECONDS}s"
      (cd "$crate_dir" && cargo "${FUZZ_TC[@]}" fuzz run "${FUZZ_SAN[@]}" "$target" -- \
        -max_total_time="$FUZZ_SECONDS" -rss_limit_mb=2048 -print_final_stats=0)
    done
  done
fi

# --- 5. Summary ----------------------------------------------------------------
step "summary"
passed=$(grep -Eo '^test result: ok\. [0-9]+ passed' target/test-output.txt | awk '{s+=$4} END {print s+0}')
failed=$(grep -Eo '[0-9]+ failed' target/test-output.txt | awk '{s+=$1} END {print s+0}')
echo "${passed} passed, ${failed} failed"
