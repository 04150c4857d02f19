"""The deploy files (``deploy/``): valid against their schemas, consistent, and their commands run.

Offline: the Compose file is checked against the Compose Specification's JSON schema as
check-jsonschema vendors it (``vendor/compose-spec.json``, from the compose-spec repository, Apache-2.0);
the Kubernetes manifests against Kubernetes' own schemas as kubernetes-validate ships them (strict:
an unknown field fails). Each validator is shown a broken copy too, so a pass means something. Docker
and a cluster are not needed (this machine has neither an engine nor a cluster): the last test runs the
files' master and worker command lines as processes on loopback, with the shipped locust.conf and prompt
set, against the mock server, and finds the results where docs/deploy.md says they land.
"""

from __future__ import annotations

import copy
import importlib.metadata
import importlib.resources
import json
import os
import re
import subprocess
import sys

import jsonschema
import pytest
import yaml

from llmload.core.paths import REPO_ROOT
from llmload.core.records import load_prompts
from llmload.core.services import free_port

DEPLOY = REPO_ROOT / "deploy"
COMPOSE = DEPLOY / "docker-compose.yml"
K8S = sorted((DEPLOY / "k8s").glob("*.yaml"))


def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def manifests() -> list[dict]:
    return [doc for path in K8S for doc in yaml.safe_load_all(path.read_text()) if doc]


def by_kind(kind: str, name: str) -> dict:
    return next(d for d in manifests() if d["kind"] == kind and d["metadata"]["name"] == name)


def container(deployment: dict) -> dict:
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    return only


def interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's ``${VAR:-default}`` (and ``${VAR}``) substitution."""
    return re.sub(r"\$\{(\w+)(?::-([^}]*))?\}", lambda m: env.get(m[1]) or (m[2] or ""), text)


def flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


# ---------------------------------------------------------------------- Compose


def compose_validator():
    schema = json.loads(importlib.resources.files("check_jsonschema.builtin_schemas.vendor")
                        .joinpath("compose-spec.json").read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


@pytest.mark.unit
def test_compose_file_matches_the_compose_spec():
    validator = compose_validator()
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(compose())]
    assert errors == []
    broken = copy.deepcopy(compose())
    broken["services"]["worker"]["deploy"]["replicas"] = [8]
    broken["services"]["master"]["comand"] = broken["services"]["master"].pop("command")
    assert len(list(validator.iter_errors(broken))) >= 2  # the schema does reject what Compose would


@pytest.mark.unit
def test_compose_runs_a_master_and_its_workers():
    services = compose()["services"]
    master, worker = services["master"]["command"], services["worker"]["command"]
    assert "--master" in master and "--worker" in worker
    assert flag(worker, "--master-host") == "master"
    assert flag(master, "-f") == flag(worker, "-f")  # the same task on both sides
    assert interpolate(flag(master, "--expect-workers"), {}) == \
        interpolate(str(services["worker"]["deploy"]["replicas"]), {}) == "8"
    prompts = {v["target"] for s in ("master", "worker") for v in services[s]["volumes"] if "prompts" in v["target"]}
    assert prompts == {"/etc/llmload/prompts.jsonl"}
    assert services["server"]["profiles"] == ["mock"]
    metrics = flag(master, "--prometheus-port")  # the master's /metrics, published for Prometheus
    assert f"{metrics}:{metrics}" in services["master"]["ports"]


# ---------------------------------------------------------------------- Kubernetes


@pytest.fixture(scope="module")
def kubernetes_version() -> str:
    kubernetes_validate = pytest.importorskip("kubernetes_validate.utils")
    return kubernetes_validate.latest_version()


@pytest.mark.unit
def test_kubernetes_manifests_match_kubernetes_schemas(kubernetes_version):
    import kubernetes_validate

    docs = manifests()
    assert sorted(d["kind"] for d in docs) == ["ConfigMap", "Deployment", "Deployment", "Service"]
    for doc in docs:
        kubernetes_validate.validate(doc, kubernetes_version, strict=True)
    broken = copy.deepcopy(by_kind("Deployment", "llmload-worker"))
    broken["spec"]["replicas"] = "eight"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, kubernetes_version, strict=True)
    broken = copy.deepcopy(by_kind("Deployment", "llmload-master"))
    container(broken)["argz"] = ["--master"]
    with pytest.raises(kubernetes_validate.ValidationError):  # strict: an unknown field fails
        kubernetes_validate.validate(broken, kubernetes_version, strict=True)


@pytest.mark.unit
def test_kubernetes_manifests_fit_together():
    master, workers = by_kind("Deployment", "llmload-master"), by_kind("Deployment", "llmload-worker")
    service, config = by_kind("Service", "llmload-master"), by_kind("ConfigMap", "llmload-config")
    master_cmd, worker_cmd = container(master)["command"], container(workers)["command"]
    assert flag(worker_cmd, "--master-host") == service["metadata"]["name"]
    assert flag(master_cmd, "-f") == flag(worker_cmd, "-f")
    assert int(flag(master_cmd, "--expect-workers")) == workers["spec"]["replicas"] == 8
    for deployment in (master, workers):
        spec = deployment["spec"]
        assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
        volumes = {v["name"]: v for v in spec["template"]["spec"]["volumes"]}
        assert volumes["config"]["configMap"]["name"] == config["metadata"]["name"]
    assert service["spec"]["selector"].items() <= master["spec"]["template"]["metadata"]["labels"].items()
    ports = {p["name"] for p in container(master)["ports"]}
    assert {p["targetPort"] for p in service["spec"]["ports"]} == ports == {"web", "workers", "metrics"}
    metrics = next(p["containerPort"] for p in container(master)["ports"] if p["name"] == "metrics")
    annotations = master["spec"]["template"]["metadata"]["annotations"]  # where an annotation-based scrape looks
    assert int(flag(master_cmd, "--prometheus-port")) == metrics == int(annotations["prometheus.io/port"])


@pytest.mark.unit
def test_configmap_holds_the_master_options_and_a_prompt_set(tmp_path):
    data = by_kind("ConfigMap", "llmload-config")["data"]
    assert data["locust.conf"] == (DEPLOY / "locust.conf").read_text()
    assert "dataset = /etc/llmload/prompts.jsonl" in data["locust.conf"].splitlines()
    (tmp_path / "prompts.jsonl").write_text(data["prompts.jsonl"])
    records = load_prompts(tmp_path / "prompts.jsonl")
    assert len(records) == 3 and {r.task for r in records} == {"chat"}


# ---------------------------------------------------------------------- the image


def requirement_closure(names: set[str]) -> set[str]:
    """The distributions that ``names`` may pull in: their requirements, recursively, extras included (a package
    such as FastAPI imports an optional one when it is there, so this is an upper bound)."""
    seen, todo = set(), [normalise(n) for n in names]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        todo.extend(normalise(re.match(r"[A-Za-z0-9._-]+", line)[0]) for line in requires)
    return seen


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


IMPORTS = """
import glob, runpy, sys
left_out = set(sys.argv[1].split(","))

class NotInTheImage:
    # the top-level modules of the distributions the image leaves out cannot be imported, as in the image (a
    # package that imports one only when it is there, as anyio does sniffio, goes on without it)
    def find_spec(self, name, path=None, target=None):
        if name in left_out:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, NotInTheImage())
for path in sorted(glob.glob('locustfiles/*.py')):
    runpy.run_path(path)
import llmload.loadgen.webui, llmload.loadgen.shapes, server.app, server.engines.mock, uvicorn
print('\\n'.join(sorted({m.split('.')[0] for m in sys.modules})))
"""


@pytest.mark.integration
def test_the_image_installs_what_the_load_generator_imports():
    """The Dockerfile installs a named part of requirements.txt: the locustfiles, the web UI and the mock server
    import with only what comes with it importable."""
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    chosen = set(re.search(r"grep -E '\^\(([^)]*)\)", dockerfile)[1].split("|"))
    required = {normalise(re.match(r"[A-Za-z0-9._-]+", line)[0]) for line in
                (REPO_ROOT / "requirements.txt").read_text().splitlines() if line.strip() and line[0].isalpha()}
    assert {normalise(n) for n in chosen} & required >= {"locust", "ddsketch", "fastapi", "uvicorn"}
    installed = requirement_closure(chosen)
    ours = {p.name for p in REPO_ROOT.iterdir() if p.is_dir()}  # the source tree, on the image's path
    providers = importlib.metadata.packages_distributions()
    left_out = {module for module, dists in providers.items()
                if module not in ours and not {normalise(d) for d in dists} & installed}
    proc = subprocess.run([sys.executable, "-c", IMPORTS, ",".join(sorted(left_out))], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    third_party = {normalise(d) for module in proc.stdout.split() if module not in ours
                   and module != "_distutils_hack" for d in providers.get(module, [])}
    assert third_party and third_party <= installed
    assert not {"torch", "transformers", "vllm", "pandas", "matplotlib"} & third_party


# ---------------------------------------------------------------------- the commands, on loopback


@pytest.mark.integration
@pytest.mark.slow
def test_the_deploy_commands_run_a_distributed_test(server_factory, tmp_path):
    """Compose's master and worker command lines, the shipped locust.conf and the ConfigMap's prompts, as
    processes here: /etc/llmload and /results become folders of the test, the mock server the target,
    2 workers; the run is cut to 24 requests from 4 users. The results are where docs/deploy.md says."""
    url = server_factory("mock", "--mock-ttft-ms", "20", "--mock-itl-ms", "2")
    etc, results = tmp_path / "etc", tmp_path / "results"
    etc.mkdir()
    (etc / "prompts.jsonl").write_text(by_kind("ConfigMap", "llmload-config")["data"]["prompts.jsonl"])
    conf = (DEPLOY / "locust.conf").read_text().replace("/etc/llmload", str(etc)).replace("/results", str(results))
    (etc / "locust.conf").write_text(conf)
    services, port, metrics_port = compose()["services"], free_port(), free_port()
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert "WORKDIR /llmload" in dockerfile and "PYTHONPATH=/llmload" in dockerfile  # the image runs its source tree
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "LOCUST_HOST": url}

    def local(command: list[str]) -> list[str]:
        command = [interpolate(a, {"LLMLOAD_WORKERS": "2"}).replace("/etc/llmload", str(etc)) for a in command]
        command = ["127.0.0.1" if a == "master" else a for a in command]
        if "--prometheus-port" in command:  # the master's /metrics, on a free port here
            command[command.index("--prometheus-port") + 1] = str(metrics_port)
        return [sys.executable, "-m", "locust", *command[1:]]

    master = subprocess.Popen(local(services["master"]["command"]) + [
        "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port), "--requests", "24", "-u", "4", "-r", "4",
        "-t", "60s", "--only-summary"], cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True)
    workers = [subprocess.Popen(local(services["worker"]["command"]) + ["--master-port", str(port)], cwd=REPO_ROOT,
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(2)]
    try:
        out, _ = master.communicate(timeout=90)
        assert master.returncode == 0, out[-3000:]
        for worker in workers:
            worker.wait(timeout=30)  # the master's quit ends them
    finally:
        for proc in [master, *workers]:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    records = [json.loads(line) for line in (results / "chat_requests.jsonl").read_text().splitlines()]
    assert len(records) == 24 and all(r["prompt_id"].startswith("example-") for r in records), records[:2]
    assert len({r.get("worker") for r in records}) == 2, {r.get("worker") for r in records}
    for name in ("chat_summary.json", "chat_stats.csv", "chat.html"):
        assert (results / name).stat().st_size > 0, name
