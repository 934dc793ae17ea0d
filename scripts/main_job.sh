#!/usr/bin/env bash
# The main job: set up, then generate text with SmolLM2-135M on device "tpu".
#   bash scripts/main_job.sh "The future of AI is" --max-new-tokens 64 [--compare-cpu]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec "${PYTHON:-python3}" -m torch_tpu.generate "$@"
