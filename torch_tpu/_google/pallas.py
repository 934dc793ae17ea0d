"""torch.tpu.pallas: JAX/Pallas kernels called from PyTorch. They need JAX and a
TPU (Pallas lowers to Mosaic, the TPU kernel compiler), which this project does
not use: both names raise NotImplementedError."""

__all__ = ["get_pallas_mesh", "jax_op"]

_WHY = ("needs JAX and TPU hardware (Pallas kernels compile with Mosaic for a TPU); this project runs "
        "without JAX: write the kernel as PyTorch ops, or a C kernel in runtime/kernels/")


def jax_op(*args, **kwargs):
    """Wraps a JAX function as a PyTorch op: not available here."""
    raise NotImplementedError(f"torch.tpu.pallas.jax_op {_WHY}")


def get_pallas_mesh(*args, **kwargs):
    """The JAX device mesh for Pallas kernels: not available here."""
    raise NotImplementedError(f"torch.tpu.pallas.get_pallas_mesh {_WHY}")
