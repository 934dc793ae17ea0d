"""Finds the PJRT plugin for the pjrt driver before the C runtime starts.

The C driver reads TORCH_TPU_PJRT_PLUGIN (else TPU_LIBRARY_PATH). When
neither is set, this looks for an installed plugin package: libtpu when a TPU
is on the PCI bus (TPU VMs), else XLA's CPU plugin (`xla-cpu-pjrt`, used by
the tests), else libtpu (which then reports that no TPU was found), and sets
the variable for the runtime. For the CPU plugin it also asks for as many chips
as TORCH_TPU_HOST_DEVICES says (default 1) unless TORCH_TPU_PJRT_OPTIONS is
set: XLA's CPU client otherwise makes one device per core."""
import importlib.util
import os


def _package_file(module, filename):
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        path = os.path.join(folder, filename)
        if os.path.isfile(path):
            return path
    return None


def configure():
    """Sets the variables the runtime's start reads; returns their names, so
    that the caller can remove them once it has started (child processes
    then choose for themselves, e.g. with another TORCH_TPU_HOST_DEVICES)."""
    set_here = []
    _configure(set_here)
    return set_here


def _setenv(set_here, name, value):
    os.environ[name] = value
    set_here.append(name)


def _configure(set_here):
    from torch_tpu import _C

    try:
        driver = _C.selected_driver()
    except ValueError:
        return  # the runtime's start reports it
    if driver != "pjrt":
        return
    plugin = os.environ.get("TORCH_TPU_PJRT_PLUGIN", "").strip() or os.environ.get("TPU_LIBRARY_PATH", "").strip()
    cpu = _package_file("xla_plugins.xla_cpu_pjrt", "xla_cpu_pjrt.so")
    if not plugin:
        libtpu = _package_file("libtpu", "libtpu.so")
        if libtpu and (_C.tpu_present() or not cpu):  # without a TPU libtpu says "no TPU found"
            _setenv(set_here, "TORCH_TPU_PJRT_PLUGIN", libtpu)
            return
        if not cpu:
            return  # the runtime's start reports that no plugin was found
        plugin = cpu
        _setenv(set_here, "TORCH_TPU_PJRT_PLUGIN", cpu)
    # XLA's CPU plugin, found or named: its chip count (else one per core).
    is_cpu_plugin = os.path.basename(plugin) == "xla_cpu_pjrt.so" or (
        cpu is not None and os.path.realpath(plugin) == os.path.realpath(cpu))
    if is_cpu_plugin and not os.environ.get("TORCH_TPU_PJRT_OPTIONS", "").strip():
        chips = os.environ.get("TORCH_TPU_HOST_DEVICES", "").strip() or "1"
        _setenv(set_here, "TORCH_TPU_PJRT_OPTIONS", f"cpu_device_count={chips}")
