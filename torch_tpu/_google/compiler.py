"""torch.tpu.compiler.custom_compiler_options: options for the graphs that
torch.compile(backend="tpu") compiles inside the block.

    with torch.tpu.compiler.custom_compiler_options({"graph": "eager"}):
        y = compiled(x)            # compiled (first call) with graph="eager"

Keys are this backend's torch.compile options (torch_tpu/_compile_options.py:
graph, codegen, gemm_epilogue, conv_epilogue, profile, fuse_rotary), with
their typed values or their environment-variable texts ("0"/"1", "c"/"eager", "auto"); unknown
keys raise ValueError. Keys starting with "xla_" are XLA compiler flags, which
no driver here passes to a compiler: they are accepted and ignored, with one
warning. Nested blocks merge, the inner one winning; options given to
torch.compile(options=...) win over the blocks. A graph keeps the options it
was compiled with: eager ops, and graphs compiled before the block, are not
affected.
"""
import contextlib
import warnings

import torch

from .. import _compile_options

__all__ = ["custom_compiler_options"]

_WARNED = set()


@contextlib.contextmanager
def custom_compiler_options(options):
    if torch.compiler.is_compiling():
        raise RuntimeError("torch.tpu.compiler.custom_compiler_options cannot be entered inside a compiled "
                           "function: a graph has one set of options")
    if not isinstance(options, dict):
        raise TypeError(f"custom_compiler_options: expected a dict of option -> value, got {type(options).__name__}")
    ours, ignored = {}, []
    for key, value in options.items():
        if isinstance(key, str) and key.startswith("xla_"):
            ignored.append(key)
        else:
            ours[key] = _compile_options.parse_option(key, value, "custom_compiler_options")
    new = [k for k in ignored if k not in _WARNED]
    if new:
        _WARNED.update(new)
        warnings.warn(f"custom_compiler_options: XLA options {', '.join(new)} are ignored (no driver of "
                      "torch_tpu passes XLA flags to a compiler)", RuntimeWarning, stacklevel=3)
    with _compile_options.scoped(ours):
        yield
