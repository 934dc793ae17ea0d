"""torch_tpu's fused layers as a local kernel repository of the Hugging Face
``kernels`` library (0.18), usable offline: no hub access, no download.

Through Transformers (5.23: ``use_kernels=True`` needs kernels >= 0.18.2):

    import torch_tpu.hub_kernels as hk

    model = AutoModelForCausalLM.from_pretrained(path, device_map="tpu", use_kernels=True,
                                                 kernel_config=hk.kernel_config())

Through ``kernels`` itself:

    from kernels import Mode, kernelize, use_kernel_mapping

    model = AutoModelForCausalLM.from_pretrained(path).to("tpu")
    with use_kernel_mapping(hk.kernel_mapping()):
        model = kernelize(model, mode=Mode.INFERENCE, device="tpu")

This directory is the repository: ``build/torch-tpu/`` is its one build
variant (noarch, backend "tpu", which `kernels` selects when the current
accelerator is tpu) with the ``metadata.json`` (whose digest covers the
variant's ``__init__.py``) and module that ``kernels.LocalLayerRepository``
loads; the layers are in ``layers.py`` (see its docstring for what each one
fuses and when).
"""
import functools
import logging
from pathlib import Path

__all__ = ["REPO_PATH", "LAYERS", "kernel_mapping", "kernel_config"]

#: The local kernel repository (this directory).
REPO_PATH = Path(__file__).resolve().parent

#: Layer names the repository provides.
LAYERS = ("RMSNorm", "rotary_pos_emb", "SwiGLUMLP", "MoEExperts")

_log = logging.getLogger(__name__)


def _names(layers):
    if isinstance(layers, str):
        layers = (layers,)
    layers = tuple(layers)
    unknown = [n for n in layers if n not in LAYERS]
    if unknown:
        raise ValueError(f"torch_tpu.hub_kernels has no layer {unknown[0]!r}; it has {', '.join(LAYERS)}")
    return layers


def _need(what, package):
    return ImportError(f"torch_tpu.hub_kernels.{what} needs the `{package}` package "
                       "(pip install kernels==0.18.3; transformers 5.23 for kernel_config)")


def kernel_mapping(layers=LAYERS):
    """{layer name: {"tpu": kernels.LocalLayerRepository}} for
    ``kernels.register_kernel_mapping`` / ``use_kernel_mapping``. Raises
    ImportError if the ``kernels`` package is not installed, ValueError for a
    name this repository does not have."""
    try:
        from kernels import LocalLayerRepository
    except ImportError as e:
        raise _need("kernel_mapping", "kernels") from e
    return {name: {"tpu": LocalLayerRepository(repo_path=REPO_PATH, layer_name=name)} for name in _names(layers)}


def kernel_config(layers=LAYERS):
    """A ``transformers.KernelConfig`` for ``from_pretrained(..., use_kernels=True,
    kernel_config=...)`` or ``model.set_use_kernels(True, kernel_config)``: each
    layer of `layers` that the model names (Transformers' ``kernel_layer_name``)
    gets this repository's layer on device "tpu", in every mode (inference,
    training, and after ``model.train()``/``eval()``); layers the model does not
    name are skipped, the model's other kernel layers keep their own forward,
    and a model on another device is left alone. Raises ImportError without
    ``kernels`` or ``transformers``, ValueError for a name this repository does
    not have."""
    names = _names(layers)
    return _config_class()(names)


@functools.lru_cache(maxsize=1)
def _config_class():
    try:
        import kernels  # noqa: F401
    except ImportError as e:
        raise _need("kernel_config", "kernels") from e
    try:
        from transformers import KernelConfig
    except ImportError as e:
        raise _need("kernel_config", "transformers") from e

    class TpuKernelConfig(KernelConfig):
        """Transformers' KernelConfig pointing at torch_tpu's local repository.

        Two steps differ from the base class, whose local-path form
        (``use_local_kernel=True``) Transformers 5.23 cannot load through
        from_pretrained (its register_kernel_replacements_and_fusions turns the
        "path:layer" strings into (string, metadata) tuples that
        create_compatible_mapping then splits as strings) and maps for the
        loading mode only (after ``model.train()`` the layers would silently
        fall back): the mapping keeps the layers the model names, and is built
        with kernel_mapping(), valid in every mode."""

        def __init__(self, layers=LAYERS):
            super().__init__({n: f"{REPO_PATH}:{n}" for n in _names(layers)}, use_local_kernel=True)

        def sanitize_kernel_mapping(self, model):
            self.store_registered_layer_names(model)
            named = set(self.registered_layer_names.values())
            kept = {n: r for n, r in self.kernel_mapping.items() if n in named}
            if not kept:
                _log.warning("torch_tpu.hub_kernels: %s names none of the layers %s; nothing is kernelized",
                             type(model).__name__, ", ".join(self.kernel_mapping))
            self.kernel_mapping = kept
            super().sanitize_kernel_mapping(model)

        def create_compatible_mapping(self, model, compile=False):
            # Every other layer the model names gets an entry with no tpu kernel: kernels then
            # keeps its forward quietly (as for a layer with no kernel for the device) instead of
            # warning "No kernel mapping found" (the mapping replaces Transformers' own here)
            mapping = {n: {} for n in set(self.registered_layer_names.values())}
            mapping.update(kernel_mapping(tuple(self.kernel_mapping)))
            self.kernel_mapping = mapping

    return TpuKernelConfig
