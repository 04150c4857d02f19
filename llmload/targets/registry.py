"""The servers under test the suite knows: one entry per kind (adding one = its file + one line here)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from llmload.core.cliargs import CLIError, option
from llmload.core.runfiles import DEFAULT_BASELINE
from llmload.core.services import ServiceError
from llmload.targets.base import Target, TargetKind
from llmload.targets.basic import BasicServer
from llmload.targets.external import ExternalServer
from llmload.targets.vllm import VLLMServer

KINDS: dict[str, TargetKind] = {}


def register(kind: TargetKind) -> TargetKind:
    """Add (or replace) a server kind; returns it."""
    KINDS[kind.name] = kind
    return kind


for _kind in (
    BasicServer("basic-naive", "naive", "the basic server, naive engine: one request at a time (the seed's script)"),
    BasicServer("basic-batched", "batched", "the basic server, continuous batching"),
    BasicServer("basic-batched-plain", "batched", "basic-batched with its weights left unpacked (to measure packing)",
                flags=("--no-prepack-weights",)),
    BasicServer("mock", "mock", "the basic server's mock engine: no model, tokens on a fixed schedule"),
    VLLMServer("vllm", prefix_caching=False, description="vLLM, automatic prefix caching off"),
    VLLMServer("vllm-prefix-cache", prefix_caching=True, description="vLLM, automatic prefix caching on"),
    ExternalServer(),
):
    register(_kind)

#: Short names accepted wherever a server kind is named.
ALIASES = {"basic": "basic-naive", "naive": "basic-naive", "batched": "basic-batched",
           "batched-plain": "basic-batched-plain"}
#: The servers a comparison runs when ``--servers`` is not given (the runner's and the benchmarks').
DEFAULT_SERVERS = "basic-naive,basic-batched,vllm"
__all__ = ["ALIASES", "DEFAULT_BASELINE", "DEFAULT_SERVERS", "KINDS", "ServerSelection", "choose_servers",
           "get_kind", "parse_targets", "register", "targets_type"]


def get_kind(name: str) -> TargetKind:
    """The kind called ``name`` (or an alias of it); :class:`ServiceError` listing the known ones."""
    kind = KINDS.get(ALIASES.get(name, name))
    if kind is None:
        raise ServiceError(f"unknown server {name!r}: choose from {', '.join(k for k in KINDS if k != 'url')}, "
                           "or give NAME=URL for a server that is already running")
    return kind


def parse_targets(text: str) -> list[Target]:
    """``basic,vllm`` or ``a=http://host:8000,b=vllm``: kinds to start, or NAME=URL for running servers.

    ``NAME=KIND`` starts a kind under another name (two runs of the same kind side by side).
    """
    targets = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, value = item.partition("=")
        name = name.strip()
        if sep and "://" in value:
            targets.append(Target(name, "url", value.strip().rstrip("/")))
        else:
            kind = get_kind(value.strip() if sep else name)
            targets.append(Target(name if sep else kind.name, kind.name))
    if not targets:
        raise ServiceError("--servers is empty")
    names = [t.name for t in targets]
    if len(set(names)) != len(names):
        raise ServiceError(f"--servers names must be unique (got {text})")
    return targets


def targets_type(text: str) -> list[Target]:
    """An argparse type for ``--servers`` (:func:`parse_targets`)."""
    try:
        return parse_targets(text)
    except ServiceError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


@dataclass(frozen=True)
class ServerSelection:
    """``--servers`` and ``--baseline``, declared once for every program that compares servers (the runner, the
    benchmarks); :func:`choose_servers` reads them."""

    servers: list[Target] | None = option(
        None, lambda: f"comma list of server kinds to start ({', '.join(k for k in KINDS if k != 'url')}; aliases "
        f"{', '.join(ALIASES)}), NAME=KIND to start a kind under another name, or NAME=URL for a server already "
        f"running (default: {DEFAULT_SERVERS})", type=targets_type, metavar="LIST")
    baseline: str | None = option(
        None, f"the server every ratio is taken against, baseline / server (default: {DEFAULT_BASELINE}, when it "
        "is among --servers)", metavar="NAME")


def choose_servers(servers: list[Target] | None, baseline: str | None) -> tuple[list[Target], str | None]:
    """The servers (:data:`DEFAULT_SERVERS` when none are given) and the baseline (:data:`DEFAULT_BASELINE` when
    it is among them, else None). Raises :class:`CLIError` for a baseline that is not among them."""
    targets = list(servers) if servers else parse_targets(DEFAULT_SERVERS)
    names = [t.name for t in targets]
    if baseline is None:
        return targets, DEFAULT_BASELINE if DEFAULT_BASELINE in names else None
    if baseline not in names:
        raise CLIError(f"--baseline {baseline} is not among --servers ({', '.join(names)})")
    return targets, baseline
