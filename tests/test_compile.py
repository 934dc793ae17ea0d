"""torch.compile(backend="tpu"): graph capture, caching per shape, and
compiled == eager (forward and a training step). The backend currently runs
the decomposed ATen graph op by op on the native kernels (no fusion yet)."""
import torch

from torch_tpu._dynamo_backend import compile_stats


def test_backend_is_registered():
    import torch._dynamo

    assert "tpu" in torch._dynamo.list_backends(exclude_tags=())


def test_compile_once_hit_same_shape_recompile_new_shape(no_fallback):
    torch._dynamo.reset()

    def f(x, w):
        return torch.nn.functional.gelu(x @ w).softmax(-1)

    cf = torch.compile(f, backend="tpu", fullgraph=True, dynamic=False)
    w = torch.randn(16, 16, device="tpu")
    x = torch.randn(4, 16, device="tpu")
    before = compile_stats()["graphs"]
    out = cf(x, w)
    assert compile_stats()["graphs"] == before + 1
    torch.testing.assert_close(out.cpu(), f(x, w).cpu())
    cf(torch.randn(4, 16, device="tpu"), w)  # same shapes: cache hit
    assert compile_stats()["graphs"] == before + 1
    cf(torch.randn(8, 16, device="tpu"), w)  # new shape: new graph
    assert compile_stats()["graphs"] == before + 2


def test_compiled_training_step_matches_eager():
    torch._dynamo.reset()
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.SiLU(), torch.nn.Linear(16, 4))
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.SiLU(), torch.nn.Linear(16, 4))
    model.load_state_dict(ref.state_dict())
    ref.to("tpu")
    model.to("tpu")
    cmodel = torch.compile(model, backend="tpu", fullgraph=True, dynamic=False)
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(5, 8, device="tpu")
    y = torch.randn(5, 4, device="tpu")
    for _ in range(2):
        for m, o in ((ref, opt_ref), (cmodel, opt)):
            o.zero_grad()
            loss = torch.nn.functional.mse_loss(m(x), y)
            loss.backward()
            o.step()
    for a, b in zip(ref.parameters(), model.parameters()):
        torch.testing.assert_close(a.cpu(), b.cpu(), rtol=1e-5, atol=1e-5)
