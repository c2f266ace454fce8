#!/usr/bin/env bash
# The daemon's time per request while `tar x` and then `rm -rf` run on a fresh VINO mount:
# mounts a new image (root, /dev/fuse), extracts TAR into it, removes it all, and prints each
# program's elapsed time (on stderr), then the daemon's total time on the requests a caller
# waited for (forgets aside), the mean time of each kind and how many of each kind there were,
# from `vino top --json`.
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
TIMEFORMAT="rm -rf %R s"
time rm -rf ./*
cd - > /dev/null
"$vino" top --json --socket "$scratch/vino.sock" > "$scratch/top.json"
python3 - "$scratch/top.json" <<'PY'
import json, sys
reqs = {r["op"]: r for r in json.load(open(sys.argv[1]))["mounts"][0]["requests"]}
waited = [r for op, r in reqs.items() if op not in ("forget", "batch_forget")]
line = [f"total {sum(r['ns'] for r in waited) / 1e6:.0f} ms"]
for op in ["create", "write", "unlink", "setattr", "lookup", "mkdir", "rmdir"]:
    if op in reqs:
        line.append(f"{op} {reqs[op]['ns'] / reqs[op]['count'] / 1e3:.1f}")
print(" ".join(line), "(us per request)")
# How many of each kind: what Linux's FUSE client asked for, which the daemon cannot change.
counts = sorted(((r["count"], op) for op, r in reqs.items() if op not in ("forget", "batch_forget")), reverse=True)
print("requests:", " ".join(f"{op} {n}" for n, op in counts))
PY
