"""The load generator's options: one declaration each, added to Locust's parser, read back as :class:`LoadSettings`.

Each option also reads a ``LOCUST_LLM_*`` environment variable and the same
key in a Locust config file (``mode = sync`` in ``locust.conf``). The prefix
differs from the server's ``LLMLOAD_*`` so that a server setting such as
``LLMLOAD_MODEL`` never leaks into the client. In distributed mode the
master's values are sent to the workers by Locust, so options go to the master.
"""

from __future__ import annotations

import argparse
import socket
from dataclasses import dataclass, fields
from pathlib import Path

from llmload.core import cliargs
from llmload.core.cancel import SYNTAX as CANCEL_SYNTAX
from llmload.core.cancel import CancelPolicy, cancel_after_text, parse_cancel_after
from llmload.core.cliargs import (duration, non_negative_float, non_negative_int, port, positive_float,
                                  positive_int, request_share)
from llmload.core.defaults import REQUEST_TIMEOUT_S
from llmload.core.cost import price
from llmload.core.cliargs import slo as slo_type
from llmload.core.apis import APIS, GenerationParams
from llmload.core.metrics import MODES, SLO
from llmload.core.paths import dataset_path
from llmload.core.records import DatasetError
from llmload.core.retry import RETRY_STATUSES, RetryPolicy
from llmload.loadgen.tracing import otel_available, otlp_url
from llmload.tasks.traces import BLOCK_TOKENS, FORMATS as TRACE_FORMATS

ENV_PREFIX = "LOCUST_LLM_"
ARRIVALS = ("constant", "poisson", "gamma")
#: --retry-max-wait's default: the longest wait before a retry, in seconds.
RETRY_MAX_WAIT_S = 10.0
#: --max-error-rate judges a run once this many requests ended (or all of --requests, less --warmup, if fewer).
ERROR_RATE_MIN_REQUESTS = 20
#: The load generator's exit code when --max-error-rate stopped the run.
ERROR_RATE_EXIT_CODE = 3
#: The options that shape a ``--trace`` replay (its format, window, scale and blocks): without a trace, bad input.
TRACE_SHAPING = ("trace_format", "time_scale", "trace_start", "trace_duration", "trace_block_size")


class SettingsError(ValueError):
    """A combination of options that cannot work (the message is one line)."""


seconds = duration("s")


def stages_type(text: str) -> tuple[tuple[float, int], ...]:
    """``--stages 30s:4,60s:16``: run 4 users for 30 s, then 16 users for 60 s, then stop."""
    stages = []
    for item in (part.strip() for part in text.split(",") if part.strip()):
        length, sep, users = item.partition(":")
        try:
            count = int(users)
        except ValueError:
            count = -1
        if not sep or count < 0:
            raise argparse.ArgumentTypeError(f"{item!r} is not DURATION:USERS (e.g. 30s:4,60s:16)")
        stages.append((seconds(length), count))
    if not stages:
        raise argparse.ArgumentTypeError("no stage given: use DURATION:USERS,... (e.g. 30s:4,60s:16)")
    return tuple(stages)


def ramp_type(text: str) -> tuple[tuple[float, int], ...]:
    """``--ramp 1:32:120s``: users from 1 to 32 in equal steps over 120 s (stages of at least 5 s, the first
    at 1 user, the last at 32)."""
    parts = text.split(":")
    try:
        first, last, length = int(parts[0]), int(parts[1]), seconds(parts[2])
        if len(parts) != 3 or first < 0 or last < 0:
            raise ValueError
    except (ValueError, IndexError, argparse.ArgumentTypeError):
        raise argparse.ArgumentTypeError(f"{text!r} is not FROM:TO:DURATION (e.g. 1:32:120s)") from None
    steps = max(1, min(abs(last - first) + 1, int(length // 5) or 1))
    if steps == 1:
        return ((length, last),)
    return tuple((length / steps, round(first + (last - first) * i / (steps - 1))) for i in range(steps))


def metrics_port_error(host: str, port: int, exc: OSError) -> str:
    """The one line said when ``/metrics`` cannot be served on ``host:port``."""
    return (f"--prometheus-port {port}: cannot serve /metrics on {host}:{port}: {exc.strerror or exc} "
            "(another process has the port? pick another)")


def check_port_free(host: str, port: int) -> None:
    """Bind ``host:port`` as the /metrics server will (and let go): :class:`SettingsError` when it cannot."""
    try:
        family, kind, proto, _name, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as http.server binds
            probe.bind(address)
    except OSError as exc:
        raise SettingsError(metrics_port_error(host, port, exc)) from None


def _from_form(f, text: str, convert):
    """A value typed into the web UI's form: blank or the default echoed back is the default; else ``convert``."""
    text = text.strip()
    if not text:
        return None
    try:
        return convert(text)
    except argparse.ArgumentTypeError as exc:
        try:
            if type(f.default)(text) == f.default:  # the form shows every default (--rate 0: closed loop)
                return None
        except (TypeError, ValueError):
            pass
        raise SettingsError(f"{f.metadata['flag']}: {exc}") from None


def _option(flag: str, help: str, **kwargs):
    """A field of :class:`LoadSettings` that is also a command-line option (:func:`llmload.core.cliargs.option`;
    the keywords are ``add_argument``'s, Locust's ``include_in_web_ui`` and ``is_secret`` included)."""
    return cliargs.option(kwargs.pop("default"), help, flag=flag, **kwargs)


@dataclass(frozen=True)
class LoadSettings:
    """The options of one run, typed; each field with a ``flag`` is a command-line option (the one default)."""

    mode: str = _option("--mode", "sync: one JSON answer per request; stream: SSE, with TTFT and time per token",
                        default="stream", choices=MODES)
    api: str = _option("--api", "completion (/v1/completions, the record's prompt), chat (/v1/chat/completions, "
                       "its messages) or responses (/v1/responses, its messages as input)", default="chat",
                       choices=APIS)
    model: str = _option("--model", "model id to request (default: the first id the server lists at /v1/models)",
                         default="", metavar="ID")
    max_tokens: int = _option("--max-tokens", "output token budget of every request (0: each prompt record's own "
                              "budget)", default=0, metavar="N", type=non_negative_int)
    ignore_eos: bool = _option("--ignore-eos", "ask the server to ignore end-of-sequence so that every request "
                               "generates --max-tokens tokens", default=False, action="store_true")
    temperature: float = _option("--temperature", "sampling temperature", default=0.0, metavar="T",
                                 type=non_negative_float)
    tokenizer: str = _option("--tokenizer", "count each streamed chunk's tokens with this model's tokenizer (a "
                             "folder or hub id) where the server sends no running count (continuous_usage_stats), "
                             "so that ITL and TPOT are per token; without it such chunks count as one token each "
                             "(flagged itl_per_chunk)", default="", metavar="MODEL", include_in_web_ui=False)
    dataset: str = _option("--dataset", "prompt records (JSONL, llmload.core.records) to send (default: "
                           "datasets/data/<task>.jsonl of the user class's task)", default="", metavar="PATH")
    requests: int = _option("--requests", "stop the run after this many requests in total, over all users and "
                            "workers (0: no limit; the run then ends with -t or by hand)", default=0, metavar="N",
                            type=non_negative_int)
    warmup: int = _option("--warmup", "the first N requests (over all workers) are sent but left out of every "
                          "statistic; the raw log keeps them with warmup: true", default=0, metavar="N",
                          type=non_negative_int)
    rate: float = _option("--rate", "open loop: R requests per second in total (a number > 0), over all users and "
                          "workers, at times drawn from --arrival; -u is then the most requests in flight at once "
                          "(without it: closed loop, each user sends its next request when its answer is complete)",
                          default=0.0, metavar="R", type=positive_float)
    arrival: str = _option("--arrival", "law of the open loop's inter-arrival times (default: poisson, or gamma when "
                           "--burstiness is not 1)", default="", choices=ARRIVALS)
    burstiness: float = _option("--burstiness", "gamma arrivals' shape K: 1 = poisson, < 1 burstier, > 1 more "
                                "regular", default=1.0, metavar="K", type=positive_float)
    seed: int = _option("--seed", "seed of the arrival times and of the requests --cancel-rate cancels (the same seed gives the "
                        "same schedule and the same cancels)", default=0,
                        metavar="N", type=non_negative_int)
    slo: SLO | None = _option("--slo", "latency targets, e.g. ttft=500,tpot=50,e2e=4000 (ms; 0.5s and 500ms work "
                              "too; keys ttft, tpot, e2e, itl): each raw record gains slo_ok, and the stats show SLO "
                              "attainment and goodput", default=None, metavar="KEY=MS,...", type=slo_type)
    stages: tuple | None = _option("--stages", "a load shape: DURATION:USERS,... (e.g. 30s:4,60s:16) run in turn, "
                                   "then the run stops; users start and stop at -r per second",
                                   default=None, metavar="SPEC", type=stages_type, include_in_web_ui=False)
    ramp: tuple | None = _option("--ramp", "a load shape: FROM:TO:DURATION users in equal steps (e.g. 1:32:120s), "
                                 "then the run stops", default=None, metavar="SPEC", type=ramp_type,
                                 include_in_web_ui=False)
    # trace replay (docs/traces.md)
    trace: str = _option("--trace", "replay a trace: each request sent at its time with its input and output "
                         "lengths, prompts built to those lengths in the --tokenizer's tokens (default: the embedded "
                         "model), shared hash blocks shared token for token; the run stops after the last one",
                         default="", metavar="FILE", include_in_web_ui=False)
    trace_format: str = _option("--trace-format", "the --trace's format (default: told from its first line)",
                                default="", choices=TRACE_FORMATS, include_in_web_ui=False)
    time_scale: float = _option("--time-scale", "multiply the trace's times by S (0.5: twice as fast)",
                                default=1.0, metavar="S", type=positive_float, include_in_web_ui=False)
    trace_start: float = _option("--trace-start", "replay from this many seconds after the trace's first request",
                                 default=0.0, metavar="SECONDS", type=non_negative_float, include_in_web_ui=False)
    trace_duration: float = _option("--trace-duration", "replay this many seconds of the trace, before "
                                    "--time-scale (0: to its end)", default=0.0, metavar="SECONDS",
                                    type=non_negative_float, include_in_web_ui=False)
    trace_block_size: int = _option("--trace-block-size", "prompt tokens per hash id of the trace (Mooncake's "
                                    "block)", default=BLOCK_TOKENS, metavar="N", type=positive_int,
                                    include_in_web_ui=False)
    max_model_len: int = _option("--max-model-len", "the server's context: a --trace request longer than it is bad "
                                 "input (0: the --tokenizer's model's max_position_embeddings)", default=0, metavar="N",
                                 type=non_negative_int, include_in_web_ui=False)
    api_key: str = _option("--api-key", "send 'Authorization: Bearer KEY'", default="", metavar="KEY",
                           is_secret=True)
    timeout: float = _option("--timeout", "seconds one request may take in all before it fails as timed out",
                             default=REQUEST_TIMEOUT_S, metavar="SECONDS", type=positive_float)
    model_timeout: float = _option("--model-timeout", "seconds the /v1/models look-up may take (once per process)",
                                   default=10.0, metavar="SECONDS", type=positive_float)
    raw_log: str = _option("--raw-log", "where to append the per-request raw log (JSONL) when no --csv is given "
                           "(with --csv it is <prefix>_requests.jsonl)", default="", metavar="PATH")
    monitor_pid: int | None = _option("--monitor-pid", "sample host, client and this server process tree's "
                                      "resources into <prefix>_monitor.csv during the test (0: no server process, "
                                      "host and client only)", default=None, metavar="PID", type=non_negative_int,
                                      include_in_web_ui=False)
    monitor_interval: float = _option("--monitor-interval", "seconds between resource samples", default=0.5,
                                      metavar="SECONDS", type=positive_float, include_in_web_ui=False)
    metrics_url: str = _option("--metrics-url", "a server's Prometheus /metrics for the monitor to sample beside "
                               "its resources (needs --monitor-pid)", default="", metavar="URL",
                               include_in_web_ui=False)
    price_per_hour: float | None = _option("--price-per-hour", "the server's price in USD per hour: the summary "
                                           "gives $ per 1M output tokens and per 1,000 requests at the measured "
                                           "throughput", default=None, metavar="USD", type=price,
                                           include_in_web_ui=False)
    prometheus_port: int | None = _option("--prometheus-port", "serve the live figures (requests, tokens, latency "
                                          "histograms per task, SLO, client-error bound) at http://HOST:PORT/metrics "
                                          "for Prometheus, from the master or a standalone run (default: off)",
                                          default=None, metavar="PORT", type=port, include_in_web_ui=False)
    prometheus_host: str = _option("--prometheus-host", "the address /metrics binds to (0.0.0.0: every interface)",
                                   default="0.0.0.0", metavar="ADDRESS", include_in_web_ui=False)
    otel_endpoint: str = _option("--otel-endpoint", "export one OpenTelemetry span per request (trace id = its "
                                 "request id, the figures as attributes) to this OTLP/HTTP endpoint, e.g. "
                                 "http://localhost:4318 (Jaeger, Tempo, a collector); each process that sends "
                                 "requests exports its own", default="", metavar="URL", type=otlp_url,
                                 include_in_web_ui=False)
    # cancellation (llmload.core.cancel)
    cancel_rate: float = _option("--cancel-rate", "share P in [0, 1] of requests the client abandons at "
                                 "--cancel-after (closes the connection; drawn per request from --seed): the raw log "
                                 "flags them cancelled; they count apart, out of the latency figures and the failures",
                                 default=0.0, metavar="P", type=request_share)
    cancel_after: str = _option("--cancel-after", f"when a cancelled request is abandoned: {CANCEL_SYNTAX}; "
                                "ttft+ and tok need --mode stream", default="", metavar="WHEN",
                                type=cancel_after_text)
    # failures (llmload.core.retry; docs/loadgen.md, "Failures and retries")
    retry: int = _option("--retry", f"send a request answered {' or '.join(map(str, RETRY_STATUSES))} again, up to "
                         "N times, after its Retry-After (seconds or an HTTP date) or else a jittered exponential "
                         "backoff; its latency counts from the first send, the raw log keeps each attempt "
                         "(0: no retry)", default=0, metavar="N", type=non_negative_int)
    retry_max_wait: float = _option("--retry-max-wait", "the longest wait before a retry: the backoff's cap; a "
                                    "longer Retry-After is not retried", default=RETRY_MAX_WAIT_S,
                                    metavar="SECONDS", type=positive_float)
    max_error_rate: float | None = _option("--max-error-rate", "stop the run, with exit code "
                                           f"{ERROR_RATE_EXIT_CODE}, once the failed share of the requests ended "
                                           f"passes R in [0, 1] (judged from {ERROR_RATE_MIN_REQUESTS} requests, "
                                           "or all of --requests if fewer; default: never)", default=None,
                                           metavar="R", type=request_share)
    csv_prefix: str = ""  # Locust's own --csv

    @property
    def params(self) -> GenerationParams:
        return GenerationParams(api=self.api, mode=self.mode, max_tokens=self.max_tokens or None,
                                ignore_eos=self.ignore_eos or bool(self.trace), temperature=self.temperature)

    def chunk_counter(self):
        """The ``--tokenizer``'s batch token count for a stream's chunks (None without one); loaded once per
        process. Raises :class:`SettingsError` (one line) when it cannot load."""
        if not self.tokenizer:
            return None
        from llmload.tasks.tokens import TokenCounter  # transformers: only with --tokenizer

        try:
            return TokenCounter.load(self.tokenizer).text_tokens
        except DatasetError as exc:
            raise SettingsError(f"--tokenizer: {exc}") from None

    def cancel_policy(self, stream: str = "") -> CancelPolicy | None:
        """Which requests this process cancels, and when (None: --cancel-rate 0); ``stream`` names the process."""
        if not self.cancel_rate or not self.cancel_after:
            return None
        return CancelPolicy(self.cancel_rate, parse_cancel_after(self.cancel_after), self.seed, stream)

    @property
    def retry_policy(self) -> RetryPolicy | None:
        """The --retry policy (None: no retry)."""
        return RetryPolicy(self.retry, self.retry_max_wait) if self.retry else None

    @property
    def error_rate_min(self) -> int:
        """Requests that must have ended before --max-error-rate judges the run."""
        measured = self.requests - self.warmup if self.requests else 0
        return min(ERROR_RATE_MIN_REQUESTS, measured) if measured > 0 else ERROR_RATE_MIN_REQUESTS

    @property
    def open_loop(self) -> bool:
        """Requests go out on a schedule: --rate's or the --trace's."""
        return self.rate > 0 or bool(self.trace)

    @property
    def arrival_law(self) -> str:
        if self.trace:
            return "trace"
        return self.arrival or ("gamma" if self.burstiness != 1.0 else "poisson")

    @property
    def shape(self) -> tuple | None:
        """The stages of the load shape asked for (--stages or --ramp), or None."""
        return self.stages or self.ramp

    @classmethod
    def from_options(cls, options) -> "LoadSettings":
        """Settings from Locust's ``environment.parsed_options`` (defaults for anything missing)."""
        values = {}
        for f in fields(cls):
            value = getattr(options, f.name, None) if options is not None else None
            convert = f.metadata.get("type")
            if isinstance(value, str) and convert is not None:  # a value typed into the web UI's form
                value = _from_form(f, value, convert)
            if value is not None:
                values[f.name] = value
        values["csv_prefix"] = values.get("csv_prefix") or ""
        return cls(**values)

    def dataset_for(self, task: str) -> Path:
        """The prompt file of ``task``: ``--dataset`` or the task's built default."""
        return Path(self.dataset) if self.dataset else dataset_path(task)

    @property
    def raw_log_path(self) -> Path | None:
        """``<csv prefix>_requests.jsonl``, else ``--raw-log``, else None (no raw log)."""
        if self.csv_prefix:
            return Path(f"{self.csv_prefix}_requests.jsonl")
        return Path(self.raw_log) if self.raw_log else None

    def _beside_raw_log(self, suffix: str) -> Path | None:
        if self.csv_prefix:
            return Path(f"{self.csv_prefix}{suffix}")
        raw = self.raw_log_path
        if raw is None:
            return None
        stem = raw.name[: -len("_requests.jsonl")] if raw.name.endswith("_requests.jsonl") else raw.stem
        return raw.with_name(f"{stem}{suffix}")

    @property
    def monitor_path(self) -> Path | None:
        """``<csv prefix>_monitor.csv`` (or beside the raw log); None when there is nowhere to write."""
        return self._beside_raw_log("_monitor.csv")

    @property
    def summary_path(self) -> Path | None:
        """``<csv prefix>_summary.json`` (or beside the raw log): the end-of-run summary as JSON."""
        return self._beside_raw_log("_summary.json")

    def check(self) -> None:
        """Raise :class:`SettingsError` for options that contradict each other."""
        if self.monitor_pid is not None and self.monitor_path is None:
            raise SettingsError("--monitor-pid needs --csv PREFIX or --raw-log PATH (to know where to write "
                                "the monitor CSV)")
        if self.metrics_url and self.monitor_pid is None:
            raise SettingsError("--metrics-url needs --monitor-pid (the monitor samples it)")
        if self.requests and self.warmup >= self.requests:
            raise SettingsError(f"--warmup {self.warmup} must be smaller than --requests {self.requests} (the "
                                f"warm-up requests are part of --requests)")
        self._check_trace()
        if not self.rate and (self.arrival or self.burstiness != 1.0):
            raise SettingsError("--arrival and --burstiness shape an open loop: give --rate R too")
        if self.arrival in ("constant", "poisson") and self.burstiness != 1.0:
            raise SettingsError(f"--burstiness applies to --arrival gamma (poisson is gamma with K = 1), "
                                f"not to --arrival {self.arrival}")
        if self.prometheus_host != "0.0.0.0" and self.prometheus_port is None:
            raise SettingsError("--prometheus-host is where /metrics binds: give --prometheus-port PORT too")
        if self.prometheus_port is not None:
            check_port_free(self.prometheus_host, self.prometheus_port)
        if self.otel_endpoint and not otel_available():
            raise SettingsError("--otel-endpoint needs the OpenTelemetry SDK and its OTLP/HTTP exporter: "
                                "pip install 'llmload[otel]'")
        if self.stages and self.ramp:
            raise SettingsError("--stages and --ramp are two load shapes: give one")
        if self.cancel_rate and not self.cancel_after:
            raise SettingsError("--cancel-rate needs --cancel-after WHEN (e.g. ttft+1s, 2s, 20tok, 1s..3s)")
        if self.cancel_after and not self.cancel_rate:
            raise SettingsError("--cancel-after applies to the requests --cancel-rate P picks: give --cancel-rate too")
        if self.cancel_after and self.mode != "stream" and parse_cancel_after(self.cancel_after).needs_stream:
            raise SettingsError(f"--cancel-after {self.cancel_after} counts from the stream's tokens: use --mode "
                                f"stream, or a time after the send (e.g. 2s)")
        if self.retry_max_wait != RETRY_MAX_WAIT_S and not self.retry:
            raise SettingsError("--retry-max-wait caps the waits of --retry: give --retry N too")
        self.chunk_counter()  # a tokenizer that cannot load is bad input, said before the run starts

    def _check_trace(self) -> None:
        trace_flags = trace_shaping(self)
        if not self.trace:
            if trace_flags:
                raise SettingsError(f"{trace_flags[0]} shapes a trace replay: give --trace FILE too")
            return
        for flag, given in (("--rate", self.rate), ("--max-tokens", self.max_tokens),
                            ("--stages", self.stages), ("--ramp", self.ramp)):
            if given:
                raise SettingsError(f"--trace gives each request's time and lengths: leave {flag} out")


def trace_shaping(values) -> list[str]:
    """The flags of the :data:`TRACE_SHAPING` options that ``values`` (settings, or another program's parsed
    options of the same names) sets away from their defaults."""
    return [f.metadata["flag"] for f in fields(LoadSettings)
            if f.name in TRACE_SHAPING and getattr(values, f.name) != f.default]


def strict_parsing(parser) -> None:
    """Make Locust's parser say a bad option in one ``error: ...`` line, exit code 2, as the suite's commands do,
    options that contradict each other included (:meth:`LoadSettings.check`), before anything starts."""
    parser.error = cliargs.fail
    parse_args = parser.parse_args

    def parse_and_check(*args, **kwargs):
        options = parse_args(*args, **kwargs)
        try:
            LoadSettings.from_options(options).check()
        except SettingsError as exc:
            parser.error(str(exc))
        if isinstance(getattr(options, "slo", None), SLO):
            # Locust sends the master's options to its workers through msgpack, which cannot carry an SLO:
            # keep its text (LoadSettings.from_options reads it back, as it reads the web UI's form)
            options.slo = options.slo.argument()
        return options

    parser.parse_args = parse_and_check


def add_arguments(parser) -> None:
    """Add the suite's options to Locust's parser (from the ``init_command_line_parser`` event); each also reads
    ``LOCUST_LLM_<NAME>`` (configargparse appends "[env var: ...]" to the help) and the same key in locust.conf."""
    cliargs.add_options(parser, LoadSettings, env_prefix=ENV_PREFIX)
