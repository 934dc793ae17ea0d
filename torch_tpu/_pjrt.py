"""Finds the PJRT plugin for the pjrt driver before the C runtime starts.

The C driver reads TORCH_TPU_PJRT_PLUGIN (else TPU_LIBRARY_PATH). When
neither is set, this looks for an installed plugin package: libtpu (TPU VMs),
then XLA's CPU plugin (`xla-cpu-pjrt`, used by the tests), and sets the
variable for the runtime. For the CPU plugin it also asks for as many chips
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


def _tpu_on_pci():
    root = "/sys/bus/pci/devices"
    try:
        names = os.listdir(root)
    except OSError:
        return False
    for name in names:
        try:
            with open(os.path.join(root, name, "vendor")) as f:
                if int(f.read().strip(), 16) == 0x1AE0:
                    return True
        except (OSError, ValueError):
            continue
    return False


def selected_driver():
    value = os.environ.get("TORCH_TPU_DRIVER", "").strip()
    if value:
        return value  # the C runtime validates it
    return "pjrt" if _tpu_on_pci() else "host"


def configure():
    if selected_driver() != "pjrt":
        return
    if os.environ.get("TORCH_TPU_PJRT_PLUGIN", "").strip() or os.environ.get("TPU_LIBRARY_PATH", "").strip():
        return
    libtpu = _package_file("libtpu", "libtpu.so")
    if libtpu:
        os.environ["TORCH_TPU_PJRT_PLUGIN"] = libtpu
        return
    cpu = _package_file("xla_plugins.xla_cpu_pjrt", "xla_cpu_pjrt.so")
    if cpu:
        os.environ["TORCH_TPU_PJRT_PLUGIN"] = cpu
        if not os.environ.get("TORCH_TPU_PJRT_OPTIONS", "").strip():
            chips = os.environ.get("TORCH_TPU_HOST_DEVICES", "").strip() or "1"
            os.environ["TORCH_TPU_PJRT_OPTIONS"] = f"cpu_device_count={chips}"
