"""Hugging Face `Trainer` on device "tpu", as a user would run it: no device
argument at all. TrainingArguments picks "tpu:0" by itself (Transformers'
`is_torch_tpu_available()` sees torch.accelerator's current accelerator), and
`use_cpu=True` gives the CPU reference run.

A tiny random Llama is fine-tuned for a few steps with AdamW (weight decay,
gradient clipping, linear schedule) on an in-memory dataset; the per-step
training losses, gradient norms and the final weights equal the CPU run's.
"""
import copy

import pytest
import torch
import torch_tpu

import transformers
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

transformers.logging.set_verbosity_error()

STEPS = 5
VOCAB, SEQ, BATCH = 128, 12, 4


def _model():
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, intermediate_size=64, max_position_embeddings=64,
                      pad_token_id=0, bos_token_id=1, eos_token_id=2, attn_implementation="sdpa")
    return LlamaForCausalLM(cfg)


def _dataset():
    g = torch.Generator().manual_seed(1)
    rows = []
    for _ in range(STEPS * BATCH):
        ids = torch.randint(3, VOCAB, (SEQ,), generator=g)
        mask = torch.ones(SEQ, dtype=torch.long)
        pad = int(torch.randint(0, 4, (), generator=g))  # right padding, ignored by the loss
        if pad:
            ids[-pad:] = 0
            mask[-pad:] = 0
        labels = ids.clone()
        labels[mask == 0] = -100
        rows.append({"input_ids": ids, "attention_mask": mask, "labels": labels})
    return rows


def _train(model, out_dir, use_cpu):
    args = TrainingArguments(
        output_dir=str(out_dir), use_cpu=use_cpu, max_steps=STEPS, per_device_train_batch_size=BATCH,
        learning_rate=3e-3, weight_decay=0.01, max_grad_norm=1.0, lr_scheduler_type="linear",
        optim="adamw_torch", logging_steps=1, save_strategy="no", report_to=[], seed=0, data_seed=0,
        disable_tqdm=True, dataloader_num_workers=0, dataloader_pin_memory=False)
    trainer = Trainer(model=model, args=args, train_dataset=_dataset())
    device = args.device
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    return device, trainer, logs


def test_trainer_matches_cpu(tmp_path, no_fallback):
    base = _model()
    cpu_dev, cpu_trainer, cpu_logs = _train(copy.deepcopy(base), tmp_path / "cpu", use_cpu=True)
    torch_tpu.reset_fallback_report()
    tpu_dev, tpu_trainer, tpu_logs = _train(copy.deepcopy(base), tmp_path / "tpu", use_cpu=False)

    assert cpu_dev.type == "cpu"
    assert tpu_dev == torch.device("tpu", 0)  # chosen by TrainingArguments, not by the test
    assert all(p.device == tpu_dev for p in tpu_trainer.model.parameters())
    # the optimizer state lives on the device too
    states = list(tpu_trainer.optimizer.state.values())
    assert states and all(s["exp_avg"].device == tpu_dev for s in states)
    assert torch_tpu.fallback_report() == {}

    assert [h["step"] for h in tpu_logs] == list(range(1, STEPS + 1))
    assert [h["step"] for h in cpu_logs] == list(range(1, STEPS + 1))
    for key in ("loss", "grad_norm", "learning_rate"):
        torch.testing.assert_close(torch.tensor([h[key] for h in tpu_logs], dtype=torch.float64),
                                   torch.tensor([h[key] for h in cpu_logs], dtype=torch.float64),
                                   rtol=1e-4, atol=1e-5, msg=lambda m: f"{key}: {m}")
    # the model learned something (losses are not constant), so the comparison is meaningful
    assert cpu_logs[-1]["loss"] < cpu_logs[0]["loss"]

    cpu_sd = cpu_trainer.model.state_dict()
    for name, t in tpu_trainer.model.state_dict().items():
        torch.testing.assert_close(t.cpu(), cpu_sd[name], rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")
        # and the weights did move away from their initial values
    moved = [n for n, t in base.state_dict().items() if not torch.equal(t, cpu_sd[n])]
    assert len(moved) > len(cpu_sd) // 2


def test_training_arguments_device():
    args = TrainingArguments(output_dir="unused", report_to=[])
    assert args.device == torch.device("tpu", 0)
    assert args.n_gpu == 1
    assert TrainingArguments(output_dir="unused", report_to=[], use_cpu=True).device.type == "cpu"
