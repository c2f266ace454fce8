# Sourced by the scripts that time programs on a VINO mount: mounts a fresh image at
# "$scratch/mnt" with `vino mount` (root), a 256 MiB cache and an image of "$1" (default 4G),
# and unmounts it when the script exits. Needs $vino and $scratch set; $extra_config, if set,
# is added to the daemon's configuration.
fresh_mount() {
    mkdir -p "$scratch/mnt"
    umount -l "$scratch/mnt" 2>/dev/null || true
    rm -f "$scratch/vino.img"
    printf 'socket = "%s"\ncache_size = "256M"\nimage_size = "%s"\n%s\n' \
        "$scratch/vino.sock" "${1:-4G}" "${extra_config:-}" > "$scratch/vino.toml"
    "$vino" mount --config "$scratch/vino.toml" "$scratch/vino.img" "$scratch/mnt" &
    daemon=$!
    # Out of the mount first: a shell left inside it would keep the unmount, and so the
    # daemon it waits for, from ending.
    trap 'cd /; kill -INT $daemon 2>/dev/null; wait $daemon 2>/dev/null || true' EXIT
    until mountpoint -q "$scratch/mnt"; do sleep 0.1; done
}

# Sets $tar_file to "$1", or where it is empty to a tar of /usr/include and /usr/share/doc in
# "$scratch" (made once): the tree the timing scripts extract by default.
tree_tar() {
    tar_file=${1:-$scratch/tree.tar}
    if [ ! -f "$tar_file" ]; then
        tar cf "$tar_file" -C / usr/include usr/share/doc 2>/dev/null || true
    fi
    tar_file=$(realpath "$tar_file")
}
