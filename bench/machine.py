"""The machine's limits, measured by the harness itself.

csrc/machine.c is compiled at bench time with the system C compiler (``$CC`` or ``cc``)
into a temporary directory and run as a subprocess, once per measurement:

- fp32 FMA peak: 8 independent ``vfmadd`` chains on ymm registers (AVX2+FMA), on 1 thread
  and on one pthread per core. This is the peak the "% of peak" columns divide by.
- extra compute limits when the CPU has them: AVX-512F fp32 FMA (12 zmm chains) and
  AVX512_BF16 ``vdpbf16ps`` (2 multiply-adds per fp32 lane), both of which stock PyTorch
  (oneDNN) can use and the tpu host kernels currently do not.
- memory read bandwidth: sum a 1 GiB float array (AVX2 loads, 4 accumulators; transparent
  huge pages requested), 1 thread and all threads (contiguous slices, first-touched by the
  thread that reads them). The VM's bandwidth varies between runs (seen: 18-28 GB/s on
  1 thread, 34-40 GB/s on 2), so a GEMV may beat the figure of a given run.
"""
import os
import platform
import shutil
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "csrc", "machine.c")


def cpu_info():
    model, flags = None, set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, val = line.partition(":")
                key = key.strip()
                if key == "model name" and model is None:
                    model = val.strip()
                elif key == "flags" and not flags:
                    flags = set(val.split())
    except OSError:
        pass
    model = model or platform.processor() or "unknown"
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    mem_gib = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem_gib = int(line.split()[1]) / 2**20
    except OSError:
        pass
    isa = [f for f in ("avx2", "fma", "f16c", "avx512f", "avx512_bf16", "amx_bf16") if f in flags]
    return {"cpu_model": model, "cores": cores, "isa": isa, "mem_gib": mem_gib}


def load_average():
    try:
        return list(os.getloadavg())
    except OSError:
        return None


class MachineBench:
    """Compiles csrc/machine.c once; call the measurement methods; close() removes it."""

    def __init__(self):
        cc = os.environ.get("CC", "cc")
        path = shutil.which(cc) or shutil.which("gcc") or shutil.which("clang")
        if path is None:
            raise SystemExit(
                f"bench: no C compiler found (tried $CC={cc!r}, gcc, clang). The machine-limit "
                "microbenchmarks are compiled at bench time; install one (e.g. apt-get install gcc) "
                "or run with --skip machine.")
        self.tmp = tempfile.mkdtemp(prefix="torch_tpu_bench_")
        self.exe = os.path.join(self.tmp, "machine")
        cmd = [path, "-O2", "-pthread", "-o", self.exe, SOURCE]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"bench: compiling {SOURCE} failed ({' '.join(cmd)}):\n{r.stderr}")
        self.cc = path

    def close(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _run(self, *args):
        r = subprocess.run([self.exe, *map(str, args)], capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise RuntimeError(f"machine {' '.join(map(str, args))} failed: {r.stderr.strip()}")
        for line in r.stdout.splitlines():
            if line.startswith("RESULT "):
                return float(line.split()[1])
        raise RuntimeError(f"machine {' '.join(map(str, args))}: no RESULT line in {r.stdout!r}")

    def peak(self, kind, threads, seconds):
        """GFLOP/s (all threads together), best of 5 runs of about seconds/5 each."""
        return self._run(kind, threads, seconds)

    def bandwidth(self, threads, mib=1024, repeats=5):
        """GB/s (1e9 bytes/s) reading a mib-MiB float array, best of repeats-1 passes."""
        return self._run("bw", threads, mib, repeats)


PEAKS = (
    ("fma", "fp32 FMA peak, 8 ymm chains (AVX2+FMA)", "fma"),
    ("fma512", "fp32 FMA peak, 12 zmm chains (AVX-512F)", "avx512f"),
    ("bf16", "bf16 dot peak, vdpbf16ps zmm (AVX512_BF16)", "avx512_bf16"),
)


def measure(cores, quick=False, log=print):
    """One pass of every limit this CPU supports: {key: value} (GFLOP/s, GB/s)."""
    info = cpu_info()
    mb = MachineBench()
    secs = 0.6 if quick else 1.0
    out = {"cc": mb.cc}
    try:
        for key, label, need in PEAKS:
            if need not in info["isa"] or (quick and key != "fma"):
                continue
            one = mb.peak(key, 1, secs)
            alln = mb.peak(key, cores, secs) if cores > 1 else one
            out[f"{key}_gflops_1core"], out[f"{key}_gflops_all"] = one, alln
            log(f"  {label}: 1 core {one:.1f}, {cores} cores {alln:.1f} GFLOP/s")
        reps = 4 if quick else 10
        one = mb.bandwidth(1, 1024, reps)
        alln = mb.bandwidth(cores, 1024, reps) if cores > 1 else one
        out["bw_gbs_1thread"], out["bw_gbs_all"] = one, alln
        log(f"  read bandwidth: 1 thread {one:.1f}, {cores} threads {alln:.1f} GB/s")
    finally:
        mb.close()
    return out


def merge(passes):
    """Best value of each limit over several passes (a limit is a maximum)."""
    out = {}
    for p in passes:
        for k, v in p.items():
            out[k] = v if k not in out or isinstance(v, str) else max(out[k], v)
    return out


def denominators(vals, cores):
    """(peak GFLOP/s, bandwidth GB/s, notes) used for '% of peak' and rooflines.

    A limit measured on all cores can only come out low because something else was
    running: with another process on one core, the all-core FMA run measures one core.
    So the peak is max(all-core, cores x 1-core x 0.95) (FMA throughput scales linearly
    with cores: no shared resource), and the bandwidth max(all-thread, 1-thread)."""
    notes = []
    peak = vals.get("fma_gflops_all")
    one = vals.get("fma_gflops_1core")
    if peak and one and peak < 0.95 * cores * one:
        notes.append(f"the all-core FMA run measured {peak:.0f} GFLOP/s, less than {cores} x the 1-core "
                     f"{one:.0f} (other processes were running): '% of peak' uses {cores} x 1-core = "
                     f"{cores * one:.0f} GFLOP/s")
        peak = cores * one
    bw = vals.get("bw_gbs_all")
    bw1 = vals.get("bw_gbs_1thread")
    if bw and bw1 and bw < bw1:
        notes.append(f"the all-thread bandwidth run measured {bw:.1f} GB/s, less than 1 thread's {bw1:.1f} "
                     "(other processes were running): the roofline uses the 1-thread value")
        bw = bw1
    return peak, bw, notes


def table_rows(vals, cores):
    rows = []
    for key, label, _ in PEAKS:
        if f"{key}_gflops_1core" not in vals:
            continue
        rows.append((f"{label}, 1 core", vals[f"{key}_gflops_1core"], "GFLOP/s", ""))
        rows.append((f"{label}, {cores} cores", vals[f"{key}_gflops_all"], "GFLOP/s",
                     "" if key == "fma" else "used by the tpu bf16 x bf16 matrix products" if key == "bf16"
                     else "not used by the tpu kernels"))
    if "bw_gbs_1thread" in vals:
        rows.append(("memory read bandwidth (sum of 1 GiB), 1 thread", vals["bw_gbs_1thread"], "GB/s", ""))
        rows.append((f"memory read bandwidth (sum of 1 GiB), {cores} threads", vals["bw_gbs_all"], "GB/s", ""))
    return rows


class Contention:
    """How much of the machine other processes used between start() and stop():
    (all CPUs' busy time from /proc/stat - this process's and its children's CPU time)
    / (wall time x cores). On a shared machine, a high value means the numbers are low
    and noisy (torch's OpenMP GEMMs suffer most: a descheduled thread stalls each op)."""

    def __init__(self, cores):
        self.cores = cores
        self.start()

    @staticmethod
    def _snap():
        try:
            with open("/proc/stat") as f:
                v = [int(x) for x in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        hz = os.sysconf("SC_CLK_TCK")
        busy = (v[0] + v[1] + v[2] + v[5] + v[6]) / hz  # user nice system irq softirq
        steal = (v[7] if len(v) > 7 else 0) / hz
        t = os.times()
        return busy, steal, t.user + t.system + t.children_user + t.children_system, t.elapsed

    def start(self):
        self.s = self._snap()

    def stop(self):
        """{'others_pct': ..., 'steal_pct': ...} since start() (None if unknown)."""
        e = self._snap()
        if not self.s or not e or e[3] <= self.s[3]:
            return {"others_pct": None, "steal_pct": None}
        wall = (e[3] - self.s[3]) * self.cores
        others = (e[0] - self.s[0]) - (e[2] - self.s[2])
        return {"others_pct": max(0.0, 100 * others / wall), "steal_pct": 100 * (e[1] - self.s[1]) / wall}
