"""The SSE parser on the shapes servers really send."""

import pytest

from llmload.core.sse import SSEDecoder, SSEFormatError, format_event, iter_events

pytestmark = pytest.mark.unit


def test_events_split_on_blank_lines_and_done():
    lines = [b'data: {"a": 1}\n', b"\n", b": keep-alive\n", b"\n", b"data: [DONE]\n", b"\n"]
    events = list(iter_events(lines))
    assert [e.data for e in events] == ['{"a": 1}', "[DONE]"]
    assert events[0].json() == {"a": 1} and events[1].is_done


def test_decoder_returns_event_only_when_complete():
    d = SSEDecoder()
    assert d.feed("data: x\r\n") is None
    assert d.feed("\r\n").data == "x"
    assert d.feed("data:no-space\n") is None and d.flush().data == "no-space"


def test_multiline_data_and_unterminated_last_event():
    events = list(iter_events(["data: one\n", "data: two\n", "\n", "data: tail\n"]))
    assert [e.data for e in events] == ["one\ntwo", "tail"]


def test_malformed_json_is_a_clear_error():
    event = next(iter_events(["data: {oops\n", "\n"]))
    with pytest.raises(SSEFormatError, match="not JSON"):
        event.json()


def test_format_event_round_trips():
    text = format_event({"k": "é"})
    assert text.endswith("\n\n")
    assert next(iter_events(text.splitlines(keepends=True))).json() == {"k": "é"}


def test_event_names_are_kept():
    lines = [b"event: response.output_text.delta\n", b'data: {"delta": "a"}\n', b"\n", b'data: {"b": 1}\n', b"\n"]
    events = list(iter_events(lines))
    assert [(e.event, e.data) for e in events] == [("response.output_text.delta", '{"delta": "a"}'), ("", '{"b": 1}')]
    text = format_event({"type": "response.created"}, event="response.created")
    assert text.startswith("event: response.created\ndata: ")
    assert next(iter_events(text.splitlines(keepends=True))).event == "response.created"
