"""`make test-loaded`: run a command (the test suite) while other processes burn every core, as on a busy CI machine.

Usage: python .ci/loaded.py [--per-core N] -- command args...
N busy-looping processes per core (default 3: a 2-core machine at load average about 7, where a live test once
failed) run at normal priority for as long as the command runs; the command's exit code is returned.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys


def burn() -> None:
    value = 0
    while True:  # pure CPU, no memory growth
        value = (value * 1103515245 + 12345) & 0x7FFFFFFF


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-core", type=int, default=int(os.environ.get("LOADED_PER_CORE", "3")))
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command to run")
    burners = [multiprocessing.Process(target=burn, daemon=True) for _ in range((os.cpu_count() or 1) * args.per_core)]
    for process in burners:
        process.start()
    print(f"loaded.py: {len(burners)} CPU burners on {os.cpu_count()} cores while running: {' '.join(command)}",
          flush=True)
    try:
        return subprocess.call(command)
    finally:
        for process in burners:
            process.terminate()
        for process in burners:
            process.join()


if __name__ == "__main__":
    sys.exit(main())
