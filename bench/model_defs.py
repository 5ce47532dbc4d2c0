"""The models of `python -m bench --models` (bench/models.py), built with random weights and no
download: GPT-2, Llama, BERT and ViT from `transformers` configs, and ResNet-18 written layer for
layer (tests/frontends/torch_models.py: torchvision's wheel does not import beside the CPU torch
wheel). Every model is f32, in eval mode, and returns one tensor (the last hidden state, or the
logits).

SIZES["issue"] are issue 39's sizes (GPT-2 style: 4 layers, hidden 768, 12 heads, sequence 256,
batch 2; Llama style: 4 layers, hidden 1024, 16 heads, 4 KV heads, intermediate 2816, sequence
256, batch 2; BERT-base style: 4 layers, sequence 256, batch 4; ViT-B/16 style: 4 layers, image
224, batch 4; ResNet-18: batch 8 at 224x224); SIZES["full"], what the bench runs by default, are
those with the changes `ADJUSTED` lists (to bring a call to the 20-300 ms the issue asks for on
the 2-core bench host).
SIZES["tiny"] are the frontend tests' sizes (2 layers, hidden 128; ResNet-18 at 64x64), for
plumbing checks. The vocabulary is 1000 tokens everywhere: the base models end at the last
hidden state (no LM head), so the embedding table's size costs nothing but memory and export
time.
"""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

VOCAB = 1000

# issue 39's sizes
ISSUE_SIZES = {
    "gpt2": {"layers": 4, "hidden": 768, "heads": 12, "seq": 256, "batch": 2},
    "llama": {"layers": 4, "hidden": 1024, "heads": 16, "kv_heads": 4, "intermediate": 2816, "seq": 256, "batch": 2},
    "bert": {"layers": 4, "hidden": 768, "heads": 12, "intermediate": 3072, "seq": 256, "batch": 4},
    "vit": {"layers": 4, "hidden": 768, "heads": 12, "intermediate": 3072, "image": 224, "patch": 16, "batch": 4},
    "resnet18": {"image": 224, "batch": 8, "classes": 1000},
}

# Eager PyTorch on the 2-core bench host (AMD EPYC, 2 threads, 2026-12-06, load average 4-5) took
# 1.40 s (GPT-2), 2.12 s (Llama), 1.86 s (BERT), 1.78 s (ViT) and 1.60 s (ResNet-18) per call at
# the issue's sizes, 5x to 10x over the 20-300 ms the issue asks for: the bench's "full" size keeps
# every model's widths (hidden, heads, intermediate, image, the kernels' shapes) and cuts layers,
# sequence and batch.
ADJUSTED_WHY = ("eager PyTorch took 1.40 s (GPT-2), 2.12 s (Llama), 1.86 s (BERT), 1.78 s (ViT) and 1.60 s "
                "(ResNet-18) per call at the issue's sizes on the 2-core bench host (2 threads, load average 4-5); "
                "the issue asks for 20-300 ms per call")
ADJUSTED = {
    "gpt2": "2 layers (not 4), sequence 128 (not 256), batch 1 (not 2)",
    "llama": "2 layers (not 4), sequence 128 (not 256), batch 1 (not 2)",
    "bert": "2 layers (not 4), sequence 128 (not 256), batch 1 (not 4)",
    "vit": "2 layers (not 4), batch 1 (not 4)",
    "resnet18": "batch 1 (not 8)",
}

SIZES = {
    "full": {
        "gpt2": {**ISSUE_SIZES["gpt2"], "layers": 2, "seq": 128, "batch": 1},
        "llama": {**ISSUE_SIZES["llama"], "layers": 2, "seq": 128, "batch": 1},
        "bert": {**ISSUE_SIZES["bert"], "layers": 2, "seq": 128, "batch": 1},
        "vit": {**ISSUE_SIZES["vit"], "layers": 2, "batch": 1},
        "resnet18": {**ISSUE_SIZES["resnet18"], "batch": 1},
    },
    "issue": ISSUE_SIZES,
    "tiny": {
        "gpt2": {"layers": 2, "hidden": 128, "heads": 4, "seq": 16, "batch": 2},
        "llama": {"layers": 2, "hidden": 128, "heads": 4, "kv_heads": 2, "intermediate": 256, "seq": 16,
                  "batch": 2},
        "bert": {"layers": 2, "hidden": 128, "heads": 4, "intermediate": 256, "seq": 16, "batch": 2},
        "vit": {"layers": 2, "hidden": 128, "heads": 4, "intermediate": 256, "image": 32, "patch": 8,
                "batch": 2},
        "resnet18": {"image": 64, "batch": 2, "classes": 10},
    },
}

MODELS = ("gpt2", "llama", "bert", "vit", "resnet18")


def build(name: str, size: str = "full", overrides: dict | None = None):
    """(model, example args, the size's config) for one model; torch.manual_seed(0) weights."""
    import torch
    cfg = dict(SIZES[size][name])
    cfg.update(overrides or {})
    torch.manual_seed(0)
    model, args = _BUILDERS[name](cfg)
    return model.eval(), args, cfg


def _wrap(inner):
    """The model returning one tensor, its last hidden state: every contender's output is then
    one array (the ONNX export's too)."""
    import torch

    class LastHidden(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x):
            return self.m(x).last_hidden_state

    return LastHidden(inner)


def _tokens(cfg):
    import torch
    g = torch.Generator().manual_seed(1)
    return (torch.randint(0, VOCAB, (cfg["batch"], cfg["seq"]), generator=g),)


def _gpt2(cfg):
    from transformers import GPT2Config, GPT2Model
    m = GPT2Model(GPT2Config(n_layer=cfg["layers"], n_embd=cfg["hidden"], n_head=cfg["heads"],
                             n_positions=max(64, cfg["seq"]), vocab_size=VOCAB, use_cache=False))
    return _wrap(m), _tokens(cfg)


def _llama(cfg):
    from transformers import LlamaConfig, LlamaModel
    m = LlamaModel(LlamaConfig(num_hidden_layers=cfg["layers"], hidden_size=cfg["hidden"],
                               num_attention_heads=cfg["heads"], num_key_value_heads=cfg["kv_heads"],
                               intermediate_size=cfg["intermediate"], vocab_size=VOCAB,
                               max_position_embeddings=max(64, cfg["seq"]), use_cache=False))
    return _wrap(m), _tokens(cfg)


def _bert(cfg):
    from transformers import BertConfig, BertModel
    m = BertModel(BertConfig(num_hidden_layers=cfg["layers"], hidden_size=cfg["hidden"],
                             num_attention_heads=cfg["heads"], intermediate_size=cfg["intermediate"],
                             vocab_size=VOCAB, max_position_embeddings=max(64, cfg["seq"])),
                  add_pooling_layer=False)
    return _wrap(m), _tokens(cfg)


def _vit(cfg):
    import torch
    from transformers import ViTConfig, ViTModel
    m = ViTModel(ViTConfig(num_hidden_layers=cfg["layers"], hidden_size=cfg["hidden"],
                           num_attention_heads=cfg["heads"], intermediate_size=cfg["intermediate"],
                           image_size=cfg["image"], patch_size=cfg["patch"]), add_pooling_layer=False)
    g = torch.Generator().manual_seed(1)
    return _wrap(m), (torch.randn(cfg["batch"], 3, cfg["image"], cfg["image"], generator=g),)


def _resnet18(cfg):
    import torch
    sys.path.insert(0, os.path.join(ROOT, "tests", "frontends"))
    try:
        from torch_models import ResNet18
    finally:
        sys.path.pop(0)
    from torch import nn
    m = ResNet18(classes=cfg["classes"])
    with torch.no_grad():                 # running statistics other than 0/1, as a trained net has
        for mod in m.modules():
            if isinstance(mod, nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.1, 0.1)
                mod.running_var.uniform_(0.5, 1.5)
    g = torch.Generator().manual_seed(1)
    return m, (torch.randn(cfg["batch"], 3, cfg["image"], cfg["image"], generator=g),)


_BUILDERS = {"gpt2": _gpt2, "llama": _llama, "bert": _bert, "vit": _vit, "resnet18": _resnet18}
