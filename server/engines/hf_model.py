"""Loading a transformers causal LM and its tokenizer, and preparing prompts for it.

Shared by the model-backed engines. The model is loaded by :meth:`HFModel.load`
(at server start-up), never at import.
"""

from __future__ import annotations

import logging
from pathlib import Path

from llmload.core.defaults import MAX_MODEL_LEN
from server.engines.base import PreparedPrompt

log = logging.getLogger(__name__)

#: Used when a tokenizer has no chat template (GPT-2 and other base models): one
#: "role: content" line per message, then "assistant:" for the model to continue.
PLAIN_CHAT_FALLBACK = "plain"


def render_plain_chat(messages: list[dict]) -> str:
    """The documented fallback chat format for models without a chat template."""
    lines = [f"{m['role']}: {m['content']}" for m in messages]
    return "\n".join(lines) + "\nassistant:"


def check_local_model(model: str) -> None:
    """Fail clearly on a local path that is not a model folder; Hugging Face ids pass through."""
    path = Path(model).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"{model} has no config.json: it is not a Hugging Face model folder")
    elif path.is_absolute() or model.startswith((".", "~")):
        raise FileNotFoundError(f"no model folder at {model}: pass a model folder or a Hugging Face id, or leave "
                                f"--model out to use the embedded default (materialised by `make model`)")


class HFModel:
    """A transformers model, its tokenizer, EOS ids and context length."""

    def __init__(self, model: str, dtype: str = "auto", max_model_len: int | None = None,
                 threads: int | None = None):
        self.model_name = model
        self.dtype = dtype
        self.max_model_len_setting = max_model_len
        self.threads = threads
        self.tokenizer = None
        self.model = None
        self.eos_token_ids: frozenset[int] = frozenset()
        self.max_model_len = max_model_len or MAX_MODEL_LEN

    def load(self) -> None:
        check_local_model(self.model_name)
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.apply_threads()
        log.info("loading model %s (dtype=%s)", self.model_name, self.dtype)
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_name)
        dtype = self.dtype if self.dtype == "auto" else getattr(torch, self.dtype)
        self.model = AutoModelForCausalLM.from_pretrained(self.model_name, dtype=dtype)
        self.model.eval()
        config_len = getattr(self.model.config, "max_position_embeddings", None) or MAX_MODEL_LEN
        self.max_model_len = min(self.max_model_len_setting or config_len, config_len)
        eos = set()
        for source in (self.model.generation_config.eos_token_id, self.tokenizer.eos_token_id):
            if isinstance(source, int):
                eos.add(source)
            elif source:
                eos.update(source)
        self.eos_token_ids = frozenset(eos)

    def apply_threads(self) -> None:
        """Apply ``threads`` to the calling thread (OpenMP thread counts are per thread: call it where the model runs)."""
        if self.threads:
            import torch

            torch.set_num_threads(self.threads)

    def encode(self, text: str, add_special_tokens: bool = True) -> PreparedPrompt:
        ids = self.tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"]
        return PreparedPrompt(text=text, token_ids=tuple(ids))

    def prepare_completion(self, prompt: str) -> PreparedPrompt:
        return self.encode(prompt)

    def prepare_chat(self, messages: list[dict]) -> PreparedPrompt:
        if getattr(self.tokenizer, "chat_template", None):
            text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        else:
            text = render_plain_chat(messages)
        # The template already contains any BOS token it wants.
        return self.encode(text, add_special_tokens=False)
