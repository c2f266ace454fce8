#!/usr/bin/env bash
# The daemon's time per request while `tar x` and then `rm -rf` run on a fresh VINO mount:
# mounts a new image (root, /dev/fuse), extracts TAR into it, removes it all, and prints each
# program's elapsed time (on stderr), then the daemon's total time on the requests a caller
# waited for (forgets aside), the mean time of each kind, and how many requests of each kind
# each program made, from `vino top --json`.
#
#   scripts/request-times.sh [TAR] [VINO]
#
# TAR defaults to a tar of /usr/include and /usr/share/doc (made once in the scratch directory);
# VINO to target/release/vino. Run it for two builds in turn to compare them.
set -euo pipefail
cd "$(dirname "$0")/.."
vino=${2:-target/release/vino}
scratch=${SCRATCH:-target/request-times}
mkdir -p "$scratch/mnt"
. scripts/fresh-mount.sh
tree_tar "${1:-}"
fresh_mount 4G
# Each program's elapsed time, then the daemon's time on their requests.
cd "$scratch/mnt"
TIMEFORMAT="tar x %R s"
time tar xf "$tar_file"
cd - > /dev/null
"$vino" top --json --socket "$scratch/vino.sock" > "$scratch/top-tar.json"
cd "$scratch/mnt"
TIMEFORMAT="rm -rf %R s"
time rm -rf ./*
cd - > /dev/null
"$vino" top --json --socket "$scratch/vino.sock" > "$scratch/top.json"
python3 - "$scratch/top-tar.json" "$scratch/top.json" <<'PY'
import json, sys
def requests(path):
    return {r["op"]: r for r in json.load(open(path))["mounts"][0]["requests"]}
after_tar, reqs = requests(sys.argv[1]), requests(sys.argv[2])
waited = [r for op, r in reqs.items() if op not in ("forget", "batch_forget")]
line = [f"total {sum(r['ns'] for r in waited) / 1e6:.0f} ms"]
for op in ["create", "write", "unlink", "setattr", "lookup", "mkdir", "rmdir"]:
    if op in reqs:
        line.append(f"{op} {reqs[op]['ns'] / reqs[op]['count'] / 1e3:.1f}")
print(" ".join(line), "(us per request)")
# How many of each kind, program by program: what Linux's FUSE client asked for.
before = {op: r["count"] for op, r in after_tar.items()}
for program, counts in [
    ("tar x", before),
    ("rm -rf", {op: r["count"] - before.get(op, 0) for op, r in reqs.items()}),
]:
    counts = {op: n for op, n in counts.items() if n and op not in ("forget", "batch_forget")}
    listed = " ".join(f"{op} {n}" for op, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    print(f"{program} requests: {sum(counts.values())}: {listed}")
PY
