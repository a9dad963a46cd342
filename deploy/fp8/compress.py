"""The seed's FP8 recipe: an FP8_DYNAMIC copy of a model folder, made with llmcompressor.

Every Linear layer's weights become FP8 (e4m3) with one scale per output channel; activations are
quantised per token at run time, so no calibration data is needed (oneshot, data-free); lm_head stays in
the checkpoint's dtype. Run by llmcompressor's own interpreter (deploy/scripts/compress-fp8.sh), so it
imports nothing of the service.

usage: python deploy/fp8/compress.py SRC_MODEL_DIR DST_DIR
"""

import argparse
import json
import shutil
import time
from importlib.metadata import version
from pathlib import Path

from llmcompressor import oneshot
from llmcompressor.modifiers.quantization import QuantizationModifier
from transformers import AutoModelForCausalLM

# Files that save_pretrained writes for the compressed model; every other file of the source is copied
# as it is. transformers re-serialises a tokenizer it saves (5.x flips `ignore_merges` in tokenizer.json),
# and both variants must count tokens exactly alike, so the tokenizer travels byte for byte.
REWRITTEN = ("config.json", "model.safetensors.index.json")
# The model folder's manifest (service/model_manifest.py): the copy's says what it is, its other fields the
# source's (the same served name, context and tokenizer: both variants answer as one model to clients).
MANIFEST = "classroom-model.json"


def recipe() -> QuantizationModifier:
    return QuantizationModifier(targets="Linear", scheme="FP8_DYNAMIC", ignore=["lm_head"])


def safetensors_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.glob("*.safetensors"))


def describe_copy(src: Path, dst: Path) -> None:
    """The source's manifest, with the quantization named; nothing where the source has none."""
    manifest = src / MANIFEST
    if manifest.is_file():
        said = json.loads(manifest.read_text())
        said["quantization"] = (
            f"FP8_DYNAMIC by llmcompressor {version('llmcompressor')} (Linear weights in e4m3 with a scale per "
            "output channel, activations per token at run time, lm_head kept)"
        )
        (dst / MANIFEST).write_text(json.dumps(said, indent=2) + "\n")


def compress(src: Path, dst: Path) -> None:
    if dst.exists():
        shutil.rmtree(dst)
    model = AutoModelForCausalLM.from_pretrained(src, dtype="auto")
    oneshot(model=model, recipe=recipe())
    model.save_pretrained(dst, save_compressed=True)
    for path in src.iterdir():
        if path.is_file() and not path.name.startswith(".") and path.suffix != ".safetensors":
            if path.name not in (*REWRITTEN, MANIFEST):
                shutil.copy2(path, dst / path.name)
    describe_copy(src, dst)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("src", type=Path, help="the original model folder")
    parser.add_argument("dst", type=Path, help="where the FP8 copy goes (replaced if present)")
    args = parser.parse_args()
    began = time.monotonic()
    compress(args.src, args.dst)
    print(f"FP8_DYNAMIC copy of {args.src} in {args.dst}, made in {time.monotonic() - began:.1f} s")
    for name, folder in (("original", args.src), ("fp8", args.dst)):
        size = safetensors_size(folder)
        print(f"{name:>8}: {size:>15,} bytes of safetensors ({size / 2**20:,.1f} MiB) in {folder}")


if __name__ == "__main__":
    main()
