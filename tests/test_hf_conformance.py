"""tools/hf_conformance.py (Transformers' and Diffusers' own tests as conformance reports):
the cache it assembles from Transformers' source distribution imports offline and gives
each architecture a working model tester, and its summary counts what the report says.
The heavy run itself is the tool, not this test."""
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, HERE)

import hf_conformance  # noqa: E402
import hf_distributed_testing_utils as hdt  # noqa: E402


def test_cache_from_sdist_imports_and_runs_a_model_tester(tmp_path):
    if not os.path.exists(os.path.join(hdt.tests_dir(), "test_modeling_common.py")):
        pytest.skip("Transformers' test files not fetched (python tests/hf_distributed_testing_utils.py fetch)")
    root = hf_conformance.assemble_transformers(cache=str(tmp_path))
    tests = os.path.join(root, "tests")
    for rel in hf_conformance.STANDINS:
        assert os.path.exists(os.path.join(tests, rel)), rel
    code = (
        "import torch\n"
        "from tests.models.conformance import test_modeling_conformance as m\n"
        "cls = m.LlamaConformanceTest\n"
        "assert not hasattr(m, 'BertConformanceTest')\n"  # HFC_ARCHS limits the classes made
        "print([c.__name__ for c in cls.all_model_classes])\n"
        "t = cls('test_config'); t.setUp()\n"
        "config, inputs = t.model_tester.prepare_config_and_inputs_for_common()\n"
        "model = cls.all_model_classes[1](config).eval()\n"
        "with torch.no_grad(): out = model(**inputs)\n"
        "print(tuple(out.logits.shape))\n"
        "t.test_config()\n"
    )
    env = dict(os.environ, HFC_ARCHS="llama", TRANSFORMERS_TEST_DEVICE="cpu",
               PYTHONPATH=os.pathsep.join([root, ROOT, os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "['LlamaModel', 'LlamaForCausalLM']" in r.stdout
    assert "(3, 7, 99)" in r.stdout


def test_summary_counts_cpu_passing_tests_only(tmp_path):
    d = tmp_path / "transformers"
    d.mkdir()

    def write(mode, recs):
        with open(d / f"arch.{mode}.jsonl", "w") as f:
            for i, (o, e) in recs.items():
                f.write(json.dumps({"id": i, "outcome": o, "error": e, "s": 0.0}) + "\n")

    write("cpu", {"a": ("passed", ""), "b": ("passed", ""), "c": ("failed", "x"), "d": ("skipped", "requires multiple accelerators"),
                  "e": ("passed", "")})
    write("tpu-error", {"a": ("passed", ""), "b": ("failed", "RuntimeError: fallback for aten::foo")})  # e: no result
    write("tpu", {"b": ("passed", ""), "e": ("failed", "AssertionError")})
    rows, fails, multi, cpufails = hf_conformance.summarize("transformers", str(tmp_path))
    (r,) = rows
    assert (r["collected"], r["cpu"], r["cpu_failed"], r["skipped"], r["err"], r["tpu"]) == (5, 3, 1, 1, 1, 2)
    assert [(f["id"], f["tpu"]) for f in fails] == [("b", "passed"), ("e", "failed")]
    assert multi == []
    assert [(f["id"], f["tpu"]) for f in cpufails] == [("c", "not run")]


def test_plugin_records_each_outcome_once(tmp_path):
    (tmp_path / "hfc_plugin.py").write_text(hf_conformance.PLUGIN)
    (tmp_path / "test_x.py").write_text(
        "import time, pytest\n"
        "@pytest.fixture\n"
        "def broken():\n    raise ValueError('setup broke')\n"
        "def test_ok():\n    pass\n"
        "def test_bad():\n    assert 1 == 2, 'one is not two'\n"
        "@pytest.mark.skip(reason='test requires accelerator')\n"
        "def test_skip():\n    pass\n"
        "def test_setup(broken):\n    pass\n"
        "def test_slow():\n    time.sleep(30)\n")
    out = tmp_path / "r.jsonl"
    env = dict(os.environ, HFC_RESULTS=str(out), HFC_TEST_TIMEOUT="1",
               PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "hfc_plugin",
                    "--rootdir", str(tmp_path), str(tmp_path / "test_x.py")], env=env, cwd=tmp_path,
                   capture_output=True, timeout=300)
    lines = out.read_text().splitlines()
    recs = {json.loads(ln)["id"].split("::")[-1]: json.loads(ln) for ln in lines}
    assert len(lines) == len(recs) == 5
    assert recs["test_ok"]["outcome"] == "passed"
    assert recs["test_bad"]["outcome"] == "failed" and "one is not two" in recs["test_bad"]["error"]
    assert recs["test_skip"]["outcome"] == "skipped" and hf_conformance.ACCEL_SKIP.search(recs["test_skip"]["error"])
    assert recs["test_setup"]["outcome"] == "failed" and "setup broke" in recs["test_setup"]["error"]
    assert recs["test_slow"]["outcome"] == "failed" and "ran past 1 s" in recs["test_slow"]["error"]


def test_release_checkout_replaces_the_standins(tmp_path):
    if not os.path.exists(os.path.join(hdt.tests_dir(), "test_modeling_common.py")):
        pytest.skip("Transformers' test files not fetched (python tests/hf_distributed_testing_utils.py fetch)")
    src = tmp_path / "src" / "tests"
    (src / "models" / "llama").mkdir(parents=True)
    (src / "models" / "llama" / "test_modeling_llama.py").write_text("# the release's own\n")
    (src / "generation").mkdir()
    (src / "generation" / "test_utils.py").write_text("class GenerationTesterMixin:  # the release's own\n    pass\n")
    (src / "causal_lm_tester.py").write_text("# the release's own\n")
    root = hf_conformance.assemble_transformers(src=str(tmp_path / "src"), cache=str(tmp_path / "cache"))
    tests = os.path.join(root, "tests")
    assert "the release's own" in open(os.path.join(tests, "generation", "test_utils.py")).read()
    assert os.path.exists(os.path.join(tests, "models", "llama", "test_modeling_llama.py"))
    assert os.path.exists(os.path.join(tests, "causal_lm_tester.py"))
    assert "Stand-in" in open(os.path.join(tests, "exporters", "test_export.py")).read()  # not in the checkout
