"""Architecture sweep (tools/arch_sweep.py): tiny random models of Transformers'
causal-LM architectures, logits and greedy tokens on "tpu" against the CPU.

Default run: a few well-known architectures, in this process. `-m slow`: every
architecture, each in a worker process with a time limit (a crash or hang loses
only that architecture). Outcomes follow `arch_sweep.verdict`: failures listed in
KNOWN_FAILURES and fallbacks listed in EXPECTED_FALLBACK xfail with the reason;
anything new fails. `python tools/arch_sweep.py` writes the report docs/arch_sweep.md.
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
