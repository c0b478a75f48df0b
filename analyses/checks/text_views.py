"""Check pe-probe's BERT-style, GPT-2-style (and CLIP text) q, k and kernel views against transformers itself.

Not a test: transformers is not a dependency of pe-probe. Tiny random models (every parameter redrawn at a visible
scale, so layer norms, biases, token types and ELECTRA / ALBERT's embedding projection matter; Linear / Conv1D weights
at 1 / sqrt(fan_in), so the softmax is neither flat nor one-hot) are saved with save_pretrained; pe-probe reads the
folders. The word embedding is then zeroed, so the model's layer-0 input is the position part alone, as in the view
(+ token_type_embeddings[0] and the embedding LayerNorm for the BERT family: token_type_ids are passed as zeros); the
models run with eager attention on N = 16 arbitrary ids, N the table's length. RoBERTa: its position ids start at
padding_idx + 1 = 2, so max_position_embeddings = N + 2 = 18 and ids without the padding id 1 give positions 2..17,
exactly the 16 rows that pe-probe keeps after dropping the 2 offset rows (checked: extra_tokens 2, 16 rows).
Kernel reference: layer-0 attention (output_attentions=True) averaged over heads (no special tokens; causal models
are masked by the model itself; GPT-Neo is checked with a global and with a local (window_size 4) first layer);
q / k: forward hooks on layer 0's query / key modules (GPT-2: the fused c_attn, output split [q | k | v]); first call
only (ALBERT shares its layer). Prints the largest difference per model and view, the kernel's mean row maximum (how
peaked it is), and OK when all are below 1e-5. CLIPTextModel is checked if pe-probe supports its table, else noted.

Run (transformers in a scratch folder, so the project's environment stays as it is):
    .venv/bin/pip install -q --target /tmp/tfpkgs transformers
    PYTHONPATH=.:/tmp/tfpkgs .venv/bin/python analyses/checks/text_views.py
Last run: transformers 5.24.0, torch 2.13.0+cpu: largest difference 1.0e-06 (CLIPTextModel included).
"""

import tempfile
import warnings

import numpy as np
import torch
import transformers
from torch import nn
from transformers import (AlbertConfig, AlbertModel, BertConfig, BertModel, CLIPTextConfig, CLIPTextModel,
                          DistilBertConfig, DistilBertModel, ElectraConfig, ElectraModel, GPT2Config, GPT2Model,
                          GPTNeoConfig, GPTNeoModel, RobertaConfig, RobertaModel)
from transformers.pytorch_utils import Conv1D

from pe_probe.api import analyze_view
from pe_probe.errors import InputError
from pe_probe.io import open_state
from pe_probe.views import view_tables

warnings.filterwarnings("ignore")
transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()
torch.manual_seed(0)
N = 16
SMALL = dict(vocab_size=64, bos_token_id=0, eos_token_id=2, pad_token_id=1, attn_implementation="eager")
BERT = dict(SMALL, hidden_size=32, num_attention_heads=2, num_hidden_layers=2, intermediate_size=64,
            max_position_embeddings=N)


def randomise(model):
    """Redraw every parameter: layer-norm weights 1 + 0.3 z, Linear / Conv1D weights z / sqrt(fan_in), the rest
    (embedding tables, biases) 0.6 z; then zero the word embedding, so any ids give a zero token part."""
    with torch.no_grad():
        for mod in model.modules():
            for pname, p in mod.named_parameters(recurse=False):
                if isinstance(mod, nn.LayerNorm) and pname == "weight":
                    p.copy_(1 + 0.3 * torch.randn_like(p))
                elif isinstance(mod, nn.Linear) and pname == "weight":
                    p.copy_(torch.randn_like(p) / p.shape[1] ** 0.5)
                elif isinstance(mod, Conv1D) and pname == "weight":  # (in, out)
                    p.copy_(torch.randn_like(p) / p.shape[0] ** 0.5)
                else:
                    p.copy_(0.6 * torch.randn_like(p))
        model.get_input_embeddings().weight.zero_()
    return model.eval()


def first(model, *suffixes):
    """Layer 0's module whose name ends with one of ``suffixes`` (found in memory, whatever the saved names)."""
    names = [n for n, _ in model.named_modules() if n.endswith(suffixes) and ".0." in n]
    return model.get_submodule(sorted(names, key=len)[0])


def reference(model, q_mod, k_mod, fused=False, token_types=True, low=3):
    """Layer-0 per-head attention, q and k, for N ids in [low, vocab) (no padding id), token types 0."""
    got = {}

    def keep(key):  # first call only (ALBERT's shared layer runs again); returns None, so the output is unchanged
        return lambda _m, _i, out: None if key in got else got.__setitem__(key, out[0].double())

    hooks = [mod.register_forward_hook(keep(key)) for key, mod in (("q", q_mod), ("k", k_mod)) if mod is not None]
    ids = torch.randint(low, 64, (1, N))
    kw = dict(token_type_ids=torch.zeros_like(ids)) if token_types else {}
    with torch.no_grad():
        out = model(input_ids=ids, output_attentions=True, **kw)
    for h in hooks:
        h.remove()
    if fused:  # GPT-2's c_attn: columns [q | k | v]
        d = got["q"].shape[-1] // 3
        got["q"], got["k"] = got["q"][:, :d], got["q"][:, d: 2 * d]
    A = out.attentions[0][0].double().numpy()  # (heads, N, N)
    return dict(kernel=A.mean(0), per_head=A, q=got["q"].numpy(), k=got["k"].numpy())


def compare(label, folder, ref, gt=f"line:{N}"):
    state, meta = open_state(folder)
    (_, K, info), = view_tables(state, meta, "kernel")
    heads = view_tables(state, meta, "kernel", per_head=True)
    (_, q, _), = view_tables(state, meta, "q")
    (_, k, _), = view_tables(state, meta, "k")
    res, = analyze_view(folder, "kernel", gt, n_perm=0, n_boot=0, n_null=2, methods="pca")
    d = dict(kernel=np.abs(K - ref["kernel"]).max(),
             per_head=max(np.abs(t - r).max() for (_, t, _), r in zip(heads, ref["per_head"])),
             q=np.abs(q - ref["q"]).max(), k=np.abs(k - ref["k"]).max(),
             analyze_view=np.abs(res.table - ref["kernel"]).max())
    print(f"{label:18s} " + "  ".join(f"{n} {v:.1e}" for n, v in d.items())
          + f"  | arch {info['architecture']}, rows {K.shape[0]}, extra_tokens {info['extra_tokens']}, "
          f"causal {info['causal']}, window {info['window']}, scale {info['scale']:.3g}, "
          f"mean row max {ref['kernel'].max(1).mean():.2f}")
    return max(d.values())


print("transformers", transformers.__version__, "torch", torch.__version__)
worst = 0.0
with tempfile.TemporaryDirectory() as tmp:
    bert_family = (
        ("BertModel", BertModel(BertConfig(**BERT)), 3),
        # position ids 2..N+1 (ids avoid the padding id 1); pe-probe drops rows 0, 1 of the N + 2
        ("RobertaModel", RobertaModel(RobertaConfig(**dict(BERT, max_position_embeddings=N + 2))), 2),
        ("ElectraModel", ElectraModel(ElectraConfig(**BERT, embedding_size=16)), 3),
        ("AlbertModel", AlbertModel(AlbertConfig(**BERT, embedding_size=16)), 3),
    )
    for label, model, low in bert_family:
        model = randomise(model)
        model.save_pretrained(f"{tmp}/{label}")
        ref = reference(model, first(model, "attention.self.query", "attention.query"),
                        first(model, "attention.self.key", "attention.key"), low=low)
        worst = max(worst, compare(label, f"{tmp}/{label}", ref))

    model = randomise(DistilBertModel(DistilBertConfig(**SMALL, dim=32, n_heads=2, n_layers=2, hidden_dim=64,
                                                       max_position_embeddings=N)))
    model.save_pretrained(f"{tmp}/distilbert")
    ref = reference(model, first(model, "attention.q_lin"), first(model, "attention.k_lin"), token_types=False)
    worst = max(worst, compare("DistilBertModel", f"{tmp}/distilbert", ref))

    model = randomise(GPT2Model(GPT2Config(**SMALL, n_embd=32, n_head=2, n_layer=2, n_positions=N)))
    model.save_pretrained(f"{tmp}/gpt2")
    ref = reference(model, first(model, "attn.c_attn"), None, fused=True, token_types=False)
    worst = max(worst, compare("GPT2Model", f"{tmp}/gpt2", ref))

    for kind in ("global", "local"):
        cfg = GPTNeoConfig(**SMALL, hidden_size=32, num_heads=2, num_layers=2, max_position_embeddings=N,
                           attention_types=[[[kind, "local" if kind == "global" else "global"], 1]], window_size=4)
        model = randomise(GPTNeoModel(cfg))
        model.save_pretrained(f"{tmp}/neo_{kind}")
        ref = reference(model, first(model, "q_proj"), first(model, "k_proj"), token_types=False)
        worst = max(worst, compare(f"GPTNeoModel.{kind}", f"{tmp}/neo_{kind}", ref))

    model = randomise(CLIPTextModel(CLIPTextConfig(**{k: v for k, v in BERT.items() if k != "pad_token_id"})))
    model.save_pretrained(f"{tmp}/clip_text")
    ref = reference(model, first(model, "self_attn.q_proj"), first(model, "self_attn.k_proj"), token_types=False)
    try:
        worst = max(worst, compare("CLIPTextModel", f"{tmp}/clip_text", ref))
    except InputError as e:
        if "clip_text_model" not in str(e):
            raise
        print("CLIP text: not supported")
print(f"worst difference {worst:.1e}:", "OK" if worst < 1e-5 else "MISMATCH")
