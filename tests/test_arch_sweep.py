"""Architecture sweep (tools/arch_sweep.py): tiny random models of Transformers'
causal-LM architectures, logits and greedy tokens on "tpu" against the CPU.

Default run: a few well-known architectures, in this process. `-m slow`: every
architecture, each in a worker process with a time limit (a crash or hang loses
only that architecture). Outcomes follow `arch_sweep.verdict`: failures listed in
KNOWN_FAILURES and fallbacks listed in EXPECTED_FALLBACK xfail with the reason;
anything new fails. `python tools/arch_sweep.py` writes the report docs/arch_sweep.md.

Compile mode (`arch_sweep.run_arch_compile`): the forward compiled with
torch.compile(backend="tpu") must equal the eager forward on "tpu". Default run:
COMPILE_SUBSET in this process; `-m slow`: every architecture of the eager sweep,
at least COMPILE_MIN_PASS of them must pass.
"""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
import arch_sweep as S  # noqa: E402

ARCH_TIMEOUT_S = 180


def _apply(res):
    outcome, msg = S.verdict(res)
    if outcome == "skip":
        pytest.skip(msg)
    if outcome == "xfail":
        pytest.xfail(msg)
    if outcome == "fail":
        pytest.fail(msg, pytrace=False)


@pytest.mark.parametrize("arch", S.FAST_SUBSET)
def test_arch(arch):
    _apply(S.run_arch(arch))


@pytest.fixture(scope="module")
def sweeper():
    with S.Sweeper(timeout=ARCH_TIMEOUT_S) as sw:
        yield sw


@pytest.mark.slow
@pytest.mark.parametrize("arch", S.all_archs())
def test_arch_full(arch, sweeper):
    _apply(sweeper.run(arch))


# --------------------------------------------------------------------------- compile mode

COMPILE_MIN_PASS = 0.95
COMPILE_ARCH_TIMEOUT_S = 300


def _compile_fail_msg(r):
    return f"{r['arch']}: {r['reason']}\n{r.get('traceback', '')}"


@pytest.mark.parametrize("arch", S.COMPILE_SUBSET)
def test_arch_compile(arch):
    r = S.run_arch_compile(arch)
    if r["status"] != "pass":
        pytest.fail(_compile_fail_msg(r), pytrace=False)
    # one ATen graph of the whole forward, mostly in C
    assert r["fullgraph"] and r["graphs"] == 1, r
    assert r["segments"] >= 1 and r["c_nodes"] > 10 * r["eager_nodes"], r


@pytest.mark.slow
def test_arch_compile_full():
    results = S.sweep(timeout=COMPILE_ARCH_TIMEOUT_S, compile=True)
    ran = [r for r in results if r["status"] != "skip"]
    failed = [r for r in ran if r["status"] != "pass"]
    assert ran and len(ran) - len(failed) >= COMPILE_MIN_PASS * len(ran), \
        "\n".join(f"{r['arch']}: {r['reason']}" for r in failed)


def test_compile_mode_skips_eager_failures_and_reports(tmp_path, monkeypatch):
    monkeypatch.setitem(S.KNOWN_FAILURES, "llama", "forward: boom")
    r = S.run_arch_compile("llama")
    assert r["status"] == "skip" and "not in the eager sweep: forward: boom" in r["reason"]
    results = [r, {"arch": "a", "status": "pass", "reason": "", "fullgraph": False, "fullgraph_error": "Unsupported: x",
                   "graphs": 3, "segments": 4, "c_nodes": 90, "eager_nodes": 2, "eager_ops": {"aten::foo": 2},
                   "max_diff": 1e-6, "seconds": 1.0},
               {"arch": "b", "status": "fail", "reason": "compare logits: AssertionError: logits differ",
                "fullgraph": True, "fullgraph_error": "", "graphs": 1, "segments": 1, "c_nodes": 9,
                "eager_nodes": 0, "eager_ops": {}, "max_diff": 0.5, "seconds": 1.0}]
    t = S.compile_totals(results)
    assert (t["pass"], t["fail"], t["skip"], t["fullgraph"], t["graph_breaks"]) == (1, 1, 1, 0, 1)
    assert (t["segments"], t["c_nodes"], t["eager_nodes"]) == (4, 90, 2)  # passing architectures only
    out = tmp_path / "compile.md"
    S.write_compile_report(results, str(out), seconds=12.0)
    text = out.read_text()
    assert "**total 3: pass 1 (fullgraph 0, with graph breaks 1), fail 1, skip 1**" in text
    assert "| `aten::foo` | 2 | 1 |" in text and "| Unsupported: x | 1 |" in text
    assert "| a | pass | no | 3 | 4 | 90 | 2 | 1.0e-06 | `aten::foo` (2) | 1.0 |" in text
    assert "sweep time: 12 s" in text


# --------------------------------------------------------------------------- the tool itself

def test_tiny_config_shrinks():
    cfg = S.tiny_config("llama")
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads) == (64, 2, 4)
    assert cfg.num_key_value_heads == 4  # Llama's default is multi-head attention: kept so
    assert S.tiny_config("mistral").num_key_value_heads == 2  # grouped-query attention kept so
    assert cfg.vocab_size <= 256 and cfg.intermediate_size <= 128 and cfg.max_position_embeddings <= 128
    g = S.tiny_config("gpt2")
    assert (g.n_embd, g.n_layer, g.n_head) == (64, 2, 4)
    # per-layer lists follow the kept layers and keep both kinds of layer
    q = S.tiny_config("qwen3_next")
    assert len(q.layer_types) == q.num_hidden_layers and set(q.layer_types) == {"linear_attention", "full_attention"}
    m = S.tiny_config("mixtral")
    assert m.num_local_experts <= 4 and m.num_experts_per_tok <= 2


def test_worker_isolates_crashes_and_reports(tmp_path, monkeypatch):
    # a crash in the worker loses one architecture only, and the sweep goes on
    monkeypatch.setitem(S.SKIP, "llama", "skipped here")
    with S.Sweeper(timeout=ARCH_TIMEOUT_S) as sw:
        assert sw.run("llama")["status"] == "skip"
        crash = sw.run("__exit__")
        assert crash["status"] == "fail" and "worker crashed (exit status 70)" in crash["reason"]
        r = sw.run("gpt2")
    assert r["arch"] == "gpt2" and r["status"] in ("pass", "fallback", "fail")
    results = [r, {"arch": "x", "status": "skip", "reason": "needs y", "fallback": {}, "seconds": 0.0},
               {"arch": "z", "status": "fail", "reason": "tpu: boom | bang", "fallback": {"aten::foo": 3},
                "seconds": 1.0}]
    out = tmp_path / "sweep.md"
    S.write_report(results, str(out))
    text = out.read_text()
    assert "**total 3:" in text and "skip 1" in text and "fail" in text
    assert "| x | skip | needs y |" in text and "boom \\| bang" in text and "`aten::foo`" in text
