"""Transformers' own tensor- and expert-parallel test mixins on tiny Qwen3 and
Qwen3-MoE models, for whatever device TRANSFORMERS_TEST_DEVICE names.

Not collected by the suite's own run (no test_ prefix): tests/test_hf_parallel.py
runs it in a fresh pytest process with

    TRANSFORMERS_TEST_BACKEND=torch_tpu TRANSFORMERS_TEST_DEVICE=tpu \\
    TRANSFORMERS_TEST_DEVICE_SPEC=transformers_device_spec.py   (from tests/)

because transformers.testing_utils reads those variables once, at import. The
mixins (TensorParallelTesterMixin, ExpertParallelTesterMixin) are Transformers'
files, unchanged, from its source distribution (hf_distributed_testing_utils).
What this file adds is what Transformers' per-model test files would: a model
tester giving the tiny config and the classes. Qwen3 and Qwen3-MoE are among the
model types the mixins enable for their distributed tests.
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_distributed_testing_utils as hdu  # noqa: E402

hdu.install_package()

import torch  # noqa: E402
from transformers import (  # noqa: E402
    Qwen3Config,
    Qwen3ForCausalLM,
    Qwen3Model,
    Qwen3MoeConfig,
    Qwen3MoeForCausalLM,
    Qwen3MoeModel,
)

from transformers_tests.test_expert_parallel_mixin import ExpertParallelTesterMixin  # noqa: E402
from transformers_tests.test_fsdp_mixin import FSDPTesterMixin  # noqa: E402
from transformers_tests.test_tensor_parallel_mixin import TensorParallelTesterMixin  # noqa: E402


class TinyTester:
    """The two calls the mixins make on a model tester, with a tiny config (vocab 99,
    as Transformers' testers use: it does not divide by the world size)."""

    def __init__(self, config_class, causal_lm_class, **config):
        self.config_class, self.causal_lm_class, self.config = config_class, causal_lm_class, config

    def get_config(self):
        return self.config_class(**self.config)

    def prepare_config_and_inputs_for_common(self):
        g = torch.Generator().manual_seed(0)
        ids = torch.randint(0, self.config["vocab_size"], (2, 7), generator=g)
        return self.get_config(), {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


COMMON = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              head_dim=8, max_position_embeddings=128, rms_norm_eps=1e-6, tie_word_embeddings=False)


class Qwen3ParallelTest(TensorParallelTesterMixin, unittest.TestCase):
    all_model_classes = (Qwen3Model, Qwen3ForCausalLM)
    model_tester = TinyTester(Qwen3Config, Qwen3ForCausalLM, intermediate_size=37, **COMMON)


class Qwen3MoeParallelTest(TensorParallelTesterMixin, ExpertParallelTesterMixin, unittest.TestCase):
    all_model_classes = (Qwen3MoeModel, Qwen3MoeForCausalLM)
    model_tester = TinyTester(Qwen3MoeConfig, Qwen3MoeForCausalLM, intermediate_size=37, moe_intermediate_size=16,
                              num_experts=4, num_experts_per_tok=2, decoder_sparse_step=1, **COMMON)


class Qwen3FsdpTest(FSDPTesterMixin, unittest.TestCase):
    model_tester = Qwen3ParallelTest.model_tester


class Qwen3MoeFsdpTest(FSDPTesterMixin, unittest.TestCase):
    model_tester = Qwen3MoeParallelTest.model_tester
