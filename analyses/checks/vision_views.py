"""Check pe-probe's ViT / DeiT / DINOv2 / CLIP-vision q, k and kernel views against transformers itself.

Not a test: transformers is not a dependency of pe-probe. Tiny random models (every parameter redrawn at a visible
scale, so layer norms, biases and CLS tokens matter) are saved with save_pretrained; pe-probe reads the folders; the
models run on a blank (all-zero) image with eager attention. Kernel reference: layer-0 attention per head, the
CLS / distillation rows and columns dropped, each head's rows renormalised, then averaged over heads (pe-probe's
definition; the last column shows how far averaging heads first would be); q / k: forward hooks on layer 0's
query / key Linears. Prints the largest difference per model and view, and OK when all are below 1e-5.

Run (transformers in a scratch folder, so the project's environment stays as it is):
    .venv/bin/pip install -q --target /tmp/tfpkgs transformers
    PYTHONPATH=.:/tmp/tfpkgs .venv/bin/python analyses/checks/vision_views.py
Last run: transformers 5.24.0, torch 2.13.0+cpu: largest difference 3.4e-06.
"""

import tempfile
import warnings

import numpy as np
import torch
import transformers
from transformers import (CLIPConfig, CLIPModel, CLIPVisionConfig, CLIPVisionModel, DeiTConfig, DeiTModel, Dinov2Config,
                          Dinov2Model, ViTConfig, ViTModel)

from pe_probe.api import analyze_view
from pe_probe.io import open_state
from pe_probe.views import view_tables

warnings.filterwarnings("ignore")
torch.manual_seed(0)
KW = dict(image_size=32, patch_size=8, hidden_size=32, num_attention_heads=2, num_hidden_layers=2,
          intermediate_size=64)


def randomise(model):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.3 * torch.randn_like(p))
            else:
                p.copy_(0.6 * torch.randn_like(p))
    return model.eval()


def reference(model, vision, m, q_mod, k_mod):
    """Layer-0 per-head attention among patches (renormalised), CLS mass, q and k of the patches, blank image."""
    got = {}
    hooks = [mod.register_forward_hook(lambda _m, _i, out, key=key: got.__setitem__(key, out[0, m:].double()))
             for key, mod in (("q", q_mod), ("k", k_mod))]
    with torch.no_grad():
        out = vision(pixel_values=torch.zeros(1, 3, 32, 32), output_attentions=True)
    for h in hooks:
        h.remove()
    A = out.attentions[0][0].double()  # (heads, T, T)
    grid = A[:, m:, m:]
    per_head = (grid / grid.sum(-1, keepdim=True)).numpy()
    naive = A.mean(0)[m:, m:]  # mean over heads first, then drop and renormalise: another definition
    return dict(kernel=per_head.mean(0), per_head=per_head, mass=float(1 - grid.sum(-1).mean()),
                naive=(naive / naive.sum(-1, keepdim=True)).numpy(), q=got["q"].numpy(), k=got["k"].numpy())


def compare(label, folder, ref, param=None):
    state, meta = open_state(folder)
    kw = dict(pe_param=param) if param else {}
    (_, K, info), = view_tables(state, meta, "kernel", **kw)
    heads = view_tables(state, meta, "kernel", per_head=True, **kw)
    (_, q, _), = view_tables(state, meta, "q", **kw)
    (_, k, _), = view_tables(state, meta, "k", **kw)
    res, = analyze_view(folder, "kernel", "grid:4x4", param=param, n_perm=0, n_boot=0, n_null=2, methods="pca")
    d = dict(kernel=np.abs(K - ref["kernel"]).max(),
             per_head=max(np.abs(t - r).max() for (_, t, _), r in zip(heads, ref["per_head"])),
             cls_mass=abs(info["cls_attention_mass"] - ref["mass"]),
             q=np.abs(q - ref["q"]).max(), k=np.abs(k - ref["k"]).max(),
             analyze_view=np.abs(res.table - ref["kernel"]).max())
    print(f"{label:16s} " + "  ".join(f"{n} {v:.1e}" for n, v in d.items())
          + f"  | cls_mass {ref['mass']:.3f}, arch {info['architecture']}, rows {K.shape[0]}, "
          f"extra_tokens {info['extra_tokens']}, head-mean-first kernel differs by {np.abs(K - ref['naive']).max():.1e}")
    return max(d.values())


print("transformers", transformers.__version__, "torch", torch.__version__)
worst = 0.0
with tempfile.TemporaryDirectory() as tmp:
    for label, Cfg, Model, m in (("ViTModel", ViTConfig, ViTModel, 1), ("DeiTModel", DeiTConfig, DeiTModel, 2)):
        model = randomise(Model(Cfg(**KW, attn_implementation="eager")))
        model.save_pretrained(f"{tmp}/{label}")
        att = model.get_submodule("layers.0.attention")  # transformers 5 module names (saved: attention.attention.*)
        worst = max(worst, compare(label, f"{tmp}/{label}", reference(model, model, m, att.q_proj, att.k_proj)))
    model = randomise(Dinov2Model(Dinov2Config(**{k: v for k, v in KW.items() if k != "intermediate_size"},
                                               attn_implementation="eager")))
    model.save_pretrained(f"{tmp}/dinov2")
    names = [n for n, _ in model.named_modules() if n.endswith("0.attention") or n.endswith("0.attention.attention")]
    att = model.get_submodule(names[-1])
    q_mod = getattr(att, "q_proj", None) or getattr(att, "query")
    k_mod = getattr(att, "k_proj", None) or getattr(att, "key")
    worst = max(worst, compare("Dinov2Model", f"{tmp}/dinov2", reference(model, model, 1, q_mod, k_mod)))
    model = randomise(CLIPVisionModel(CLIPVisionConfig(**KW, attn_implementation="eager")))
    model.save_pretrained(f"{tmp}/clipv")
    att = model.get_submodule("encoder.layers.0.self_attn")
    worst = max(worst, compare("CLIPVisionModel", f"{tmp}/clipv", reference(model, model, 1, att.q_proj, att.k_proj)))
    cfg = CLIPConfig(text_config=dict(hidden_size=32, num_attention_heads=2, num_hidden_layers=1, intermediate_size=64,
                                      max_position_embeddings=16),
                     vision_config=dict(KW), attn_implementation="eager")
    model = randomise(CLIPModel(cfg))
    model.save_pretrained(f"{tmp}/clip")
    att = model.vision_model.get_submodule("encoder.layers.0.self_attn")
    worst = max(worst, compare("CLIPModel.vision", f"{tmp}/clip",
                               reference(model, model.vision_model, 1, att.q_proj, att.k_proj),
                               param="vision_model.embeddings.position_embedding.weight"))
    state, meta = open_state(f"{tmp}/clip")
    try:
        view_tables(state, meta, "kernel", pe_param="text_model.embeddings.position_embedding.weight")
    except Exception as e:
        print("CLIP text tower:", type(e).__name__, str(e)[:160], "...")
print(f"worst difference {worst:.1e}:", "OK" if worst < 1e-5 else "MISMATCH")
