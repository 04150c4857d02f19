"""The layers of docs/architecture.md, checked: every import of the project's own modules points down.

Each package may import only the packages below it (:data:`ALLOWED`); the walk
covers every import statement, including those inside functions, and a
function-local import of the project's own modules must say why on its line
(a ``#`` comment: an optional or heavy dependency, a cycle it avoids).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[1]

#: Package -> the project packages it may import (besides itself), bottom layer first.
ALLOWED: dict[str, set[str]] = {
    "llmload.core": set(),
    "server": {"llmload.core"},
    "monitors": {"llmload.core"},
    "llmload.tasks": {"llmload.core"},
    "llmload.targets": {"llmload.core", "server"},
    "llmload.loadgen": {"llmload.core", "llmload.tasks", "monitors"},
    "reports": {"llmload.core", "llmload.tasks", "monitors"},
    "llmload.runner": {"llmload.core", "llmload.tasks", "llmload.targets", "llmload.loadgen", "monitors", "reports",
                       "server"},
    "benchmarks": {"llmload.core", "llmload.tasks", "llmload.targets", "llmload.loadgen", "monitors", "reports",
                   "server", "benchmarks"},
    "llmload.locustfiles": {"llmload.loadgen"},
    "datasets": {"llmload.tasks"},
    # The one command: each subcommand is a program of the layers below (llmload/cli.py and llmload/__main__.py).
    "llmload.cli": {"llmload.core", "llmload.tasks", "llmload.targets", "llmload.loadgen", "monitors", "reports",
                    "server", "llmload.runner"},
}
#: Packages that are one module (``llmload/cli.py``), with the modules that belong to them.
MODULES = {"llmload.cli": ("llmload/cli.py", "llmload/__main__.py")}
PROJECT_ROOTS = {"llmload", "server", "monitors", "reports", "benchmarks"}


def package_of(module: str) -> str | None:
    """The layer package a dotted module name belongs to (None for third-party modules)."""
    parts = module.split(".")
    if parts[0] not in PROJECT_ROOTS:
        return None
    if parts[0] == "llmload":
        return "llmload." + parts[1] if len(parts) > 1 and f"llmload.{parts[1]}" in ALLOWED else "llmload.core"
    return parts[0]


def source_files() -> list[tuple[str, Path]]:
    files = []
    for package in ALLOWED:
        if package in MODULES:
            files += [(package, REPO / path) for path in MODULES[package]]
            continue
        folder = REPO.joinpath(*package.split("."))
        files += [(package, path) for path in sorted(folder.rglob("*.py"))]
    files += [("llmload.core", REPO / "llmload" / "__init__.py")]
    return files


def imports(path: Path) -> list[tuple[int, str, bool]]:
    """(line, module, inside a function) of every import of ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    local = {id(node) for fn in ast.walk(tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
             for node in ast.walk(fn) if isinstance(node, (ast.Import, ast.ImportFrom))}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, id(node) in local) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.lineno, node.module, id(node) in local))
    return found


FILES = source_files()


@pytest.mark.parametrize("package, path", FILES, ids=[str(p.relative_to(REPO)) for _, p in FILES])
def test_every_import_points_down(package, path):
    wrong = []
    for line, module, _ in imports(path):
        target = package_of(module)
        if target is not None and target != package and target not in ALLOWED[package]:
            wrong.append(f"{path.relative_to(REPO)}:{line}: {package} imports {module} ({target} is not below it)")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("package, path", FILES, ids=[str(p.relative_to(REPO)) for _, p in FILES])
def test_function_local_imports_of_the_project_say_why(package, path):
    lines = path.read_text(encoding="utf-8").splitlines()
    silent = [f"{path.relative_to(REPO)}:{line}: {lines[line - 1].strip()}"
              for line, module, local in imports(path)
              if local and package_of(module) is not None and "#" not in lines[line - 1]]
    assert not silent, "function-local imports without a reason:\n" + "\n".join(silent)


def test_the_layers_are_drawn_in_the_architecture_document():
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    for package in ALLOWED:
        assert f"`{MODULES[package][0] if package in MODULES else package.replace('.', '/') + '/'}`" in text, package


def test_every_layer_file_is_walked():
    """No Python file of the project's packages falls outside the table (a new top-level module would)."""
    walked = {path for _, path in FILES}
    for root in ("llmload", "server", "monitors", "reports", "benchmarks"):
        missed = [str(p.relative_to(REPO)) for p in (REPO / root).rglob("*.py") if p not in walked]
        assert not missed, f"files in no layer: {missed}"
