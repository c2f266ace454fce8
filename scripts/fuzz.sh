#!/usr/bin/env bash
# Runs VINO's fuzz targets under libFuzzer (cargo-fuzz, on the nightly toolchain), each for a
# while, starting from the seeds and the kept regressions. Quiet on success; on a failure it
# prints libFuzzer's report and where the failing input is (fuzz/artifacts/<target>/), which
# `fuzz/target/<host>/release/<target> <file>` runs again. Move a fixed failure's input into
# fuzz/regressions/<target>/: the corpus tests then replay it on stable.
#
#   scripts/fuzz.sh [TARGET...] [--time SECONDS] [--jobs N] [--sanitizer address|none] [-v]
#
# Targets: protocol, image, graft, program, frames (all by default). --time is per target (60 s by default);
# --jobs runs that many libFuzzer processes per target; -v (or CI set) prints each target's last
# libFuzzer status line (inputs run, coverage, corpus). Long runs: e.g.
#   scripts/fuzz.sh graft --time 36000 --jobs 8
#
# Exit status: 0 no finding, 1 a finding, 3 no nightly toolchain, 4 cargo-fuzz or the nightly
# build failed (a toolchain problem; the stable build is checked by scripts/check.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

time=60
jobs=1
sanitizer=address
verbose=${CI:-}
targets=()
while [ $# -gt 0 ]; do
    case "$1" in
        --time) time=$2; shift 2 ;;
        --jobs) jobs=$2; shift 2 ;;
        --sanitizer) sanitizer=$2; shift 2 ;;
        -v|--verbose) verbose=1; shift ;;
        -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "fuzz: unknown option $1" >&2; exit 2 ;;
        *) targets+=("$1"); shift ;;
    esac
done
[ ${#targets[@]} -gt 0 ] || targets=(protocol image graft program frames recording)

# Only a nightly toolchain already installed: nothing here downloads one.
if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    echo "fuzz: no nightly toolchain installed (rustup toolchain install nightly); the corpus tests replay every target on stable: cargo test -p vino-fuzzing" >&2
    exit 3
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    log=$(mktemp)
    if ! cargo install cargo-fuzz --locked >"$log" 2>&1; then
        cat "$log" >&2
        exit 4
    fi
    rm -f "$log"
fi

cargo run -q --release -p vino-fuzzing --bin vino-fuzz-seeds -- fuzz/corpus
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! cargo +nightly fuzz build -O --sanitizer "$sanitizer" >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "fuzz: the nightly build of the fuzz targets failed" >&2
    exit 4
fi
# The targets run as built (not through `cargo fuzz run`, which would build again first).
bin="fuzz/target/$(rustc -vV | sed -n 's/^host: //p')/release"
for t in "${targets[@]}"; do
    mkdir -p "fuzz/artifacts/$t"
    extra=()
    [ -d "fuzz/regressions/$t" ] && extra+=("fuzz/regressions/$t")
    [ "$jobs" -gt 1 ] && extra+=("-fork=$jobs")
    if ! "$bin/$t" -artifact_prefix="fuzz/artifacts/$t/" -max_total_time="$time" -timeout=60 \
        -rss_limit_mb=4096 "fuzz/corpus/$t" "${extra[@]}" >"$log" 2>&1; then
        tail -n 60 "$log" >&2
        echo "fuzz: $t failed; the input is in fuzz/artifacts/$t/ (run it again: $bin/$t FILE)" >&2
        exit 1
    fi
    [ -z "$verbose" ] || echo "fuzz: $t: $(grep -E '^#[0-9]+' "$log" | tail -n 1)" >&2
done
