"""The batched engine: continuous (iteration-level) batching on transformers.

One worker thread loops over iterations: admit waiting requests (up to
``max_num_seqs`` running, at most ``prefill_token_budget`` prompt tokens per
iteration), prefill each alone (the naive engine's ``_prefill``), then run one
decode step for every running request at once; finished or cancelled requests
leave right after the step. Per-request sampling, seeds, stop strings,
``min_tokens``, ``ignore_eos``, streaming, cancellation and timing are the naive
engine's, through the same :class:`~server.engines.sequence.Decoding`.

The batch's keys and values live in :class:`SlotKVCache`, one slot per running
request, freed whenever the engine goes idle. Decode steps use weights packed
into oneDNN's layout (:func:`prepack_linear_weights`) and attention as grouped
matrix products (:func:`batched_sdpa_attention`). Only decoder-only models whose
layers all attend to the whole context are supported
(:func:`check_full_attention`). Design, measurements, and why not transformers'
own continuous batching: ``docs/engines.md``.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque

import torch
from transformers import AttentionInterface, Cache, DynamicCache
from transformers.cache_utils import CacheLayerMixin
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from server.engines.base import EngineLoad, GenerationJob
from server.engines.naive import NaiveEngine
from server.engines.sequence import Decoding

log = logging.getLogger(__name__)

DEFAULT_MAX_NUM_SEQS = 32
DEFAULT_PREFILL_TOKEN_BUDGET = 2048
#: The KV buffers' length grows in steps of this many positions.
CAPACITY_STEP = 256
#: How long the idle worker waits for a request before looking again (seconds).
IDLE_POLL_S = 0.5


# --------------------------------------------------------------------------- attention for the batched decode step

#: The attention implementation the engine switches an ``sdpa`` model to (registered below).
BATCHED_SDPA = "llmload_batched_sdpa"


def batched_sdpa_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None,
                           **kwargs):
    """transformers' SDPA attention, except for the batched one-token decode step, which does its own maths.

    With one query token per sequence, attention is two batched matrix products
    per layer, with each KV head serving its group of query heads in one product
    and the softmax in float32 (cheaper than the fused CPU kernel, and no
    ``repeat_kv`` copy of the cache; ``docs/engines.md``). Prefill and everything
    else go to transformers' function unchanged.
    """
    if attention_mask is None or query.shape[2] != 1 or kwargs.get("position_bias") is not None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    batch, heads, _, dim = query.shape
    kv_heads = key.shape[1]
    scale = scaling if scaling is not None else dim ** -0.5
    grouped = query.view(batch, kv_heads, heads // kv_heads, dim)  # the query heads that share each KV head
    scores = torch.matmul(grouped, key.transpose(-1, -2)).float() * scale + attention_mask.float()
    probs = torch.softmax(scores, dim=-1).to(value.dtype)
    out = torch.matmul(probs, value).view(batch, heads, 1, dim)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(BATCHED_SDPA, batched_sdpa_attention)
AttentionMaskInterface.register(BATCHED_SDPA, sdpa_mask)


# --------------------------------------------------------------------------- weights in oneDNN's layout


class PrepackedLinear(torch.nn.Module):
    """A ``torch.nn.Linear`` whose weight was reordered once into oneDNN's blocked layout.

    Same inputs and outputs as the layer it replaces, up to float rounding (about
    1e-5 relative); see :func:`prepack_linear_weights` for why.
    """

    def __init__(self, source: torch.nn.Linear):
        super().__init__()
        self.in_features, self.out_features = source.in_features, source.out_features
        self.register_buffer("packed_weight", torch.ops.mkldnn._reorder_linear_weight(source.weight.detach(), None),
                             persistent=False)
        self.bias = source.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed_weight, self.bias, "none", [None], "")

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, layout=onednn"


def prepack_linear_weights(model: torch.nn.Module) -> int:
    """Replace every ``nn.Linear`` of ``model`` by a :class:`PrepackedLinear`; return how many were replaced.

    Decode steps stream every weight from memory, and the blocked layout streams
    faster than the plain one (``docs/engines.md``). Where PyTorch has no oneDNN
    nothing changes (returns 0).
    """
    if not (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")):
        log.warning("oneDNN is not available in this PyTorch: linear weights keep their plain layout")
        return 0
    targets = [(parent, name, child) for parent in model.modules()
               for name, child in parent.named_children() if type(child) is torch.nn.Linear]
    for parent, name, linear in targets:
        setattr(parent, name, PrepackedLinear(linear))
    # The other parameters (embeddings, norms) may be views of the checkpoint's memory map, which would then keep
    # every replaced weight's pages resident: give them their own memory so that the plain weights are released.
    for param in model.parameters():
        param.data = param.data.clone()
    return len(targets)


# --------------------------------------------------------------------------- the batch's KV cache


class _SlotLayer(CacheLayerMixin):
    """One layer's view of :class:`SlotKVCache`, in the shape transformers' attention expects."""

    def __init__(self, owner: "SlotKVCache", layer_idx: int):
        super().__init__()
        self.owner = owner
        self.layer_idx = layer_idx
        self.is_initialized = True

    def lazy_initialization(self, key_states, value_states) -> None:  # buffers are made by the owner
        pass

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """Write one new position per running row; return every row's keys/values so far."""
        return self.owner.write_step(self.layer_idx, key_states, value_states)

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.owner.step_kv_len, 0

    def get_seq_length(self) -> int:
        return self.owner.step_kv_len - 1

    def get_max_length(self) -> int:
        return self.owner.capacity


class SlotKVCache(Cache):
    """Per-layer KV buffers ``[slots, kv_heads, capacity, head_dim]``, one slot per running sequence.

    Rows ``0..rows-1`` are in use; row ``i`` holds ``lengths[i]`` positions. A
    decode step (:meth:`begin_step`, then the model's forward) appends one
    position to every row at its own length.
    """

    def __init__(self, num_layers: int, max_slots: int, max_len: int):
        super().__init__(layers=[_SlotLayer(self, i) for i in range(num_layers)])
        self.num_layers = num_layers
        self.max_slots = max_slots
        self.max_len = max_len
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.lengths: list[int] = []
        self.capacity = 0
        self.step_kv_len = 0
        self._step_rows = None
        self._step_positions = None

    @property
    def rows(self) -> int:
        return len(self.lengths)

    @property
    def slots(self) -> int:
        return self.keys[0].shape[0] if self.keys else 0

    def nbytes(self) -> int:
        """Bytes held by the buffers."""
        return sum(t.numel() * t.element_size() for t in self.keys + self.values)

    def release(self) -> None:
        """Free the buffers (the cache must be empty)."""
        assert not self.lengths, "release() with rows in use"
        self.keys, self.values, self.capacity = [], [], 0

    def _ensure(self, slots: int, length: int, like: torch.Tensor) -> None:
        """Grow the buffers (never shrink) to hold ``slots`` rows of ``length`` positions."""
        have_slots, have_len = self.slots, self.capacity
        if slots <= have_slots and length <= have_len:
            return
        new_slots = have_slots or 1
        while new_slots < slots:
            new_slots *= 2
        new_slots = min(max(new_slots, slots), self.max_slots)
        new_len = max(have_len, min(self.max_len, -(-length // CAPACITY_STEP) * CAPACITY_STEP))
        _, heads, _, dim = like.shape
        for store in (self.keys, self.values):
            for layer in range(self.num_layers):
                # zeros, not empty: masked positions are multiplied by 0 and must not hold NaN
                grown = torch.zeros(new_slots, heads, new_len, dim, dtype=like.dtype, device=like.device)
                if store and self.lengths:
                    used = max(self.lengths)
                    grown[:self.rows, :, :used] = store[layer][:self.rows, :, :used]
                if len(store) > layer:
                    store[layer] = grown
                else:
                    store.append(grown)
        self.capacity = new_len

    def add_row(self, prefill: DynamicCache) -> int:
        """Copy a one-sequence prefill cache into the next free row; return the row index."""
        first = prefill.layers[0].keys
        length = first.shape[-2]
        self._ensure(self.rows + 1, length + 1, first)
        row = self.rows
        for layer in range(self.num_layers):
            self.keys[layer][row, :, :length] = prefill.layers[layer].keys[0]
            self.values[layer][row, :, :length] = prefill.layers[layer].values[0]
        self.lengths.append(length)
        return row

    def remove_row(self, row: int) -> None:
        """Drop a row; the last row moves into its place (the caller mirrors the move)."""
        last = self.rows - 1
        if row != last:
            used = self.lengths[last]
            for store in (self.keys, self.values):
                for layer in range(self.num_layers):
                    store[layer][row, :, :used] = store[layer][last, :, :used]
            self.lengths[row] = self.lengths[last]
        self.lengths.pop()

    def begin_step(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Prepare a decode step; return ``position_ids`` ``[rows, 1]`` and the additive mask ``[rows, 1, 1, L]``."""
        positions = torch.tensor(self.lengths, dtype=torch.long)
        self._ensure(self.rows, max(self.lengths) + 1, self.keys[0])
        self.step_kv_len = max(self.lengths) + 1
        self._step_rows = torch.arange(self.rows)
        self._step_positions = positions
        dtype = self.keys[0].dtype
        visible = torch.arange(self.step_kv_len)[None, :] <= positions[:, None]
        mask = torch.zeros(visible.shape, dtype=dtype).masked_fill_(~visible, torch.finfo(dtype).min)
        return positions[:, None], mask[:, None, None, :]

    def end_step(self) -> None:
        """Account for the position every row gained in the step."""
        self.lengths = [n + 1 for n in self.lengths]

    def write_step(self, layer: int, key_states: torch.Tensor, value_states: torch.Tensor):
        """Store one new position per row (called by the model's attention layers)."""
        keys, values = self.keys[layer], self.values[layer]
        index = (self._step_rows, slice(None), self._step_positions)
        keys[index] = key_states[:, :, 0]
        values[index] = value_states[:, :, 0]
        return keys[:self.rows, :, :self.step_kv_len], values[:self.rows, :, :self.step_kv_len]


# --------------------------------------------------------------------------- the engine


class BatchedEngine(NaiveEngine):
    """transformers with continuous batching: up to ``max_num_seqs`` requests decode together.

    Model loading, prompt preparation, the job queue and :meth:`generate` are
    the naive engine's; only the worker loop differs.
    """

    name = "batched"

    def __init__(self, model: str, served_model_name: str, max_model_len: int | None = None,
                 dtype: str = "auto", threads: int | None = None, max_num_seqs: int = DEFAULT_MAX_NUM_SEQS,
                 prefill_token_budget: int = DEFAULT_PREFILL_TOKEN_BUDGET, prepack_weights: bool = True):
        if max_num_seqs < 1:
            raise ValueError(f"max_num_seqs must be at least 1, got {max_num_seqs}")
        super().__init__(model, served_model_name, max_model_len, dtype=dtype, threads=threads)
        self.max_num_seqs = max_num_seqs
        self.prefill_token_budget = prefill_token_budget
        self.prepack_weights = prepack_weights
        self.packed_layers = 0  # linear layers whose weights are in oneDNN's layout (``/health``)
        self.cache: SlotKVCache | None = None
        self.running: list[Decoding] = []
        self.waiting: deque[GenerationJob] = deque()  # taken from the job queue, not yet admitted
        self.steps = 0  # decode steps run so far
        self.peak_batch = 0  # most sequences decoded together so far

    def start(self) -> None:
        self.hf.load()
        self.max_model_len = self.hf.max_model_len
        check_full_attention(self.hf.model.config, self.max_model_len)
        if self.hf.model.config._attn_implementation == "sdpa":
            self.hf.model.set_attn_implementation(BATCHED_SDPA)
        if self.prepack_weights:
            self.packed_layers = prepack_linear_weights(self.hf.model)
            log.info("packed %d linear weights into oneDNN's layout", self.packed_layers)
        config = self.hf.model.config.get_text_config()
        self.cache = SlotKVCache(config.num_hidden_layers, self.max_num_seqs, self.max_model_len)
        self._worker = threading.Thread(target=self._run, name="batched-engine", daemon=True)
        self._worker.start()

    def load(self) -> EngineLoad:
        """Requests in the batch and waiting; KV use: positions held over ``max_num_seqs x max_model_len``."""
        held = sum(self.cache.lengths) if self.cache else 0
        return EngineLoad(running=len(self.running), waiting=len(self.waiting) + self._jobs.qsize(),
                          kv_cache_usage=min(1.0, held / (self.max_num_seqs * self.max_model_len)))

    def info(self) -> dict:
        """``/health``: the naive engine's fields plus the batch cap, packing and the KV buffers' size."""
        return {**super().info(), "max_num_seqs": self.max_num_seqs, "prepacked_weights": self.packed_layers,
                "kv_cache_mib": round(self.cache.nbytes() / 2**20, 1) if self.cache else 0.0}

    # ------------------------------------------------------------------ worker thread

    def _run(self) -> None:
        self._start_worker_thread()
        while True:
            if not self._take_new_jobs(block=not self.running and not self.waiting):
                self._abandon()
                return
            with torch.inference_mode():
                self._admit()
                self._drop_cancelled()
                if self.running:
                    self._decode_step()
            if not self.running and not self.waiting and self.cache.keys:
                self.cache.release()  # idle: give the KV memory back

    def _take_new_jobs(self, block: bool) -> bool:
        """Move queued jobs to :attr:`waiting` (waiting for one when ``block``); False when asked to stop."""
        while True:
            try:
                job = self._jobs.get(timeout=IDLE_POLL_S) if block else self._jobs.get_nowait()
            except queue.Empty:
                if block:
                    continue
                return True
            if job is None:
                return False
            self.waiting.append(job)
            block = False

    def _abandon(self) -> None:
        """At shutdown: tell every unfinished request that it will not complete."""
        for job in list(self.waiting) + [r.job for r in self.running]:
            job.emit(RuntimeError("the engine stopped"))
        self.waiting.clear()
        self.running = []

    def _admit(self) -> None:
        """Prefill waiting requests into the batch, within the slot cap and the per-iteration token budget."""
        self.waiting = deque(job for job in self.waiting if not job.cancelled.is_set())
        spent = 0
        while self.waiting and len(self.running) < self.max_num_seqs:
            cost = len(self.waiting[0].prompt.token_ids)
            if spent and spent + cost > self.prefill_token_budget:
                return
            job = self.waiting.popleft()
            spent += cost
            try:
                self._join(job)
            except Exception as exc:  # report to that request, keep serving the others
                log.exception("prefill failed for %s", job.request_id)
                job.emit(exc)

    def _join(self, job: GenerationJob) -> None:
        """Prefill the request alone (the naive engine's :meth:`_prefill`) and add it to the batch."""
        decoding, prefilled = self._prefill(job)
        if decoding.done:
            return
        self.cache.add_row(prefilled)
        self.running.append(decoding)
        self.peak_batch = max(self.peak_batch, len(self.running))

    def _remove(self, index: int) -> None:
        """Take one sequence out of the batch (the last one moves into its row)."""
        self.cache.remove_row(index)
        last = self.running.pop()
        if index < len(self.running):
            self.running[index] = last

    def _drop_cancelled(self) -> None:
        for index in reversed(range(len(self.running))):
            if self.running[index].job.cancelled.is_set():
                self._remove(index)

    def _decode_step(self) -> None:
        """One token for every running sequence; finished ones leave the batch."""
        cache = self.cache
        input_ids = torch.tensor([[r.last_token] for r in self.running], dtype=torch.long)
        position_ids, mask = cache.begin_step()
        try:
            out = self.hf.model(input_ids=input_ids, position_ids=position_ids, attention_mask=mask,
                                past_key_values=cache, use_cache=True)
        except Exception as exc:  # the whole batch is lost: fail its requests, keep serving new ones
            log.exception("decode step failed for a batch of %d", len(self.running))
            for index in reversed(range(len(self.running))):
                self.running[index].job.emit(exc)
                self._remove(index)
            return
        cache.end_step()
        self.steps += 1
        logits = out.logits[:, -1]
        done = []
        for index, decoding in enumerate(self.running):
            decoding.push(logits[index])
            if decoding.done:
                done.append(index)
        for index in reversed(done):
            self._remove(index)


def check_full_attention(config, max_model_len: int) -> None:
    """Refuse models whose layers do not all attend to the whole context (``max_model_len`` tokens).

    The batch's mask shows each sequence all of its own positions, so a sliding
    window is honoured only when it is at least as long as the context.
    """
    text = config.get_text_config()
    kinds = set(getattr(text, "layer_types", None) or ["full_attention"])
    sliding = getattr(text, "sliding_window", None) if getattr(text, "use_sliding_window", True) else None
    if not kinds <= {"full_attention", "sliding_attention"} or (sliding and sliding < max_model_len):
        raise ValueError(f"the batched engine supports full-attention models only; {text.model_type} has layer "
                         f"types {sorted(kinds)} with a sliding window of {sliding} tokens, shorter than "
                         f"--max-model-len {max_model_len}: lower --max-model-len or use --engine naive")
