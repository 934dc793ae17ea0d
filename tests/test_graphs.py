"""torch.tpu.TPUGraph / torch.tpu.graph: capture once, replay (torch_tpu/_graphs.py,
capture_begin in runtime/include/tpu/hal.h). Results are compared with the same
code run eagerly on the CPU, and with eager tpu runs bit for bit."""
import pytest
import torch

import torch_tpu  # noqa: F401

DEV = "tpu"


def _fn(x, w, b):
    y = torch.nn.functional.gelu(x @ w + b)
    return y.softmax(-1) * 2 - y.mean()


def test_replay_computes_the_captured_ops_on_new_inputs():
    torch.manual_seed(0)
    w, b = torch.randn(16, 8), torch.randn(8)
    x = torch.zeros(5, 16, device=DEV)
    wt, bt = w.to(DEV), b.to(DEV)
    _fn(x, wt, bt)  # warm-up, as with CUDA graphs
    g = torch.tpu.TPUGraph()
    with torch.tpu.graph(g):
        y = _fn(x, wt, bt)
    assert g.num_works() >= 6
    for _ in range(4):
        xn = torch.randn(5, 16)
        x.copy_(xn)
        g.replay()
        torch.testing.assert_close(y.cpu(), _fn(xn, w, b))
    g.reset()
    assert g.num_works() == 0
    with pytest.raises(RuntimeError, match="nothing captured"):
        g.replay()


def test_capture_records_and_does_not_run():
    x = torch.ones(4, device=DEV)
    g = torch.tpu.TPUGraph()
    with torch.tpu.graph(g):
        x.add_(1)
    assert x.cpu().tolist() == [1.0] * 4  # recorded, not run
    g.replay()
    g.replay()
    assert x.cpu().tolist() == [3.0] * 4
    assert torch.tpu.is_current_stream_capturing() is False


def test_host_reads_and_random_ops_are_refused_and_the_device_stays_usable():
    x = torch.randn(3, 4, device=DEV)
    for body, what in [(lambda: (x * 2).sum().item(), "copy to the host"),
                       (lambda: print((x + 1).cpu()), "copy to the host"),
                       (lambda: torch.tpu.synchronize(), "synchronize"),
                       (lambda: torch.rand(3, device=DEV), "random")]:
        g = torch.tpu.TPUGraph()
        with pytest.raises(RuntimeError, match=what):
            with torch.tpu.graph(g):
                assert torch.tpu.is_current_stream_capturing()
                body()
        assert not torch.tpu.is_current_stream_capturing()
        assert g.num_works() == 0
        torch.testing.assert_close((x + 1).cpu(), x.cpu() + 1)  # usable again
    g = torch.tpu.TPUGraph()  # and a later capture works
    with torch.tpu.graph(g):
        y = x * 3
    g.replay()
    torch.testing.assert_close(y.cpu(), x.cpu() * 3)


def test_bad_use_raises_clear_errors():
    g = torch.tpu.TPUGraph()
    with pytest.raises(NotImplementedError, match="pools"):
        g.capture_begin(pool=(0, 1))
    with pytest.raises(NotImplementedError, match="stream"):
        torch.tpu.graph(g, stream=torch.tpu.current_stream())
    with pytest.raises(RuntimeError, match="capture_begin was not called"):
        g.capture_end()
    g.capture_begin()
    try:
        g2 = torch.tpu.TPUGraph()
        with pytest.raises(RuntimeError, match="already being captured"):
            g2.capture_begin()
    finally:
        g.capture_end()
    with pytest.raises(RuntimeError, match="already holds a capture"):
        g.capture_begin()
    g.reset()


def test_memory_used_by_the_capture_is_held_until_reset():
    x = torch.randn(256, 256, device=DEV)
    torch.tpu.synchronize()
    before = torch.tpu.memory_allocated()
    g = torch.tpu.TPUGraph()
    with torch.tpu.graph(g):
        t = x * 2       # freed during the capture: held, never handed out again
        y = t.sin() + 1
        del t
    # New tensors of the same size must not land on the captured intermediates.
    others = [torch.full((256, 256), float(i), device=DEV) for i in range(8)]
    x2 = torch.randn(256, 256)
    x.copy_(x2)
    g.replay()
    torch.testing.assert_close(y.cpu(), (x2 * 2).sin() + 1)
    for i, o in enumerate(others):
        assert bool((o.cpu() == i).all())
    held = torch.tpu.memory_reserved()
    del y, others, o
    g.reset()
    torch.tpu.synchronize()
    assert torch.tpu.memory_allocated() == before
    assert torch.tpu.memory_reserved() <= held


def test_output_freed_after_capture_is_not_reused_while_the_graph_lives():
    x = torch.randn(128, device=DEV)
    g = torch.tpu.TPUGraph()
    with torch.tpu.graph(g):
        y = x.exp()
    ptr = y.data_ptr()
    del y  # the replay still writes there: the block stays the graph's
    z = [torch.empty(128, device=DEV) for _ in range(16)]
    assert all(t.data_ptr() != ptr for t in z)
    g.replay()
    g.reset()


def _tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg).eval()


@pytest.mark.parametrize("fuse", [False, True])
def test_a_transformers_decode_step_replays_as_it_runs_eagerly(fuse):
    # The main job's decode: a StaticCache step (forward, argmax, next position) captured once;
    # every replay's token and logits equal the same step run eagerly, bit for bit.
    from transformers import StaticCache

    mdl = _tiny_llama().to(DEV)
    if fuse:
        torch_tpu.optimize(mdl)
    prompt = torch.tensor([[3, 14, 15, 9, 26]], device=DEV)

    def decode(graph, steps=8):
        cache = StaticCache(config=mdl.config, max_cache_len=16)
        with torch.no_grad():
            out = mdl(input_ids=prompt, past_key_values=cache, use_cache=True,
                      cache_position=torch.arange(5, device=DEV))
            ids = out.logits[:, -1:].argmax(-1)
            pos = torch.full((1,), 5, dtype=torch.long, device=DEV)
            logits = []

            def step():
                o = mdl(input_ids=ids, past_key_values=cache, use_cache=True, cache_position=pos)
                ids.copy_(o.logits[:, -1:].argmax(-1))
                pos.add_(1)
                return o.logits

            if graph:
                g = torch.tpu.TPUGraph()
                with torch.tpu.graph(g):
                    lg = step()
                for _ in range(steps):
                    g.replay()
                    logits.append((ids.item(), lg.cpu().clone()))
                g.reset()
            else:
                for _ in range(steps):
                    lg = step()
                    logits.append((ids.item(), lg.cpu().clone()))
        return logits

    eager, replayed = decode(False), decode(True)
    for (a, la), (b, lb) in zip(eager, replayed):
        assert a == b
        assert torch.equal(la, lb)
    # and the eager tpu steps follow the CPU model's greedy tokens
    cpu = _tiny_llama()
    with torch.no_grad():
        ref = cpu.generate(prompt.cpu(), max_new_tokens=9, do_sample=False, min_new_tokens=9)
    assert [t for t, _ in eager] == ref[0, 6:].tolist()


def test_main_job_graph_decode_matches_generate():
    # torch_tpu.generate.run_graph (the main job's default on tpu) against generate() on the CPU,
    # with a tiny model and a character tokenizer built here.
    from torch_tpu.generate import graph_decode_supported, run_graph

    tok = _char_tokenizer()
    mdl = _tiny_llama()
    mdl.generation_config.eos_token_id = None
    with torch.no_grad():
        ref = mdl.generate(**tok("the cat", return_tensors="pt"), max_new_tokens=12, do_sample=False)
    assert graph_decode_supported("tpu")
    ids, ttft, tps = run_graph(tok, mdl.to(DEV), "the cat", 12, "tpu", False)
    assert ids.tolist() == ref[0].tolist()
    assert ttft > 0 and tps > 0


def _char_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {chr(ord("a") + i): i for i in range(26)}
    vocab.update({" ": 26, "<unk>": 27})
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    return PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>")


def test_main_job_defaults_to_the_captured_step_and_matches_cpu(tmp_path):
    # `python -m torch_tpu.generate --model DIR --compare-cpu` on a tiny local model: the default
    # decode is the captured step, with the fused kernels, and its greedy tokens are the CPU's.
    import os
    import subprocess
    import sys

    mdl = _tiny_llama()
    mdl.generation_config.eos_token_id = None
    mdl.save_pretrained(tmp_path)
    _char_tokenizer().save_pretrained(tmp_path)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for flags, want in [([], "the step captured once and replayed"), (["--decode", "generate"], "decode: generate()")]:
        p = subprocess.run([sys.executable, "-m", "torch_tpu.generate", "the cat", "--model", str(tmp_path),
                            "--max-new-tokens", "10", "--compare-cpu", *flags],
                           env=dict(os.environ, PYTHONPATH=root), capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-3000:]
        assert want in p.stdout and "fused kernels" in p.stdout, p.stdout
        assert "greedy tokens identical on tpu and cpu: True" in p.stdout, p.stdout


def test_a_whole_training_step_is_captured_and_replayed():
    # forward, backward (queued from autograd's thread) and the optimizer step, as CUDA users
    # capture them: the replays train the model as the CPU does.
    def make(dev):
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)).to(dev)
        return m, torch.optim.AdamW(m.parameters(), lr=0.05)

    torch.manual_seed(1)
    xs, ys = [torch.randn(4, 8) for _ in range(6)], [torch.randn(4, 1) for _ in range(6)]
    m, opt = make("cpu")
    for x, y in zip(xs, ys):
        opt.zero_grad()
        ((m(x) - y) ** 2).mean().backward()
        opt.step()
    m2, _ = make(DEV)
    # capturable=True: the step count and bias corrections live on the device (as for CUDA graphs)
    opt2 = torch.optim.AdamW(m2.parameters(), lr=0.05, capturable=True)
    sx, sy = torch.zeros(4, 8, device=DEV), torch.zeros(4, 1, device=DEV)

    def step():
        opt2.zero_grad(set_to_none=False)
        loss = ((m2(sx) - sy) ** 2).mean()
        loss.backward()
        opt2.step()
        return loss

    sx.copy_(xs[0])
    sy.copy_(ys[0])
    step()  # eagerly: gradients and optimizer state allocated outside the capture
    g = torch.tpu.TPUGraph()
    with torch.tpu.graph(g):
        loss = step()
    for x, y in zip(xs[1:], ys[1:]):
        sx.copy_(x)
        sy.copy_(y)
        g.replay()
    for a, b in zip(m.parameters(), m2.parameters()):
        torch.testing.assert_close(b.detach().cpu(), a.detach())
    g.reset()
    # Without capturable=True the step count and bias corrections stay on the host: PyTorch checks
    # that only for CUDA graphs; here too, instead of replays silently reusing the captured step.
    opt3 = torch.optim.AdamW(m2.parameters(), lr=0.05)
    step_fn = opt2
    opt2 = opt3
    step()
    with pytest.raises(RuntimeError, match="capturable"):
        with torch.tpu.graph(torch.tpu.TPUGraph()):
            step()
    opt2 = step_fn


def test_compiled_graphs_and_large_host_copies_are_captured():
    def f(x, w):
        return torch.relu(x @ w).sum(-1) * 2 + x.mean()

    cf = torch.compile(f, backend="tpu")
    x, w = torch.randn(8, 16, device=DEV), torch.randn(16, 4, device=DEV)
    cf(x, w)
    big = torch.randn(3 << 20)  # 12 MiB: above the host driver's staging size, snapshotted anyway
    t = torch.empty(3 << 20, device=DEV)
    g = torch.tpu.TPUGraph()
    with torch.tpu.graph(g):
        y = cf(x, w)  # one compiled-graph run: one work
        t.copy_(big)
    want = big.clone()
    big.zero_()
    for _ in range(2):
        xn = torch.randn(8, 16)
        x.copy_(xn)
        g.replay()
        torch.testing.assert_close(y.cpu(), f(xn, w.cpu()))
    assert torch.equal(t.cpu(), want)
    g.reset()


def test_capture_on_another_chip():
    if torch.tpu.device_count() < 2:
        pytest.skip("needs TORCH_TPU_HOST_DEVICES >= 2")
    a = torch.ones(3, device="tpu:1")
    with torch.tpu.device(1):
        g = torch.tpu.TPUGraph()
        with torch.tpu.graph(g):
            b = a * 5
    g.replay()
    assert b.device == torch.device("tpu:1") and b.cpu().tolist() == [5.0] * 3
    g.reset()


def test_main_job_decodes_eagerly_when_the_step_cannot_be_captured(capsys):
    # A model whose step reads a value on the host: the capture is refused twice, the loop
    # goes on eagerly (saying so) and still gives generate()'s tokens.
    from torch_tpu.generate import run_graph

    mdl = _tiny_llama()
    mdl.generation_config.eos_token_id = None
    tok = _char_tokenizer()
    with torch.no_grad():
        ref = mdl.generate(**tok("the cat", return_tensors="pt"), max_new_tokens=6, do_sample=False)
    mdl = mdl.to(DEV)
    norm = mdl.model.norm
    calls = []
    orig = type(norm).forward

    def reads_host(self, x):
        calls.append(float(x.abs().max()))  # a sync: refused while capturing
        return orig(self, x)

    norm.forward = reads_host.__get__(norm)
    ids, _, _ = run_graph(tok, mdl, "the cat", 6, DEV, False)
    assert ids.tolist() == ref[0].tolist()
    assert "could not be captured, decoding eagerly" in capsys.readouterr().err
