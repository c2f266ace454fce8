#!/usr/bin/env bash
# Installs what VINO needs on a fresh Debian machine: clang and lld (to build grafts and the
# benchmark workloads for wasm32), and the Rust crates. Quiet on success.
set -euo pipefail

need=()
command -v clang >/dev/null 2>&1 || need+=(clang)
command -v wasm-ld >/dev/null 2>&1 || need+=(lld)
if [ ${#need[@]} -gt 0 ]; then
    sudo_cmd=""
    [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${need[@]}" >/dev/null
fi
if ! command -v cargo >/dev/null 2>&1; then
    echo "setup: cargo not found; install Rust (rustup) first" >&2
    exit 1
fi
cargo fetch --quiet
