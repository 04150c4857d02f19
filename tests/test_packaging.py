"""The package as others get it: a wheel of this tree, installed into a fresh virtual environment, runs the
``llmload`` command, the basic server's mock engine, Locust on a packaged locustfile and one cell of the runner,
with nothing of the checkout on the path. And pyproject.toml declares what requirements.txt tests.

The dependencies are installed at the versions of the environment running the tests (the tested set), from a
wheelhouse kept between runs (``~/.cache/llmload/test-wheels``); a dependency missing there is fetched once.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

from llmload.core.paths import REPO_ROOT
from llmload.core.rawlog import read_results
from llmload.core.services import ServiceProcess, free_port, local_url
from prompt_sets import make_data

#: What the wheel is built from (a copy, so that no build/ or egg-info of the checkout leaks into it).
SOURCES = ("llmload", "server", "monitors", "reports", "pyproject.toml", "README.md")
WHEELHOUSE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "llmload" / "test-wheels"
#: Packages a base install must not bring (the extras and vLLM do).
HEAVY = ("torch", "transformers", "vllm", "datasets", "accelerate")


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement(line: str) -> tuple[str, str]:
    """``(normalised name, specifier)`` of a requirement line such as ``prometheus-client>=0.20``."""
    name, spec = re.match(r"\s*([A-Za-z0-9._-]+)\s*([^;#]*)", line).groups()
    return normalise(name), spec.replace(" ", "")


@pytest.mark.unit
def test_pyproject_declares_what_requirements_txt_tests():
    """Every dependency of the package and its extras is in requirements.txt with the same lower bound."""
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    tested = dict(requirement(line) for line in (REPO_ROOT / "requirements.txt").read_text().splitlines()
                  if line.strip() and not line.lstrip().startswith("#"))
    declared = list(project["dependencies"]) + [r for extra in project["optional-dependencies"].values() for r in extra
                                               if not r.startswith("llmload[")]
    assert len(declared) > 20
    for line in declared:
        name, spec = requirement(line)
        assert tested.get(name) == spec, f"pyproject has {line!r}, requirements.txt {name}{tested.get(name)}"
    assert project["scripts"] == {"llmload": "llmload.cli:main"}
    assert not {normalise(requirement(r)[0]) for r in project["dependencies"]} & set(HEAVY)


def run(command: list, timeout: float = 600, **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in command], capture_output=True, text=True, timeout=timeout, **kwargs)
    assert proc.returncode == 0, f"{' '.join(map(str, command))}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def build_wheel(folder: Path) -> Path:
    source = folder / "src"
    for name in SOURCES:
        path = REPO_ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(path, source / name)
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", folder / "dist",
         source])
    return next((folder / "dist").glob("llmload-*.whl"))


def install(python: Path, wheel: Path, constraints: Path) -> None:
    """Install ``wheel`` and its dependencies into the environment of ``python``, from the wheelhouse."""
    pip = [sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-compile", "-c", constraints]
    local = pip + ["--no-index", "--find-links", WHEELHOUSE, wheel]
    if subprocess.run([str(c) for c in local], capture_output=True, timeout=600).returncode == 0:
        return
    WHEELHOUSE.mkdir(parents=True, exist_ok=True)  # a dependency is not in the wheelhouse yet: fetch them once
    run([sys.executable, "-m", "pip", "wheel", "-q", "-c", constraints, "-w", WHEELHOUSE, wheel])
    for stale in WHEELHOUSE.glob("llmload-*.whl"):
        stale.unlink()
    run(local)


def pinned_versions(path: Path) -> Path:
    """A constraints file pinning every package of the running environment (but this one) to its version."""
    pins = {normalise(d.metadata["Name"]): d.version for d in metadata.distributions() if d.metadata["Name"]}
    pins.pop("llmload", None)
    path.write_text("".join(f"{name}=={version}\n" for name, version in sorted(pins.items())))
    return path


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(the fresh environment's bin folder, an environment without the checkout, phase timings in seconds)."""
    folder = tmp_path_factory.mktemp("wheel")
    timings = {}
    started = time.monotonic()
    wheel = build_wheel(folder)
    timings["build"] = time.monotonic() - started
    venv = folder / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", venv])
    install(venv / "bin" / "python", wheel, pinned_versions(folder / "constraints.txt"))
    timings["venv and install"] = time.monotonic() - started - timings["build"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLMLOAD_", "PYTHON", "VIRTUAL_ENV"))}
    env.update(PYTHONPATH="", PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}")
    return venv / "bin", env, timings


@pytest.mark.integration
@pytest.mark.slow
def test_the_installed_command_runs_a_mock_cell(installed, tmp_path):
    bin_dir, env, timings = installed
    work = tmp_path / "work"  # the current folder of every command: the checkout is nowhere on the path
    work.mkdir()
    data = make_data(tmp_path / "data", ("qa",), n=8)
    llmload = str(bin_dir / "llmload")
    started = time.monotonic()

    help_text = run([llmload, "--help"], cwd=work, env=env).stdout
    assert help_text.startswith("usage: llmload COMMAND") and "locustfile" in help_text
    site = run([bin_dir / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
               cwd=work, env=env).stdout.strip()
    locustfile = Path(run([llmload, "locustfile", "qa"], cwd=work, env=env).stdout.strip())
    assert locustfile == Path(site) / "llmload" / "locustfiles" / "qa.py" and locustfile.is_file()
    found = run([bin_dir / "python", "-c", f"import importlib.util as u; print([m for m in {HEAVY!r} if u.find_spec(m)])"],
                cwd=work, env=env).stdout.strip()
    assert found == "[]", f"the base install brought {found}"

    # the basic server's mock engine, and Locust on the packaged locustfile against it
    port = free_port()
    server = ServiceProcess("installed mock server", [llmload, "serve", "--engine", "mock", "--host", "127.0.0.1",
                                                      "--port", str(port), "--mock-ttft-ms", "5", "--mock-itl-ms", "1",
                                                      "--log-level", "warning"],
                            local_url(port, "/health"), tmp_path / "server.log", env=env, cwd=work).start()
    try:
        server.wait_ready(60)
        locust = run([llmload, "locust", "qa", "--", "--headless", "-u", "1", "-r", "1", "-t", "60s",
                      "-H", f"http://127.0.0.1:{port}", "--requests", "3", "--max-tokens", "4",
                      "--dataset", data / "qa.jsonl"], cwd=work, env=env, timeout=120)
    finally:
        server.stop()
    assert "llmload: 3 requests, 0 failed" in locust.stdout + locust.stderr

    # one cell of the runner: it starts the mock server and Locust from the installed package
    cell = run([llmload, "run", "--servers", "mock", "--tasks", "qa", "--concurrency", "1", "--requests", "4",
                "--max-tokens", "8", "--data-dir", data, "--mock-ttft-ms", "5", "--mock-itl-ms", "1",
                "--cell-timeout", "120", "--repeat", "1"], cwd=work, env=env, timeout=300)
    timings["commands"] = time.monotonic() - started
    (run_dir,) = (work / "results").iterdir()  # an installed suite writes its results under the current folder
    cells = [json.loads(line) for line in (run_dir / "cells.jsonl").read_text().splitlines()]
    assert [(c["server"], c["task"], c["status"]) for c in cells][-1] == ("mock", "qa", "ok"), cell.stdout
    results = read_results(run_dir / "mock" / "qa_stream_c1_requests.jsonl")
    assert len(results) == 4 and all(r.success and r.output_tokens == 8 for r in results)
    manifest = json.loads((run_dir / "run.json").read_text())
    assert manifest["git_commit"] is None and manifest["datasets"] == {"qa": str(data / "qa.jsonl")}
    assert re.search(r"\|\s*mock\s*\|\s*qa\s*\|\s*stream\s*\|\s*c1\s*\|\s*ok\s*\|\s*-\s*\|\s*4\s*\|",
                     (run_dir / "report" / "summary.md").read_text())
    print("wheel test timings: " + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items()))
