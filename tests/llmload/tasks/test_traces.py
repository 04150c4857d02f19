"""Traces: each format read and told apart, the replay window and scale, every bad line named, and prompts built
to exact lengths on the embedded model's tokenizer with shared hash blocks token for token."""

from __future__ import annotations

import json

import pytest

from benchmarks.mooncake_trace import mooncake_trace
from llmload.tasks.traces import TracePrompts, TraceError, TraceRequest, check_lengths, offsets, read_trace

pytestmark = pytest.mark.unit

MOONCAKE = [{"timestamp": 1000, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]},
            {"timestamp": 1500, "input_length": 700, "output_length": 7, "hash_ids": [0, 2]},
            {"timestamp": 4250, "input_length": 30, "output_length": 1, "hash_ids": [3]}]
AZURE = ("TIMESTAMP,ContextTokens,GeneratedTokens\n"
         "2023-11-16 18:15:46.6805900,374,44\n"
         "2023-11-16 18:15:50.9951690,396,109\n"
         "2023-11-16 18:16:01.0000000,879,7\n")
BURSTGPT = ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
            "5,ChatGPT,472,18,490,Conversation log\n"
            "45,ChatGPT,1087,0,1087,Conversation log\n"
            "118.5,GPT-4,417,276,693,API log\n")


def write(path, lines) -> str:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines) if isinstance(lines, list) else lines)
    return str(path)


def test_mooncake_times_in_ms_become_seconds_after_the_first_request(tmp_path):
    trace = read_trace(write(tmp_path / "t.jsonl", MOONCAKE))
    assert trace.format == "mooncake"
    assert [(r.line, r.time_s, r.input_length, r.output_length, r.hash_ids) for r in trace.requests] == [
        (1, 0.0, 600, 5, (0, 1)), (2, 0.5, 700, 7, (0, 2)), (3, 3.25, 30, 1, (3,))]


def test_azure_datetimes_with_seven_fractional_digits(tmp_path):
    trace = read_trace(write(tmp_path / "azure.csv", AZURE))
    assert trace.format == "azure"
    assert [r.time_s for r in trace.requests] == pytest.approx([0.0, 4.314579, 14.31941])
    assert [(r.input_length, r.output_length) for r in trace.requests] == [(374, 44), (396, 109), (879, 7)]


def test_burstgpt_leaves_out_requests_that_failed_in_the_original_log(tmp_path):
    trace = read_trace(write(tmp_path / "burst.csv", BURSTGPT))
    assert trace.format == "burstgpt"
    assert [(r.line, r.time_s, r.input_length, r.output_length) for r in trace.requests] == [
        (2, 0.0, 472, 18), (4, 113.5, 417, 276)]


def test_the_suites_own_jsonl_in_seconds(tmp_path):
    lines = [{"timestamp_s": 2.5, "input_length": 10, "output_length": 3},
             {"timestamp_s": 2.75, "input_length": 20, "output_length": 4, "hash_ids": [7]}]
    trace = read_trace(write(tmp_path / "own.jsonl", lines))
    assert trace.format == "jsonl"
    assert [(r.time_s, r.hash_ids) for r in trace.requests] == [(0.0, ()), (0.25, (7,))]


def test_a_given_format_wins_over_detection(tmp_path):
    path = write(tmp_path / "t.jsonl", [{"timestamp": 2, "input_length": 3, "output_length": 1}])
    assert read_trace(path, "mooncake").requests[0].input_length == 3
    with pytest.raises(TraceError, match=r"t\.jsonl:1: timestamp_s: missing"):
        read_trace(path, "jsonl")


def test_window_and_scale(tmp_path):
    lines = [{"timestamp_s": t, "input_length": 4, "output_length": 1} for t in (0, 1, 2, 3, 4, 5)]
    trace = read_trace(write(tmp_path / "t.jsonl", lines))
    window = trace.window(start_s=1.5, duration_s=3)
    assert [r.time_s for r in window] == [2, 3, 4]
    assert offsets(window, 1.5, 0.5) == [0.25, 0.75, 1.25]
    assert [r.time_s for r in trace.window(4)] == [4, 5]
    with pytest.raises(TraceError, match=r"no request \[10 s, 11 s\); the trace spans 5 s"):
        trace.window(10, 1)


@pytest.mark.parametrize("name, text, message", [
    ("unknown.csv", "time,prompt,answer\n1,2,3\n", r"unknown\.csv:1: cannot tell the trace's format .*--trace-format"),
    ("both.jsonl", '{"timestamp": 1, "timestamp_s": 1}\n', r"both\.jsonl:1: cannot tell the trace's format"),
    ("order.jsonl", '{"timestamp": 5, "input_length": 2, "output_length": 1}\n'
                    '{"timestamp": 4, "input_length": 2, "output_length": 1}\n',
     r"order\.jsonl:2: timestamp: earlier than line 1's: a trace must be in time order"),
    ("negative.jsonl", '{"timestamp": -3, "input_length": 2, "output_length": 1}\n',
     r"negative\.jsonl:1: timestamp: -3 is negative"),
    ("missing.jsonl", '{"timestamp": 1, "input_length": 2, "output_length": 1}\n{"timestamp": 2, "input_length": 2}\n',
     r"missing\.jsonl:2: output_length: missing"),
    ("float.jsonl", '{"timestamp": 1, "input_length": 2.5, "output_length": 1}\n',
     r"float\.jsonl:1: input_length: 2\.5 is not an integer"),
    ("zero.jsonl", '{"timestamp": 1, "input_length": 0, "output_length": 1}\n',
     r"zero\.jsonl:1: input_length: 0 is below 1"),
    ("hashes.jsonl", '{"timestamp": 1, "input_length": 2, "output_length": 1, "hash_ids": "a"}\n',
     r"hashes\.jsonl:1: hash_ids: not a list of integers"),
    ("broken.jsonl", '{"timestamp": 1, "input_length": 2, "output_length": 1}\n{"timestamp": \n',
     r"broken\.jsonl:2: line: not JSON"),
    ("azure.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.5,,4\n",
     r"azure\.csv:2: ContextTokens: missing"),
    ("when.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,3,4\n",
     r"when\.csv:2: TIMESTAMP: 'yesterday' is not a date and time"),
    ("late.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.5,3,4\n2023-11-16 18:15:46.4,3,4\n",
     r"late\.csv:3: TIMESTAMP: earlier than line 2's"),
    ("burst.csv", "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n-1,m,3,4,7,API log\n",
     r"burst\.csv:2: Timestamp: -1 is negative"),
    ("empty.jsonl", "\n", r"empty\.jsonl: the trace is empty"),
])
def test_every_bad_line_names_the_file_line_and_field(tmp_path, name, text, message):
    with pytest.raises(TraceError, match=message):
        read_trace(write(tmp_path / name, text))


def test_a_missing_column_names_it(tmp_path):
    path = write(tmp_path / "cols.csv", "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.5,3\n")
    with pytest.raises(TraceError, match=r"cols\.csv:1: GeneratedTokens: no such column"):
        read_trace(path, "azure")


def test_lengths_beyond_the_context_name_the_line(tmp_path):
    trace = read_trace(write(tmp_path / "t.jsonl", MOONCAKE))
    check_lengths(trace.path, trace.requests, 707)
    with pytest.raises(TraceError, match=r"t\.jsonl:2: input_length \+ output_length: 700 \+ 7 tokens exceed the "
                                         r"model's context of 706"):
        check_lengths(trace.path, trace.requests, 706)
    with pytest.raises(TraceError, match=r"t\.jsonl:3: input_length: 30 tokens cannot hold a prompt: the chat form "
                                         r"adds 30 tokens"):
        check_lengths(trace.path, trace.requests, None, 30, "chat")


@pytest.fixture(scope="module")
def prompts(counter):
    return TracePrompts(counter, block_size=64, seed=3)


def test_prompts_are_exact_in_both_forms_and_share_hash_blocks_token_for_token(prompts, counter):
    requests = [TraceRequest(1, 0.0, 150, 5, (0, 1)), TraceRequest(2, 0.1, 200, 6, (0, 1, 2, 3)),
                TraceRequest(3, 0.2, 100, 7, (9,)), TraceRequest(4, 0.3, 40, 1)]
    records = [prompts.record(r) for r in requests]
    completion = counter.prompt_ids([r.prompt for r in records])
    chat = counter.chat_ids([r.messages for r in records])
    assert [len(ids) for ids in completion] == [150, 200, 100, 40]
    assert [len(ids) for ids in chat] == [150, 200, 100, 40]
    assert [(r.max_tokens, r.input_tokens) for r in records] == [(5, 150), (6, 200), (7, 100), (1, 40)]
    shared = 2 * 64 + counter.special_tokens  # blocks 0 and 1, the whole of them
    assert completion[0][:shared] == completion[1][:shared]
    assert completion[0][shared:] != completion[1][shared:len(completion[0])]  # own words after the blocks
    assert completion[2][:10] != completion[0][:10]  # another block
    template = len(counter.chat_ids([[{"role": "user", "content": ""}]])[0])  # the template's head and tail
    assert chat[0][:template + 100] == chat[1][:template + 100]
    assert prompts.record(requests[0]) == records[0]  # the same prompt every time, in every process


def test_a_mooncake_style_trace_made_here_replays_to_exact_lengths(prompts, counter, tmp_path):
    lines = mooncake_trace(12, 5.0, groups=2, prefix_blocks=2, block_size=64, input_len=(10, 90),
                           output_len=(3, 9), seed=1)
    trace = read_trace(write(tmp_path / "made.jsonl", lines))
    assert [r.time_s * 1000 for r in trace.requests] == [line["timestamp"] for line in lines]
    assert all(r.hash_ids[:2] in ((0, 1), (2, 3)) and len(r.hash_ids) == -(-r.input_length // 64)
               for r in trace.requests)
    records = [prompts.record(r) for r in trace.requests]
    assert counter.prompt_tokens([r.prompt for r in records]) == [r.input_length for r in trace.requests]
