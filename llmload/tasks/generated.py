"""Generated tasks: records built to a length or a shape rather than one per raw text.

* :func:`synthetic_records`: prompts of a chosen length in the model's own
  tokens, cut from running text (so that the chat template and detokenisation
  behave as with real prompts), like vLLM's ``random`` dataset but with text.
* :func:`prefix_records`: prompts that share a long document (token for token)
  and end with a short distinct question, in groups, like vLLM's
  ``prefix_repetition`` dataset.
* :func:`conversation_records`: multi-turn sessions; each record carries the
  user turns of one conversation (``PromptRecord.turns``), the client plays them
  in order with the server's own answers as the assistant turns.

Each has a ``check_*`` hook that validates its options against the context
before anything is built. They are declared as tasks in :mod:`llmload.tasks.catalog`.
"""

from __future__ import annotations

import math
import random
from typing import Callable, Iterator, Sequence

from llmload.core.records import DatasetError, PromptRecord
from llmload.tasks.build import BATCH_SIZE, normalised, shuffled
from llmload.tasks.registry import GenerateRequest
from llmload.tasks.sources import RawItem, RawSource
from llmload.tasks.tokens import TokenCounter

EPSILON = 1e-9  # so that 100 * 1.1 is 110, not 110.00000000000001


class CorpusCutter:
    """Cuts texts of an exact token count from running text, taking the corpus's texts in a seeded order.

    Each cut starts at the beginning of an unused text and goes on into the
    following ones (joined by a blank line) as far as needed; the rest of the
    last text is dropped, so no text is used twice.
    """

    SEPARATOR = "\n\n"

    def __init__(self, items: Sequence[RawItem], counter: TokenCounter, order_key: str, seed: int):
        self.items = shuffled(items, order_key, seed)
        self.counter = counter
        self.position = 0
        self._ids: dict[int, list[int]] = {}
        self._separator = counter.text_ids([self.SEPARATOR])[0]

    def _text_ids(self, index: int) -> list[int]:
        if index not in self._ids:
            batch = range(index, min(index + BATCH_SIZE, len(self.items)))
            for i, ids in zip(batch, self.counter.text_ids([self.items[i].text for i in batch])):
                self._ids[i] = ids
        return self._ids.pop(index)

    def cut(self, tokens: int, count: Callable[[str], int]) -> tuple[str, list[str]] | None:
        """A text that ``count`` finds exactly ``tokens`` long, and the ids of the texts it comes from.

        None when the corpus is used up.
        """
        while True:
            ids, used = [], []
            while len(ids) < tokens + 8 and self.position < len(self.items):
                if ids:
                    ids += self._separator
                ids += self._text_ids(self.position)
                used.append(self.items[self.position].id)
                self.position += 1
            if len(ids) < tokens:
                return None
            text = self._fit(ids, tokens, count)
            if text is not None:
                return text, used

    def _fit(self, ids: list[int], tokens: int, count: Callable[[str], int]) -> str | None:
        """Decode a prefix of ``ids`` and adjust its length until the re-encoded text counts ``tokens``."""
        keep = tokens - count("")  # count("") is what the count adds to any text: special tokens
        tried = set()
        for _ in range(8):
            keep = max(1, min(keep, len(ids)))
            if keep in tried:
                break
            tried.add(keep)
            text = self.counter.decode(ids[:keep])
            n = count(text)
            if n == tokens and "\ufffd" not in text:
                return text
            keep += tokens - n if n != tokens else -1  # a cut inside a character: one token less
        return None


def _ceil(x: float) -> int:
    return math.ceil(x - EPSILON)


def _floor(x: float) -> int:
    return math.floor(x + EPSILON)


def _user_message(text: str) -> tuple[dict, ...]:
    return ({"role": "user", "content": text},)


def _chat_overhead(counter: TokenCounter) -> int:
    """How many more tokens a text has as one user message of the chat form (0 without a chat template)."""
    probe = "hello"
    n_chat = counter.chat_tokens([_user_message(probe)])[0]
    return 0 if n_chat is None else max(0, n_chat - counter.prompt_tokens([probe])[0])


# --------------------------------------------------------------------------- synthetic

def length_bounds(length: int, ratio: float, minimum: int = 1) -> tuple[int, int]:
    """The lengths ``length * (1 ± ratio)`` spans, as vLLM's ``random`` dataset draws them (floor, ceil)."""
    return max(minimum, _floor(length * (1 - ratio))), max(minimum, _ceil(length * (1 + ratio)))


def check_synthetic(raw: RawSource, req: GenerateRequest) -> None:
    """The longest prompt (chat form) plus the largest output budget must fit the context."""
    length, ratio = req.options["input_len"], req.options["range_ratio"]
    if not 0 <= ratio < 1:
        raise DatasetError(f"--range-ratio {ratio:g}: must be at least 0 and below 1")
    special = req.counter.special_tokens
    low, high = length_bounds(length, ratio)
    if low <= special:
        raise DatasetError(f"--input-len {length}: the shortest prompt ({low} tokens) must be longer than the "
                           f"{special} special token(s) the tokenizer adds")
    _, out_high = length_bounds(req.max_tokens, ratio)
    overhead = _chat_overhead(req.counter)
    room = req.max_model_len - overhead - out_high
    if high + overhead + out_high > req.max_model_len:
        limit = _floor(room / (1 + ratio))
        while limit > 0 and _ceil(limit * (1 + ratio)) > room:
            limit -= 1
        spread = f" with --range-ratio {ratio:g}" if ratio else ""
        raise DatasetError(f"--input-len {length}: the longest prompt ({high} tokens, {high + overhead} with the "
                           f"chat template) plus its output budget ({out_high}) must fit --max-model-len "
                           f"{req.max_model_len}: at most {max(limit, 0)}{spread}")


def synthetic_records(raw: RawSource, req: GenerateRequest) -> Iterator[PromptRecord]:
    """Prompts cut from the corpus (until it is used up), each exactly its drawn length in tokens of the
    completion form.

    Lengths are drawn uniformly over ``input_len * (1 ± range_ratio)`` and budgets over
    ``max_tokens * (1 ± range_ratio)`` (integers, bounds included). ``input_tokens`` is
    exact: the prompt as the server tokenises it (special tokens included); the chat
    form (the same text as one user message) is counted in ``metadata.chat_input_tokens``.
    """
    counter, ratio = req.counter, req.options["range_ratio"]
    low, high = length_bounds(req.options["input_len"], ratio, minimum=counter.special_tokens + 1)
    out_low, out_high = length_bounds(req.max_tokens, ratio)
    lengths = random.Random(f"{req.task.name}-lengths:{req.seed}")
    cutter = CorpusCutter(raw.items, counter, req.task.name, req.seed)
    count = lambda text: counter.prompt_tokens([text])[0]  # noqa: E731 - the exact count, as the server's
    while True:
        n_input, n_output = lengths.randint(low, high), lengths.randint(out_low, out_high)
        cut = cutter.cut(n_input, count)
        if cut is None:
            return  # the corpus is used up: a smaller set, with the build's warning
        text, used = cut
        messages = _user_message(text)
        n_chat = counter.chat_tokens([messages])[0]
        if max(n_input, n_chat or 0) + n_output > req.max_model_len:
            continue  # only if the chat template's overhead varied
        yield PromptRecord(
            id=f"{req.task.name}:{used[0]}", task=req.task.name, source=raw.name, prompt=text, messages=messages,
            max_tokens=n_output, input_tokens=n_input,
            metadata={"source_id": used[0], "source_ids": used, "chat_input_tokens": n_chat, "truncated": False,
                      "build": dict(req.build)})


# --------------------------------------------------------------------------- prefix

PREFIX_HEAD = "Read the following document, then answer the question after it briefly.\n\n"
QUESTION_MAX_TOKENS = 48


def prefix_prompt(document: str, question: str) -> tuple[str, tuple[dict, ...]]:
    """The completion prompt and chat messages of one prefix record: the document, then the question."""
    body = f"{PREFIX_HEAD}{document}\n\nQuestion: {question}"
    return f"{body}\nAnswer:", _user_message(body)


def _prefix_overhead(counter: TokenCounter) -> int:
    """Tokens the frame adds around a document and a question, the larger of the two forms."""
    probe = "hello"
    prompt, messages = prefix_prompt(probe, probe)
    bare = 2 * len(counter.text_ids([probe])[0])
    n_chat = counter.chat_tokens([messages])[0] or 0
    return max(counter.prompt_tokens([prompt])[0], n_chat) - bare + 2  # 2: merges where frame and text meet


def check_prefix(raw: RawSource, req: GenerateRequest) -> None:
    """The shared prefix, a question and the output budget must fit the context; no more groups than prompts."""
    length, groups = req.options["prefix_len"], req.options["prefix_groups"]
    if groups > req.num:
        raise DatasetError(f"--prefix-groups {groups}: more groups than prompts (--num {req.num}): at most {req.num}")
    limit = req.max_model_len - req.max_tokens - _prefix_overhead(req.counter) - QUESTION_MAX_TOKENS
    if length > limit:
        raise DatasetError(f"--prefix-len {length}: the shared prefix, a question (up to {QUESTION_MAX_TOKENS} "
                           f"tokens) and the output budget ({req.max_tokens}) must fit --max-model-len "
                           f"{req.max_model_len}: at most {max(limit, 0)}")


def _starts_with(ids: Sequence[int] | None, head: Sequence[int] | None) -> bool:
    return ids is None or head is None or list(ids[:len(head)]) == list(head)


def prefix_records(raw: RawSource, req: GenerateRequest, documents: Callable[[], list[RawItem]]
                   ) -> Iterator[PromptRecord]:
    """Prompts in ``prefix_groups`` groups: each group's document of exactly ``prefix_len`` tokens, then one
    distinct short question of ``raw``; record ``i`` belongs to group ``i % prefix_groups``.

    ``metadata.prefix_tokens`` (completion form) and ``chat_prefix_tokens`` (chat form)
    count the tokens every prompt of the group shares, token for token: the frame,
    the document and ``Question:``.
    """
    counter, length, groups = req.counter, req.options["prefix_len"], req.options["prefix_groups"]
    cutter = CorpusCutter(documents(), counter, f"{req.task.name}-documents", req.seed)
    docs = []
    for _ in range(groups):
        cut = cutter.cut(length, lambda text: len(counter.text_ids([text])[0]))
        if cut is None:
            raise DatasetError(f"--prefix-groups {groups} --prefix-len {length}: the bundled corpus holds only "
                               f"{len(docs)} such documents: lower either")
        docs.append(cut)
    heads = []  # per group: (completion ids, chat ids) of the shared part
    for text, _ in docs:
        prompt, messages = prefix_prompt(text, "?")
        head = counter.prompt_ids([prompt[:prompt.rindex("Question:") + len("Question:")]])[0]
        chat_head = None
        if counter.has_chat_template:  # the chat text up to the same place
            chat, content = counter.chat_text(messages), messages[0]["content"]
            chat_head = counter.text_ids([chat[:chat.index(content) + len(content) - len(" ?")]])[0]
        heads.append((head, chat_head))
    seen, made = set(), 0
    questions = shuffled(raw.items, req.task.name, req.seed)
    for start in range(0, len(questions), BATCH_SIZE):
        batch = [q for q in questions[start:start + BATCH_SIZE] if normalised(q.text) not in seen]
        for question, ids in zip(batch, counter.text_ids([q.text for q in batch]) if batch else []):
            if len(ids) > QUESTION_MAX_TOKENS or normalised(question.text) in seen:
                continue
            group = made % groups
            (document, document_ids), (head, chat_head) = docs[group], heads[group]
            prompt, messages = prefix_prompt(document, question.text)
            prompt_ids, chat_ids = counter.prompt_ids([prompt])[0], counter.chat_ids([messages])[0]
            if not (_starts_with(prompt_ids, head) and _starts_with(chat_ids, chat_head)):
                continue  # the question merged into the shared part: not a clean prefix
            n_chat = None if chat_ids is None else len(chat_ids)
            if max(len(prompt_ids), n_chat or 0) + req.max_tokens > req.max_model_len:
                continue
            seen.add(normalised(question.text))
            made += 1
            yield PromptRecord(
                id=f"{req.task.name}:{group}:{question.id}", task=req.task.name, source=raw.name, prompt=prompt,
                messages=messages, max_tokens=req.max_tokens, input_tokens=len(prompt_ids),
                reference=question.reference,
                metadata={"source_id": question.id, "chat_input_tokens": n_chat, "truncated": False,
                          "prefix_group": group, "prefix_tokens": len(head),
                          "chat_prefix_tokens": None if chat_head is None else len(chat_head),
                          "document_tokens": length, "document_source_ids": document_ids,
                          "build": dict(req.build)})


# --------------------------------------------------------------------------- conversation

#: Tokens allowed per earlier answer beyond its budget: a decoded answer may re-encode a little longer.
ANSWER_MARGIN = 4


def conversation_messages(turns: Sequence[str], answers: Sequence[str] | None = None) -> list[dict]:
    """The chat history of ``turns`` with the assistant's ``answers`` between them (empty when not given)."""
    messages = []
    for index, turn in enumerate(turns):
        if index:
            messages.append({"role": "assistant", "content": answers[index - 1] if answers else ""})
        messages.append({"role": "user", "content": turn})
    return messages


def conversation_prompt(turns: Sequence[str], answers: Sequence[str] | None = None) -> str:
    """The completion form of the same history: ``User: ...`` / ``Assistant: ...`` lines, ending ``Assistant:``."""
    lines = []
    for index, turn in enumerate(turns):
        if index:
            lines.append(f"Assistant: {answers[index - 1] if answers else ''}".rstrip())
        lines.append(f"User: {turn}")
    return "\n".join(lines) + "\nAssistant:"


def conversation_tokens(counter: TokenCounter, turns: Sequence[str], max_tokens: int) -> int:
    """The most tokens the context holds at the end of the conversation (both forms, the larger).

    The last request holds every user turn, the earlier answers (each at most
    ``max_tokens``, plus :data:`ANSWER_MARGIN`) and generates up to ``max_tokens`` more.
    """
    n_prompt = counter.prompt_tokens([conversation_prompt(turns)])[0]
    n_chat = counter.chat_tokens([conversation_messages(turns)])[0] or 0
    return max(n_prompt, n_chat) + (len(turns) - 1) * (max_tokens + ANSWER_MARGIN) + max_tokens


def check_conversation(raw: RawSource, req: GenerateRequest) -> None:
    """Enough bundled conversations for ``num``, and room for two turns in the context."""
    max_turns = req.options["max_turns"]
    if max_turns < 2:
        raise DatasetError(f"--max-turns {max_turns}: a conversation has at least 2 turns")
    if req.num > len(raw.items):
        raise DatasetError(f"--num {req.num}: the {raw.name} source has only {len(raw.items)} conversations of 2 "
                           f"or more user turns: at most {len(raw.items)}")
    two_turns = conversation_tokens(req.counter, ["hello", "hello"], 0)
    budget_limit = (req.max_model_len - two_turns - ANSWER_MARGIN) // 2
    if req.max_tokens > budget_limit:
        raise DatasetError(f"--max-tokens {req.task.name}={req.max_tokens}: two turns, each with its output budget, "
                           f"must fit --max-model-len {req.max_model_len}: at most {max(budget_limit, 0)}")


def conversation_records(raw: RawSource, req: GenerateRequest) -> Iterator[PromptRecord]:
    """One record per conversation: its first user turns (at most ``max_turns``, at least 2) that fit.

    A conversation keeps as many of its first user turns as fit the context by
    :func:`conversation_tokens`; one where fewer than 2 fit is left out. ``messages``
    and ``prompt`` hold the first turn (``input_tokens`` counts it), ``turns`` all of
    them, ``max_tokens`` is the budget of each answer. Running out before ``num`` is an error.
    """
    counter, max_turns = req.counter, req.options["max_turns"]
    seen, made, too_long = set(), 0, 0
    for item in shuffled(raw.items, req.task.name, req.seed):
        key = normalised(item.text)
        if key in seen:
            continue
        seen.add(key)
        turns = list(item.extra["turns"][:max_turns])
        while len(turns) >= 2:
            context = conversation_tokens(counter, turns, req.max_tokens)
            if context <= req.max_model_len:
                break
            turns.pop()
        if len(turns) < 2:
            too_long += 1
            continue
        prompt, messages = conversation_prompt(turns[:1]), tuple(conversation_messages(turns[:1]))
        n_chat = counter.chat_tokens([messages])[0]
        made += 1
        yield PromptRecord(
            id=f"{req.task.name}:{item.id}", task=req.task.name, source=raw.name, prompt=prompt,
            messages=messages, max_tokens=req.max_tokens, input_tokens=counter.prompt_tokens([prompt])[0],
            reference=item.reference, turns=tuple(turns),
            metadata={"source_id": item.id, "chat_input_tokens": n_chat, "truncated": False,
                      "turn_tokens": [len(ids) for ids in counter.text_ids(turns)],
                      "user_turns_available": len(item.extra["turns"]), "context_tokens": context,
                      "build": dict(req.build)})
    raise DatasetError(f"--num {req.num}: only {made} of the {len(raw.items)} conversations of {raw.name} "
                       f"fit --max-model-len {req.max_model_len} with 2 or more turns of --max-tokens "
                       f"{req.task.name}={req.max_tokens}: at most {made}, or raise --max-model-len")
