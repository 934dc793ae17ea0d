"""torch_tpu's fused layers as a local kernel repository of the Hugging Face
``kernels`` library (0.17), usable offline: no hub access, no download.

    from kernels import Mode, kernelize, use_kernel_mapping
    import torch_tpu.hub_kernels as hk

    model = AutoModelForCausalLM.from_pretrained(path).to("tpu")
    with use_kernel_mapping(hk.kernel_mapping()):
        model = kernelize(model, mode=Mode.INFERENCE, device="tpu")

This directory is the repository: ``build/torch-tpu/`` is its one build
variant (noarch, backend "tpu", which `kernels` selects when
``torch.backends.tpu`` exists) with the ``metadata.json`` and module that
``kernels.LocalLayerRepository`` loads; the layers are in ``layers.py``
(see its docstring for what each one fuses and when).
"""
from pathlib import Path

__all__ = ["REPO_PATH", "LAYERS", "kernel_mapping"]

#: The local kernel repository (this directory).
REPO_PATH = Path(__file__).resolve().parent

#: Layer names the repository provides.
LAYERS = ("RMSNorm", "rotary_pos_emb", "SwiGLUMLP", "MoEExperts")


def kernel_mapping(layers=LAYERS):
    """{layer name: {"tpu": kernels.LocalLayerRepository}} for
    ``kernels.register_kernel_mapping`` / ``use_kernel_mapping``. Raises
    ImportError if the ``kernels`` package is not installed, ValueError for a
    name this repository does not have."""
    try:
        from kernels import LocalLayerRepository
    except ImportError as e:
        raise ImportError("torch_tpu.hub_kernels.kernel_mapping needs the `kernels` package "
                          "(pip install kernels==0.17.2)") from e
    if isinstance(layers, str):
        layers = (layers,)
    unknown = [n for n in layers if n not in LAYERS]
    if unknown:
        raise ValueError(f"torch_tpu.hub_kernels has no layer {unknown[0]!r}; it has {', '.join(LAYERS)}")
    return {name: {"tpu": LocalLayerRepository(repo_path=REPO_PATH, layer_name=name)} for name in layers}
