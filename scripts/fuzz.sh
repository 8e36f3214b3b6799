#!/usr/bin/env bash
# Runs the coverage-guided fuzz targets under fuzz/ (cargo fuzz, libFuzzer).
# Not part of CI. Needs `cargo install cargo-fuzz`; on a stable toolchain
# RUSTC_BOOTSTRAP=1 lets cargo fuzz use the nightly-only sanitizer flags.
#
#   scripts/fuzz.sh                 every target, 10 million runs each
#   RUNS=100000 scripts/fuzz.sh path auth
#   SANITIZER=none scripts/fuzz.sh ticket    (if ASan gives trouble)
#
# A crash leaves its input in fuzz/artifacts/<target>/; it becomes a
# regression unit test before it is fixed.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
RUNS="${RUNS:-10000000}"
SANITIZER="${SANITIZER:-address}"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(path auth webhook ticket challenge enqueue)
fi
export RUSTC_BOOTSTRAP=1
for target in "${targets[@]}"; do
    echo "== $target: $RUNS runs (sanitizer: $SANITIZER)"
    mkdir -p "corpus/$target"
    extra=()
    # Header parsing is fuzzed with long inputs; the others stay short so
    # a shared machine gets through 10 million runs (docs/benchmarks.md).
    if [ "$target" != auth ]; then
        extra+=(-max_len=512)
    fi
    if [ -f "dicts/$target.dict" ]; then
        extra+=(-dict="dicts/$target.dict")
    fi
    cargo fuzz run --sanitizer "$SANITIZER" --debug-assertions "$target" "corpus/$target" -- \
        -runs="$RUNS" -print_final_stats=1 "${extra[@]}"
done
