"""Transformers' and Diffusers' own test suites run on device "tpu" and on the CPU,
reported as conformance: of the tests that pass on the CPU, how many pass on tpu.

    python tools/hf_conformance.py transformers [--transformers-src DIR] [--archs llama,...]
    python tools/hf_conformance.py diffusers   [--diffusers-src DIR]  [--families flux,...]
    python tools/hf_conformance.py report      # rewrites docs/*_conformance.md from the results

Test files (never committed; assembled into build/hf-conformance/, which git ignores):

- Transformers: the top-level tests/*.py of the PyPI source distribution of the
  installed version (tests/hf_distributed_testing_utils.py `fetch` downloads it;
  it holds test_modeling_common.py's ModelTesterMixin and test_configuration_common.py's
  ConfigTester), plus, from --transformers-src (a checkout of the matching release:
  `git clone --depth 1 -b v5.23.0 https://github.com/huggingface/transformers`), the
  per-model folders tests/models/<arch>/ and the helper folders the common tests import
  (generation/, exporters/, utils/, causal_lm_tester.py). Without a checkout (the
  source distribution lacks those folders) each architecture runs
  tools/hf_conformance_models.py: Transformers' version-matched ModelTesterMixin and
  ConfigTester against a tiny model tester written here, and the helpers the common
  tests import get empty stand-ins (GenerationTesterMixin, ExportTesterMixin: their
  tests do not run), see STANDINS.
- Diffusers: tests/ of a Diffusers checkout (--diffusers-src DIR, e.g.
  `git clone --depth 1 -b v0.42.1 https://github.com/huggingface/diffusers`; default:
  the git mirror at /work/.mirror/huggingface+diffusers/repo, read with `git archive`).

Each selection (an architecture, a Diffusers model family) runs in its own pytest
process per mode, one after the other, under `nice`:

- cpu:        TRANSFORMERS_TEST_DEVICE=cpu / DIFFUSERS_TEST_DEVICE=cpu
- tpu-error:  the device spec (tests/transformers_device_spec.py,
              tests/diffusers_device_spec.py) and TORCH_TPU_FALLBACK=error, on the
              tests that passed on the CPU
- tpu:        the default fallback, on the tests that failed under tpu-error (a test that
              passes with TORCH_TPU_FALLBACK=error took no fallback, so it runs the same
              ops with fallbacks allowed)
- cpufail:    the tests that failed on the CPU, on tpu with fallbacks allowed (their
              errors are listed next to the CPU's: a test broken by the environment or by a
              version skew fails the same way on both)
- accel:      the tests the CPU run skipped for wanting an accelerator
              (require_torch_accelerator, require_torch_multi_accelerator) on tpu with
              TORCH_TPU_HOST_DEVICES=2 virtual chips and TORCH_TPU_FALLBACK=error, then
              (accel-fb) those that failed, with fallbacks allowed

A plugin (PLUGIN below) gives each test a time limit and writes every outcome to
build/hf-conformance/results/<suite>/<selection>.<mode>.jsonl as it goes.
"""
import argparse
import re
import json
import os
import shutil
import subprocess
import sys
import tarfile
import io
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TESTS = os.path.join(ROOT, "tests")
CACHE = os.path.join(ROOT, "build", "hf-conformance")
RESULTS = os.path.join(CACHE, "results")
DIFFUSERS_MIRROR = "/work/.mirror/huggingface+diffusers/repo"

sys.path.insert(0, TESTS)

# Diffusers model families: test file under tests/models/ and the -k expression. Quantization,
# single-file, hub, compile (inductor) and parallel classes are left out (they need libraries,
# downloads or GPUs the CPU run lacks, so they would drop out of the CPU denominator anyway).
DIFFUSERS_FAMILIES = {
    "flux": "models/transformers/test_models_transformer_flux.py",
    "unet2d": "models/unets/test_models_unet_2d.py",
    "unet2d_condition": "models/unets/test_models_unet_2d_condition.py",
    "autoencoder_kl": "models/autoencoders/test_models_autoencoder_kl.py",
}
DIFFUSERS_DEFAULT = ("flux", "unet2d", "autoencoder_kl")  # (unet2d_condition: not run for the report yet)
DIFFUSERS_EXCLUDE = ("Compile", "SingleFile", "Quanto", "TorchAo", "GGUF", "BitsAndBytes", "ModelOpt", "SDNQ",
                     "AutoRound", "Nunchaku", "Parallel", "Neuron", "HotSwap")

# Default -k for the conformance models: test_eager_matches_sdpa_inference's 25 variants are
# cut to the three "pad_left_sdpa_kernels" ones (fp16, fp32, bf16), and the 19 s dtype-loading
# test is left out, to keep one architecture at a few minutes per mode on a loaded 2-core machine.
TRANSFORMERS_K = "(not eager_matches_sdpa_inference or pad_left_sdpa_kernels) and not test_bc_torch_dtype"

# Stand-ins for the modules Transformers' common tests import that its source distribution lacks.
STANDINS = {
    "generation/test_utils.py": '''"""Stand-in (the source distribution lacks tests/generation/): the generation
tests of GenerationTesterMixin do not run."""


class GenerationTesterMixin:
    pass
''',
    "exporters/test_export.py": '''"""Stand-in (the source distribution lacks tests/exporters/): the export tests
of ExportTesterMixin do not run."""


class ExportTesterMixin:
    pass
''',
    "utils/test_configuration_utils.py": '''"""Stand-in (the source distribution lacks tests/utils/): common configuration
arguments given values other than their defaults, for ConfigTester.check_config_arguments_init."""

config_common_kwargs = {
    "return_dict": False,
    "output_hidden_states": True,
    "output_attentions": True,
    "dtype": "float16",
    "tie_word_embeddings": False,
    "chunk_size_feed_forward": 5,
    "is_encoder_decoder": True,
}
''',
}

PLUGIN = '''"""pytest plugin of tools/hf_conformance.py: a time limit per test (SIGALRM) and
every test's outcome appended to $HFC_RESULTS as one JSON line."""
import json
import os
import signal

import pytest

LIMIT = float(os.environ.get("HFC_TEST_TIMEOUT", "120"))
_outcomes = {}


def _alarm(signum, frame):
    raise TimeoutError(f"test ran past {LIMIT:g} s")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, LIMIT)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def pytest_runtest_logreport(report):
    rec = _outcomes.setdefault(report.nodeid, {"id": report.nodeid, "outcome": "passed", "error": "", "s": 0.0})
    rec["s"] += report.duration
    if report.skipped and rec["outcome"] == "passed":
        rec["outcome"] = "skipped"
        lr = report.longrepr
        rec["error"] = (lr[2] if isinstance(lr, tuple) else str(lr))[:300]
    elif report.failed:
        rec["outcome"] = "failed"
        crash = getattr(report.longrepr, "reprcrash", None)
        msg = crash.message if crash is not None else str(report.longrepr)
        lines = [ln.strip() for ln in msg.strip().splitlines() if ln.strip()]
        rec["error"] = " / ".join(lines[:2])[:400]
    if report.when == "teardown":  # (runs after a failed or skipped setup too)
        with open(os.environ["HFC_RESULTS"], "a") as f:
            f.write(json.dumps(rec) + "\\n")
'''


# skip messages of Transformers' require_torch_accelerator / require_torch_multi_accelerator and
# Diffusers' require_torch_accelerator / require_torch_multi_accelerator
ACCEL_SKIP = re.compile(r"requires? (an? )?(multiple )?(torch |hardware )?accelerators?\b|with an accelerator", re.I)


def _write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def _copytree(src, dst):
    if os.path.isdir(src):
        shutil.copytree(src, dst, dirs_exist_ok=True)
        return True
    return False


def assemble_transformers(src=None, cache=CACHE):
    """build/hf-conformance/transformers-<version>/tests: the source distribution's tests/*.py,
    the checkout's model and helper folders if given (else stand-ins), the conformance models."""
    import transformers

    import hf_distributed_testing_utils as hdt

    version = transformers.__version__
    root = os.path.join(cache, f"transformers-{version}")
    dest = os.path.join(root, "tests")
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(hdt.fetch(version), dest)
    _write(os.path.join(dest, "__init__.py"), "")
    from_src = []
    if src:
        st = os.path.join(src, "tests")
        for name in ("models", "generation", "exporters", "utils"):
            if _copytree(os.path.join(st, name), os.path.join(dest, name)):
                from_src.append(name)
        for name in ("causal_lm_tester.py", "__init__.py"):
            if os.path.exists(os.path.join(st, name)):
                shutil.copy(os.path.join(st, name), os.path.join(dest, name))
    for rel, text in STANDINS.items():
        if rel.split("/")[0] not in from_src:
            _write(os.path.join(dest, rel), text)
            _write(os.path.join(dest, os.path.dirname(rel), "__init__.py"), "")
    if not os.path.exists(os.path.join(dest, "distributed_testing_utils.py")):
        shutil.copy(os.path.join(TESTS, "hf_distributed_testing_utils.py"),
                    os.path.join(dest, "distributed_testing_utils.py"))
    conf = os.path.join(dest, "models", "conformance")
    _write(os.path.join(dest, "models", "__init__.py"), "") if not os.path.exists(
        os.path.join(dest, "models", "__init__.py")) else None
    _write(os.path.join(conf, "__init__.py"), "")
    shutil.copy(os.path.join(HERE, "hf_conformance_models.py"), os.path.join(conf, "test_modeling_conformance.py"))
    _write(os.path.join(root, "hfc_plugin.py"), PLUGIN)
    _write(os.path.join(root, "pytest.ini"), "[pytest]\naddopts = -p hfc_plugin\n")
    for spec in ("transformers_device_spec.py", "diffusers_device_spec.py"):
        shutil.copy(os.path.join(TESTS, spec), os.path.join(root, spec))
    return root


def assemble_diffusers(src=None, cache=CACHE):
    """build/hf-conformance/diffusers/tests: tests/ of a checkout, or of the git mirror."""
    root = os.path.join(cache, "diffusers")
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    if src:
        shutil.copytree(os.path.join(src, "tests"), os.path.join(root, "tests"))
        rev = subprocess.run(["git", "-C", src, "describe", "--tags", "--always"], capture_output=True,
                             text=True).stdout.strip() or "checkout"
    else:
        tar = subprocess.run(["git", f"--git-dir={DIFFUSERS_MIRROR}", "archive", "HEAD", "tests"], check=True,
                             capture_output=True).stdout
        with tarfile.open(fileobj=io.BytesIO(tar)) as t:
            t.extractall(root, filter="data")
        rev = subprocess.run(["git", f"--git-dir={DIFFUSERS_MIRROR}", "log", "-1", "--format=%h %cs"],
                             capture_output=True, text=True).stdout.strip()
        init = subprocess.run(["git", f"--git-dir={DIFFUSERS_MIRROR}", "show", "HEAD:src/diffusers/__init__.py"],
                              capture_output=True, text=True).stdout
        ver = [ln.split('"')[1] for ln in init.splitlines() if ln.startswith("__version__")]
        rev = f"{ver[0] if ver else '?'} ({rev})"
    _write(os.path.join(root, "SOURCE"), rev + "\n")
    _write(os.path.join(root, "hfc_plugin.py"), PLUGIN)
    _write(os.path.join(root, "pytest.ini"), "[pytest]\naddopts = -p hfc_plugin\n")
    for spec in ("transformers_device_spec.py", "diffusers_device_spec.py"):
        shutil.copy(os.path.join(TESTS, spec), os.path.join(root, spec))
    return root


def _env(suite, mode, out):
    env = dict(os.environ, HFC_RESULTS=out, PYTHONPATH=os.pathsep.join(
        [ROOT, TESTS, os.environ.get("PYTHONPATH", "")]), PYTHONDONTWRITEBYTECODE="1")
    pre = "TRANSFORMERS" if suite == "transformers" else "DIFFUSERS"
    for k in ("TORCH_TPU_FALLBACK", "TORCH_TPU_HOST_DEVICES", f"{pre}_TEST_BACKEND", f"{pre}_TEST_DEVICE_SPEC"):
        env.pop(k, None)
    if mode == "cpu":
        env[f"{pre}_TEST_DEVICE"] = "cpu"
    else:
        env.update({f"{pre}_TEST_BACKEND": "torch_tpu", f"{pre}_TEST_DEVICE": "tpu",
                    f"{pre}_TEST_DEVICE_SPEC": f"{suite}_device_spec.py"})
        if mode == "tpu-error":
            env["TORCH_TPU_FALLBACK"] = "error"
        if mode.startswith("accel"):
            env["TORCH_TPU_HOST_DEVICES"] = "2"
            if mode == "accel":
                env["TORCH_TPU_FALLBACK"] = "error"
    return env


def load(path):
    out = {}
    if os.path.exists(path):
        with open(path) as f:
            for ln in f:
                rec = json.loads(ln)
                out[rec["id"]] = rec
    return out


def run_pytest(suite, root, name, mode, args, ids=None, limit=1800):
    """One pytest process, in the cache's root: the tests' node ids are relative to it (Transformers'
    run_test_using_subprocess reruns `python -m pytest <node id>` in the same directory), and the
    device specs are copied there (Transformers and Diffusers take the spec as a path and import it
    by that name)."""
    out = os.path.join(RESULTS, suite, f"{name}.{mode}.jsonl")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    if os.path.exists(out):
        os.remove(out)
    cmd = ["nice", sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c",
           os.path.join(root, "pytest.ini"), "--rootdir", root]
    if ids is not None:
        if not ids:
            return out
        lst = os.path.join(RESULTS, suite, f"{name}.{mode}.ids")
        with open(lst, "w") as f:
            f.write("\n".join(os.path.join(root, i) for i in ids) + "\n")
        cmd += [f"@{lst}"]
    else:
        cmd += args
    env = _env(suite, mode, out)
    env["PYTHONPATH"] = os.pathsep.join([root, env["PYTHONPATH"]])
    if suite == "transformers":
        env["HFC_ARCHS"] = name
    t0 = time.time()
    log = os.path.join(RESULTS, suite, f"{name}.{mode}.log")
    with open(log, "w") as f:
        try:
            subprocess.run(cmd, cwd=root, env=env, stdout=f, stderr=subprocess.STDOUT, timeout=limit)
        except subprocess.TimeoutExpired:
            f.write(f"\nhf_conformance: process killed after {limit} s\n")
    res = load(out)
    n = {k: sum(r["outcome"] == k for r in res.values()) for k in ("passed", "failed", "skipped")}
    print(f"{suite} {name} {mode}: {n} in {time.time() - t0:.0f} s", flush=True)
    return out


def run_selection(suite, root, name, args, modes):
    cpu = load(os.path.join(RESULTS, suite, f"{name}.cpu.jsonl"))
    if "cpu" in modes or not cpu:
        cpu = load(run_pytest(suite, root, name, "cpu", args))
    passing = sorted(i for i, r in cpu.items() if r["outcome"] == "passed")
    if "tpu-error" in modes:
        err = load(run_pytest(suite, root, name, "tpu-error", args, ids=passing))
        failing = sorted(i for i in passing if err.get(i, {}).get("outcome") != "passed")
        run_pytest(suite, root, name, "tpu", args, ids=failing)
    if "tpu-error" in modes or "cpufail" in modes:  # the CPU failures on tpu too: does a CPU-side failure hide a tpu one?
        run_pytest(suite, root, name, "cpufail", args,
                   ids=sorted(i for i, r in cpu.items() if r["outcome"] == "failed"))
    if "accel" in modes:  # skipped on the CPU for wanting an accelerator (or two): on tpu only
        accel = sorted(i for i, r in cpu.items() if r["outcome"] == "skipped" and ACCEL_SKIP.search(r["error"]))
        res = load(run_pytest(suite, root, name, "accel", args, ids=accel))
        run_pytest(suite, root, name, "accel-fb", args, ids=[i for i in accel if res.get(i, {}).get("outcome") == "failed"])


def architectures():
    """The model types of hf_conformance_models.py (read, not imported: it is a test module
    of the cache's package)."""
    import ast

    with open(os.path.join(HERE, "hf_conformance_models.py")) as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "ARCHITECTURES":
            return list(ast.literal_eval(node.value))
    raise RuntimeError("no ARCHITECTURES in hf_conformance_models.py")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("suite", choices=["transformers", "diffusers", "assemble", "report"])
    ap.add_argument("--transformers-src")
    ap.add_argument("--diffusers-src")
    ap.add_argument("--archs", help="comma-separated model types (default: all of hf_conformance_models.py)")
    ap.add_argument("--families", help="comma-separated Diffusers families, of %s (default: %s)" % (
        ",".join(DIFFUSERS_FAMILIES), ",".join(DIFFUSERS_DEFAULT)))
    ap.add_argument("--modes", default="cpu,tpu-error,accel", help="cpu,tpu-error (then tpu and cpufail),cpufail,accel (an earlier CPU result is reused when cpu is left out)")
    ap.add_argument("-k", dest="kexpr", help="extra pytest -k expression")
    ap.add_argument("--no-assemble", action="store_true", help="reuse the assembled cache")
    a = ap.parse_args(argv)
    modes = a.modes.split(",")
    if a.suite == "assemble":
        print(assemble_transformers(a.transformers_src))
        print(assemble_diffusers(a.diffusers_src))
    elif a.suite == "transformers":
        import transformers

        root = os.path.join(CACHE, f"transformers-{transformers.__version__}") if a.no_assemble else \
            assemble_transformers(a.transformers_src)
        ARCHITECTURES = architectures()

        for arch in (a.archs.split(",") if a.archs else ARCHITECTURES):
            folder = os.path.join(root, "tests", "models", arch)
            if os.path.isdir(folder):  # the release's own model tests (--transformers-src)
                args = [folder, "-k", a.kexpr or "not slow"]
            else:
                cls = "".join(p.capitalize() for p in arch.split("_")) + "ConformanceTest"
                args = [os.path.join(root, "tests", "models", "conformance", "test_modeling_conformance.py"),
                        "-k", f"{cls} and ({a.kexpr or TRANSFORMERS_K})"]
            run_selection("transformers", root, arch, args, modes)
        write_reports()
    elif a.suite == "diffusers":
        root = os.path.join(CACHE, "diffusers") if a.no_assemble else assemble_diffusers(a.diffusers_src)
        k = " and ".join(f"not {x}" for x in DIFFUSERS_EXCLUDE) + (f" and ({a.kexpr})" if a.kexpr else "")
        for fam in (a.families.split(",") if a.families else DIFFUSERS_DEFAULT):
            run_selection("diffusers", root, fam, [os.path.join(root, "tests", DIFFUSERS_FAMILIES[fam]), "-k", k],
                          modes)
        write_reports()
    else:
        write_reports()


def summarize(suite, results=RESULTS):
    """Per selection: counts and the tpu-only failures."""
    d = os.path.join(results, suite)
    rows, fails, multi, cpufails = [], [], [], []
    names = sorted({f.split(".")[0] for f in os.listdir(d) if f.endswith(".cpu.jsonl")}) if os.path.isdir(d) else []
    for name in names:
        cpu = load(os.path.join(d, f"{name}.cpu.jsonl"))
        err = load(os.path.join(d, f"{name}.tpu-error.jsonl"))
        tpu = load(os.path.join(d, f"{name}.tpu.jsonl"))
        passing = [i for i, r in cpu.items() if r["outcome"] == "passed"]
        ok_err = [i for i in passing if err.get(i, {}).get("outcome") == "passed"]
        ok_tpu = [i for i in passing if i in ok_err or tpu.get(i, {}).get("outcome") == "passed"]
        rows.append(dict(name=name, collected=len(cpu), cpu=len(passing),
                         cpu_failed=sum(r["outcome"] == "failed" for r in cpu.values()),
                         skipped=sum(r["outcome"] == "skipped" for r in cpu.values()),
                         tpu=len(ok_tpu), err=len(ok_err)))
        for i in passing:
            if i not in ok_err:
                e = err.get(i, {"outcome": "not run", "error": "no result (process killed?)"})
                t = tpu.get(i, {"outcome": "not run", "error": ""})
                fails.append(dict(name=name, id=i, err=e["error"] or e["outcome"],
                                  tpu=t["outcome"], tpu_err=t["error"]))
        cf = load(os.path.join(d, f"{name}.cpufail.jsonl"))
        for i, r in sorted(cpu.items()):
            if r["outcome"] == "failed":
                t = cf.get(i, {"outcome": "not run", "error": ""})
                cpufails.append(dict(name=name, id=i, cpu=r["error"], tpu=t["outcome"], tpu_err=t["error"]))
        m = load(os.path.join(d, f"{name}.accel.jsonl"))
        mf = load(os.path.join(d, f"{name}.accel-fb.jsonl"))
        for i, r in sorted(m.items()):
            f = mf.get(i, {"outcome": "-", "error": ""})
            multi.append(dict(name=name, id=i, outcome=r["outcome"], error=r["error"], skip=cpu[i]["error"],
                              fb=f["outcome"] + (": " + f["error"] if f["error"] else "")))
    return rows, fails, multi, cpufails


BEGIN = "<!-- hf_conformance tables: begin -->"
END = "<!-- hf_conformance tables: end -->"


def write_reports():
    for suite in ("transformers", "diffusers"):
        rows, fails, multi, cpufails = summarize(suite)
        if not rows:
            continue
        lines = [f"| {'architecture' if suite == 'transformers' else 'family'} | collected | CPU pass | CPU fail | "
                 "skipped on CPU | tpu pass (of CPU pass) | tpu pass, TORCH_TPU_FALLBACK=error | rate | rate (error) |",
                 "|---|---|---|---|---|---|---|---|---|"]
        tot = {k: 0 for k in ("collected", "cpu", "cpu_failed", "skipped", "tpu", "err")}
        for r in rows:
            for k in tot:
                tot[k] += r[k]
        for r in rows + [dict(tot, name="**total**")]:
            rate = f"{100 * r['tpu'] / r['cpu']:.1f}%" if r["cpu"] else "-"
            rate_e = f"{100 * r['err'] / r['cpu']:.1f}%" if r["cpu"] else "-"
            lines.append(f"| {r['name']} | {r['collected']} | {r['cpu']} | {r['cpu_failed']} | {r['skipped']} | "
                         f"{r['tpu']} | {r['err']} | {rate} | {rate_e} |")
        lines += ["", "tpu-only failures (pass on the CPU, fail on tpu with TORCH_TPU_FALLBACK=error; "
                  "the last column is the same test with fallbacks allowed):", ""]
        if fails:
            lines += ["| selection | test | error (TORCH_TPU_FALLBACK=error) | with fallbacks |", "|---|---|---|---|"]
            for f in fails:
                tid = f["id"].split("::", 1)[-1]
                e = f["err"].replace("|", "\\|")
                t = f["tpu"] + (": " + f["tpu_err"].replace("|", "\\|") if f["tpu_err"] else "")
                lines.append(f"| {f['name']} | `{tid}` | {e} | {t} |")
        else:
            lines.append("none.")
        lines += ["", "Tests failing on the CPU (not in the denominator), and the same tests on tpu with fallbacks "
                  "allowed:", ""]
        if cpufails:
            lines += ["| selection | test | CPU error | tpu |", "|---|---|---|---|"]
            for f in cpufails:
                t = f["tpu"] + (": " + f["tpu_err"] if f["tpu_err"] and f["tpu_err"] != f["cpu"] else
                                " (same error)" if f["tpu_err"] else "")
                lines.append(f"| {f['name']} | `{f['id'].split('::', 1)[-1]}` | {f['cpu'][:160].replace('|', chr(92) + '|')} "
                             f"| {t[:200].replace('|', chr(92) + '|')} |")
        else:
            lines.append("none.")
        lines += ["", "Accelerator-only tests (skipped on the CPU for wanting one or two accelerators), on tpu with "
                  "TORCH_TPU_HOST_DEVICES=2 and TORCH_TPU_FALLBACK=error (last column: a failure rerun with "
                  "fallbacks allowed):", ""]
        if multi:
            n = {k: sum(m["outcome"] == k for m in multi) for k in ("passed", "failed", "skipped")}
            lines += [f"{len(multi)} tests: {n['passed']} passed, {n['failed']} failed, {n['skipped']} skipped on tpu "
                      "too.", "",
                      "| selection | test | CPU skip | tpu | message | with fallbacks |", "|---|---|---|---|---|---|"]
            for m in multi:
                lines.append(f"| {m['name']} | `{m['id'].split('::', 1)[-1]}` | {m['skip'][9:60]} | {m['outcome']} | "
                             f"{m['error'].replace('|', chr(92) + '|')[:200] if m['outcome'] != 'skipped' else m['error'][:80]} | "
                             f"{m['fb'].replace('|', chr(92) + '|')[:160]} |")
        else:
            lines.append("not run.")
        path = os.path.join(RESULTS, f"{suite}_tables.md")
        tables = "\n".join(lines) + "\n"
        _write(path, tables)
        print("wrote", path)
        doc = os.path.join(ROOT, "docs", f"{suite}_conformance.md")
        if os.path.exists(doc):  # the tables between the markers; the text around them is kept
            with open(doc) as f:
                text = f.read()
            a, b = text.find(BEGIN), text.find(END)
            if a >= 0 and b > a:
                _write(doc, text[:a + len(BEGIN)] + "\n" + tables + text[b:])
                print("updated", doc)


if __name__ == "__main__":
    main()
