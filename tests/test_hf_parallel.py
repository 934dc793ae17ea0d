"""Transformers' own tensor- and expert-parallel tests (its test mixins, from its
source distribution) on device "tpu" with 2 processes over tpu_dist: see
hf_parallel_mixins.py and hf_distributed_testing_utils.py. Each run is a fresh
pytest process, because transformers.testing_utils reads the test device once."""
import os
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import hf_distributed_testing_utils as hdu  # noqa: E402

# Every test of the two mixins that runs on tiny Qwen3 / Qwen3-MoE (the others skip for
# the reasons in ALLOWED_SKIPS, as they do on the CPU).
ALL = [f"Qwen3ParallelTest::{t}" for t in ("test_tp_backward", "test_tp_forward_0", "test_tp_forward_1",
                                           "test_tp_generation", "test_tp_plan_shards_input_embeddings")]
ALL += [f"Qwen3MoeParallelTest::{t}" for t in (
    "test_ep_backward_0_eager", "test_ep_backward_1_grouped_mm", "test_ep_backward_2_batched_mm",
    *(f"test_ep_forward_{i}" for i in range(6)), "test_moe_parallel_plans_shard_experts", "test_tp_backward",
    "test_tp_forward_0", "test_tp_forward_1", "test_tp_generation", "test_tp_plan_shards_input_embeddings")]
ALLOWED_SKIPS = ("Test requires torchao", "Not an MoE model")


def run_mixins(select=None, limit=1800):
    pytest.importorskip("parameterized")
    if not os.path.exists(os.path.join(hdu.tests_dir(), "test_tensor_parallel_mixin.py")):
        pytest.skip("Transformers' test mixins are not fetched: python tests/hf_distributed_testing_utils.py fetch "
                    "(scripts/test.sh runs it)")
    env = dict(os.environ, TRANSFORMERS_TEST_BACKEND="torch_tpu", TRANSFORMERS_TEST_DEVICE="tpu",
               TRANSFORMERS_TEST_DEVICE_SPEC="transformers_device_spec.py", HF_HUB_OFFLINE="1")
    argv = [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-o", "addopts=",
            "hf_parallel_mixins.py"] + (["-k", select] if select else [])
    r = subprocess.run(argv, cwd=HERE, env=env, capture_output=True, text=True, timeout=limit)
    out = r.stdout + r.stderr
    passed = set(re.findall(r"^PASSED hf_parallel_mixins.py::(\S+)", out, re.M))
    skips = re.findall(r"^SKIPPED \[\d+\] \S+: (.*)$", out, re.M)
    assert r.returncode == 0, out[-8000:]
    assert all(s.startswith(ALLOWED_SKIPS) for s in skips), skips
    # hf_rank.py's check on every rank of every distributed test: tpu_dist carried collectives
    # and the models took chip memory
    ran = re.findall(r"^rank (\d): backend tpu_dist, (\d+) tpu_dist collectives", out, re.M)
    assert ran and all(int(n) > 0 for _, n in ran), out[-4000:]
    return passed, out


def test_tp_forward_on_two_chips():
    """One of them in the default suite: TP logits equal one chip's (tiny Qwen3)."""
    passed, out = run_mixins("Qwen3ParallelTest and test_tp_forward_0")
    assert passed == {"Qwen3ParallelTest::test_tp_forward_0"}, out[-4000:]


@pytest.mark.slow
def test_all_mixin_tests():
    passed, out = run_mixins()
    assert passed == set(ALL), (sorted(set(ALL) - passed), out[-4000:])
