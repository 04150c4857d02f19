"""Every command the README (and the docs pages that took its sections) shows exists and parses: modules answer
--help, make targets and files exist; every relative link of the README and docs/ resolves."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

#: Commands run to completion, no wall-clock bound: beside the serial part at idle CPU priority (docs/testing.md).
pytestmark = pytest.mark.background

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
#: The pages whose commands are checked: the README and the docs pages its sections moved to.
CHECKED = ("README.md", "docs/results.md", "docs/benchmarks.md", "docs/testing.md", "docs/loadgen.md",
           "docs/server.md", "docs/reports.md", "docs/metrics.md", "docs/traces.md", "docs/install.md")
TEXT = "\n".join((REPO / name).read_text() for name in CHECKED)
#: The inline code spans (`...`), outside the fenced blocks.
INLINE_CODE = re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", TEXT, flags=re.S))
#: The shell blocks (```bash or bare); every fence is matched as a pair, so a ```python block's closing fence is
#: never taken for an opening one.
CODE = "\n".join(body for lang, body in re.findall(r"```(\w*)\n(.*?)```", TEXT, flags=re.S)
                 if lang in ("", "bash")) + "\n" + "\n".join(INLINE_CODE)

# vLLM's own entry point takes a minute to print its help; the vLLM cell test starts it for real.
MODULES = sorted(m for m in set(re.findall(r"python -m ([a-z_][\w.]*)", CODE)) - {"venv", "pip"}
                 if not m.startswith("vllm."))
MAKE_TARGETS = sorted(set(re.findall(r"\bmake ([a-z][\w-]*)", CODE)))
#: The subcommands of ``llmload COMMAND`` (or ``python -m llmload COMMAND``) the README shows.
LLMLOAD_COMMANDS = sorted(set(re.findall(r"(?<![\w/.-])llmload ([a-z][\w-]*)", CODE)))
PATHS = sorted(set(re.findall(r"(?<![\w./-])((?:locustfiles|datasets|scripts|server|reports|monitors|llmload|docs|benchmarks)"
                              r"/[\w./-]+\.(?:py|sh|md|png|js|conf))(?![\w-])", TEXT)))


@pytest.mark.unit
def test_the_readme_names_commands():
    modules = set(re.findall(r"python -m ([a-z_][\w.]*)", README))
    assert {"llmload.runner", "server", "server.vllm_launcher", "reports.merge", "monitors"} <= modules
    assert {"compare", "test", "quick", "data", "model"} <= set(re.findall(r"\bmake ([a-z][\w-]*)", README))
    assert {"run", "report", "compare", "prepare", "serve", "locust", "locustfile"} <= set(LLMLOAD_COMMANDS)


@pytest.mark.integration
@pytest.mark.parametrize("command", LLMLOAD_COMMANDS)
def test_llmload_commands_exist_and_answer_help(command):
    proc = subprocess.run([sys.executable, "-m", "llmload", command, "--help"], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "usage" in proc.stdout.lower()


@pytest.mark.parametrize("module", MODULES)
@pytest.mark.integration
def test_module_commands_answer_help(module):
    proc = subprocess.run([sys.executable, "-m", module, "--help"], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "usage" in proc.stdout.lower() or "options" in proc.stdout.lower()


@pytest.mark.integration
def test_dataset_script_answers_help():
    proc = subprocess.run([sys.executable, "datasets/prepare.py", "--help"], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and "--source" in proc.stdout, proc.stderr


@pytest.mark.unit
def test_make_targets_exist():
    makefile = (REPO / "Makefile").read_text()
    for target in MAKE_TARGETS:
        assert re.search(rf"^{re.escape(target)}:", makefile, flags=re.M), f"make {target} is not in the Makefile"


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.unit
def test_files_the_readme_names_exist(path):
    assert (REPO / path).exists(), path


@pytest.mark.unit
def test_datasets_is_not_a_package():
    assert not (REPO / "datasets" / "__init__.py").exists()


def readme_command_lines() -> list[str]:
    """The commands of the checked pages' bash blocks (continuation lines joined, comments dropped) and its inline
    commands (`python -m ...`, `llmload ...`, `make compare ARGS="..."`)."""
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", TEXT, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #", 1)[0].strip()
            if line and not line.startswith("#"):
                lines.append(line)
    lines += [span for span in INLINE_CODE if help_command(span)]
    return lines


def help_command(line: str) -> tuple[str, ...] | None:
    """The command whose --help lists the flags ``line`` uses (None for commands not checked here)."""
    words = line.split()
    if words[:3] == ["python", "-m", "llmload"]:
        words = words[2:]
    if len(words) < 2:
        return None
    if words[0] == "llmload":
        if not re.fullmatch(r"[a-z][\w-]*", words[1]):
            return None  # `llmload COMMAND --help`: a placeholder
        return ("locust",) if words[1] == "locust" else ("llmload", words[1])
    if words[0] == "make" and words[1] in ("compare", "quick"):
        return ("python", "-m", "llmload.runner")
    if words[:2] == ["python", "-m"] and len(words) > 2:
        module = words[2]
        return None if module in ("venv", "pip") or module.startswith("vllm.") else ("python", "-m", module)
    if words[0] in ("locust", "uvicorn"):
        return (words[0],)
    return None


def help_text(command: tuple[str, ...]) -> str:
    """What ``command --help`` prints; for Locust, its own help plus the suite's options (``python -m llmload.loadgen``:
    Locust prints its help before it imports a locustfile, so it never lists a locustfile's options)."""
    if command == ("locust",):
        runs = [["-m", "locust", "-f", "locustfiles/chat.py", "--help"], ["-m", "llmload.loadgen"]]
    elif command[0] == "llmload":
        runs = [["-m", "llmload", command[1], "--help"]]
    else:
        runs = [["-m", command[-1], "--help"]]
    texts = []
    for args in runs:
        proc = subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=180)
        assert proc.returncode == 0, (args, proc.stderr[-2000:])
        texts.append(proc.stdout)
    return "\n".join(texts)


FLAG_CHECKS = sorted({(cmd, flag) for line in readme_command_lines() if (cmd := help_command(line))
                      for flag in re.findall(r"(?<![^\s\"'])(--[a-z][\w-]*)", line)})


@pytest.fixture(scope="module")
def help_texts() -> dict[tuple[str, ...], str]:
    """Each checked command's --help output, run once."""
    return {cmd: help_text(cmd) for cmd in sorted({cmd for cmd, _ in FLAG_CHECKS})}


@pytest.mark.unit
def test_the_readme_commands_use_flags():
    assert len(FLAG_CHECKS) > 25 and (("locust",), "--requests") in FLAG_CHECKS


@pytest.mark.parametrize("cmd, flag", FLAG_CHECKS, ids=[f"{c[-1]}:{f}" for c, f in FLAG_CHECKS])
@pytest.mark.integration
def test_every_flag_in_a_readme_command_is_in_its_help(help_texts, cmd, flag):
    assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", help_texts[cmd]), \
        f"{flag} is not in the help of `{' '.join(cmd)}`"


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, flags=re.M)}


PAGES = [REPO / "README.md", REPO / "datasets" / "README.md", *sorted((REPO / "docs").glob("*.md"))]


@pytest.mark.unit
@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_relative_links_resolve(page):
    """Every relative link (a file, a figure, a #heading) of the README and docs/ points at something there."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue  # http:, https:, mailto:
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(target)
    assert not broken, f"{page.relative_to(REPO)}: {broken}"
