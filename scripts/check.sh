#!/usr/bin/env bash
# The project's gates and its tests, in the order CI runs them: format, lints (warnings are
# errors), then every test of the workspace in release mode. The crates' own tests turn on their
# `invariants` feature (cache frame table, journal writer, lock manager), so the whole suite runs
# with those invariants checked after every operation. Cargo unifies a dev-dependency's features
# into every binary a test build makes, so the tests build in a target directory of their own:
# `target/release` then only ever holds binaries built for use, never the slow checked ones.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { [ -z "${CI:-}" ] || echo "check: $*" >&2; }

step "cargo fmt --check"
cargo fmt --all --check
step "cargo clippy -D warnings"
cargo clippy --release --workspace --all-targets --quiet -- -D warnings
# The test binaries carry no debug information: a panic still names its file and line (the
# message is built from the code, not from debug tables), and without the tables the two
# hundred binaries that link wasmtime take about a third less disk, which CI's disk, shared
# with other work, ran out of in the linker (a bus error in ld) while building them.
step "cargo test"
CARGO_PROFILE_RELEASE_DEBUG=false cargo test --release --workspace --target-dir target/test
# vendor/smoltcp's own unit tests, over the fixes VINO made to its TCP (docs/network.md). It is
# outside the workspace, as upstream ships it, with its dev-dependencies pinned by its own lock
# file: about 80 s, most of it the build.
step "cargo test (vendor/smoltcp)"
cargo test --release --quiet --lib --manifest-path vendor/smoltcp/Cargo.toml --target-dir target/smoltcp
# The kernel's tests once more in a debug build, where every open, close, unlink, rmdir, link,
# rename and hold of the mount is followed by the kernel's invariant check of what it changed
# (Kernel::check_touched) and the debug assertions are on: about 4 minutes, most of it the build.
# Built once, so without incremental state, and without debug information (gigabytes on a disk
# the checks share).
step "cargo test (debug, kernel invariants after each call)"
CARGO_INCREMENTAL=0 CARGO_PROFILE_DEV_DEBUG=false cargo test --quiet -p vino-kernel --target-dir target/debug-check
# Each fuzz target briefly under libFuzzer, where a nightly toolchain is installed (none is
# downloaded); the tests above replayed every target's corpus on stable either way. Without
# AddressSanitizer here: its build took 900 s of a cold run against 381 s without, and a short
# run does ten times the inputs without it; long runs (scripts/fuzz.sh) keep it.
# A finding fails the check; a nightly toolchain that cannot build them is said, not failed on.
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    step "fuzz each target ${VINO_FUZZ_SECONDS:-15} s"
    status=0
    bash scripts/fuzz.sh --time "${VINO_FUZZ_SECONDS:-15}" --sanitizer none || status=$?
    case $status in
        0) ;;
        3|4) echo "check: the fuzz targets could not run under libFuzzer (above); they ran as corpus tests" >&2 ;;
        *) exit "$status" ;;
    esac
else
    echo "check: no nightly toolchain installed: the fuzz targets ran only as corpus tests" >&2
fi
