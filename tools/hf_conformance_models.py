"""Transformers' ModelTesterMixin and ConfigTester run against tiny models of several
architectures (tools/hf_conformance.py copies this file into its cache as
tests/models/conformance/test_modeling_conformance.py, next to Transformers' own
tests/test_modeling_common.py of the installed version).

Transformers' per-model test folders (tests/models/<arch>/) are not in its PyPI
source distribution; where they are absent this file gives each architecture the
model tester those folders would: a tiny random config (2 layers, hidden 32, 4
heads, 2 key/value heads, vocabulary 99) and the common inputs (input_ids and an
attention mask of batch 3 x 7 tokens; Gemma 3 with images: see
Gemma3MultimodalModelTester). One unittest class per architecture,
named <Arch>ConformanceTest, so `-k LlamaConformanceTest` selects one.
"""
import os
import unittest

import transformers
from transformers.models.auto import configuration_auto, modeling_auto

from ...test_configuration_common import ConfigTester
from ...test_modeling_common import ModelTesterMixin, floats_tensor, ids_tensor, random_attention_mask

# model_type -> extra config values (beyond the common tiny ones below)
ARCHITECTURES = {
    "llama": {},
    "mistral": {"sliding_window": 4},
    "qwen2": {},
    "qwen3": {},
    "gemma": {},
    "gemma2": {"sliding_window": 4},
    "gemma3_text": {"sliding_window": 4},
    "gemma3": {"sliding_window": 4},  # image and text (SigLIP tower, avg_pool2d projector): Gemma3MultimodalModelTester
    "phi3": {},
    "olmo2": {},
    "starcoder2": {"sliding_window": 4},
    "qwen3_moe": {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16, "decoder_sparse_step": 1},
    # (expert widths a multiple of 4 floats: torch's CPU grouped GEMM wants 16-byte strides)
    "mixtral": {"num_local_experts": 4, "num_experts_per_tok": 2, "intermediate_size": 32},
    "gpt2": {"n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 512},
    # (64 positions: with 512 the position table is most of the model, and test_model_parallelism's
    # device_map="auto" split at 70% puts every module on the second device)
    "bert": {"type_vocab_size": 2, "max_position_embeddings": 64},
}

COMMON = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              head_dim=8, intermediate_size=37, max_position_embeddings=512, pad_token_id=0, bos_token_id=1,
              eos_token_id=2, attention_dropout=0.0, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
              initializer_range=0.02)

# the task heads exercised per architecture (where the architecture has one)
# (the base model and its language-model head: every common test loops over these classes, so
# each more head costs run time on this 2-core machine)
HEADS = ("MODEL_MAPPING_NAMES", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_MASKED_LM_MAPPING_NAMES")


def model_classes(model_type):
    out = []
    for mapping in HEADS:
        name = getattr(modeling_auto, mapping).get(model_type)
        if isinstance(name, str) and hasattr(transformers, name):
            out.append(getattr(transformers, name))
    return tuple(dict.fromkeys(out))[:2]


class TinyModelTester:
    """What ModelTesterMixin reads from `self.model_tester`."""

    batch_size = 3
    seq_length = 7
    is_training = True
    use_labels = True
    num_labels = 3
    num_choices = 4

    def __init__(self, parent, model_type):
        self.parent = parent
        self.model_type = model_type
        self.config_class = getattr(transformers, configuration_auto.CONFIG_MAPPING_NAMES[model_type])
        self.kwargs = dict(COMMON, **ARCHITECTURES[model_type])
        config = self.get_config()
        self.vocab_size = config.vocab_size
        self.hidden_size = config.hidden_size
        self.num_hidden_layers = config.num_hidden_layers
        self.num_attention_heads = config.num_attention_heads

    def get_config(self):
        config = self.config_class(**self.kwargs)
        config.num_labels = self.num_labels
        return config

    def prepare_config_and_inputs_for_common(self):
        input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size)
        input_ids[input_ids < 3] = 3  # no pad/bos/eos inside the sequence
        mask = random_attention_mask([self.batch_size, self.seq_length])
        return self.get_config(), {"input_ids": input_ids, "attention_mask": mask}


class Gemma3MultimodalModelTester(TinyModelTester):
    """Gemma 3 with its vision tower: 16x16 images in 4x4 patches, pooled 2x2 by the
    projector's avg_pool2d to 4 image tokens, placed after the first text token."""

    seq_length = 12
    image_token = 4  # below the vocabulary the resize tests shrink to
    mm_tokens = 4

    def __init__(self, parent, model_type):
        self.parent = parent
        self.model_type = model_type
        self.config_class = transformers.Gemma3Config
        self.text_config = {k: v for k, v in COMMON.items() if "prob" not in k}
        self.text_config["sliding_window"] = 4
        self.vision_config = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
                                  image_size=16, patch_size=4, num_channels=3, vision_use_head=False)
        self.kwargs = dict(text_config=self.text_config, vision_config=self.vision_config,
                           mm_tokens_per_image=self.mm_tokens, image_token_index=self.image_token,
                           boi_token_index=5, eoi_token_index=6)
        self.vocab_size = COMMON["vocab_size"]
        self.hidden_size = COMMON["hidden_size"]
        self.num_hidden_layers = COMMON["num_hidden_layers"]
        self.num_attention_heads = COMMON["num_attention_heads"]

    def get_config(self):
        return self.config_class(**self.kwargs)

    def prepare_config_and_inputs_for_common(self):
        input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size)
        input_ids[input_ids < 7] = 7  # no pad/bos/eos/image/boi/eoi token in the text
        input_ids[:, 1:1 + self.mm_tokens] = self.image_token
        token_type_ids = (input_ids == self.image_token).long()
        mask = random_attention_mask([self.batch_size, self.seq_length])
        mask[:, :1 + self.mm_tokens] = 1
        pixel_values = floats_tensor([self.batch_size, 3, 16, 16])
        return self.get_config(), {"input_ids": input_ids, "attention_mask": mask, "token_type_ids": token_type_ids,
                                   "pixel_values": pixel_values}


def _make(model_type):
    if model_type == "gemma3":
        classes = (transformers.Gemma3Model, transformers.Gemma3ForConditionalGeneration)
        tester = Gemma3MultimodalModelTester
    else:
        classes = model_classes(model_type)
        tester = TinyModelTester
    name = "".join(p.capitalize() for p in model_type.split("_")) + "ConformanceTest"

    def setUp(self):
        self.model_tester = tester(self, model_type)
        self.config_tester = ConfigTester(self, config_class=self.model_tester.config_class,
                                          has_text_modality=model_type != "gemma3", **self.model_tester.kwargs)

    def test_config(self):
        self.config_tester.run_common_tests()

    return name, type(name, (ModelTesterMixin, unittest.TestCase),
                      {"all_model_classes": classes, "setUp": setUp, "test_config": test_config,
                       "_is_composite": model_type == "gemma3"})


# HFC_ARCHS (comma-separated model types) limits the classes made, so that collecting one
# architecture does not expand every other one's parameterized tests
for _t in (os.environ["HFC_ARCHS"].split(",") if os.environ.get("HFC_ARCHS") else ARCHITECTURES):
    _name, _cls = _make(_t)
    globals()[_name] = _cls
del _t, _name, _cls
