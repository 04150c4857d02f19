"""The prompt record type and its JSONL I/O."""

import pytest

from llmload.core.records import PromptRecord, RecordFormatError, read_records, write_records

pytestmark = pytest.mark.unit


def record(i=0):
    return PromptRecord(id=f"qa-{i}", task="qa", source="test", prompt=f"Q{i}?",
                        messages=[{"role": "user", "content": f"Q{i}?"}], max_tokens=32, input_tokens=3,
                        reference="A")


def test_round_trip_keeps_every_field(tmp_path):
    path = tmp_path / "qa.jsonl"
    records = [record(i) for i in range(3)]
    assert write_records(path, records) == 3
    back = read_records(path)
    assert back == records
    assert isinstance(back[0].messages, tuple)


def test_missing_field_and_bad_json_name_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(record().to_json() + "\n" + '{"id": "x"}\n')
    with pytest.raises(RecordFormatError, match=r"bad.jsonl:2: .*missing field"):
        read_records(path)
    path.write_text("[1, 2]\n")
    with pytest.raises(RecordFormatError, match="not a JSON object"):
        read_records(path)


def test_failed_write_leaves_no_partial_file(tmp_path):
    path = tmp_path / "qa.jsonl"

    def broken():
        yield record()
        raise RuntimeError("source failed")

    with pytest.raises(RuntimeError):
        write_records(path, broken())
    assert not path.exists()
    assert list(tmp_path.iterdir()) == []
