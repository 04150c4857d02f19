"""Per-request decoding state shared by the model engines: sampling, detokenisation, stop rules.

:class:`SequenceState` follows one request token by token: it applies
``min_tokens`` and ``ignore_eos``, detokenises incrementally (so spaces and
multi-byte characters come out right however the tokens split them), finds stop
strings, and holds back just enough text that a stop string split across two
steps is never streamed. The deltas it returns concatenate to exactly the final
text, so a stream and a non-stream response to the same greedy request agree.
:class:`Decoding` is one request on an engine's worker thread: its state, its
random generator, and each sampled token stamped and handed to the client.
"""

from __future__ import annotations

import torch

from server.engines.base import GenerationDelta, GenerationJob, SamplingParams


class IncrementalDetokenizer:
    """Turn a growing list of token ids into text deltas (vLLM's prefix/read-offset method)."""

    def __init__(self, tokenizer, prompt_ids: tuple[int, ...] | list[int], context: int = 5):
        self.tokenizer = tokenizer
        # A few prompt tokens give the decoder the context it needs for leading spaces.
        self.ids: list[int] = list(prompt_ids[-context:]) if prompt_ids else []
        self.prefix_offset = 0
        self.read_offset = len(self.ids)

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)

    def push(self, token_id: int) -> str:
        """Add one token; return the text it completes (may be empty while a character is partial)."""
        self.ids.append(token_id)
        prefix_text = self._decode(self.ids[self.prefix_offset:self.read_offset])
        new_text = self._decode(self.ids[self.prefix_offset:])
        if len(new_text) > len(prefix_text) and not new_text.endswith("\ufffd"):
            delta = new_text[len(prefix_text):]
            self.prefix_offset = self.read_offset
            self.read_offset = len(self.ids)
            return delta
        return ""


class SequenceState:
    """One request's output so far; :meth:`append` one sampled token at a time."""

    def __init__(self, tokenizer, prompt_ids: tuple[int, ...], params: SamplingParams,
                 eos_token_ids: frozenset[int]):
        self.params = params
        self.eos_token_ids = eos_token_ids
        self.detokenizer = IncrementalDetokenizer(tokenizer, prompt_ids)
        self.token_ids: list[int] = []
        self.text = ""  # all text decoded so far (stop string and what follows removed at the end)
        self.emitted = 0  # characters of ``text`` already handed out
        self.finish_reason: str | None = None
        self._holdback = max((len(s) for s in params.stop), default=1) - 1

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def blocked_token_ids(self) -> frozenset[int]:
        """Token ids the sampler must not pick now (EOS before ``min_tokens``)."""
        if len(self.token_ids) < self.params.min_tokens:
            return self.eos_token_ids
        return frozenset()

    def append(self, token_id: int) -> GenerationDelta | None:
        """Record a sampled token; return the delta to send, or None when nothing is ready yet."""
        self.token_ids.append(token_id)
        is_eos = token_id in self.eos_token_ids
        if is_eos and not self.params.ignore_eos:
            self.finish_reason = "stop"
        else:
            piece = self.detokenizer.push(token_id)
            if piece:
                start = max(0, len(self.text) - self._holdback)
                self.text += piece
                self._find_stop(start)
        if not self.finished and len(self.token_ids) >= self.params.max_tokens:
            self.finish_reason = "length"
        end = len(self.text) if self.finished else max(self.emitted, len(self.text) - self._holdback)
        delta = self.text[self.emitted:end]
        self.emitted = end
        if delta or self.finished:
            return GenerationDelta(delta, len(self.token_ids), self.finish_reason)
        return None

    def _find_stop(self, start: int) -> None:
        if not self.params.stop or len(self.token_ids) < self.params.min_tokens:
            return
        hits = [i for i in (self.text.find(s, start) for s in self.params.stop) if i >= 0]
        if hits:
            self.text = self.text[:min(hits)]
            self.emitted = min(self.emitted, len(self.text))
            self.finish_reason = "stop"


def request_generator(params: SamplingParams) -> torch.Generator | None:
    """The request's own random generator (seeded when it asks for a seed); None for greedy decoding."""
    if params.greedy:
        return None
    generator = torch.Generator()
    if params.seed is not None:
        generator.manual_seed(params.seed)
    else:
        generator.seed()
    return generator


def sample_next_token(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None,
                      blocked: frozenset[int] = frozenset()) -> int:
    """Pick the next token from one row of logits: greedy at temperature 0, else temperature + top-p."""
    logits = logits.float()
    if blocked:
        logits = logits.clone()
        logits[list(blocked)] = float("-inf")
    if params.greedy:
        return int(torch.argmax(logits))
    probs = torch.softmax(logits / params.temperature, dim=-1)
    if params.top_p < 1.0:
        sorted_probs, sorted_ids = torch.sort(probs, descending=True)
        cumulative = torch.cumsum(sorted_probs, dim=-1)
        keep = cumulative - sorted_probs < params.top_p  # always keeps the most likely token
        sorted_probs = torch.where(keep, sorted_probs, torch.zeros_like(sorted_probs))
        choice = torch.multinomial(sorted_probs / sorted_probs.sum(), 1, generator=generator)
        return int(sorted_ids[choice])
    return int(torch.multinomial(probs, 1, generator=generator))


class Decoding:
    """One request being decoded on a worker thread: its job, :class:`SequenceState` and random generator."""

    def __init__(self, job: GenerationJob, tokenizer, eos_token_ids: frozenset[int]):
        self.job = job
        self.state = SequenceState(tokenizer, job.prompt.token_ids, job.params, eos_token_ids)
        self.generator = request_generator(job.params)
        self.last_token = -1

    @property
    def done(self) -> bool:
        """Finished, or cancelled by its client."""
        return self.state.finished or self.job.cancelled.is_set()

    def push(self, logits: torch.Tensor) -> None:
        """Sample the next token from one row of logits, stamp it, and hand out the text it releases."""
        token = sample_next_token(logits, self.job.params, self.generator, self.state.blocked_token_ids())
        self.last_token = token
        delta = self.state.append(token)
        self.job.timing.mark_token()
        if delta is not None:
            self.job.emit(delta)
