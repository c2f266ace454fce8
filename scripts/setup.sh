#!/usr/bin/env bash
# Installs what VINO needs on a fresh Debian machine: clang and lld (to build grafts and the
# benchmark workloads for wasm32), wasi-libc (to build programs that run as VINO processes),
# FUSE and the programs the mount tests run (sqlite3, git, gzip, tar; bzip2, lz4 and zstd for the
# VINO-process tests), iproute2 for the host link's network namespaces, Python for the Python
# client, the Rust crates, and the Debian bookworm sources of lz4, zstd and zlib that
# `vino build --program` builds. Quiet on success.
set -euo pipefail

need=()
command -v clang >/dev/null 2>&1 || need+=(clang)
command -v wasm-ld >/dev/null 2>&1 || need+=(lld)
command -v fusermount3 >/dev/null 2>&1 || need+=(fuse3)
command -v sqlite3 >/dev/null 2>&1 || need+=(sqlite3)
command -v git >/dev/null 2>&1 || need+=(git)
command -v gzip >/dev/null 2>&1 || need+=(gzip)
command -v bzip2 >/dev/null 2>&1 || need+=(bzip2)
command -v tar >/dev/null 2>&1 || need+=(tar)
command -v lz4 >/dev/null 2>&1 || need+=(lz4)
command -v zstd >/dev/null 2>&1 || need+=(zstd)
# `apt-get source` (the real programs' sources) extracts with dpkg-source.
command -v dpkg-source >/dev/null 2>&1 || need+=(dpkg-dev)
command -v python3 >/dev/null 2>&1 || need+=(python3)
# pjdfstest (built below) links libacl; setpriv runs the mount tests' programs as other users.
[ -e /usr/include/acl/libacl.h ] || need+=(libacl1-dev)
command -v setpriv >/dev/null 2>&1 || need+=(util-linux)
# The network's host-link tests and `vino bench net` make network namespaces with ip(8).
command -v ip >/dev/null 2>&1 || need+=(iproute2)
# VINO processes (crates/wasi): C programs built for wasm32-wasi need wasi-libc and clang's
# wasm32 runtime library (the package that follows Debian's default clang).
[ -e /usr/lib/wasm32-wasi/libc.a ] || need+=(wasi-libc)
compgen -G "/usr/lib/llvm-*/lib/clang/*/lib/wasi/libclang_rt.builtins-wasm32.a" >/dev/null ||
    need+=(libclang-rt-dev-wasm32)
sudo_cmd=""
[ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
# `apt-get source` needs a deb-src line; add one for bookworm's main if there is none.
deb_src=/etc/apt/sources.list.d/vino-deb-src.sources
if ! grep -Eqs '^(deb-src|Types:.*deb-src)' /etc/apt/sources.list /etc/apt/sources.list.d/*; then
    # The same mirror as the binary packages' (the machine's own sources), else Debian's.
    uri=$(awk '$1 == "URIs:" { print $2; exit }' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    printf '%s\n' 'Types: deb-src' "URIs: ${uri:-http://deb.debian.org/debian}" 'Suites: bookworm' 'Components: main' \
        'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg' | $sudo_cmd tee "$deb_src" >/dev/null
    need_update=1
fi
if [ ${#need[@]} -gt 0 ] || [ -n "${need_update:-}" ]; then
    log=$(mktemp)
    # apt talks on stderr even when all goes well: keep its output for when it fails.
    if ! { $sudo_cmd apt-get update -qq && { [ ${#need[@]} -eq 0 ] || DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${need[@]}"; }; } >"$log" 2>&1; then
        cat "$log" >&2
        exit 1
    fi
    rm -f "$log"
fi
# The real programs' sources (crates/sdk/src/programs.rs looks for them here, and fetches them
# the same way if they are missing): lz4 1.9.4, zstd 1.5.4 (source package libzstd), zlib 1.2.13.
sources="${VINO_SOURCES:-${XDG_CACHE_HOME:-$HOME/.cache}/vino/sources}"
mkdir -p "$sources"
for pkg in lz4:lz4-1.9.4 libzstd:libzstd-1.5.4 zlib:zlib-1.2.13; do
    compgen -G "$sources/${pkg#*:}*/" >/dev/null && continue
    log=$(mktemp)
    if ! (cd "$sources" && apt-get source -qq "${pkg%%:*}") >"$log" 2>&1; then
        cat "$log" >&2
        exit 1
    fi
    rm -f "$log"
done
# The FUSE mount (and its tests) need /dev/fuse: as root, make the node if the kernel has FUSE
# but the node is missing (as in some containers).
if [ ! -e /dev/fuse ] && [ "$(id -u)" -eq 0 ]; then
    modprobe fuse 2>/dev/null || true
    mknod -m 666 /dev/fuse c 10 229 2>/dev/null || true
fi
if ! command -v cargo >/dev/null 2>&1; then
    echo "setup: cargo not found; install Rust (rustup) first" >&2
    exit 1
fi
# The gates need rustfmt and clippy; a minimal Rust toolchain lacks them.
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
    if command -v rustup >/dev/null 2>&1; then
        rustup component add rustfmt clippy >/dev/null 2>&1 || {
            echo "setup: could not add rustfmt and clippy (rustup component add rustfmt clippy)" >&2
            exit 1
        }
    else
        echo "setup: cargo fmt and cargo clippy are needed (install rustfmt and clippy)" >&2
        exit 1
    fi
fi
cargo fetch --quiet
# The POSIX suite the mount tests run (crates/fuse/tests/pjdfstest.rs).
if ! cargo install --list 2>/dev/null | grep -q '^pjdfstest v0\.2\.2:'; then
    log=$(mktemp)
    if ! cargo install pjdfstest --version 0.2.2 --locked >"$log" 2>&1; then
        cat "$log" >&2
        exit 1
    fi
    rm -f "$log"
fi
