#!/usr/bin/env bash
# What the cache's first fill costs writers: mounts a fresh image (root, /dev/fuse), extracts
# TAR into it twice (into a/, then b/, each with `vino sync`), and prints each extraction's
# time and the page faults the mount's ring threads (which serve the writes) took meanwhile.
# The first fills the 256 MiB cache with frames made for it; the second reuses them.
#
#   scripts/first-fill.sh [WARM_AHEAD] [TAR] [VINO]
#
# WARM_AHEAD sets `cache_warm_ahead` (default: the daemon's; 0 makes every frame on first need);
# TAR defaults, as in request-times.sh, to a tar of /usr/include and /usr/share/doc (made once);
# VINO to target/release/vino.
set -euo pipefail
cd "$(dirname "$0")/.."
vino=$(realpath "${3:-target/release/vino}")
scratch=${SCRATCH:-target/first-fill}
mkdir -p "$scratch"
extra_config=${1:+cache_warm_ahead = $1}
. scripts/fresh-mount.sh
tree_tar "${2:-}"
fresh_mount 4G
ring_faults() {
    cat /proc/"$daemon"/task/*/stat 2>/dev/null | awk '$2 ~ /vino-fuse-ring/ { n += $10 } END { print n + 0 }'
}
for dir in a b; do
    mkdir "$scratch/mnt/$dir"
    before=$(ring_faults)
    start=$(date +%s%N)
    tar xf "$tar_file" -C "$scratch/mnt/$dir"
    "$vino" sync "$scratch/mnt"
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    echo "tar x into $dir: $ms ms, ring threads' page faults $(( $(ring_faults) - before ))"
done
