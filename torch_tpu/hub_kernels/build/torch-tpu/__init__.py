"""The `kernels` library's view of torch_tpu's fused layers (build variant
"torch-tpu": noarch, backend tpu). The layers live in torch_tpu.hub_kernels.layers;
this file only exposes them under the name `kernels` looks up."""
from torch_tpu.hub_kernels import layers  # noqa: F401
