"""Weight-only int8/int4 quantization at load time through Transformers' quantizer registry:

    from torch_tpu.quant import WeightOnlyConfig
    model = AutoModelForCausalLM.from_pretrained(path, device_map="tpu",
                                                 quantization_config=WeightOnlyConfig(bits=4))

The checkpoint's float weights load as usual, then every nn.Linear except those Transformers
keeps in float (the output embedding, tied weights: its get_keys_to_not_convert) or those named
in ``modules_to_not_convert`` becomes a torch_tpu.quant.QuantLinear (torch_tpu.quant.quantize_weights).
Imported lazily by torch_tpu.quant (Transformers' import is slow).
"""
from transformers.quantizers.auto import (AUTO_QUANTIZATION_CONFIG_MAPPING, AUTO_QUANTIZER_MAPPING,
                                          register_quantization_config, register_quantizer)
from transformers.quantizers.base import HfQuantizer, get_keys_to_not_convert
from transformers.utils.quantization_config import QuantizationConfigMixin

from . import quant

METHOD = "torch_tpu_weight_only"


class WeightOnlyConfig(QuantizationConfigMixin):
    """int8 (``bits=8``, GGUF Q8_0 blocks) or int4 (``bits=4``, Q4_1 blocks) weights in groups of
    32 with float16 scales; activations stay float (computed in float32)."""

    def __init__(self, bits: int = 8, modules_to_not_convert=None, **kwargs):
        if bits not in (8, 4):
            raise ValueError(f"WeightOnlyConfig: bits must be 8 or 4, got {bits!r}")
        self.quant_method = METHOD
        self.bits = bits
        self.modules_to_not_convert = list(modules_to_not_convert) if modules_to_not_convert else None


class WeightOnlyQuantizer(HfQuantizer):
    requires_calibration = False

    def validate_environment(self, *args, device_map=None, **kwargs):
        if self.pre_quantized:
            raise ValueError("torch_tpu's weight-only quantization quantizes float checkpoints at load; "
                             "this checkpoint says it is already quantized with it, which is not a saved format")

    def _process_model_after_weight_loading(self, model, **kwargs):
        skip = self.quantization_config.modules_to_not_convert
        if skip is None:
            skip = get_keys_to_not_convert(model)
        model.torch_tpu_quant_report = quant.quantize_weights(model, self.quantization_config.bits, skip)
        return model

    def is_serializable(self):
        return False

    @property
    def is_compileable(self):
        return True

    @property
    def is_trainable(self):
        return False


if METHOD not in AUTO_QUANTIZATION_CONFIG_MAPPING:
    register_quantization_config(METHOD)(WeightOnlyConfig)
if METHOD not in AUTO_QUANTIZER_MAPPING:
    register_quantizer(METHOD)(WeightOnlyQuantizer)
