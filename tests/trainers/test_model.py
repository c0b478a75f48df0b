"""The transformer with every PE variant: shapes, gradients, placement, fixed tables, readout."""

import math
from unittest import mock

import pytest
import torch
import torch.nn.functional as F

from trainers.config import ModelConfig, PEConfig
from trainers.model import Block, PETransformer, SelfAttention
from trainers.pe import PE_KINDS, PESpec, build_pe

torch.set_num_threads(1)

ADDITIVE = ["sin1d", "sin2d", "sin3d", "random", "learned"]
FIXED = ["sin1d", "sin2d", "random"]


def coords_for(kind):
    if kind == "sin3d":
        return torch.tensor([[x, y, z] for x in range(2) for y in range(2) for z in range(4)]).float()
    r, c = torch.meshgrid(torch.arange(4), torch.arange(4), indexing="ij")
    return torch.stack([r.flatten(), c.flatten()], 1).float()


def tiny(kind, every_layer=False, **model_kw):
    cfg = ModelConfig(**{"d_model": 24, "n_layers": 2, "n_heads": 2, "mlp_ratio": 2.0, **model_kw})
    torch.manual_seed(0)
    return PETransformer(cfg, PEConfig(kind=kind, every_layer=every_layer, init_std=0.5), coords_for(kind))


def batch(n=5):
    g = torch.Generator().manual_seed(1)
    x = torch.nn.functional.one_hot(torch.randint(0, 6, (n, 16), generator=g), 6)[..., 1:].float()  # (n, 16, 5)
    return x, torch.randint(0, 4, (n,), generator=g)


CASES = [(k, False) for k in PE_KINDS] + [(k, True) for k in ADDITIVE]


@pytest.mark.parametrize("kind,every_layer", CASES)
@pytest.mark.parametrize("norm,readout", [("post", "last"), ("pre", "cls")])
def test_every_variant_runs_forward_and_backward(kind, every_layer, norm, readout):
    model = tiny(kind, every_layer, norm=norm, readout=readout)
    x, y = batch()
    logits = model(x)
    assert logits.shape == (5, 4) and torch.isfinite(logits).all()
    torch.nn.functional.cross_entropy(logits, y).backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    sd = model.state_dict()
    for name in model.pe_param_names():
        assert name in sd
    if kind == "learned":
        tables = dict(model.named_parameters())
        assert all(tables[n].grad.abs().sum() > 0 for n in model.pe_param_names())
    if kind == "relative":
        # with a CLS readout the last layer's table gets no gradient (CLS has no relative position)
        assert model.blocks[0].attn.pe.offset_table.grad.abs().sum() > 0


def test_pe_param_names_follow_placement():
    assert tiny("learned").pe_param_names() == ["pe.table"]
    assert tiny("learned", True).pe_param_names() == ["blocks.0.pe.table", "blocks.1.pe.table"]
    assert tiny("sin2d", True).pe_param_names() == ["blocks.0.pe.table", "blocks.1.pe.table"]
    for kind in ("none", "relative", "rope1d", "rope2d"):
        assert tiny(kind).pe_param_names() == []
    m = tiny("learned", True)
    assert not torch.equal(m.blocks[0].pe.table, m.blocks[1].pe.table)  # a separate table per layer


@pytest.mark.parametrize("kind", FIXED)
@pytest.mark.parametrize("every_layer", [False, True])
def test_fixed_tables_are_saved_but_never_trained(kind, every_layer):
    model = tiny(kind, every_layer)
    names = model.pe_param_names()
    before = {n: model.state_dict()[n].clone() for n in names}
    assert names and all(n in model.state_dict() for n in names)
    assert not any(n in dict(model.named_parameters()) for n in names)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.1)
    x, y = batch()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    for n in names:
        assert torch.equal(model.state_dict()[n], before[n])


def test_learned_table_is_updated_by_a_step():
    model = tiny("learned")
    before = model.pe.table.detach().clone()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = batch()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    assert not torch.equal(model.pe.table.detach(), before)


def test_without_pe_the_model_ignores_token_order_and_with_pe_it_does():
    x, _ = batch(3)
    perm = torch.randperm(16, generator=torch.Generator().manual_seed(2))
    nope = tiny("none", readout="cls").eval()
    with torch.no_grad():
        assert torch.allclose(nope(x), nope(x[:, perm]), atol=1e-5)
    for kind in ("learned", "rope1d", "relative"):
        m = tiny(kind, readout="cls").eval()
        with torch.no_grad():
            assert not torch.allclose(m(x), m(x[:, perm]), atol=1e-4), kind


def test_dropout_acts_in_train_mode_only():
    m = tiny("learned", dropout=0.3)
    x, _ = batch()
    assert not torch.allclose(m(x), m(x))
    m.eval()
    assert torch.equal(m(x), m(x))


@pytest.mark.parametrize("every_layer", [False, True])
def test_dropout_hits_the_embedding_once_whether_the_table_is_at_the_input_or_at_every_layer(every_layer):
    """The first block's attention input is embedding + table after one dropout: with p = 0.5 about half of it is
    zeroed, not three quarters (a second dropout at block 0 once zeroed 0.749 of it with a table at every layer)."""
    m = tiny("learned", every_layer=every_layer, dropout=0.5, n_layers=1).train()
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("pe.table"):
                p.zero_()  # the table adds nothing: only dropout can zero an entry
    seen = []
    m.blocks[0].attn.register_forward_pre_hook(lambda mod, args: seen.append(args[0].detach().clone()))  # post-LN
    torch.manual_seed(3)
    x = torch.ones(64, 16, 5)
    m(x)
    zeroed = float((seen[0] == 0).float().mean())
    assert 0.45 < zeroed < 0.55, zeroed


def test_study_sized_model_shapes():
    m = PETransformer(ModelConfig(), PEConfig(kind="learned", every_layer=True), coords_for("learned"))
    assert len(m.blocks) == 4 and m.blocks[0].mlp.fc.out_features == 640
    assert m.blocks[0].pe.table.shape == (16, 160)


@pytest.mark.parametrize("kind,every_layer", CASES)
@pytest.mark.parametrize("norm,readout", [("post", "last"), ("pre", "cls"), ("post", "cls")])
def test_readout_only_last_layer_gives_the_full_models_logits_and_gradients(kind, every_layer, norm, readout):
    """The pruned last block (one query token) is the same function as running every token through it."""
    model = tiny(kind, every_layer, norm=norm, readout=readout)
    x, y = batch(7)
    grads = []
    for readout_only in (True, False):
        model.zero_grad()
        logits = model(x, readout_only=readout_only)
        torch.nn.functional.cross_entropy(logits, y).backward()
        grads.append((logits.detach(), [p.grad.clone() if p.grad is not None else None for p in model.parameters()]))
    (l_pruned, g_pruned), (l_full, g_full) = grads
    torch.testing.assert_close(l_pruned, l_full, rtol=1e-5, atol=1e-6)
    for a, b in zip(g_pruned, g_full):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def _qkv(tq, t, nh=2, hs=8, b=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(b, nh, n, hs, generator=g, requires_grad=True) for n in (tq, t, t)]


@pytest.mark.parametrize("mask", [None, "float", "bool"])
@pytest.mark.parametrize("tq", [16, 1])
def test_small_cpu_attention_path_equals_the_fused_kernel_in_value_and_gradient(mask, tq):
    """`attend` with <= 32 keys on the CPU (matmul-softmax) is SDPA's function: outputs and gradients."""
    from trainers.model import MATH_ATTENTION_MAX_TOKENS, attend

    assert MATH_ATTENTION_MAX_TOKENS >= 16  # the study's 16 tokens take the fast path
    q, k, v = _qkv(tq, 16)
    g = torch.Generator().manual_seed(5)
    m = {"float": torch.randn(3, 2, tq, 16, generator=g), "bool": torch.rand(3, 2, tq, 16, generator=g) > 0.3, None: None}[mask]
    if mask == "bool":
        m[..., 0] = True  # every row keeps a key (an all-masked row is NaN in both)
    ours = attend(q, k, v, attn_mask=m)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m)
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-6)
    w = torch.randn_like(ref)
    for a, b in zip(torch.autograd.grad((ours * w).sum(), (q, k, v)), torch.autograd.grad((ref * w).sum(), (q, k, v))):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_long_sequences_keep_the_fused_kernel_and_dropout_zeroes_whole_weights():
    from trainers.model import MATH_ATTENTION_MAX_TOKENS, attend

    q, k, v = _qkv(40, 40)
    assert 40 > MATH_ATTENTION_MAX_TOKENS
    torch.testing.assert_close(attend(q, k, v), torch.nn.functional.scaled_dot_product_attention(q, k, v))
    q, k, v = _qkv(16, 16)
    v = torch.eye(16).expand(3, 2, 16, 16)  # output = the (dropped, rescaled) attention weights themselves
    torch.manual_seed(0)
    out = attend(q, k, v, dropout_p=0.5)
    kept = out != 0
    assert 0.3 < kept.float().mean() < 0.7  # about half the weights dropped
    from trainers.model import attention_weights
    torch.testing.assert_close(out[kept], (2 * attention_weights(q, k))[kept])


@pytest.mark.skipif(not __import__("trainers.evaluate").evaluate.cpu_has_bf16(), reason="CPU without native bf16")
def test_small_attention_under_cpu_bf16_autocast_is_close_to_float32():
    from trainers.model import attend

    q, k, v = _qkv(16, 16)
    ref = attend(q, k, v)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = attend(q, k, v)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), ref, rtol=0.05, atol=0.05)


@pytest.mark.skipif(not __import__("trainers.evaluate").evaluate.cpu_has_bf16(), reason="CPU without native bf16")
def test_attention_logits_stay_float32_under_bf16_autocast_as_in_sdpa():
    """The matmul-softmax path takes q k^T in float32 from bf16 inputs, under autocast too (the weights are
    exactly the float32 softmax of the float32 product). Its mean error against a float64 reference stays
    within 1.3x that of SDPA's own fused bf16 kernel (it rounds the weights to bf16 for the product with v,
    as GPU flash kernels do), where rounding the logits to bf16 first, as the plain bf16 product does, more
    than doubles it (2.3x here)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from trainers.model import attend, attention_weights

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(256, 1, 16, 64, generator=g) * s for s in (1.5, 1.5, 1.0))
    qb, kb, vb = q.bfloat16(), k.bfloat16(), v.bfloat16()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        w = attention_weights(qb, kb)
        ours = attend(qb, kb, vb)
    assert w.dtype == torch.float32
    torch.testing.assert_close(w, torch.softmax(qb.float() @ kb.float().transpose(-2, -1) / 8, -1), rtol=0, atol=0)
    ref = torch.nn.functional.scaled_dot_product_attention(qb.double(), kb.double(), vb.double())
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        fused = torch.nn.functional.scaled_dot_product_attention(qb, kb, vb)
    rounded = torch.softmax((qb @ kb.transpose(-2, -1)).float() / 8, -1).bfloat16() @ vb  # bf16 logits
    err = {name: (x.double() - ref).abs().mean().item() for name, x in
           (("ours", ours), ("fused", fused), ("rounded", rounded))}
    assert err["ours"] <= 1.3 * err["fused"] and err["rounded"] > 2 * err["fused"], err
    assert attention_weights(q.double(), k.double()).dtype == torch.float64  # wider inputs keep their precision


@pytest.mark.parametrize("keys,bf16,fused", [(16, False, False), (33, False, True), (64, False, True),
                                             (64, True, False), (80, True, False), (512, True, False),
                                             (513, True, True)])
def test_the_cpu_attention_path_depends_on_length_and_autocast(monkeypatch, keys, bf16, fused):
    """Matmul-softmax up to 32 keys in float32 (the netsim / brain models, 64 / 80 tokens, keep the fused
    kernel their reports were trained with), up to 512 under bf16 autocast; the fused kernel beyond, in
    float32 under autocast."""
    import torch.nn.functional as F

    from trainers.model import attend, math_attention_limit

    calls = []
    real = F.scaled_dot_product_attention

    def spy(q, *a, **kw):
        calls.append(q.dtype)
        return real(q, *a, **kw)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    q, k, v = _qkv(4, keys, nh=1, b=2)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        assert math_attention_limit() == (512 if bf16 else 32)
        out = attend(q, k, v)
    assert calls == ([torch.float32] if fused else [])
    assert out.dtype == (torch.bfloat16 if bf16 and not fused else torch.float32)
    ref = real(q, k, v)
    torch.testing.assert_close(out.float(), ref, **({"rtol": 0.05, "atol": 0.05} if bf16 else {}))


@pytest.mark.parametrize("keys,compiling,math_path", [(16, True, True), (32, True, True), (33, True, False),
                                                      (16, False, False)])
def test_on_a_gpu_only_compiled_steps_with_few_keys_take_the_matmul_softmax_path(monkeypatch, keys, compiling, math_path):
    """Off the CPU (here the meta device stands in for a GPU), the matmul-softmax path is taken only while
    torch.compile traces and with at most 32 keys: what the H200 profile measured faster."""
    from trainers.model import MATH_ATTENTION_MAX_TOKENS_COMPILED_GPU, uses_math_attention

    assert MATH_ATTENTION_MAX_TOKENS_COMPILED_GPU == 32
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: compiling)
    q = torch.empty(2, 1, 4, 8, device="meta")
    k = torch.empty(2, 1, keys, 8, device="meta")
    assert uses_math_attention(q, k) is math_path
    # the CPU rule does not depend on compiling
    assert uses_math_attention(torch.zeros(2, 1, 4, 8), torch.zeros(2, 1, keys, 8)) is (keys <= 32)


@pytest.mark.parametrize("mask", ["none", "shared", "per-row"])
def test_attention_in_batch_chunks_equals_one_call(mask):
    """`sdpa_in_chunks` (batches past the GPU kernel's limit, e.g. an ensemble of 300 evaluated 256 puzzles
    at a time) gives the one-call values, with a mask shared by all rows or one per row."""
    from trainers.model import sdpa_in_chunks

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(7, 2, 16, 8, generator=g) for _ in range(3))
    m = {"none": None, "shared": torch.randn(1, 1, 16, 16, generator=g), "per-row": torch.randn(7, 2, 16, 16, generator=g)}[mask]
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m)
    torch.testing.assert_close(sdpa_in_chunks(q, k, v, m, 0.0, max_rows=4), want)  # 2 rows per chunk: 4 chunks


def _pe_tables(model):
    return [t for n, t in model.named_parameters() if n.endswith("pe.table") or n.endswith("offset_table")]


@pytest.mark.parametrize("kind,every_layer", [("learned", False), ("learned", True), ("relative", False)])
def test_the_models_pe_tables_start_with_the_configured_sigma(kind, every_layer):
    """Kills: PEConfig.init_std not passed on as is (e.g. sigma**2) when the model builds its PEs."""
    sigma = 2.0
    cfg = ModelConfig(d_model=256, n_layers=2, n_heads=1, mlp_ratio=1.0)
    torch.manual_seed(0)
    model = PETransformer(cfg, PEConfig(kind=kind, every_layer=every_layer, init_std=sigma), coords_for(kind))
    tables = _pe_tables(model)
    assert len(tables) == (1 if kind == "learned" and not every_layer else 2)
    for t in tables:  # standard error of a sample std: sigma / sqrt(2 n); allow 5 of them
        assert abs(t.std().item() - sigma) < 5 * sigma / math.sqrt(2 * t.numel())


def test_the_models_pe_tables_follow_the_configured_init():
    """Kills: PEConfig.init not passed on (every table drawn normal)."""
    cfg = ModelConfig(d_model=64, n_layers=2, n_heads=1, mlp_ratio=1.0)
    torch.manual_seed(0)
    zeros = PETransformer(cfg, PEConfig(kind="learned", init="zeros", every_layer=True), coords_for("learned"))
    assert all(t.abs().sum() == 0 for t in _pe_tables(zeros))
    sigma = 0.5
    uni = PETransformer(cfg, PEConfig(kind="relative", init="uniform", init_std=sigma), coords_for("relative"))
    for t in _pe_tables(uni):  # U(-a, a) with a = sigma sqrt(3)
        assert t.abs().max().item() <= sigma * math.sqrt(3) + 1e-6


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_a_block_is_attention_then_a_gelu_mlp_with_residuals_and_layer_norms(norm):
    """Kills: GELU replaced by ReLU; the pre-LN attention residual dropped."""
    cfg = ModelConfig(d_model=24, n_heads=2, mlp_ratio=2.0, norm=norm)
    torch.manual_seed(11)
    block = Block(cfg).eval()
    x = torch.randn(3, 16, 24)

    def mlp(z):  # the study's MLP: Linear, exact GELU, Linear
        hidden = F.gelu(F.linear(z, block.mlp.fc.weight, block.mlp.fc.bias))
        return F.linear(hidden, block.mlp.proj.weight, block.mlp.proj.bias)

    with torch.no_grad():
        if norm == "post":  # x = LN(x + f(x)) around each sublayer
            h = block.ln1(x + block.attn(x))
            want = block.ln2(h + mlp(h))
        else:  # x = x + f(LN(x))
            h = x + block.attn(block.ln1(x))
            want = h + mlp(block.ln2(h))
        torch.testing.assert_close(block(x), want)


@pytest.mark.parametrize("kind", ["rope1d", "rope2d", "relative"])
def test_attention_with_an_attention_pe_is_the_softmax_of_rotated_queries_and_keys_plus_the_bias(kind):
    """Kills: RoPE rotating (q, q) in SelfAttention (the keys replaced by the queries)."""
    cfg = ModelConfig(d_model=16, n_heads=2)
    pe = build_pe(kind, PESpec(16, 2, coords_for(kind), init_std=1.0))
    torch.manual_seed(12)
    attn = SelfAttention(cfg, pe).eval()
    x = torch.randn(3, 16, 16)
    with torch.no_grad():
        q, k, v = (t.view(3, 16, 2, 8).transpose(1, 2) for t in attn.qkv(x).split(16, dim=2))
        bias = pe.attn_bias(q)
        rq, rk = pe.rotate(q, k)
        logits = rq @ rk.transpose(-2, -1) / math.sqrt(8)
        if bias is not None:
            logits = logits + bias
        y = (torch.softmax(logits, -1) @ v).transpose(1, 2).reshape(3, 16, 16)
        want = attn.proj(y)
        torch.testing.assert_close(attn(x), want, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(attn(x, query=15), want[:, 15:16], rtol=1e-5, atol=1e-6)


def test_cpu_attention_hands_its_products_contiguous_operands():
    """A bf16 q, k and v arrive as slices of the fused qkv output (rows 3 C apart); ATen's CPU bmm would copy
    such an operand inside each product that reads it (v in the forward's product and, transposed, the
    backward's; q and k in the logits' backward products). `matmul_attention` makes v contiguous once
    (`CONTIGUOUS_V_DEVICES`) and `trainers.logits.half_logits` q and k (`CONTIGUOUS_OPERANDS_DEVICES`): no
    product copies an operand then, the output and gradients are the same bits, and with the slices passed
    as they are (the control) the products do copy. A float32 step, whose products take strided operands as
    they are, copies nothing."""
    from torch.profiler import profile

    import trainers.logits
    import trainers.model as M
    from trainers.evaluate import cpu_has_bf16

    g = torch.Generator()

    def run(dtype):
        qkv = torch.randn(6, 16, 3 * 8, generator=g).to(dtype).requires_grad_(True)
        up = torch.randn(6, 1, 16, 8, generator=g).to(dtype)
        q, k, v = (t.unsqueeze(1) for t in qkv.split(8, dim=-1))  # (B, 1, T, hs) views, rows 24 apart
        with profile() as prof:
            y = M.matmul_attention(q, k, v)
            (grad,) = torch.autograd.grad(y, qkv, up)
        contiguous = [e.cpu_parent.name if e.cpu_parent else None for e in prof.events() if e.name == "aten::contiguous"]
        return y, grad, contiguous

    g.manual_seed(0)
    y, grad, contiguous = run(torch.bfloat16)
    with mock.patch.object(M, "CONTIGUOUS_V_DEVICES", frozenset()), \
            mock.patch.object(trainers.logits, "CONTIGUOUS_OPERANDS_DEVICES", frozenset()):
        g.manual_seed(0)
        y0, grad0, contiguous0 = run(torch.bfloat16)
    assert contiguous == [None] * 3  # ours: v, q and k once each, outside the products
    if cpu_has_bf16():  # the control: ATen's native-bf16 product copies strided operands (a CPU without
        # native bf16 runs another bf16 kernel, which reads them as they are: seen on an AVX2 CPU)
        assert contiguous0 == ["aten::bmm"] * 4  # v in two products, q and k in the logits' backward
    assert torch.equal(y, y0) and torch.equal(grad, grad0)
    assert run(torch.float32)[2] == []


def test_compiled_cpu_step_keeps_the_matmul_attention():
    """Inductor's attention-fusion pass swaps a 4-d matmul-softmax-matmul chain for the fused SDPA kernel,
    slower on the CPU at these sizes, which is why `attend` takes the matmul path there. `attend`'s products
    are 3-d batches (`trainers.logits.flat_bmm`), which the pass leaves alone, forward and backward; the
    control, the same maths with 4-d ``@``, is rewritten, so the pass is live in this torch and the check
    means something. Both compute the same values."""
    from torch._dynamo.utils import counters

    from trainers.model import attend

    def chain_4d(q, k, v):
        return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v

    def compiled(fn):
        counters.clear()
        torch._dynamo.reset()
        q, k, v = _qkv(16, 16)
        # compiled afresh: a graph from Inductor's caches would skip the passes and count nothing
        with torch._inductor.config.patch(fx_graph_cache=False), \
                torch._functorch.config.patch(enable_autograd_cache=False):
            out = torch.compile(fn)(q, k, v)
            grads = torch.autograd.grad(out.sum(), (q, k, v))
        return counters["inductor"]["fuse_attention"], out, grads

    rewritten, ref, ref_grads = compiled(chain_4d)
    kept, ours, our_grads = compiled(attend)
    assert rewritten > 0 and kept == 0
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-6)
    for a, b in zip(our_grads, ref_grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("every_layer", [False, True])
def test_the_masked_model_drops_out_the_embedding_once(every_layer):
    from trainers.masked_model import MaskedPETransformer

    coords = torch.stack(torch.meshgrid(torch.arange(4.0), torch.arange(4.0), indexing="ij"), -1).reshape(16, 2)
    torch.manual_seed(0)
    m = MaskedPETransformer(ModelConfig(d_model=24, n_layers=1, n_heads=2, mlp_ratio=2.0, dropout=0.5),
                            PEConfig(kind="learned", every_layer=every_layer, init_std=0.5), coords, n_in=3, n_out=1).train()
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("pe.table"):
                p.zero_()
    seen = []
    m.blocks[0].attn.register_forward_pre_hook(lambda mod, args: seen.append(args[0].detach().clone()))
    torch.manual_seed(3)
    m(torch.ones(64, 16, 3))
    assert 0.45 < float((seen[0] == 0).float().mean()) < 0.55


@pytest.mark.parametrize("every_layer", [False, True])
def test_the_ensemble_forward_drops_out_the_embedding_once(every_layer, monkeypatch):
    import trainers.ensemble as E

    m = tiny("learned", every_layer=every_layer, dropout=0.5, n_layers=1).train()
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("pe.table"):
                p.zero_()
    calls, linear = [], E._linear
    monkeypatch.setattr(E, "_linear", lambda x, w, b: calls.append(x.detach().clone()) or linear(x, w, b))
    torch.manual_seed(3)
    E.explicit_forward(m, E.Stack.of([m, m]), torch.ones(2, 64, 16, 5))
    assert 0.45 < float((calls[1] == 0).float().mean()) < 0.55  # block 0's qkv input (post-LN: the residual stream)
