#!/usr/bin/env bash
# Installs the benchmark's optional peer engines into the current Python (pinned):
# llama-cpp-python, which pip builds from source (several minutes on 2 cores), so that
# `python -m bench` adds the llama.cpp row to the main job's table. Not needed by the
# main job or the tests.
# -mno-amx-tile: ggml's AMX matrix product (compiled in by -march=native on CPUs that list
# AMX) crashed with SIGSEGV in decode on this project's reference VM; its AVX-512/AVX2
# kernels are used instead. LLAVA_BUILD=OFF: the multimodal tools are not needed.
# --no-cache-dir: pip caches built wheels by version, not by these build flags.
set -euo pipefail
PY=${PYTHON:-python3}
CMAKE_ARGS="${CMAKE_ARGS:-} -DLLAVA_BUILD=OFF -DCMAKE_C_FLAGS=-mno-amx-tile -DCMAKE_CXX_FLAGS=-mno-amx-tile" \
  "$PY" -m pip install -q --disable-pip-version-check --no-cache-dir llama-cpp-python==0.3.36
