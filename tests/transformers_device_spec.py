"""Device spec for Transformers' test utilities (transformers.testing_utils), so that
Transformers' own test suite runs its device tests on "tpu":

    cd tests    # Transformers imports the spec by bare module name: give the file name, run from here
    TRANSFORMERS_TEST_BACKEND=torch_tpu TRANSFORMERS_TEST_DEVICE=tpu \\
    TRANSFORMERS_TEST_DEVICE_SPEC=transformers_device_spec.py \\
        python -m pytest <transformers checkout>/tests/models/llama -k "not slow"

testing_utils imports TRANSFORMERS_TEST_BACKEND (torch_tpu registers the device),
checks TRANSFORMERS_TEST_DEVICE against DEVICE_NAME, and puts the *_FN callables
below into its backend_manual_seed / backend_empty_cache / backend_device_count
tables for DEVICE_NAME. The names are exactly those it reads.
"""
import torch
import torch_tpu  # noqa: F401  (registers the "tpu" device and torch.tpu)

DEVICE_NAME = "tpu"

# backend_manual_seed(device, seed): seeds the current chip's generator
MANUAL_SEED_FN = torch.tpu.manual_seed
# backend_empty_cache(device): returns cached blocks of the caching allocator to the chips
EMPTY_CACHE_FN = torch.tpu.empty_cache
# backend_device_count(device): number of chips (TORCH_TPU_HOST_DEVICES virtual chips on the host driver)
DEVICE_COUNT_FN = torch.tpu.device_count

# Tests that would fork a subprocess per test run in-process on this device (Transformers
# already treats "tpu" so; said explicitly here for older versions that read the flag).
SINGLE_PROCESS_DEVICE = True
