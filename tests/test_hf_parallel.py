"""Transformers' own tensor-parallel, expert-parallel and FSDP tests (its test
mixins, from its source distribution) on device "tpu" with 2 to 8 processes over
tpu_dist: see
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
# The FSDP mixin's tests (FSDP2, HSDP on 2x2, DCP save/load, bf16 training, expert
# parallel on 2-D meshes, DDP as the reference), 2, 4 or 8 processes each.
FSDP = ["test_fsdp_plan_declared", "test_fsdp2_bf16_training", "test_fsdp2_save_load", "test_fsdp2_save_load_dcp",
        "test_hsdp_save_load", "test_hsdp_save_load_dcp", "test_fsdp2_plan_vs_ddp_0_untied",
        "test_fsdp2_plan_vs_ddp_1_tied", "test_fsdp2_sharding_structure_0_untied",
        "test_fsdp2_sharding_structure_1_tied", "test_hsdp_grad_accumulation_vs_single_device_0_replicate_and_shard",
        "test_hsdp_grad_accumulation_vs_single_device_1_replicate_only"]
MOE_FSDP = ["test_fsdp2_expert_parallel_2d_vs_ddp", "test_fsdp2_expert_parallel_bf16_grads_0_experts_sharded",
            "test_fsdp2_expert_parallel_bf16_grads_1_experts_not_sharded",
            "test_hsdp_grad_accumulation_vs_single_device_2_expert_parallel"]
ALL_FSDP = [f"Qwen3FsdpTest::{t}" for t in FSDP] + [f"Qwen3MoeFsdpTest::{t}" for t in FSDP + MOE_FSDP]
ALLOWED_SKIPS = ("Test requires torchao", "Not an MoE model", "Model does not have an expert parallel plan",
                 "Model does not have a token-dispatch expert parallel plan")


def run_mixins(select=None, limit=1800):
    pytest.importorskip("parameterized")
    if not os.path.exists(os.path.join(hdu.tests_dir(), "test_tensor_parallel_mixin.py")):
        pytest.skip("Transformers' test mixins are not fetched: python tests/hf_distributed_testing_utils.py fetch "
                    "(scripts/test.sh runs it)")
    # 8 chips in the pytest process: the FSDP mixin starts as many ranks as the device
    # count allows (up to 8); each rank process has LOCAL_WORLD_SIZE chips of its own.
    env = dict(os.environ, TRANSFORMERS_TEST_BACKEND="torch_tpu", TRANSFORMERS_TEST_DEVICE="tpu",
               TRANSFORMERS_TEST_DEVICE_SPEC="transformers_device_spec.py", HF_HUB_OFFLINE="1",
               TORCH_TPU_HOST_DEVICES="8")
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


def test_fsdp2_against_ddp_on_two_chips():
    """One FSDP test in the default suite: FSDP2 training (Transformers' fsdp plan) traces
    DDP's losses, grad norms and final weights step by step, 2 processes."""
    passed, out = run_mixins("Qwen3FsdpTest and test_fsdp2_plan_vs_ddp_0_untied")
    assert passed == {"Qwen3FsdpTest::test_fsdp2_plan_vs_ddp_0_untied"}, out[-4000:]


@pytest.mark.slow
def test_all_mixin_tests():
    passed, out = run_mixins("not Fsdp")
    assert passed == set(ALL), (sorted(set(ALL) - passed), out[-4000:])


@pytest.mark.slow
def test_all_fsdp_mixin_tests():
    passed, out = run_mixins("Fsdp")
    assert passed == set(ALL_FSDP), (sorted(set(ALL_FSDP) - passed), out[-4000:])
