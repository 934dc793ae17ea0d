"""Device spec for Diffusers' test utilities (tests/testing_utils.py of a Diffusers
checkout), so that Diffusers' own tests run their device tests on "tpu":

    cd tests    # the spec is imported by bare module name: give the file name, run from here
    DIFFUSERS_TEST_BACKEND=torch_tpu DIFFUSERS_TEST_DEVICE=tpu \\
    DIFFUSERS_TEST_DEVICE_SPEC=diffusers_device_spec.py \\
        python -m pytest <diffusers checkout>/tests/models/unets/test_models_unet_2d.py

testing_utils imports DIFFUSERS_TEST_BACKEND, checks DIFFUSERS_TEST_DEVICE against
DEVICE_NAME and puts the names below into its BACKEND_* tables for DEVICE_NAME
(a name left out takes the table's "default" entry).
"""
import torch
import torch_tpu  # noqa: F401  (registers the "tpu" device and torch.tpu)

DEVICE_NAME = "tpu"

MANUAL_SEED_FN = torch.tpu.manual_seed
EMPTY_CACHE_FN = torch.tpu.empty_cache
DEVICE_COUNT_FN = torch.tpu.device_count
SUPPORTS_TRAINING = True
RESET_PEAK_MEMORY_STATS_FN = torch.tpu.reset_peak_memory_stats
RESET_MAX_MEMORY_ALLOCATED_FN = torch.tpu.reset_max_memory_allocated
MAX_MEMORY_ALLOCATED_FN = torch.tpu.max_memory_allocated
