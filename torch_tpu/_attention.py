"""ATen's flash and cuDNN attention ops on tpu, as the fused kernels tpu::sdpa_fwd/_bwd.

`torch.nn.functional.scaled_dot_product_attention` reaches the C kernels through
aten::_scaled_dot_product_fused_attention_overrideable and its backward
(csrc/aten/attention.cpp). Code that calls one backend's op itself does not:
Diffusers' attention backends `_native_flash` and `_native_cudnn` (the ones whose
context-parallel ring attention gets the log-sum-exp it merges partial results
with) call

    aten::_scaled_dot_product_flash_attention(_backward)
    aten::_scaled_dot_product_cudnn_attention(_backward)

which have no CPU kernel either (the CPU's is ..._flash_attention_for_cpu), so on
tpu they raised NotImplementedError from the CPU fallback. `install()` registers
them for PrivateUse1: each is the overrideable op (the same C kernels, any strides,
float32/bfloat16/float16, head dims <= 256), with its results laid out as the op's
meta function in torch/_meta_registrations.py describes:

- output [B, H, L, Ev] in the query's dimension order; logsumexp float32, natural
  log, [B, H, L] (flash) or [B, H, L, 1] (cuDNN); cum_seq_q/k undefined;
  max_q = L, max_k = S; seed and offset as the overrideable op returns them;
  debug mask: empty (flash), undefined (cuDNN);
- the backwards take that logsumexp and return (dq, dk, dv) like the inputs.

Refused as the overrideable op refuses them: dropout_p > 0 (NotImplementedError),
non-4-D inputs, mismatched heads or devices (RuntimeError). return_debug_mask=True
raises NotImplementedError (the kernels never form the probability matrix).
Autograd needs nothing here: PyTorch's formulas for these ops call the backwards.

The CPU's own op, aten::_scaled_dot_product_flash_attention_for_cpu(_backward),
is registered too (code exported on a CPU calls it by name): PyTorch's
decomposition of it returns the attention probabilities [B, H, L, S] where the
op returns the log-sum-exp [B, H, L]. Here it is attention written with device
ops (in float64 for float32 inputs, float32 for bfloat16/float16; the log-sum-exp float32 as the CPU's), any head count that
divides the query's (GQA), with the CPU kernel's checks and its answer for a row
that every key is masked from: output 0 and log-sum-exp 0. The backward is the
softmax's gradient written out with the same device ops.
"""
import torch

_aten = torch.ops.aten
_lib = None


def _no_debug_mask(op, return_debug_mask):
    if return_debug_mask:
        raise NotImplementedError(f"aten::{op}: return_debug_mask=True is not supported on tpu "
                                  "(the fused kernels never form the attention probabilities)")


def _flash(query, key, value, dropout_p=0.0, is_causal=False, return_debug_mask=False, *, scale=None):
    _no_debug_mask("_scaled_dot_product_flash_attention", return_debug_mask)
    out, lse, cq, ck, max_q, max_k, seed, offset, _ = _aten._scaled_dot_product_fused_attention_overrideable(
        query, key, value, None, dropout_p, is_causal, False, scale=scale)
    debug = torch.empty(0, dtype=query.dtype, device=query.device)
    return out, lse, cq, ck, max_q, max_k, seed, offset, debug


def _flash_backward(grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k,
                    dropout_p, is_causal, philox_seed, philox_offset, *, scale=None):
    dq, dk, dv, _ = _aten._scaled_dot_product_fused_attention_overrideable_backward(
        grad_out, query, key, value, None, [True, True, True, False], out, logsumexp, cum_seq_q, cum_seq_k,
        max_q, max_k, dropout_p, is_causal, philox_seed, philox_offset, scale=scale)
    return dq, dk, dv


def _cudnn(query, key, value, attn_bias, compute_log_sumexp, dropout_p=0.0, is_causal=False,
           return_debug_mask=False, *, scale=None):
    _no_debug_mask("_scaled_dot_product_cudnn_attention", return_debug_mask)
    out, lse, cq, ck, max_q, max_k, seed, offset, _ = _aten._scaled_dot_product_fused_attention_overrideable(
        query, key, value, attn_bias, dropout_p, is_causal, False, scale=scale)
    return out, lse.unsqueeze(-1), cq, ck, max_q, max_k, seed, offset, None


def _cudnn_backward(grad_out, query, key, value, out, logsumexp, philox_seed, philox_offset, attn_bias,
                    cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, *, scale=None):
    lse = logsumexp.squeeze(-1) if logsumexp.dim() == 4 else logsumexp
    dq, dk, dv, _ = _aten._scaled_dot_product_fused_attention_overrideable_backward(
        grad_out, query, key, value, attn_bias, [True, True, True, False], out, lse, cum_seq_q, cum_seq_k,
        max_q, max_k, dropout_p, is_causal, philox_seed, philox_offset, scale=scale)
    return dq, dk, dv


_FOR_CPU = "aten::_scaled_dot_product_flash_attention_for_cpu"


def _for_cpu_checks(query, key, value, dropout_p, attn_mask):
    if dropout_p != 0.0:
        raise RuntimeError(f"{_FOR_CPU}: dropout probability must be zero, got {dropout_p}")
    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        raise RuntimeError(f"{_FOR_CPU}: q, k, v must be 4-dimensional tensors, got "
                           f"{query.dim()}, {key.dim()}, {value.dim()}")
    if not query.is_floating_point() or key.dtype != query.dtype or value.dtype != query.dtype:
        raise RuntimeError(f"{_FOR_CPU}: query, key and value must have one floating dtype, got "
                           f"{query.dtype}, {key.dtype}, {value.dtype}")
    if key.size(1) == 0 or query.size(1) % key.size(1) or value.size(1) != key.size(1):
        raise RuntimeError(f"{_FOR_CPU}: {query.size(1)} query heads cannot share {key.size(1)} key heads "
                           f"and {value.size(1)} value heads")
    if attn_mask is not None:
        if attn_mask.dtype != query.dtype:
            raise RuntimeError(f"{_FOR_CPU}: the attention mask must have the query's dtype {query.dtype}, "
                               f"got {attn_mask.dtype}")
        if attn_mask.dim() not in (2, 4):
            raise RuntimeError(f"{_FOR_CPU}: the attention mask must have 2 or 4 dimensions, "
                               f"got {attn_mask.dim()}")


def _for_cpu_math(query, key, value, is_causal, attn_mask, scale):
    """(output in the query's dtype, log-sum-exp, probabilities, the upcast
    key and value repeated per query head, the scale). Computed in float64 for
    float32/float64 inputs: written as separate products, float32 sums are up
    to 5x farther from the exact gradients than the CPU's fused kernel (1.1e-4
    vs 2e-5 on OpInfo's masked sample); float32 for bfloat16/float16."""
    acc = torch.float64 if query.dtype in (torch.float32, torch.float64) else torch.float32
    groups = query.size(1) // key.size(1)
    k, v = key.to(acc), value.to(acc)
    if groups > 1:
        k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    if scale is None:
        scale = 1.0 / query.size(-1) ** 0.5 if query.size(-1) else 1.0
    scores = torch.matmul(query.to(acc), k.transpose(-2, -1)) * scale
    if attn_mask is not None:
        scores = scores + attn_mask.to(acc)
    if is_causal:
        L, S = scores.shape[-2:]
        keep = torch.ones(L, S, dtype=torch.bool, device=query.device).tril()
        scores = scores.masked_fill(keep.logical_not(), float("-inf"))
    lse = torch.logsumexp(scores, -1)
    empty = torch.isneginf(lse)  # every key masked: the CPU kernel gives 0 and 0
    lse = lse.masked_fill(empty, 0.0)
    probs = torch.exp(scores - lse.unsqueeze(-1)).masked_fill(empty.unsqueeze(-1), 0.0)
    lse_dtype = torch.float64 if query.dtype == torch.float64 else torch.float32
    return torch.matmul(probs, v).to(query.dtype), lse.to(lse_dtype), probs, k, v, scale


def _flash_for_cpu(query, key, value, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None):
    _for_cpu_checks(query, key, value, dropout_p, attn_mask)
    out, lse, *_ = _for_cpu_math(query, key, value, is_causal, attn_mask, scale)
    return out, lse


def _flash_for_cpu_backward(grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, *,
                            attn_mask=None, scale=None):
    # softmax backward: dS = P * (dO V^T - rowsum(dO * O)); dQ = dS K s,
    # dK = dS^T Q s, dV = P^T dO, the per-query-head dK, dV summed per key head
    _for_cpu_checks(query, key, value, dropout_p, attn_mask)
    _, _, probs, k, v, scale = _for_cpu_math(query, key, value, is_causal, attn_mask, scale)
    acc = probs.dtype
    d_out = grad_out.to(acc)
    d_probs = torch.matmul(d_out, v.transpose(-2, -1))
    d_scores = probs * (d_probs - (d_probs * probs).sum(-1, keepdim=True))
    dq = torch.matmul(d_scores, k) * scale
    dk = torch.matmul(d_scores.transpose(-2, -1), query.to(acc)) * scale
    dv = torch.matmul(probs.transpose(-2, -1), d_out)
    groups = query.size(1) // key.size(1)
    if groups > 1:
        B, H, S, _ = dk.shape
        dk = dk.reshape(B, H // groups, groups, S, -1).sum(2)
        dv = dv.reshape(B, H // groups, groups, S, -1).sum(2)
    return dq.to(query.dtype), dk.to(key.dtype), dv.to(value.dtype)


def install():
    """Registers the six ops' PrivateUse1 kernels (once per process)."""
    global _lib
    if _lib is not None:
        return
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("_scaled_dot_product_flash_attention", _flash, "PrivateUse1")
    lib.impl("_scaled_dot_product_flash_attention_backward", _flash_backward, "PrivateUse1")
    lib.impl("_scaled_dot_product_cudnn_attention", _cudnn, "PrivateUse1")
    lib.impl("_scaled_dot_product_cudnn_attention_backward", _cudnn_backward, "PrivateUse1")
    lib.impl("_scaled_dot_product_flash_attention_for_cpu", _flash_for_cpu, "PrivateUse1")
    lib.impl("_scaled_dot_product_flash_attention_for_cpu_backward", _flash_for_cpu_backward, "PrivateUse1")
    _lib = lib
