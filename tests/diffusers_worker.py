"""One rank of the Diffusers parallelism tests in test_diffusers.py (started by test_dist's launcher).

    python tests/diffusers_worker.py BACKEND CASE [CASE ...]

Rendezvous through env:// (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE). Every case builds
the tiny Flux transformer of tests/test_diffusers.py with the same seed on every rank, runs it
on this rank's chip alone (the reference), then calls `enable_parallelism` on a fresh copy and
runs that: outputs (and, for the backward cases, the gradients summed over the ranks) must
equal the one-chip results, and no op may take the CPU fallback. Prints "PASS <case>" per case;
any failure is a traceback and a non-zero exit.
"""
import datetime
import os
import sys

import torch
import torch.distributed as dist
import torch_tpu
import torch_tpu.distributed

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_diffusers import FLUX, _flux_pipeline, flux_inputs  # noqa: E402

from diffusers import FluxTransformer2DModel  # noqa: E402
from diffusers.models._modeling_parallel import ContextParallelConfig, TensorParallelConfig  # noqa: E402
from torch.distributed.tensor import DTensor  # noqa: E402

RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])


def dev():
    return torch.device("tpu", torch.tpu.current_device())


def flux(backend, dtype=torch.float32, train=False):
    torch.manual_seed(0)
    m = FluxTransformer2DModel(**FLUX).to(dev(), dtype)
    m.train(train)
    m.set_attention_backend(backend)  # also Diffusers' process-wide active backend
    return m


def forward(m, inputs, dtype):
    return m(**{k: v.to(dev(), dtype) for k, v in inputs.items()}, return_dict=False)[0]


def no_fallback(what):
    fb = torch_tpu.fallback_report()
    assert not fb, f"{what}: ops on the CPU fallback: {fb}"


def collectives():
    return sum(torch_tpu.distributed.transport_stats().values())


def check_parallel(name, m, config, seen, inputs, ran):
    """The work was split: collectives ran; context parallelism gave the first block this rank's
    part of each sequence; tensor parallelism left this rank half of the attention's rows."""
    assert ran > 0, f"{name}: no collective ran"
    if isinstance(config, ContextParallelConfig):
        want = [(x.shape[1] + WORLD - 1 - RANK) // WORLD  # torch.tensor_split's sizes; even: equal chunks
                for x in (inputs["hidden_states"], inputs["encoder_hidden_states"])]
        assert seen[0] == tuple(want), f"{name}: the first block saw sequences {seen[0]}, not this rank's {want}"
    else:
        w = m.transformer_blocks[0].attn.to_q.weight
        assert isinstance(w, DTensor) and w.to_local().shape[0] == w.shape[0] // WORLD, (name, type(w))


def parallel_model(m, config):
    """m with enable_parallelism(config); the (image, text) token counts its first block sees are
    recorded in `seen`; the fallback report is reset and the collective counts taken (`before`)."""
    m.enable_parallelism(config=config)
    seen = []
    m.transformer_blocks[0].register_forward_pre_hook(
        lambda mod, args, kw: seen.append((kw["hidden_states"].shape[1], kw["encoder_hidden_states"].shape[1])),
        with_kwargs=True)
    torch.tpu.synchronize()
    torch_tpu.reset_fallback_report()
    return m, seen, collectives()


def check_forward(name, config, backend, dtype=torch.float32, **input_args):
    inputs = flux_inputs(**input_args)
    with torch.no_grad():
        ref = forward(flux("native", dtype), inputs, dtype).cpu()  # F.scaled_dot_product_attention
        m, seen, before = parallel_model(flux(backend, dtype), config)
        got = forward(m, inputs, dtype).cpu()
    no_fallback(name)
    check_parallel(name, m, config, seen, inputs, collectives() - before)
    assert got.shape == ref.shape, (name, got.shape, ref.shape)
    # bfloat16: the ring merges partial outputs that the attention op has each rounded to bfloat16,
    # so it may differ from one chip by one bfloat16 step at the outputs' magnitude (< 1 here: 2**-8)
    tol = dict(atol=2 ** -8, rtol=1.6e-2) if dtype == torch.bfloat16 else {}
    torch.testing.assert_close(got, ref, **tol, msg=lambda m: f"{name}: parallel != one chip: {m}")
    print(f"rank {RANK}: {name} max |diff| {(got.float() - ref.float()).abs().max().item():.3g}", flush=True)


def check_backward(name, config, backend):
    """loss = output.sum() on every rank: the gradients of the parameters, summed over the
    ranks (each rank's hold its sequence shard's part), equal one chip's."""
    inputs = flux_inputs()
    ref_model = flux("native", train=True)
    forward(ref_model, inputs, torch.float32).sum().backward()
    ref = {n: p.grad.cpu() for n, p in ref_model.named_parameters() if p.grad is not None}
    m, seen, before = parallel_model(flux(backend, train=True), config)
    out = forward(m, inputs, torch.float32)
    out.sum().backward()
    check_parallel(name, m, config, seen, inputs, collectives() - before)
    got = {}
    for n, p in m.named_parameters():
        if p.grad is None:
            continue
        g = p.grad.clone()
        dist.all_reduce(g)
        got[n] = g.cpu()
    no_fallback(name)
    assert got.keys() == ref.keys(), (name, sorted(set(got) ^ set(ref)))
    for n in ref:
        torch.testing.assert_close(got[n], ref[n], rtol=1e-4, atol=1e-5,
                                   msg=lambda msg, n=n: f"{name}: gradient of {n}: {msg}")


def case_ulysses():
    check_forward("ulysses", ContextParallelConfig(ulysses_degree=WORLD), "native")


def case_ring():
    # ring attention merges partial results by their log-sum-exp: only the backends whose
    # op returns it (`_native_flash`, `_native_cudnn`) can run it; not "native"
    check_forward("ring", ContextParallelConfig(ring_degree=WORLD), "_native_flash")


def case_tp():
    check_forward("tp", TensorParallelConfig(tp_degree=WORLD), "native")


def case_more():
    """Other backends, dtypes, batch 2, sequence lengths that do not divide by the ranks."""
    check_forward("ring cudnn", ContextParallelConfig(ring_degree=WORLD), "_native_cudnn")
    check_forward("ulysses flash", ContextParallelConfig(ulysses_degree=WORLD), "_native_flash")
    check_forward("ulysses bf16", ContextParallelConfig(ulysses_degree=WORLD), "native", torch.bfloat16)
    check_forward("ring bf16", ContextParallelConfig(ring_degree=WORLD), "_native_flash", torch.bfloat16)
    check_forward("ulysses batch 2", ContextParallelConfig(ulysses_degree=WORLD), "native", batch=2)
    check_forward("ring batch 2", ContextParallelConfig(ring_degree=WORLD), "_native_flash", batch=2)
    check_forward("tp batch 2", TensorParallelConfig(tp_degree=WORLD), "native", batch=2)
    check_forward("ulysses_anything", ContextParallelConfig(ulysses_degree=WORLD, ulysses_anything=True),
                  "native", text_len=47)
    check_forward("ring_anything", ContextParallelConfig(ring_degree=WORLD, ring_anything=True),
                  "_native_flash", text_len=47)


def case_pipeline():
    """FluxPipeline, 2 steps, its transformer under Ulysses attention: the images equal one chip's."""
    g = torch.Generator().manual_seed(1)
    embeds, pooled = torch.randn(1, 48, 32, generator=g), torch.randn(1, 32, generator=g)

    def run(pipe):
        with torch.no_grad():
            return pipe(prompt_embeds=embeds.to(dev()), pooled_prompt_embeds=pooled.to(dev()), height=8, width=8,
                        num_inference_steps=2, max_sequence_length=48, generator=torch.Generator().manual_seed(0),
                        output_type="pt").images.cpu()

    def pipeline():
        pipe = _flux_pipeline(dev())
        pipe.transformer.set_attention_backend("native")
        return pipe

    ref = run(pipeline())
    pipe = pipeline()
    pipe.transformer.enable_parallelism(config=ContextParallelConfig(ulysses_degree=WORLD))
    torch.tpu.synchronize()
    torch_tpu.reset_fallback_report()
    before = collectives()
    got = run(pipe)
    no_fallback("pipeline")
    assert collectives() - before > 0, "pipeline: no collective ran"
    torch.testing.assert_close(got, ref, msg=lambda m: f"pipeline: parallel != one chip: {m}")


def case_backward():
    check_backward("ulysses backward", ContextParallelConfig(ulysses_degree=WORLD), "native")
    check_backward("ring backward", ContextParallelConfig(ring_degree=WORLD), "_native_flash")


TIMEOUT = float(os.environ.get("DIST_TEST_TIMEOUT", "60"))
BACKEND = sys.argv[1] if len(sys.argv) > 1 else ""

if __name__ == "__main__":
    cases = sys.argv[2:]
    dist.init_process_group(BACKEND, timeout=datetime.timedelta(seconds=TIMEOUT))
    for name in cases:
        globals()["case_" + name]()
        print(f"PASS {name}", flush=True)
    dist.destroy_process_group()
