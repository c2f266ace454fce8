"""Connects to vinod, creates a file, writes to it, reads it back and prints it.

    VINO_SOCKET=/path/to/vinod.sock python3 python/examples/hello.py [PATH]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

import vino  # noqa: E402


def main() -> int:
    path = sys.argv[1] if len(sys.argv) > 1 else "/hello.txt"
    text = b"hello from Python through vinod\n"
    try:
        with vino.Client() as c:
            fd = c.open(path, vino.O_RDWR | vino.O_CREAT | vino.O_TRUNC, 0o644)
            c.write(fd, text)
            data = c.pread(fd, 128, 0)
            st = c.fstat(fd)
            c.close(fd)
            sys.stdout.write(data.decode())
            print(f"{path}: {st.size} bytes, inode {st.ino}, kernel pid {c.pid}")
    except OSError as e:
        print(f"hello.py: {e.strerror} (errno {e.errno})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
