"""The load generator's replay of a --trace: its window, offsets and prompts, and the context it checks against."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from llmload.core.records import DatasetError
from llmload.loadgen.options import LoadSettings
from llmload.loadgen.prompts import TraceReplay

pytestmark = pytest.mark.unit


def test_the_window_the_offsets_and_the_context_of_the_model(tmp_path, default_model):
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"timestamp_s": t, "input_length": n, "output_length": 4}) + "\n"
                            for t, n in ((0, 50), (1, 60), (2, 70), (3, 8200))))
    settings = LoadSettings(trace=str(path), tokenizer=default_model, trace_start=1, trace_duration=1.5,
                            time_scale=2, api="completion")
    replay = TraceReplay(settings)
    assert [r.line for r in replay.requests] == [2, 3] and replay.offsets == [0.0, 2.0]
    assert (replay.record(1).id, replay.record(1).input_tokens, replay.record(1).max_tokens) == ("trace:3", 70, 4)
    assert len(TraceReplay(replace(settings, trace_duration=0, requests=1)).requests) == 1  # --requests caps it
    with pytest.raises(DatasetError, match=r"t\.jsonl:4: input_length \+ output_length: 8200 \+ 4 tokens exceed "
                                           r"the model's context of 8192"):  # the model's max_position_embeddings
        TraceReplay(replace(settings, trace_duration=0))
    with pytest.raises(DatasetError, match=r"t\.jsonl:3: .* exceed the model's context of 70"):
        TraceReplay(replace(settings, max_model_len=70))
