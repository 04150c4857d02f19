"""The default model's materialisation reads its GGUF file once (transformers would parse it three times)."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from llmload.core.model_store import _gguf_read_once

pytestmark = pytest.mark.unit


def write_gguf(path) -> None:
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(2)
    writer.add_tensor("token_embd.weight", np.arange(12, dtype=np.float32).reshape(3, 4))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_one_reader_per_file_and_one_name_map_per_architecture_inside_only(tmp_path):
    path = tmp_path / "tiny.gguf"
    write_gguf(path)
    real_reader, real_map = gguf.GGUFReader, gguf.get_tensor_name_map
    with _gguf_read_once():
        first = gguf.GGUFReader(path)
        assert gguf.GGUFReader(str(path)) is first  # the same file by another spelling: parsed once
        assert [t.name for t in first.tensors] == ["token_embd.weight"]
        assert first.tensors[0].data.tolist() == np.arange(12, dtype=np.float32).reshape(3, 4).tolist()
        llama = gguf.MODEL_ARCH.LLAMA
        assert gguf.get_tensor_name_map(llama, 2) is gguf.get_tensor_name_map(llama, 2)
        assert gguf.get_tensor_name_map(llama, 2).get_name("model.embed_tokens") == "token_embd"
    assert gguf.GGUFReader is real_reader and gguf.get_tensor_name_map is real_map
    assert gguf.GGUFReader(path) is not first  # a new reader outside


def test_the_real_functions_come_back_after_an_error():
    real_reader = gguf.GGUFReader
    with pytest.raises(RuntimeError):
        with _gguf_read_once():
            raise RuntimeError("conversion failed")
    assert gguf.GGUFReader is real_reader
