"""A GGUF checkpoint (here SmolLM2-135M-Instruct's Q4_1) turned into an ordinary transformers folder that vLLM
serves: config.json, model.safetensors in bf16, tokenizer.json and the chat template. Run by vLLM's own
interpreter (torch and transformers are there; the `gguf` and `accelerate` packages are added beside them by
`service/local/model/small.py`), never by the service's.

transformers dequantizes the GGUF while loading it, but `save_pretrained` refuses a model that still carries the
GGUF `quantization_config`: a plain model is built from the config without it, and the state dict loaded into it.

    python convert_gguf.py SRC.gguf DEST
"""

import sys
from pathlib import Path

import torch  # type: ignore[import-not-found]  # vLLM's environment has it; the service's does not
from transformers import AutoModelForCausalLM, AutoTokenizer


def convert(gguf: Path, dest: Path) -> None:
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = type(loaded)(config).to(torch.bfloat16)
    plain.load_state_dict(loaded.state_dict(), strict=True)
    plain.save_pretrained(dest)
    AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(dest)


if __name__ == "__main__":
    convert(Path(sys.argv[1]), Path(sys.argv[2]))
