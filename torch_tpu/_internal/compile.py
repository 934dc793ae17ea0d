"""torch_tpu._internal.compile.TpuBackend: Google's backend object,

    torch.compile(model, backend=TpuBackend())        # same as backend="tpu"

An instance is this project's "tpu" dynamo backend (torch_tpu/_dynamo_backend.py):
torch.compile(..., options={...}) reaches it with this backend's options
(_compile_options.py). The constructor's debug, dynamism and enable_serialization
are accepted for Google's signature: dynamism is unused there too; debug=True
raises NotImplementedError (Google dumps its XLA graphs); serialization of
compiled artifacts is not done by this backend either way.
"""

__all__ = ["TpuBackend"]


class TpuBackend:
    def __init__(self, debug: bool = False, dynamism: bool = False, enable_serialization: bool = True):
        if debug:
            raise NotImplementedError("TpuBackend(debug=True): this backend has no XLA graph dumps; see "
                                      "torch.tpu.compile_stats() and TORCH_TPU_GRAPH_PROFILE instead")
        self._dynamism = dynamism
        self._enable_serialization = enable_serialization

    def __call__(self, graph_module, example_inputs, **kwargs):
        from torch_tpu._dynamo_backend import tpu_backend

        return tpu_backend(graph_module, example_inputs, **kwargs)
