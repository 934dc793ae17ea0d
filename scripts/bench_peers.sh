#!/usr/bin/env bash
# Installs the benchmark's optional peer engines into the current Python (pinned):
# llama-cpp-python, which pip builds from source (several minutes on 2 cores), so that
# `python -m bench` adds the llama.cpp row to the main job's table. Not needed by the
# main job or the tests.
# On a CPU that lists AMX, ggml's AMX matrix product (compiled in by -march=native) crashed
# with SIGSEGV in decode on this project's reference VM: there the build names the CPU's
# other vector extensions instead of -march=native, and ggml uses its AVX-512/AVX2 kernels.
# LLAVA_BUILD=OFF: the multimodal tools are not needed. --no-cache-dir: pip caches built
# wheels by version, not by these build flags.
set -euo pipefail
PY=${PYTHON:-python3}
args="-DLLAVA_BUILD=OFF"
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
if [[ " $flags " == *" amx_tile "* ]]; then
  args+=" -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
  for f in avx512f:AVX512 avx512vbmi:AVX512_VBMI avx512_vnni:AVX512_VNNI avx512_bf16:AVX512_BF16 avx_vnni:AVX_VNNI; do
    [[ " $flags " == *" ${f%%:*} "* ]] && args+=" -DGGML_${f##*:}=ON"
  done
fi
CMAKE_ARGS="${CMAKE_ARGS:-} $args" \
  "$PY" -m pip install -q --disable-pip-version-check --no-cache-dir llama-cpp-python==0.3.36
