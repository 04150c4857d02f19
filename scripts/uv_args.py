"""Print, one per line, the ``uv pip install`` options that give uv the package sources pip is configured with.

    python scripts/uv_args.py          # reads `python -m pip config list` (pip's files and PIP_* variables)

pip's index, extra indexes, find-links folders, constraints and trusted hosts
become uv's options; ``--index-strategy unsafe-best-match`` makes uv pick, as
pip does, the best version across all of them (a local wheel beside PyPI's).
A setting that would change what pip installs and has no such option here
(a proxy, ``--pre``, ``--only-binary``, ...) exits 3 with its name, so that
``scripts/setup_env.sh`` uses pip instead.
"""

from __future__ import annotations

import ast
import subprocess
import sys

#: pip settings -> uv option, each value (split on white space) given once per option
MAPPED = {"index-url": "--index-url", "extra-index-url": "--extra-index-url", "find-links": "--find-links",
          "constraint": "--constraint", "trusted-host": "--allow-insecure-host"}
#: pip settings that do not change what is installed (or that uv does its own way: ``cert`` by the system's store)
HARMLESS = {"cert", "config-file", "timeout", "default-timeout", "disable-pip-version-check", "progress-bar",
            "no-cache-dir", "cache-dir", "retries", "quiet", "verbose", "no-input", "root-user-action", "no-color",
            "no-warn-script-location", "no-python-version-warning", "require-virtualenv", "break-system-packages"}
#: later wins: a command's own section over [global], the environment over both
PRECEDENCE = {"global": 0, "install": 1, ":env:": 2}
TRUE = {"1", "true", "yes", "on"}


def settings(listing: str) -> dict[str, str]:
    """``{key: value}`` from ``pip config list`` output (``section.key='value'`` lines), by precedence."""
    found: dict[str, tuple[int, str]] = {}
    for line in listing.splitlines():
        name, sep, raw = line.partition("=")
        section, _dot, key = name.rpartition(".")
        if not sep or section not in PRECEDENCE:
            continue
        value = ast.literal_eval(raw) if raw and raw[0] in "'\"" else raw
        rank = PRECEDENCE[section]
        if key not in found or rank >= found[key][0]:
            found[key] = (rank, str(value))
    return {key: value for key, (_rank, value) in found.items()}


def uv_args(config: dict[str, str]) -> list[str]:
    """The options for ``uv pip install``; ValueError naming a setting with no uv equivalent here."""
    args = ["--index-strategy", "unsafe-best-match"]
    for key, value in sorted(config.items()):
        if key in MAPPED:
            for item in value.split():
                args += [MAPPED[key], item]
        elif key == "no-index":
            if value.strip().lower() in TRUE:
                args.append("--no-index")
        elif key not in HARMLESS:
            raise ValueError(key)
    return args


def main() -> int:
    try:
        listing = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                                 check=True).stdout
        args = uv_args(settings(listing))
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"cannot read pip's settings: {exc}", file=sys.stderr)
        return 3
    except ValueError as exc:
        print(f"pip setting {exc} has no uv equivalent here", file=sys.stderr)
        return 3
    print("\n".join(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
