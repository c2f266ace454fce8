#!/usr/bin/env bash
# How long another program's operations wait while a big file is freed on a VINO mount: mounts
# a fresh image (root, io_uring where Linux offers it), writes a 2 GiB file, then for 4 s
# creates and unlinks small files in a loop while, a second in, the big file is removed
# (`rm`), truncated (`truncate -s 0`) or truncated by an open with O_TRUNC (`cp /dev/null`).
# Prints the loop's operation count and its slowest create+unlink.
#
#   scripts/big-free.sh [rm|truncate|o_trunc] [VINO]
set -euo pipefail
cd "$(dirname "$0")/.."
how=${1:-rm}
vino=${2:-target/release/vino}
case $how in
    rm) free=(rm) ;;
    truncate) free=(truncate -s 0) ;;
    o_trunc) free=(cp /dev/null) ;;
    *) echo "big-free.sh: rm, truncate or o_trunc, not $how" >&2; exit 2 ;;
esac
scratch=${SCRATCH:-target/big-free}
. scripts/fresh-mount.sh
fresh_mount 8G
dd if=/dev/zero of="$scratch/mnt/big" bs=1M count=2048 status=none conv=fsync
mkdir "$scratch/mnt/d"
python3 - "$scratch/mnt/d" <<'PY' &
import os, sys, time
d, worst, n = sys.argv[1], 0.0, 0
end = time.time() + 4
while time.time() < end:
    path = f"{d}/f{n % 50}"
    t = time.perf_counter()
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY))
    os.unlink(path)
    worst = max(worst, time.perf_counter() - t)
    n += 1
print(f"{n} creates and unlinks, the slowest {worst * 1e3:.1f} ms")
PY
loop=$!
sleep 1
"${free[@]}" "$scratch/mnt/big"
wait $loop
