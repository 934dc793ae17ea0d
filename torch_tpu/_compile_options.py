"""Options of the "tpu" torch.compile backend:
`torch.compile(model, backend="tpu", options={...})`.

Each option's default comes from an environment variable where one exists
(read when a graph is compiled), so the option overrides the variable for one
torch.compile call. Unknown keys and values are errors that name the key and
the valid choices. `check_environment()` validates the variables at import.
"""
import contextlib
import dataclasses
import os
import threading

# option: (environment variable, {its text: option value}, option values, default, meaning)
_TABLE = {
    "graph": ("TORCH_TPU_GRAPH", {"c": "c", "eager": "eager"}, ("c", "eager"), "c",
              "'c': the C graph compiler; 'eager': run the ATen graphs op by op (comparisons)"),
    "codegen": ("TORCH_TPU_CODEGEN", {"auto": "auto", "1": True, "0": False}, ("auto", True, False), "auto",
                "generated C for fused groups: 'auto' when a C compiler works (else the tile interpreter), "
                "True: a missing compiler is an error, False: always the tile interpreter"),
    "gemm_epilogue": ("TORCH_TPU_GEMM_EPILOGUE", {"1": True, "0": False}, (True, False), True,
                      "mm/addmm may head fused groups with their pointwise consumers"),
    "conv_epilogue": ("TORCH_TPU_CONV_EPILOGUE", {"1": True, "0": False}, (True, False), True,
                      "convolutions and group norms may head fused groups with their pointwise consumers"),
    "profile": ("TORCH_TPU_GRAPH_PROFILE", {"1": True, "0": False}, (True, False), False,
                "time every step on the device queue (torch.tpu.graph_profile())"),
    "fuse_rotary": (None, None, (True, False), True,
                    "Transformers' apply_rotary_pos_emb becomes one torch.ops.tpu.rope call"),
}

# Accepted and ignored: torch.compile(mode=...) passes Inductor's mode names,
# which have no meaning here (no CUDA graphs, no autotuning).
MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


@dataclasses.dataclass(frozen=True)
class CompileOptions:
    graph: str
    codegen: object  # "auto", True or False
    gemm_epilogue: bool
    conv_epilogue: bool
    profile: bool
    fuse_rotary: bool

    @property
    def codegen_mode(self) -> int:
        """tpu_graph_set_codegen's mode: 0 off, 1 auto, 2 required."""
        return {False: 0, "auto": 1, True: 2}[self.codegen]


def _from_environment(key):
    var, texts, _, default, _ = _TABLE[key]
    text = os.environ.get(var, "").strip() if var else ""
    if not text:
        return default
    if text not in texts:
        raise ValueError(f"invalid value for {var}: {text!r} (expected one of {', '.join(repr(t) for t in texts)})")
    return texts[text]


def _same(a, b):
    return type(a) is type(b) and a == b  # True is not 1, "1" is not True


def _check(key, value, who):
    if key not in _TABLE:
        raise ValueError(f"{who}: unknown option {key!r}; valid options: {', '.join(sorted(_TABLE))}")
    allowed = _TABLE[key][2]
    if not any(_same(value, a) for a in allowed):
        raise ValueError(f"{who}: option {key!r} must be one of {', '.join(repr(a) for a in allowed)}, got {value!r}")
    return value


def parse_option(key, value, who="torch.compile(backend='tpu')"):
    """The option value for `key`: one of the option's values, or (a string)
    the text its environment variable would hold ("0"/"1", "c", "auto").
    Unknown keys and values raise ValueError naming `who`, the key and the
    valid choices."""
    texts = _TABLE[key][1] if key in _TABLE else None
    if isinstance(value, str) and texts and value.strip() in texts:
        return texts[value.strip()]
    return _check(key, value, who)


_SCOPES = threading.local()  # a stack of option dicts (torch.tpu.compiler.custom_compiler_options)


@contextlib.contextmanager
def scoped(options):
    """Options (already parsed) for the graphs compiled inside the block, over
    the environment and outer blocks, under torch.compile(options=...)."""
    stack = _SCOPES.__dict__.setdefault("stack", [])
    stack.append(dict(options))
    try:
        yield
    finally:
        stack.pop()


def compile_options(options=None) -> CompileOptions:
    """The options of one torch.compile call: `options` over the enclosing
    custom_compiler_options blocks over the environment."""
    merged = {}
    for scope in _SCOPES.__dict__.get("stack", []):
        merged.update(scope)
    for key, value in dict(options or {}).items():
        merged[key] = _check(key, value, "torch.compile(backend='tpu')")
    return CompileOptions(**{k: merged[k] if k in merged else _from_environment(k) for k in _TABLE})


def check_environment() -> None:
    """Raises ValueError naming the variable and its value if one of the
    options' environment variables holds an unknown value."""
    for key in _TABLE:
        _from_environment(key)

