#!/usr/bin/env bash
# The test suite: set up, C runtime tests under ASan+UBSan, then pytest.
# TORCH_TPU_SLOW_TESTS=0 skips the heavier sweeps (marker `slow`).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
bash scripts/setup.sh
# libtpu (Google's PJRT plugin for TPUs, 205 MB): the tests check that loading
# it on this machine, which has no TPU, is a clear "no TPU found" error.
"$PY" -m pip install -q --disable-pip-version-check --no-deps libtpu==0.0.51
# The Hugging Face `kernels` library: tests/test_kernels_hub.py kernelizes models with this
# project's local kernel repository (torch_tpu/hub_kernels), offline, also through Transformers'
# own use_kernels=True (Transformers 5.23 accepts kernels >= 0.18.2, < 0.19). --no-deps: its
# requirements huggingface_hub >= 1.32, packaging and pyyaml come with transformers; tomlkit is
# listed but no module of kernels 0.18.3 imports it; sigstore is an optional extra.
"$PY" -m pip install -q --disable-pip-version-check --no-deps kernels==0.18.3
# Diffusers: tests/test_diffusers.py runs tiny pipelines built from configs and
# enable_parallelism on two processes, offline. With its dependencies (Pillow,
# importlib_metadata, regex, requests, safetensors, filelock; huggingface_hub and
# numpy also come with transformers): its pipelines and image processing import them.
"$PY" -m pip install -q --disable-pip-version-check diffusers==0.42.1
# Transformers' own multi-process test mixins (tensor and expert parallel; tests/test_hf_parallel.py):
# its source distribution from PyPI holds them (pip's cache is reused); `parameterized` is their
# one test-only dependency.
"$PY" -m pip install -q --disable-pip-version-check --no-deps parameterized==0.9.0
"$PY" tests/hf_distributed_testing_utils.py fetch >/dev/null

echo "== C runtime tests (AddressSanitizer + UndefinedBehaviorSanitizer)"
# The driver conformance suite runs on the pjrt driver too, on XLA's CPU plugin.
TORCH_TPU_PJRT_PLUGIN=$("$PY" -c "import os, xla_plugins.xla_cpu_pjrt as m; print(os.path.join(os.path.dirname(m.__file__), 'xla_cpu_pjrt.so'))")
export TORCH_TPU_PJRT_PLUGIN TORCH_TPU_CTS_REQUIRE_PJRT=1
cmake -S . -B build/c-san -DTPU_SANITIZE=ON -DTPU_BUILD_PYTHON=OFF -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build build/c-san -j "$(nproc)" >/dev/null
ctest --test-dir build/c-san --output-on-failure

echo "== Python tests"
"$PY" -m pytest -q tests

echo "== Python tests on the pjrt driver (XLA's CPU plugin): device, OpInfo, tiny models"
# test_arch: forward, backward and greedy tokens of tiny models equal to the CPU (eager). The
# compile-mode sweep asserts the host graph compiler's share of C nodes: not run on pjrt.
# Also fused Adam(W) (a decomposition there), attention, the fused kernels (rms_norm, rope,
# swiglu; optimize() on tiny models), complex tensors, the device profiler, Diffusers pipelines on one chip, and tpu_dist across
# processes (collectives on both transports, DTensor, DDP/FSDP2 steps, errors, a 2x2 mesh,
# torchrun on one and two nodes, Transformers' tp_plan, Diffusers' enable_parallelism).
TORCH_TPU_DRIVER=pjrt "$PY" -m pytest -q tests/test_device.py tests/test_opinfo.py \
  "tests/test_arch_sweep.py::test_arch" tests/test_optim_fused.py tests/test_attention.py \
  tests/test_fused.py tests/test_complex.py tests/test_device_profiler.py tests/test_diffusers.py -k "not parallel"
TORCH_TPU_DRIVER=pjrt "$PY" -m pytest -q tests/test_dist.py tests/test_diffusers.py \
  -k "collectives or mesh or torchrun or tp_plan or google_ops or parallel"

if [ "${TORCH_TPU_SLOW_TESTS:-1}" = "1" ]; then
  echo "== Slow tests"
  rc=0
  "$PY" -m pytest -q -m slow tests || rc=$?
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then exit "$rc"; fi
fi
