"""Run a command while busy loops take some of the machine's cores: the suite as a slower machine runs it.

    .venv/bin/python -m tests.busy --cores 1 -- make test      # `make test-busy`

Each loop is a process of its own at the tests' own priority, so the scheduler shares the cores between the
loops, vLLM, the service and pytest as a loaded or slower host would. The loops end with the command, whose exit
status this returns.
"""

import argparse
import multiprocessing
import subprocess
import sys
import time


def spin() -> None:
    while True:
        pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cores", type=int, default=1, help="busy loops to run beside the command (default 1)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("name a command after --")
    loops = [multiprocessing.Process(target=spin, daemon=True) for _ in range(args.cores)]
    for loop in loops:
        loop.start()
    began = time.monotonic()
    try:
        status = subprocess.call(command)
    finally:
        for loop in loops:
            loop.kill()
    minutes = (time.monotonic() - began) / 60
    sys.stderr.write(f"{' '.join(command)}: exit {status} after {minutes:.1f} min beside {args.cores} busy loop(s)\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
