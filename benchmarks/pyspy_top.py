"""Where a service's workers spent their CPU while serving, from a py-spy raw profile taken over its whole
life (as `loadtest/gpu/h200.sh decision-runs` takes one on the H200):

    .venv/bin/python -m benchmarks.pyspy_top results/h200-2026-12-03-decision/pyspy-service-bursts.txt.gz

Only the uvicorn workers' samples count, and the start-up stacks (imports, the app's lifespan) are left out:
on the GPU host they were 78% of all samples, none of them on a pupil's path.
"""

import gzip
from pathlib import Path
from typing import Annotated

import typer

from benchmarks.gateway_parts import top_frames

WORKER = "spawn_main"
START_UP = ("_find_and_load", "lifespan", "Config.load", "import_module")


def serving_stacks(raw: str) -> tuple[str, int]:
    """The workers' serving stacks without py-spy's process and thread frames, and the samples left out."""
    kept, left_out = [], 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if WORKER not in stack:
            continue
        if any(frame in stack for frame in START_UP):
            left_out += int(count)
            continue
        # py-spy's process frames quote a command line, which may itself hold ";": drop every piece of them.
        frames = [f for f in stack.split(";") if not f.startswith(("process ", "thread ")) and '"' not in f]
        if frames:  # a sample with no Python frame at all (native only) says nothing of where
            kept.append(";".join(frames) + " " + count)
    return "\n".join(kept), left_out


def main(
    profile: Annotated[Path, typer.Argument(help="py-spy record -f raw output (.gz or not)")],
    rate_hz: Annotated[float, typer.Option(help="the rate it was sampled at (-r)")] = 250,
) -> None:
    data = profile.read_bytes()
    stacks, left_out = serving_stacks((gzip.decompress(data) if profile.suffix == ".gz" else data).decode())
    serving = sum(int(line.rpartition(" ")[2]) for line in stacks.splitlines())
    typer.echo(f"start-up samples left out: {left_out} ({left_out / rate_hz:.1f} s of CPU)")
    typer.echo(f"serving samples: {serving} ({serving / rate_hz:.2f} s of CPU over all workers)\n")
    typer.echo(top_frames(stacks, 30))


if __name__ == "__main__":
    typer.run(main)
