"""torch-tpu benchmark harness: `python -m bench` (see bench/README.md).

Importing this package must not import torch: bench/__main__.py sets TORCH_TPU_*
environment variables first.
"""
