"""End-to-end against the real embedded model (SmolLM2-135M-Instruct) on the naive engine.

One session server (``real_server``) answers every request here; requests are
short (at most 16 new tokens). Checked: greedy streaming equals the non-streamed
answer on prompts whose answers hold multi-byte characters (Korean, emoji,
accented letters) and leading spaces; greedy output equals transformers' own
``generate``; usage equals the tokenizer's counts; the chat template is used;
stop, seed, top_p, ignore_eos, min_tokens, max_completion_tokens; the openai
client on both endpoints; the Responses API; per-chunk running usage; and the
plain chat fallback of a model without a chat template.
"""

from __future__ import annotations

import json
import os
import shutil
import unicodedata
from dataclasses import dataclass

import httpx
import openai
import pytest

from server.engines.hf_model import render_plain_chat
from server_client import StreamResult, post_ok, response_text, stream

pytestmark = [pytest.mark.integration, pytest.mark.model]


@dataclass(frozen=True)
class GreedyCase:
    """A greedy request whose answer exercises the detokeniser, and what its text must contain."""

    name: str
    body: dict
    must_contain: str  # "hangul", "emoji" or "accent": what :func:`has_feature` checks

    @property
    def path(self) -> str:
        return "/v1/chat/completions" if "messages" in self.body else "/v1/completions"


GREEDY_CASES = [
    GreedyCase("chat-korean", {"messages": [{"role": "user", "content": "Say hello in Korean and add an emoji."}],
                               "max_tokens": 16}, "hangul"),
    GreedyCase("completion-emoji", {"prompt": "Emoji: 😀 😃", "max_tokens": 9}, "emoji"),
    GreedyCase("completion-accents", {"prompt": "Les cafés de Paris sont", "max_tokens": 12}, "accent"),
]


def has_feature(text: str, feature: str) -> bool:
    if feature == "hangul":
        return any("HANGUL" in unicodedata.name(c, "") for c in text)
    if feature == "emoji":
        return any(ord(c) >= 0x1F000 for c in text)
    if feature == "accent":
        return any(unicodedata.decomposition(c) and ord(c) > 127 for c in text)
    raise ValueError(feature)


@dataclass
class GreedyAnswer:
    case: GreedyCase
    plain: dict
    streamed: StreamResult


@pytest.fixture(scope="module")
def greedy_answers(real_server) -> dict[str, GreedyAnswer]:
    """Each greedy case asked once without and once with streaming (with the usage chunk)."""
    answers = {}
    for case in GREEDY_CASES:
        body = {**case.body, "temperature": 0}
        plain = post_ok(real_server, case.path, body)
        streamed = stream(real_server, case.path, {**body, "stream_options": {"include_usage": True}})
        answers[case.name] = GreedyAnswer(case, plain, streamed)
    return answers


@pytest.mark.parametrize("name", [c.name for c in GREEDY_CASES])
def test_greedy_stream_equals_non_stream(greedy_answers, name):
    answer = greedy_answers[name]
    text = response_text(answer.plain)
    assert has_feature(text, answer.case.must_contain), f"{name}: the answer lost its point: {text!r}"
    assert answer.streamed.text() == text
    assert "\ufffd" not in text
    assert answer.streamed.finish_reason() == answer.plain["choices"][0]["finish_reason"]
    assert answer.streamed.usage() == answer.plain["usage"]


def test_completion_text_keeps_its_leading_space(greedy_answers):
    text = response_text(greedy_answers["completion-accents"].plain)
    assert text.startswith(" ") and not text.startswith("  ")


def test_usage_equals_the_tokenizers_count(greedy_answers, hf_tokenizer):
    """prompt_tokens is the tokenizer's count of the (templated) prompt; completion_tokens is max_tokens here."""
    for answer in greedy_answers.values():
        body = answer.case.body
        if "messages" in body:
            expected_prompt = len(hf_tokenizer.apply_chat_template(body["messages"], add_generation_prompt=True)
                                  ["input_ids"])
        else:
            expected_prompt = len(hf_tokenizer(body["prompt"])["input_ids"])
        usage = answer.plain["usage"]
        assert usage["prompt_tokens"] == expected_prompt, answer.case.name
        if answer.plain["choices"][0]["finish_reason"] == "length":
            assert usage["completion_tokens"] == body["max_tokens"], answer.case.name
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_chat_uses_the_models_template(greedy_answers, hf_tokenizer):
    """The templated prompt (system prompt, <|im_start|> markers) is what was counted, not the plain fallback."""
    messages = greedy_answers["chat-korean"].case.body["messages"]
    templated = hf_tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert templated.startswith("<|im_start|>system") and templated.endswith("<|im_start|>assistant\n")
    plain = len(hf_tokenizer(render_plain_chat(messages), add_special_tokens=False)["input_ids"])
    assert greedy_answers["chat-korean"].plain["usage"]["prompt_tokens"] != plain


def test_greedy_output_equals_transformers_generate(greedy_answers, hf_tokenizer, default_model):
    """The naive engine's own decode loop gives exactly what ``model.generate(do_sample=False)`` gives."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(default_model)
    model.eval()
    for answer in greedy_answers.values():
        body = answer.case.body
        if "messages" in body:
            ids = hf_tokenizer.apply_chat_template(body["messages"], add_generation_prompt=True)["input_ids"]
        else:
            ids = hf_tokenizer(body["prompt"])["input_ids"]
        with torch.inference_mode():
            out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                 do_sample=False, max_new_tokens=body["max_tokens"])
        new_ids = out[0, len(ids):].tolist()
        # An answer cut inside a multi-byte character ends in U+FFFD here; the server sends whole characters.
        expected = hf_tokenizer.decode(new_ids, skip_special_tokens=True).rstrip("\ufffd")
        assert response_text(answer.plain) == expected, answer.case.name
        assert answer.plain["usage"]["completion_tokens"] == len(new_ids), answer.case.name


# --------------------------------------------------------------------------- sampling and length controls

SHORT_ANSWER = {"messages": [{"role": "user", "content": "What is the capital of France?"}], "temperature": 0}
FIXED = 10  # tokens; more than the short answer needs


@pytest.fixture(scope="module")
def short_answer(real_server) -> dict:
    """A greedy chat answer that ends with EOS before FIXED tokens."""
    answer = post_ok(real_server, "/v1/chat/completions", {**SHORT_ANSWER, "max_tokens": FIXED})
    assert answer["choices"][0]["finish_reason"] == "stop", answer
    assert answer["usage"]["completion_tokens"] < FIXED
    return answer


def test_ignore_eos_gives_exactly_max_tokens(real_server, short_answer):
    fixed = post_ok(real_server, "/v1/chat/completions", {**SHORT_ANSWER, "max_tokens": FIXED, "ignore_eos": True})
    assert fixed["usage"]["completion_tokens"] == FIXED and fixed["choices"][0]["finish_reason"] == "length"
    assert response_text(fixed).startswith(response_text(short_answer))
    streamed = stream(real_server, "/v1/chat/completions", {**SHORT_ANSWER, "max_tokens": FIXED, "ignore_eos": True,
                                                            "stream_options": {"include_usage": True}})
    assert streamed.usage()["completion_tokens"] == FIXED and streamed.text() == response_text(fixed)


def test_min_tokens_holds_eos_back(real_server, short_answer):
    held = post_ok(real_server, "/v1/chat/completions", {**SHORT_ANSWER, "max_tokens": FIXED, "min_tokens": FIXED})
    assert held["usage"]["completion_tokens"] == FIXED and held["choices"][0]["finish_reason"] == "length"
    assert response_text(held).startswith(response_text(short_answer))  # same tokens until EOS was due


def test_stop_string_cuts_the_answer(real_server, short_answer):
    full = response_text(short_answer)
    stop = " " + full.split()[-1]  # the last word, e.g. " Paris."
    body = {**SHORT_ANSWER, "max_tokens": FIXED, "stop": [stop, "never appears"]}
    cut = post_ok(real_server, "/v1/chat/completions", body)
    assert response_text(cut) == full[:full.index(stop)]
    assert cut["choices"][0]["finish_reason"] == "stop"
    streamed = stream(real_server, "/v1/chat/completions", {**body, "stop": stop})  # one string, not a list
    assert streamed.text() == response_text(cut) and streamed.finish_reason() == "stop"
    assert stop not in streamed.raw


def test_same_seed_same_sampled_text(real_server):
    body = {"prompt": "Once upon a time", "max_tokens": 6, "temperature": 1.0, "ignore_eos": True}
    first = response_text(post_ok(real_server, "/v1/completions", {**body, "seed": 7}))
    again = stream(real_server, "/v1/completions", {**body, "seed": 7}).text()
    other = response_text(post_ok(real_server, "/v1/completions", {**body, "seed": 8}))
    assert first == again
    assert first != other


def test_tiny_top_p_is_greedy(real_server, greedy_answers):
    case = greedy_answers["completion-accents"]
    nucleus = post_ok(real_server, case.case.path, {**case.case.body, "temperature": 1.0, "top_p": 1e-6,
                                                    "seed": 3})
    assert response_text(nucleus) == response_text(case.plain)


def test_openai_client_both_endpoints(real_server):
    """The official client, sync and stream, on both endpoints; vLLM extensions go in extra_body."""
    client = openai.OpenAI(base_url=real_server + "/v1", api_key="unused", max_retries=0, timeout=120)
    model = client.models.list().data[0].id
    fixed = {"ignore_eos": True}
    completion = client.completions.create(model=model, prompt="The sky is", max_tokens=4, temperature=0,
                                           extra_body=fixed)
    assert completion.usage.completion_tokens == 4 and completion.choices[0].finish_reason == "length"
    chunks = list(client.completions.create(model=model, prompt="The sky is", max_tokens=4, temperature=0,
                                            stream=True, extra_body=fixed))
    assert "".join(c.choices[0].text for c in chunks) == completion.choices[0].text

    messages = [{"role": "user", "content": "Name a colour."}]
    chat = client.chat.completions.create(model=model, messages=messages, max_completion_tokens=4, temperature=0,
                                          extra_body=fixed)
    assert chat.usage.completion_tokens == 4 and chat.choices[0].message.role == "assistant"
    chunks = list(client.chat.completions.create(model=model, messages=messages, max_completion_tokens=4,
                                                 temperature=0, stream=True, extra_body=fixed,
                                                 stream_options={"include_usage": True}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == chat.choices[0].message.content
    assert chunks[-1].usage.completion_tokens == 4 and chunks[-1].usage.prompt_tokens == chat.usage.prompt_tokens


# --------------------------------------------------------------------------- the Responses API, running usage


def test_responses_api_answers_as_chat_does(real_server, short_answer):
    """The same greedy answer through /v1/responses (text input, sync and streamed) as through chat; an answer
    that ends with EOS is ``completed``, one cut by max_output_tokens ``incomplete``."""
    question = SHORT_ANSWER["messages"][0]["content"]
    body = {"input": question, "max_output_tokens": FIXED, "temperature": 0}
    answer = post_ok(real_server, "/v1/responses", body)
    assert answer["status"] == "completed" and answer["incomplete_details"] is None
    assert answer["output"][0]["content"][0]["text"] == response_text(short_answer)
    assert answer["usage"]["output_tokens"] == short_answer["usage"]["completion_tokens"]
    assert answer["usage"]["input_tokens"] == short_answer["usage"]["prompt_tokens"]
    client = openai.OpenAI(base_url=real_server + "/v1", api_key="unused", max_retries=0, timeout=120)
    events = list(client.responses.create(model=answer["model"], stream=True, **body))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == response_text(short_answer)
    assert events[-1].type == "response.completed" and events[-1].response.usage.output_tokens == \
        answer["usage"]["output_tokens"]
    cut = client.responses.create(model=answer["model"], input=SHORT_ANSWER["messages"], max_output_tokens=2,
                                  temperature=0)
    assert cut.status == "incomplete" and cut.incomplete_details.reason == "max_output_tokens"
    assert cut.usage.output_tokens == 2


def test_running_usage_counts_every_token_of_each_chunk(real_server, hf_tokenizer):
    """Chunks hold back partial characters and stop-string prefixes, so one chunk may carry several tokens:
    the running counts (continuous_usage_stats) add up to the final usage, chunk by chunk."""
    body = {"prompt": "Emoji: 😀 😃", "max_tokens": 12, "temperature": 0, "ignore_eos": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    result = stream(real_server, "/v1/completions", body)
    *chunks, final = result.chunks
    running = [c["usage"]["completion_tokens"] for c in chunks]
    assert running == sorted(running) and running[-1] == final["usage"]["completion_tokens"] == 12
    counts = [b - a for a, b in zip([0] + running, running)]
    assert sum(counts) == 12 and all(c >= 1 for c in counts)
    assert max(counts) > 1, "expected a chunk that held back a partial emoji"


# --------------------------------------------------------------------------- model without a chat template


@pytest.fixture()
def model_without_template(default_model, tmp_path) -> str:
    """The embedded model's folder with its chat template removed (as GPT-2 has none); weights linked."""
    folder = tmp_path / "no-template-model"
    folder.mkdir()
    for entry in os.scandir(default_model):
        if entry.name == "chat_template.jinja":
            continue
        target = folder / entry.name
        if entry.name.endswith(".safetensors"):
            target.symlink_to(entry.path)
        else:
            shutil.copy(entry.path, target)
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config.pop("chat_template", None)  # older tokenizers keep the template here
    config_path.write_text(json.dumps(config))
    return str(folder)


@pytest.mark.slow
def test_plain_chat_fallback_without_a_template(server_factory, model_without_template, hf_tokenizer):
    from transformers import AutoTokenizer

    assert not AutoTokenizer.from_pretrained(model_without_template).chat_template
    url = server_factory("naive", "--model", model_without_template, "--max-model-len", "256", timeout=300)
    assert httpx.get(url + "/v1/models").json()["data"][0]["id"] == "no-template-model"
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there!"}]
    answer = post_ok(url, "/v1/chat/completions", {"messages": messages, "max_tokens": 2, "temperature": 0,
                                                    "ignore_eos": True})
    plain = render_plain_chat(messages)
    assert plain == "system: Be brief.\nuser: Hello there!\nassistant:"
    assert answer["usage"]["prompt_tokens"] == len(hf_tokenizer(plain, add_special_tokens=False)["input_ids"])
    assert answer["usage"]["completion_tokens"] == 2


def test_threads_setting_reaches_the_worker_thread(real_server):
    # the session server runs with --threads 1; OpenMP thread counts are per thread, so the engine must apply
    # it in the worker thread that runs the model, not only where the model was loaded
    info = httpx.get(real_server + "/health", timeout=10).json()
    assert info["engine"] == "naive" and info["threads"] == 1
