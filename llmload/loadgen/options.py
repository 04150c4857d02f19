"""The load generator's command-line options, added to Locust's own parser.

Each option also reads a ``LOCUST_LLM_*`` environment variable and a Locust
config file key of the same name (``mode = sync`` in ``locust.conf``). The
prefix differs from the server's ``LLMLOAD_*`` so that a server setting such as
``LLMLOAD_MODEL`` never leaks into the client. In distributed mode the master's
values are sent to the workers by Locust, so options are given to the master.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from llmload.core.metrics import APIS, MODES
from llmload.core.paths import dataset_path
from llmload.core.wire import GenerationParams

ENV_PREFIX = "LOCUST_LLM_"


def _number(kind, minimum, inclusive: bool, what: str):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if value < minimum or (not inclusive and value == minimum):
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
        return value
    return parse


non_negative_int = _number(int, 0, True, "an integer >= 0")
positive_float = _number(float, 0.0, False, "a number > 0")
non_negative_float = _number(float, 0.0, True, "a number >= 0")


def add_arguments(parser) -> None:
    """Add the suite's options to Locust's parser (from the ``init_command_line_parser`` event)."""

    def add(flag: str, **kwargs) -> None:
        # configargparse appends "[env var: ...]" to the help
        parser.add_argument(flag, env_var=ENV_PREFIX + flag.lstrip("-").replace("-", "_").upper(), **kwargs)

    add("--mode", choices=MODES, default="stream",
        help="sync: one JSON answer per request; stream: SSE, with TTFT and time per token (default: %(default)s)")
    add("--api", choices=APIS, default="chat",
        help="completion (/v1/completions, the record's prompt) or chat (/v1/chat/completions, its messages) "
             "(default: %(default)s)")
    add("--model", metavar="ID", default="",
        help="model id to request (default: the first id the server lists at /v1/models)")
    add("--max-tokens", metavar="N", type=non_negative_int, default=0,
        help="output token budget of every request (default 0: each prompt record's own budget)")
    add("--ignore-eos", action="store_true", default=False,
        help="ask the server to ignore end-of-sequence so that every request generates --max-tokens tokens")
    add("--temperature", metavar="T", type=non_negative_float, default=0.0,
        help="sampling temperature (default: %(default)s)")
    add("--dataset", metavar="PATH", default="",
        help="prompt records (JSONL, llmload.core.records) to send (default: datasets/data/<task>.jsonl of the user "
             "class's task)")
    add("--requests", metavar="N", type=non_negative_int, default=0,
        help="stop the run after this many requests in total, over all users and workers (default 0: no limit; "
             "the run then ends with -t or by hand)")
    add("--api-key", metavar="KEY", default="", is_secret=True, help="send 'Authorization: Bearer KEY'")
    add("--timeout", metavar="SECONDS", type=positive_float, default=600.0,
        help="seconds one request may take in all before it fails as timed out (default: %(default)s)")
    add("--raw-log", metavar="PATH", default="",
        help="where to write the per-request raw log (JSONL) when no --csv is given "
             "(with --csv it is <prefix>_requests.jsonl)")
    add("--monitor-pid", metavar="PID", type=non_negative_int, default=None, include_in_web_ui=False,
        help="sample host, client and this server process tree's resources into <prefix>_monitor.csv during the "
             "test (0: no server process, host and client only)")
    add("--monitor-interval", metavar="SECONDS", type=positive_float, default=0.5, include_in_web_ui=False,
        help="seconds between resource samples (default: %(default)s)")


class SettingsError(ValueError):
    """A combination of options that cannot work (the message is one line)."""


@dataclass(frozen=True)
class LoadSettings:
    """The options of one run, typed (built from Locust's parsed options)."""

    params: GenerationParams
    model: str = ""
    dataset: str = ""
    requests: int = 0
    api_key: str = ""
    timeout: float = 600.0
    csv_prefix: str = ""
    raw_log: str = ""
    monitor_pid: int | None = None
    monitor_interval: float = 0.5

    @classmethod
    def from_options(cls, options) -> "LoadSettings":
        """Settings from Locust's ``environment.parsed_options`` (defaults for anything missing)."""
        get = lambda name, default: getattr(options, name, default) if options is not None else default  # noqa: E731
        params = GenerationParams(api=get("api", "chat"), mode=get("mode", "stream"),
                                  max_tokens=get("max_tokens", 0) or None, ignore_eos=bool(get("ignore_eos", False)),
                                  temperature=float(get("temperature", 0.0)))
        return cls(params=params, model=get("model", "") or "", dataset=get("dataset", "") or "",
                   requests=int(get("requests", 0) or 0), api_key=get("api_key", "") or "",
                   timeout=float(get("timeout", 600.0)), csv_prefix=get("csv_prefix", "") or "",
                   raw_log=get("raw_log", "") or "", monitor_pid=get("monitor_pid", None),
                   monitor_interval=float(get("monitor_interval", 0.5)))

    def dataset_for(self, task: str) -> Path:
        """The prompt file of ``task``: ``--dataset`` or the task's built default."""
        return Path(self.dataset) if self.dataset else dataset_path(task)

    @property
    def raw_log_path(self) -> Path | None:
        """``<csv prefix>_requests.jsonl``, else ``--raw-log``, else None (no raw log)."""
        if self.csv_prefix:
            return Path(f"{self.csv_prefix}_requests.jsonl")
        return Path(self.raw_log) if self.raw_log else None

    @property
    def monitor_path(self) -> Path | None:
        """``<csv prefix>_monitor.csv`` (or beside the raw log); None when there is nowhere to write."""
        if self.csv_prefix:
            return Path(f"{self.csv_prefix}_monitor.csv")
        raw = self.raw_log_path
        if raw is None:
            return None
        stem = raw.name[: -len("_requests.jsonl")] if raw.name.endswith("_requests.jsonl") else raw.stem
        return raw.with_name(f"{stem}_monitor.csv")

    def check(self) -> None:
        """Raise :class:`SettingsError` for options that contradict each other."""
        if self.monitor_pid is not None and self.monitor_path is None:
            raise SettingsError("--monitor-pid needs --csv PREFIX or --raw-log PATH (to know where to write "
                                "the monitor CSV)")
