"""torch.tpu.profiler.TpuProfilerConfig: the profiler options of Google's
TorchTPU as a torch.profiler experimental config,

    torch.profiler.profile(..., experimental_config=TpuProfilerConfig(run_dir="/tmp/trace"))

A thin, checked configuration object: the options are kept as attributes and
also encoded, "key:value" pairs joined by commas, in PyTorch's
custom_profiler_config string (what a profiler backend reads). What the
profiler records on tpu is the profiler's business, not this object's.
"""
import os

import torch

__all__ = ["TpuProfilerConfig"]

_STABLE = ("host_tracer_level", "device_tracer_level", "python_tracer_level", "run_dir", "worker_rank",
           "check_experimental_options")


def _text(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    raise TypeError(f"TpuProfilerConfig: experimental option values must be int, bool or str, got {value!r}")


class TpuProfilerConfig(torch.profiler._ExperimentalConfig):
    """Tracer levels (host 0-3, device 0-1, python 0-1), the directory the
    trace goes to (run_dir; None: the profiler's own default), a worker rank
    suffix, and free-form experimental options (int, bool or str values)."""

    def __init__(self, *, host_tracer_level: int = 2, device_tracer_level: int = 1, python_tracer_level: int = 0,
                 run_dir=None, worker_rank: str | None = None, experimental_options=None,
                 check_experimental_options: bool = True):
        for name, value, top in (("host_tracer_level", host_tracer_level, 3),
                                 ("device_tracer_level", device_tracer_level, 1),
                                 ("python_tracer_level", python_tracer_level, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= top:
                raise ValueError(f"TpuProfilerConfig: {name} must be an integer in [0, {top}], got {value!r}")
        if worker_rank is not None:
            if not isinstance(worker_rank, str):
                raise TypeError(f"TpuProfilerConfig: worker_rank must be a string, got {type(worker_rank).__name__}")
            if ":" in worker_rank or "," in worker_rank:
                raise ValueError(f"TpuProfilerConfig: worker_rank may not contain ':' or ',': {worker_rank!r}")
        options = dict(experimental_options or {})
        for key in options:
            if key in _STABLE or ":" in key or "," in key:
                raise ValueError(f"TpuProfilerConfig: bad experimental option name {key!r} (a stable option's "
                                 "name, or it contains ':' or ',')")
        self.host_tracer_level = host_tracer_level
        self.device_tracer_level = device_tracer_level
        self.python_tracer_level = python_tracer_level
        self.run_dir = os.fspath(run_dir) if run_dir is not None else None
        self.worker_rank = worker_rank
        self.experimental_options = options
        self.check_experimental_options = check_experimental_options
        parts = [f"host_tracer_level:{host_tracer_level}", f"device_tracer_level:{device_tracer_level}",
                 f"python_tracer_level:{python_tracer_level}"]
        if self.run_dir is not None:
            parts.append(f"run_dir:{self.run_dir}")
        if worker_rank is not None:
            parts.append(f"worker_rank:{_text(worker_rank)}")
        if options:
            parts += [f"{k}:{_text(v)}" for k, v in options.items()]
            parts.append(f"check_experimental_options:{_text(bool(check_experimental_options))}")
        self.config_string = ",".join(parts)
        super().__init__(custom_profiler_config=self.config_string)
