"""The real models the frontends' tests run: GPT-2, Llama, BERT and ViT from `transformers` with
random weights and tiny configs (2 layers, hidden 128), and ResNet-18. Nothing is downloaded.

ResNet-18 is written here, layer for layer as torchvision and timm define it (7x7/2 stem conv,
batch norm, ReLU, 3x3/2 max pool, four stages of two basic blocks with 1x1/2 projection
shortcuts, global average pool, linear head): PyPI's torchvision wheel for Linux is a CUDA build
that fails to import beside the CPU torch wheel, and timm imports torchvision at import time.
"""
from __future__ import annotations

import torch
from torch import nn

SEQ = 16
BATCH = 2


def _eval(m):
    torch.manual_seed(0)
    return m.eval()


def gpt2():
    from transformers import GPT2Config, GPT2Model
    torch.manual_seed(0)
    m = GPT2Model(GPT2Config(n_layer=2, n_embd=128, n_head=4, n_positions=64, vocab_size=1000, use_cache=False))
    return m.eval(), (torch.randint(0, 1000, (BATCH, SEQ)),)


def llama():
    from transformers import LlamaConfig, LlamaModel
    torch.manual_seed(0)
    m = LlamaModel(LlamaConfig(num_hidden_layers=2, hidden_size=128, num_attention_heads=4, num_key_value_heads=2,
                               intermediate_size=256, vocab_size=1000, max_position_embeddings=64, use_cache=False))
    return m.eval(), (torch.randint(0, 1000, (BATCH, SEQ)),)


def bert():
    from transformers import BertConfig, BertModel
    torch.manual_seed(0)
    m = BertModel(BertConfig(num_hidden_layers=2, hidden_size=128, num_attention_heads=4, intermediate_size=256,
                             vocab_size=1000, max_position_embeddings=64))
    return m.eval(), (torch.randint(0, 1000, (BATCH, SEQ)),)


def vit():
    from transformers import ViTConfig, ViTModel
    torch.manual_seed(0)
    m = ViTModel(ViTConfig(num_hidden_layers=2, hidden_size=128, num_attention_heads=4, intermediate_size=256,
                           image_size=32, patch_size=8))
    return m.eval(), (torch.randn(BATCH, 3, 32, 32),)


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + (x if self.down is None else self.down(x)))


class ResNet18(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        chans = [(64, 64, 1), (64, 128, 2), (128, 256, 2), (256, 512, 2)]
        self.stages = nn.Sequential(*[nn.Sequential(BasicBlock(a, b, s), BasicBlock(b, b, 1)) for a, b, s in chans])
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.stages(self.stem(x))), 1))


def resnet18():
    torch.manual_seed(0)
    m = ResNet18()
    with torch.no_grad():                 # running statistics other than 0/1, as a trained net has
        for mod in m.modules():
            if isinstance(mod, nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.1, 0.1)
                mod.running_var.uniform_(0.5, 1.5)
    return m.eval(), (torch.randn(BATCH, 3, 64, 64),)


MODELS = {"gpt2": gpt2, "llama": llama, "bert": bert, "vit": vit, "resnet18": resnet18}
ATTENTION_LAYERS = {"gpt2": 2, "llama": 2, "bert": 2, "vit": 2, "resnet18": 0}
