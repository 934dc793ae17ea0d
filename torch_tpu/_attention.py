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


def install():
    """Registers the four ops' PrivateUse1 kernels (once per process)."""
    global _lib
    if _lib is not None:
        return
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("_scaled_dot_product_flash_attention", _flash, "PrivateUse1")
    lib.impl("_scaled_dot_product_flash_attention_backward", _flash_backward, "PrivateUse1")
    lib.impl("_scaled_dot_product_cudnn_attention", _cudnn, "PrivateUse1")
    lib.impl("_scaled_dot_product_cudnn_attention_backward", _cudnn_backward, "PrivateUse1")
    _lib = lib
