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


def test_push_returns_every_event_a_piece_completes_and_keeps_the_rest():
    d = SSEDecoder()
    assert d.push(b'data: {"a":') == []  # half a line: nothing yet
    events = d.push(b' 1}\n\ndata: [DONE]\n\ndata: x')
    assert [e.data for e in events] == ['{"a": 1}', "[DONE]"] and events[1].is_done
    assert events[0].raw == b'{"a": 1}' and events[0].json() == {"a": 1}
    assert d.flush().data == "x" and d.flush() is None


def test_pieces_cut_anywhere_give_the_same_events():
    body = ('event: response.output_text.delta\ndata: {"delta": "café 日本"}\n\n: ping\r\n\r\n'
            'data: one\ndata: two\r\n\r\ndata:no-space\n\nid: 3\ndata:  two spaces\n\nevent: lone\n\n'
            'data: [DONE]\n\n').encode()
    whole = list(iter_events([body]))
    assert [(e.event, e.data) for e in whole] == [
        ("response.output_text.delta", '{"delta": "café 日本"}'), ("", "one\ntwo"), ("", "no-space"),
        ("", " two spaces"), ("", "[DONE]")]
    assert list(iter_events(body.splitlines(keepends=True))) == whole
    assert list(iter_events([body[i:i + 1] for i in range(len(body))])) == whole  # byte by byte
    for first in range(0, len(body), 3):
        for second in range(first, len(body), 5):
            assert list(iter_events([body[:first], body[first:second], body[second:]])) == whole, (first, second)


def test_a_payload_that_is_not_utf8_is_a_clear_error():
    event = next(iter_events([b'data: {"a": "\xff"}\n\n']))
    with pytest.raises(SSEFormatError, match=r"^malformed SSE: line is not UTF-8 \(invalid start byte\)$"):
        event.json()
