"""Multi-turn conversations: each later turn carries the earlier turns with the same server's own answers."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

from locust_helpers import output, run_locust
from llmload.core.rawlog import read_results
from llmload.core.records import PromptRecord, write_records

pytestmark = pytest.mark.integration

TURNS = 3


def conversations(path, count=4):
    records = []
    for i in range(count):
        turns = tuple(f"[conv-{i}-{t}] Question {t} of conversation {i}?" for t in range(TURNS))
        records.append(PromptRecord(id=f"conv-{i}", task="conversation", source="test", prompt=turns[0],
                                    messages=({"role": "user", "content": turns[0]},), max_tokens=6,
                                    input_tokens=8, turns=turns))
    write_records(path, records)
    return path


def test_later_turns_carry_the_servers_own_earlier_answers(recording_mock, tmp_path):
    url, _, record = recording_mock
    raw = tmp_path / "conv_requests.jsonl"
    proc = run_locust("conversation.py", url, "-u", "2", "-r", "2", "--requests", str(4 * TURNS), "--raw-log",
                      str(raw), "--dataset", str(conversations(tmp_path / "conv.jsonl")), "--max-tokens", "6")
    assert proc.returncode == 0 and "Traceback" not in output(proc), output(proc)[-3000:]
    results = read_results(raw)
    assert len(results) == 4 * TURNS and all(r.success for r in results)
    by_conversation = defaultdict(dict)
    for r in results:
        by_conversation[r.prompt_id][r.turn] = r
    assert all(sorted(turns) == list(range(TURNS)) for turns in by_conversation.values())
    sent = {}  # what the server received, by the tag of the request's last user turn
    for line in record.read_text().splitlines():
        entry = json.loads(line)
        if "request" in entry and '"messages"' in entry["request"]:
            messages = json.loads(entry["request"])["messages"]
            sent[messages[-1]["content"].split("]")[0] + "]"] = messages
    for conversation, turns in by_conversation.items():
        i = conversation.split("-")[1]
        for t in range(1, TURNS):
            messages = sent[f"[conv-{i}-{t}]"]
            assert [m["role"] for m in messages] == ["user", "assistant"] * t + ["user"]
            answers = [m["content"] for m in messages if m["role"] == "assistant"]
            assert answers == [turns[k].output_text for k in range(t)] and all(answers)


def test_conversations_need_the_chat_api(recording_mock, tmp_path):
    url, _, _ = recording_mock
    proc = run_locust("conversation.py", url, "--requests", "3", "--api", "completion",
                      "--dataset", str(conversations(tmp_path / "conv.jsonl")))
    assert proc.returncode != 0 and output(proc).strip().splitlines()[-1] == (
        "error: conversations carry their history as chat messages: use --api chat")
