#!/usr/bin/env bash
# Installs the benchmark's optional peer engines into the current Python (pinned):
# llama-cpp-python, which pip builds from source (several minutes on 2 cores), so that
# `python -m bench` adds the llama.cpp row to the main job's table. Not needed by the
# main job or the tests.
set -euo pipefail
PY=${PYTHON:-python3}
"$PY" -m pip install -q --disable-pip-version-check llama-cpp-python==0.3.36
