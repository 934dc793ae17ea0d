"""Diffusers 0.42.1 on tpu: tiny models and pipelines built from configs (random weights, fixed
seeds, nothing downloaded) run eagerly on tpu and on the CPU; and `ModelMixin.enable_parallelism`
(context parallelism: Ulysses and ring attention; tensor parallelism) on two processes over the
c10d backend "tpu_dist", against one chip.

The model configs are those of Diffusers' own tests (tests/models/transformers/
test_models_transformer_flux.py, tests/pipelines/flux, tests/pipelines/ddpm). Ops that take the
CPU fallback are recorded per test (FALLBACK below), not hidden: a test fails when its set of
fallback ops changes either way.
"""
import os

import pytest
import torch

import torch_tpu
import test_dist

diffusers = pytest.importorskip("diffusers")
from diffusers.models.attention_dispatch import _AttentionBackendRegistry  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "diffusers_worker.py")

# FluxTransformer2DModel as Diffusers' tests build it: 1 double-stream and 1 single-stream block,
# 2 heads of 16, rotary axes 4 + 4 + 8
FLUX = dict(patch_size=1, in_channels=4, num_layers=1, num_single_layers=1, attention_head_dim=16,
            num_attention_heads=2, joint_attention_dim=32, pooled_projection_dim=32, axes_dims_rope=[4, 4, 8])

# {test: ops measured on the CPU fallback (aten names)}
FALLBACK = {
    "flux_transformer": set(),
    "flux_pipeline": set(),
    # UNet2DModel's Upsample2D (interpolate, nearest) has no C kernel: torch._decomp's entry runs it
    # on the device (it took the CPU fallback before decompositions ran on the host driver too).
    "ddpm_pipeline": set(),
}


def flux_inputs(batch=1, text_len=48, seed=0):
    """Inputs of the tiny Flux transformer: 4x4 latent patches, `text_len` text tokens."""
    g = torch.Generator().manual_seed(seed)

    def r(*shape):
        return torch.randn(*shape, generator=g)

    return dict(hidden_states=r(batch, 16, 4), encoder_hidden_states=r(batch, text_len, 32),
                pooled_projections=r(batch, 32), img_ids=r(16, 3), txt_ids=r(text_len, 3),
                timestep=torch.tensor([1.0]).expand(batch))


@pytest.fixture(autouse=True)
def _attention_backend():
    """`set_attention_backend` also sets Diffusers' process-wide active backend: restore it."""
    saved = _AttentionBackendRegistry._active_backend
    yield
    _AttentionBackendRegistry.set_active_backend(saved)


def _fallback_ops(run):
    torch.tpu.synchronize()
    torch_tpu.reset_fallback_report()
    out = run()
    torch.tpu.synchronize()
    return out, set(torch_tpu.fallback_report())


def _flux(device):
    torch.manual_seed(0)
    return diffusers.FluxTransformer2DModel(**FLUX).to(device)


def test_flux_transformer_matches_cpu():
    """Forward and the parameters' gradients (loss = output.sum()) equal the CPU's."""
    inputs = flux_inputs()
    ref_model = _flux("cpu")
    ref = ref_model(**inputs, return_dict=False)[0]
    ref.sum().backward()
    model = _flux("tpu")

    def run():
        out = model(**{k: v.to("tpu") for k, v in inputs.items()}, return_dict=False)[0]
        out.sum().backward()
        return out.cpu()

    got, fallback = _fallback_ops(run)
    assert fallback == FALLBACK["flux_transformer"]
    torch.testing.assert_close(got, ref.detach())
    ref_grads = dict(ref_model.named_parameters())
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad.cpu(), ref_grads[name].grad, rtol=1e-4, atol=1e-5,
                                   msg=lambda m, name=name: f"gradient of {name}: {m}")


def _flux_pipeline(device):
    torch.manual_seed(0)
    transformer = diffusers.FluxTransformer2DModel(**FLUX)
    torch.manual_seed(0)
    vae = diffusers.AutoencoderKL(sample_size=32, in_channels=3, out_channels=3, block_out_channels=(4,),
                                  layers_per_block=1, latent_channels=1, norm_num_groups=1, use_quant_conv=False,
                                  use_post_quant_conv=False, shift_factor=0.0609, scaling_factor=1.5035)
    # no text encoders: the prompt embeddings are given
    pipe = diffusers.FluxPipeline(scheduler=diffusers.FlowMatchEulerDiscreteScheduler(), vae=vae, text_encoder=None,
                                  tokenizer=None, text_encoder_2=None, tokenizer_2=None, transformer=transformer)
    pipe.set_progress_bar_config(disable=True)
    return pipe.to(device)


def test_flux_pipeline_matches_cpu():
    """FluxPipeline (transformer, flow-matching Euler scheduler, VAE decoder), 2 steps."""
    g = torch.Generator().manual_seed(1)
    embeds, pooled = torch.randn(1, 48, 32, generator=g), torch.randn(1, 32, generator=g)

    def run(device):
        return _flux_pipeline(device)(
            prompt_embeds=embeds.to(device), pooled_prompt_embeds=pooled.to(device), height=8, width=8,
            num_inference_steps=2, max_sequence_length=48, generator=torch.Generator().manual_seed(0),
            output_type="pt").images.cpu()

    ref = run("cpu")
    got, fallback = _fallback_ops(lambda: run("tpu"))
    assert fallback == FALLBACK["flux_pipeline"]
    assert got.shape == (1, 3, 8, 8)
    torch.testing.assert_close(got, ref)


def test_ddpm_unet_pipeline_matches_cpu():
    """DDPMPipeline over a tiny UNet2DModel (ResNet and attention blocks, down and up sampling), 3 steps."""

    def run(device):
        torch.manual_seed(0)
        unet = diffusers.UNet2DModel(block_out_channels=(4, 8), layers_per_block=1, norm_num_groups=4, sample_size=8,
                                     in_channels=3, out_channels=3, down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                                     up_block_types=("AttnUpBlock2D", "UpBlock2D"))
        pipe = diffusers.DDPMPipeline(unet=unet, scheduler=diffusers.DDPMScheduler(num_train_timesteps=10)).to(device)
        pipe.set_progress_bar_config(disable=True)
        images = pipe(generator=torch.Generator().manual_seed(0), num_inference_steps=3, output_type="np").images
        return torch.from_numpy(images)

    ref = run("cpu")
    got, fallback = _fallback_ops(lambda: run("tpu"))
    assert fallback == FALLBACK["ddpm_pipeline"]
    torch.testing.assert_close(got, ref)


# UNet2DConditionModel close to Diffusers' own tests' tiny config (2 resolutions, cross-attention
# down and up blocks, a mid block), with 8/16 channels in 4 groups
UNET_COND = dict(block_out_channels=(8, 16), layers_per_block=1, sample_size=16, in_channels=4, out_channels=4,
                 down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                 up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=8, attention_head_dim=2,
                 norm_num_groups=4)


def _unet_cond_inputs():
    g = torch.Generator().manual_seed(0)
    return dict(sample=torch.randn(2, 4, 16, 16, generator=g), timestep=torch.tensor([10.0, 10.0]),
                encoder_hidden_states=torch.randn(2, 5, 8, generator=g))


DRIVER = torch_tpu._C.selected_driver()  # "host", or "pjrt" (TORCH_TPU_DRIVER=pjrt)


def _compiled_stats(run):
    """(run(), its CPU fallback ops, compile_stats deltas, eager ops of the graphs it compiled)."""
    from torch_tpu._dynamo_backend import compile_stats

    torch._dynamo.reset()
    s0 = compile_stats()
    out, fallback = _fallback_ops(run)
    s1 = compile_stats()
    eager = {k: v - s0["eager_ops"].get(k, 0) for k, v in s1["eager_ops"].items() if v > s0["eager_ops"].get(k, 0)}
    return out, fallback, {k: s1[k] - s0[k] for k in ("segments", "eager_nodes", "conv_epilogues", "norm_epilogues")}, eager


def _check_compiled_unet(st, eager, segments):
    """On the host driver: `segments` C segments, nothing eager, convolutions and group norms
    heading fused groups. On pjrt (graphs lowered to StableHLO, no fusion here): `segments`
    programs with the convolutions and group norms in them, nothing eager."""
    assert st["segments"] == segments and st["eager_nodes"] == 0 and not eager, (st, eager)
    if DRIVER == "host":
        assert st["conv_epilogues"] > 0 and st["norm_epilogues"] > 0, st


@pytest.mark.parametrize("kind", ["condition", "ddpm"])
def test_compiled_unet_forward_matches_eager_and_cpu(kind):
    """torch.compile(backend="tpu") of a tiny UNet2DConditionModel and of the DDPM test's UNet2DModel:
    one C segment, nothing eager (convolutions are tpu::conv_fwd nodes, group norms tpu::group_norm
    nodes), convolutions and group norms heading fused groups with their epilogues (time-embedding
    and residual adds, SiLU); on pjrt see _check_compiled_unet. The output equals eager tpu and the
    CPU (rtol 1e-4, atol 1e-5: differences seen are ~1e-6, from summation orders)."""
    torch.manual_seed(0)
    if kind == "condition":
        model, inputs = diffusers.UNet2DConditionModel(**UNET_COND).eval(), _unet_cond_inputs()
    else:
        model = diffusers.UNet2DModel(block_out_channels=(4, 8), layers_per_block=1, norm_num_groups=4, sample_size=8,
                                      in_channels=3, out_channels=3, down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                                      up_block_types=("AttnUpBlock2D", "UpBlock2D")).eval()
        inputs = dict(sample=torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(0)),
                      timestep=torch.tensor([3.0, 3.0]))
    with torch.no_grad():
        ref = model(**inputs, return_dict=False)[0]
        model.to("tpu")
        tin = {k: v.to("tpu") for k, v in inputs.items()}
        eager = model(**tin, return_dict=False)[0].cpu()
        cmodel = torch.compile(model, backend="tpu", fullgraph=True, dynamic=False)
        got, fallback, st, eager_ops = _compiled_stats(lambda: cmodel(**tin, return_dict=False)[0].cpu())
    assert fallback == set()
    _check_compiled_unet(st, eager_ops, 1)
    torch.testing.assert_close(got, eager, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5)


def test_compiled_unet_training_step_matches_cpu():
    """Forward and backward of the tiny UNet2DConditionModel compiled: a forward and a backward C
    segment, nothing eager (convolution_backward is tpu::conv_bwd); the output and every parameter's
    gradient (loss = mean of the squared output) equal the CPU's (rtol 1e-4, atol 1e-5)."""
    inputs = _unet_cond_inputs()
    torch.manual_seed(0)
    ref_model = diffusers.UNet2DConditionModel(**UNET_COND)
    ref = ref_model(**inputs, return_dict=False)[0]
    ref.square().mean().backward()
    torch.manual_seed(0)
    model = diffusers.UNet2DConditionModel(**UNET_COND).to("tpu")
    cmodel = torch.compile(model, backend="tpu", fullgraph=True, dynamic=False)

    def run():
        out = cmodel(**{k: v.to("tpu") for k, v in inputs.items()}, return_dict=False)[0]
        out.square().mean().backward()
        return out.detach().cpu()

    got, fallback, st, eager_ops = _compiled_stats(run)
    assert fallback == set()
    _check_compiled_unet(st, eager_ops, 2)
    torch.testing.assert_close(got, ref.detach(), rtol=1e-4, atol=1e-5)
    ref_grads = dict(ref_model.named_parameters())
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad.cpu(), ref_grads[name].grad, rtol=1e-4, atol=1e-5,
                                   msg=lambda m, name=name: f"gradient of {name}: {m}")


@pytest.mark.parametrize("backend", ["_native_flash", "_native_cudnn"])
def test_flash_and_cudnn_backends_one_chip(backend):
    """Diffusers' flash and cuDNN backends wrap F.scaled_dot_product_attention in
    sdpa_kernel(FLASH_ATTENTION / CUDNN_ATTENTION): tpu's fused kernel runs."""
    inputs = flux_inputs()
    with torch.no_grad():  # before set_attention_backend, which is process-wide (the CPU has no cuDNN)
        ref = _flux("cpu")(**inputs, return_dict=False)[0]
    model = _flux("tpu")
    model.set_attention_backend(backend)
    with torch.no_grad():
        got, fallback = _fallback_ops(lambda: model(**{k: v.to("tpu") for k, v in inputs.items()},
                                                    return_dict=False)[0].cpu())
    assert not fallback
    torch.testing.assert_close(got, ref)


# ------------------------------------------------ enable_parallelism on 2 processes (tpu_dist)
# Each rank runs tests/diffusers_worker.py; see its cases for what each compares.


def test_parallel_forward_equals_one_chip():
    """ContextParallelConfig(ulysses_degree=2) (backend "native"), ContextParallelConfig(ring_degree=2)
    (backend "_native_flash") and TensorParallelConfig(tp_degree=2): the Flux transformer's output
    equals one chip's, with no CPU fallback."""
    cases = ["ulysses", "ring", "tp"]
    test_dist.check_passed(test_dist.ranks("tpu_dist", cases, worker=WORKER), cases)


@pytest.mark.slow
def test_parallel_variants_and_backward():
    """Ring over `_native_cudnn`, Ulysses over `_native_flash`, bfloat16, batch 2, the
    `ulysses_anything`/`ring_anything` modes with a text length that does not divide by 2;
    FluxPipeline's images with its transformer under Ulysses attention; and the gradients of
    Ulysses and ring attention, summed over the ranks, equal one chip's."""
    cases = ["more", "pipeline", "backward"]
    test_dist.check_passed(test_dist.ranks("tpu_dist", cases, worker=WORKER), cases)
