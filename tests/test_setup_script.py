"""scripts/uv_args.py: pip's package sources handed to uv, or pip kept where uv cannot match a setting."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from llmload.core.paths import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "uv_args.py"
_spec = importlib.util.spec_from_file_location("uv_args", SCRIPT)
uv_args = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(uv_args)

LISTING = """\
global.cert='/etc/ssl/certs/ca-certificates.crt'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/opt/wheels'
install.find-links='/srv/wheels'
:env:.default-timeout='180'
:env:.index-url='https://mirror.example/simple'
"""


@pytest.mark.unit
def test_each_source_becomes_uv_options_the_environment_and_the_install_section_winning():
    config = uv_args.settings(LISTING)
    assert config["find-links"] == "/srv/wheels" and config["index-url"] == "https://mirror.example/simple"
    args = uv_args.uv_args(config)
    assert args[:2] == ["--index-strategy", "unsafe-best-match"]  # pip's: the best version over every source
    pairs = list(zip(args[2::2], args[3::2]))
    assert sorted(pairs) == sorted([
        ("--constraint", "/etc/xdg/pip/constraints.txt"), ("--extra-index-url", "file:///opt/pypi/simple"),
        ("--extra-index-url", "file:///opt/pypi-more/simple"), ("--find-links", "/srv/wheels"),
        ("--index-url", "https://mirror.example/simple")])


@pytest.mark.unit
@pytest.mark.parametrize("listing, expected", [
    (":env:.no-index='1'", ["--no-index"]), (":env:.no-index='false'", []),
    ("global.trusted-host='a.example b.example'", ["--allow-insecure-host", "a.example", "--allow-insecure-host",
                                                   "b.example"]),
    ("", []), ("not a setting\nsite.other='x'", []),
])
def test_switches_lists_and_lines_that_are_not_settings(listing, expected):
    assert uv_args.uv_args(uv_args.settings(listing))[2:] == expected


@pytest.mark.unit
@pytest.mark.parametrize("key", ["proxy", "pre", "only-binary", "no-binary", "index"])
def test_a_setting_uv_would_not_honour_here_is_refused(key):
    with pytest.raises(ValueError, match=key):
        uv_args.uv_args(uv_args.settings(f"global.{key}='x'"))


def run(env: dict[str, str]) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    return subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=60,
                          env={**clean, "PIP_CONFIG_FILE": os.devnull, **env})


@pytest.mark.integration
def test_the_script_reads_pips_own_settings():
    proc = run({"PIP_FIND_LINKS": "/tmp/a-folder", "PIP_DEFAULT_TIMEOUT": "60"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:-1] == ["--index-strategy", "unsafe-best-match", "--find-links", "/tmp/a-folder"]
    refused = run({"PIP_PROXY": "http://proxy.example:3128"})
    assert refused.returncode == 3 and refused.stdout == ""
    assert refused.stderr == "pip setting proxy has no uv equivalent here\n"
