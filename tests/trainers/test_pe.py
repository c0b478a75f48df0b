"""Positional-encoding variants: formulas, offset invariance, causality, init statistics."""

import math

import numpy as np
import pytest
import torch

from pe_probe.errors import InputError
from trainers.config import ModelConfig
from trainers.model import SelfAttention
from trainers.pe import PE_KINDS, PESpec, build_pe, sinusoid_table

torch.set_num_threads(1)


def grid_coords(h=4, w=4):
    r, c = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    return torch.stack([r.flatten(), c.flatten()], 1).float()  # (h*w, 2) (row, col) row-major


def spec(d=16, heads=1, coords=None, **kw):
    return PESpec(d_model=d, n_heads=heads, coords=grid_coords() if coords is None else coords, **kw)


def attention_logits(pe, q_vec, k_vec, n):
    """Logits (n, n) when every position holds the same query and the same key vector."""
    q = q_vec.expand(1, 1, n, -1).clone()  # (B, nh, T, hs)
    k = k_vec.expand(1, 1, n, -1).clone()
    q, k = pe.rotate(q, k)
    return (q @ k.transpose(-1, -2))[0, 0]


def test_sin2d_matches_the_study_form():
    d = 16
    table = build_pe("sin2d", spec(d)).table
    coords = grid_coords()
    for t in range(16):
        r, c = coords[t].tolist()
        for k in range(d // 4):
            w = 10000 ** (-4 * k / d)
            assert table[t, 2 * k] == pytest.approx(math.sin(c * w), abs=1e-6)
            assert table[t, 2 * k + 1] == pytest.approx(math.cos(c * w), abs=1e-6)
            assert table[t, d // 2 + 2 * k] == pytest.approx(math.sin(r * w), abs=1e-6)
            assert table[t, d // 2 + 2 * k + 1] == pytest.approx(math.cos(r * w), abs=1e-6)


def test_sin1d_is_the_classic_sinusoid_over_the_index():
    table = build_pe("sin1d", spec(8)).table
    pos = 5
    for i in range(4):
        assert table[pos, 2 * i] == pytest.approx(math.sin(pos * 10000 ** (-2 * i / 8)), abs=1e-6)
        assert table[pos, 2 * i + 1] == pytest.approx(math.cos(pos * 10000 ** (-2 * i / 8)), abs=1e-6)


def test_sin3d_uses_three_axes_and_checks_dims():
    c3 = torch.tensor([[x, y, z] for x in range(2) for y in range(2) for z in range(4)]).float()
    t = sinusoid_table(c3, 12)
    assert t.shape == (16, 12)
    # first third encodes the last axis (z): tokens differing only in x share it
    assert torch.allclose(t[0, :4], t[8, :4]) and not torch.allclose(t[0, 8:], t[8, 8:])
    with pytest.raises(InputError):
        build_pe("sin3d", spec(16, coords=c3))  # 16 not divisible by 6
    with pytest.raises(InputError):
        build_pe("sin3d", spec(12))  # 2D coordinates


def test_rope1d_logits_depend_only_on_the_token_offset():
    torch.manual_seed(0)
    pe = build_pe("rope1d", spec(16, heads=2))  # head dim 8
    logits = attention_logits(pe, torch.randn(8), torch.randn(8), 16)
    i, j = np.meshgrid(np.arange(16), np.arange(16), indexing="ij")
    by_offset = {}
    for a, b in zip(i.ravel(), j.ravel()):
        by_offset.setdefault(b - a, []).append(logits[a, b].item())
    for vals in by_offset.values():
        assert np.allclose(vals, vals[0], atol=1e-5)
    firsts = [v[0] for v in by_offset.values()]
    assert np.ptp(firsts) > 1e-2  # it does depend on the offset


def test_rope2d_logits_depend_only_on_the_grid_offset():
    torch.manual_seed(1)
    coords = grid_coords()
    pe = build_pe("rope2d", spec(16, heads=2))  # head dim 8: 4 dims by row, 4 by column
    logits = attention_logits(pe, torch.randn(8), torch.randn(8), 16)
    by_offset = {}
    for a in range(16):
        for b in range(16):
            by_offset.setdefault(tuple((coords[b] - coords[a]).tolist()), []).append(logits[a, b].item())
    for vals in by_offset.values():
        assert np.allclose(vals, vals[0], atol=1e-5)
    # genuinely 2D: same token-index offset (1), different grid offsets (0, 1) vs (1, -3)
    assert abs(logits[0, 1] - logits[3, 4]) > 1e-3


def test_rope_rotates_each_batch_element_alone():
    """The companion code's RoPE mixed across the batch; ours must not."""
    torch.manual_seed(2)
    pe = build_pe("rope1d", spec(8))
    q, k = torch.randn(3, 1, 16, 8), torch.randn(3, 1, 16, 8)
    q2, k2 = q.clone(), k.clone()
    q2[1:] = torch.randn(2, 1, 16, 8)
    (rq, rk), (rq2, rk2) = pe.rotate(q, k), pe.rotate(q2, k2)
    assert torch.allclose(rq[0], rq2[0]) and torch.allclose(rk[0], rk2[0])
    assert torch.allclose(rq.norm(dim=-1), q.norm(dim=-1), atol=1e-5)  # a rotation keeps norms


def _attn_output_change(causal: bool) -> torch.Tensor:
    torch.manual_seed(3)
    cfg = ModelConfig(d_model=16, n_heads=2, dropout=0.0)
    attn = SelfAttention(cfg, build_pe("relative", spec(16, heads=2, causal=causal)))
    x = torch.randn(1, 16, 16)
    x2 = x.clone()
    x2[0, 9] += 1.0  # change a LATER token than token 0
    with torch.no_grad():
        return (attn(x)[0, :9] - attn(x2)[0, :9]).abs().amax()


def test_relative_pe_is_bidirectional_by_default_and_causal_on_request():
    assert _attn_output_change(causal=False) > 1e-4
    assert _attn_output_change(causal=True) < 1e-6


def test_relative_bias_depends_on_clipped_offset():
    torch.manual_seed(4)
    pe = build_pe("relative", spec(8))
    q = torch.randn(1, 1, 1, 8).expand(1, 1, 16, 8)
    bias = pe.attn_bias(q)[0, 0]
    assert torch.isfinite(bias).all()
    assert torch.allclose(bias[0, 5], bias[3, 8]) and not torch.allclose(bias[0, 5], bias[5, 0])
    clipped = PE_KINDS["relative"](spec(8), max_offset=2)
    assert clipped.offset_table.shape == (5, 8)
    b2 = clipped.attn_bias(q)[0, 0]
    assert torch.allclose(b2[0, 3], b2[0, 15])  # offsets 3 and 15 both clip to 2


@pytest.mark.parametrize("kind", ["learned", "relative"])  # every trainable table: the absolute and the offsets
@pytest.mark.parametrize("init", ["normal", "uniform"])
@pytest.mark.parametrize("sigma", [0.1, 2.0])
def test_trainable_table_initial_std_matches_sigma(kind, init, sigma):
    torch.manual_seed(5)
    s = PESpec(d_model=1000, n_heads=1, coords=torch.zeros(200, 2), init=init, init_std=sigma)
    pe = build_pe(kind, s)
    table = pe.table if kind == "learned" else pe.offset_table
    assert isinstance(table, torch.nn.Parameter)
    assert table.std().item() == pytest.approx(sigma, rel=0.03)
    assert abs(table.mean().item()) < 0.05 * sigma
    if init == "uniform":
        assert table.abs().max().item() <= sigma * math.sqrt(3) + 1e-6


def test_zeros_init_and_random_table():
    assert build_pe("learned", spec(16, init="zeros")).table.abs().sum() == 0
    torch.manual_seed(6)
    t = build_pe("random", spec(64)).table
    assert not isinstance(t, torch.nn.Parameter)
    assert t.std().item() == pytest.approx(1.0, rel=0.1)


def test_unknown_kind_and_bad_dims_raise_input_error():
    with pytest.raises(InputError, match="unknown PE kind"):
        build_pe("sin4d", spec())
    with pytest.raises(InputError):
        build_pe("sin2d", spec(6))  # 6 not divisible by 4
    with pytest.raises(InputError):
        build_pe("rope2d", spec(12, heads=2))  # head dim 6 not divisible by 4
    with pytest.raises(InputError):
        build_pe("learned", spec(8, init="orthogonal"))


def _rotate_by_hand(x, angles):
    """Rotate the pairs (2i, 2i+1) of x (T, hs) by angles (T, hs/2): the RoPE formula in float64 numpy."""
    x = np.asarray(x, dtype=np.float64)
    c, s = np.cos(angles), np.sin(angles)
    out = np.empty_like(x)
    out[:, 0::2] = x[:, 0::2] * c - x[:, 1::2] * s
    out[:, 1::2] = x[:, 0::2] * s + x[:, 1::2] * c
    return out


def test_rope1d_rotates_by_the_index_times_the_transformer_frequencies():
    """Kills: wrong RoPE frequency base (pe.py rotary_angles)."""
    hs = 8
    pe = build_pe("rope1d", spec(16, heads=2))  # head dim 8
    torch.manual_seed(7)
    q, k = torch.randn(1, 1, 16, hs), torch.randn(1, 1, 16, hs)
    rq, rk = pe.rotate(q, k)
    ang = np.arange(16)[:, None] * 10000.0 ** (-np.arange(0, hs, 2) / hs)  # Su et al.: pos * 10000^(-2i/hs)
    np.testing.assert_allclose(rq[0, 0].numpy(), _rotate_by_hand(q[0, 0], ang), atol=1e-5)
    np.testing.assert_allclose(rk[0, 0].numpy(), _rotate_by_hand(k[0, 0], ang), atol=1e-5)


def test_rope2d_rotates_the_first_half_by_row_and_the_second_half_by_column():
    """Kills: Rope2D halves swapped; column angles taken from the row coordinate (a 1D RoPE in disguise)."""
    hs = 8
    coords = grid_coords().numpy()  # (row, col)
    pe = build_pe("rope2d", spec(16, heads=2))
    torch.manual_seed(8)
    q = torch.randn(1, 1, 16, hs)
    rq, _ = pe.rotate(q, q.clone())
    freq = 10000.0 ** (-np.arange(0, hs // 2, 2) / (hs // 2))  # the 1D RoPE frequencies of one half (hs/2 dims)
    ang = np.concatenate([coords[:, :1] * freq, coords[:, 1:] * freq], axis=1)  # (16, hs/2): row pairs, then column
    np.testing.assert_allclose(rq[0, 0].numpy(), _rotate_by_hand(q[0, 0], ang), atol=1e-5)


def test_relative_bias_is_the_query_dotted_with_its_offset_vector_over_sqrt_hs():
    """Kills: the 1/sqrt(hs) scale of the relative logit term dropped."""
    hs, n = 8, 16
    pe = build_pe("relative", spec(8))  # one head of 8; offsets -15..15, row = offset + 15
    torch.manual_seed(9)
    q = torch.randn(2, 1, n, hs)
    with torch.no_grad():
        bias = pe.attn_bias(q).numpy()
    table, qn = pe.offset_table.detach().numpy(), q.numpy()
    expected = np.empty((2, 1, n, n))
    for i in range(n):
        for j in range(n):
            expected[:, 0, i, j] = qn[:, 0, i] @ table[(j - i) + (n - 1)] / np.sqrt(hs)
    np.testing.assert_allclose(bias, expected, atol=1e-5)


def test_with_a_cls_token_an_additive_pe_skips_it_and_covers_the_grid_tokens():
    """Kills: the table added to the first N tokens (CLS included, last grid token left out)."""
    pe = build_pe("learned", spec(16, init_std=1.0))
    x = torch.randn(2, 17, 16)  # CLS + 16 grid tokens
    with torch.no_grad():
        out = pe(x)
    assert torch.equal(out[:, 0], x[:, 0])
    torch.testing.assert_close(out[:, 1:], x[:, 1:] + pe.table)


def test_rope1d_refuses_an_odd_head_dim():
    """Kills: the even-head-dim check removed (a raw torch error instead of the InputError)."""
    with pytest.raises(InputError, match="even head dim"):
        build_pe("rope1d", spec(6, heads=2))  # head dim 3
