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
    from torch_tpu import _C

    try:
        driver = _C.selected_driver()
    except ValueError:
        return  # the runtime's start reports it
    if driver != "pjrt":
        return
    if os.environ.get("TORCH_TPU_PJRT_PLUGIN", "").strip() or os.environ.get("TPU_LIBRARY_PATH", "").strip():
        return
    libtpu = _package_file("libtpu", "libtpu.so")
    cpu = _package_file("xla_plugins.xla_cpu_pjrt", "xla_cpu_pjrt.so")
    if libtpu and (_C.tpu_present() or not cpu):  # without a TPU libtpu says "no TPU found"
        os.environ["TORCH_TPU_PJRT_PLUGIN"] = libtpu
        return
    if cpu:
        os.environ["TORCH_TPU_PJRT_PLUGIN"] = cpu
        if not os.environ.get("TORCH_TPU_PJRT_OPTIONS", "").strip():
            chips = os.environ.get("TORCH_TPU_HOST_DEVICES", "").strip() or "1"
            os.environ["TORCH_TPU_PJRT_OPTIONS"] = f"cpu_device_count={chips}"
