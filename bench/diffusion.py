"""One denoiser step of Diffusers models: tpu eager, torch.compile(backend="tpu"), stock torch
CPU eager and torch.compile's default backend (inductor) on the CPU, in one process.

- UNet: a small UNet2DConditionModel built from a config (random weights, nothing downloaded):
  three resolutions with 32/64/64 channels, one ResNet block per level, cross-attention at the
  two lower resolutions (2 heads), groups of 8 channels; batch 2 (a guided step), 4 x 32 x 32
  latents, 16 text tokens of 64. Convolutions and group norms are most of its work.
- Flux: a small FluxTransformer2DModel (2 double-stream and 4 single-stream blocks, 4 heads of
  32), batch 1, 16 x 16 latent patches (256 tokens) and 64 text tokens.

Every variant is built and called once first (the compiled ones compile there: "first call").
Then their timed chunks take turns, round after round, so that the machine's drift falls on
all of them; steps/s of each one's fastest chunk. The UNet is also measured compiled with
options={"conv_epilogue": False} (convolutions and group norms as C nodes, their epilogues a
fused group of their own), which shows what the epilogue fusion itself gives.
"""
import copy
import time

import torch

from .models import _sync

UNET = dict(block_out_channels=(32, 64, 64), layers_per_block=1, sample_size=32, in_channels=4, out_channels=4,
            down_block_types=("DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
            up_block_types=("CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"), cross_attention_dim=64,
            attention_head_dim=2, norm_num_groups=8)
FLUX = dict(patch_size=1, in_channels=16, num_layers=2, num_single_layers=4, attention_head_dim=32,
            num_attention_heads=4, joint_attention_dim=64, pooled_projection_dim=64, axes_dims_rope=[8, 12, 12])


def _unet():
    import diffusers

    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    inputs = dict(sample=torch.randn(2, 4, 32, 32, generator=g), timestep=torch.tensor([500.0, 500.0]),
                  encoder_hidden_states=torch.randn(2, 16, 64, generator=g))
    return diffusers.UNet2DConditionModel(**UNET).eval(), inputs


def _flux():
    import diffusers

    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)

    def r(*shape):
        return torch.randn(*shape, generator=g)

    inputs = dict(hidden_states=r(1, 256, 16), encoder_hidden_states=r(1, 64, 64), pooled_projections=r(1, 64),
                  img_ids=r(256, 3), txt_ids=r(64, 3), timestep=torch.tensor([1.0]))
    return diffusers.FluxTransformer2DModel(**FLUX).eval(), inputs


def _variants(model, inputs, epilogue_off):
    """{name: (step(), device)} for tpu eager/compiled, CPU eager/inductor (and tpu compiled without
    the conv/norm epilogue fusion)."""
    tin = {k: v.to("tpu") for k, v in inputs.items()}
    mt = copy.deepcopy(model).to("tpu")
    out = {"tpu eager": (lambda: mt(**tin, return_dict=False)[0], "tpu")}
    options = [("tpu compiled", None)] + ([("tpu compiled, conv_epilogue off", {"conv_epilogue": False})]
                                         if epilogue_off else [])
    for name, opts in options:
        mc = copy.deepcopy(model).to("tpu")
        cm = torch.compile(mc, backend="tpu", dynamic=False, options=opts)
        out[name] = ((lambda cm=cm: cm(**tin, return_dict=False)[0]), "tpu")
    out["cpu eager"] = (lambda: model(**inputs, return_dict=False)[0], "cpu")
    mi = copy.deepcopy(model)
    ci = torch.compile(mi, backend="inductor", dynamic=False)
    out["cpu inductor"] = (lambda: ci(**inputs, return_dict=False)[0], "cpu")
    return out


def _measure(model, inputs, epilogue_off, rounds, per, log, label):
    """({variant: steps/s of its fastest chunk}, {variant: first-call seconds}, {variant: max |out - CPU|})."""
    from torch_tpu._dynamo_backend import compile_stats

    with torch.no_grad():
        ref = model(**inputs, return_dict=False)[0]
        fns = _variants(model, inputs, epilogue_off)
        first, err = {}, {}
        for name, (fn, device) in fns.items():
            s0 = compile_stats()
            t0 = time.perf_counter()
            o = fn()
            _sync(device)
            first[name] = time.perf_counter() - t0
            err[name] = (o.cpu() - ref).abs().max().item()
            if name == "tpu compiled":
                s1 = compile_stats()
                eager = {k: v - s0["eager_ops"].get(k, 0) for k, v in s1["eager_ops"].items()
                         if v > s0["eager_ops"].get(k, 0)}
                log(f"  {label} compiled: {s1['segments'] - s0['segments']} C segment(s), "
                    f"{s1['c_nodes'] - s0['c_nodes']} C nodes, eager ops {eager or 'none'}, "
                    f"{s1['conv_epilogues'] - s0['conv_epilogues']} convolution and "
                    f"{s1['norm_epilogues'] - s0['norm_epilogues']} group-norm epilogues fused, "
                    f"{s1['codegen_groups'] - s0['codegen_groups']} groups as generated code")
        best = {}
        for _ in range(rounds):
            for name, (fn, device) in fns.items():
                fn()  # one untimed step: the other variants ran since
                _sync(device)
                t0 = time.perf_counter()
                for _ in range(per):
                    fn()
                _sync(device)
                dt = (time.perf_counter() - t0) / per
                best[name] = min(dt, best.get(name, dt))
    for name in fns:
        log(f"  {label} {name}: {1e3 * best[name]:.1f} ms/step (first call {first[name]:.1f} s, "
            f"max |out - CPU eager| {err[name]:.1e})")
    return {k: 1.0 / v for k, v in best.items()}, first, err


def _row(workload, v, first, compiled="tpu compiled"):
    r = {"workload": workload, "unit": "steps/s", "tpu_eager": v["tpu eager"], "tpu_compiled": v[compiled],
         "cpu_eager": v["cpu eager"], "cpu_inductor": v["cpu inductor"],
         "first_call_s": f"tpu {first[compiled]:.1f}, inductor {first['cpu inductor']:.1f}"}
    r["compiled_vs_eager"] = r["tpu_compiled"] / r["tpu_eager"]
    r["compiled_vs_inductor"] = r["tpu_compiled"] / r["cpu_inductor"]
    r["compiled_vs_cpu_eager"] = r["tpu_compiled"] / r["cpu_eager"]
    return r


def measure(quick, log=print):
    import torch._dynamo

    rounds, per = (2, 2) if quick else (5, 3)
    rows, ms = [], {}
    for label, build, epilogue_off, workload in (
            ("UNet", _unet, True, "UNet2DConditionModel 32/64/64 ch, 2x4x32x32, one step"),
            ("Flux", _flux, False, "FluxTransformer2DModel 2+4 blocks, 256+64 tokens, one step")):
        torch._dynamo.reset()
        model, inputs = build()
        v, first, err = _measure(model, inputs, epilogue_off, rounds, per, log, label)
        ms[label] = {k: 1e3 / x for k, x in v.items()}
        rows.append(_row(workload, v, first))
        rows[-1]["max_abs_diff_vs_cpu"] = err
        if epilogue_off:
            rows.append(_row("  same, options={'conv_epilogue': False}", v, first, "tpu compiled, conv_epilogue off"))
    return {"rows": rows, "ms_per_step": ms}
