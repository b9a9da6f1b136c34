"""Checks of the NumPy reference itself against values worked by hand from
`shared/docs/positional-encodings.md`, and against naive loop versions."""

import math

import numpy as np
import pytest

try:
    from . import numpy_reference as ref
except ImportError:  # tests/ is not a package: pytest puts tests/ on sys.path
    import numpy_reference as ref


# ---------------------------------------------------------------------------
# T5 buckets
# ---------------------------------------------------------------------------


def _spec_bucket(rel):
    """The bucket table stated in the spec (defaults 32 / 128, bidirectional)."""
    n = abs(rel)
    ranges = [(8, 11, 8), (12, 15, 9), (16, 22, 10), (23, 31, 11), (32, 45, 12),
              (46, 63, 13), (64, 90, 14)]
    if n <= 7:
        b = n
    elif n >= 91:
        b = 15
    else:
        b = next(v for lo, hi, v in ranges if lo <= n <= hi)
    return b + (16 if rel > 0 else 0)


def test_t5_bucket_matches_spec_table():
    rel = np.arange(-300, 301)
    got = ref.t5_relative_position_bucket(rel)
    expected = np.array([_spec_bucket(int(r)) for r in rel])
    np.testing.assert_array_equal(got, expected)
    assert got.dtype == np.int64


def test_t5_bucket_boundaries_explicit():
    rel = np.array([0, -7, -8, -11, -12, -15, -16, -22, -23, -31, -32, -45, -46,
                    -63, -64, -90, -91, -128, -10_000])
    expected = [0, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15, 15]
    np.testing.assert_array_equal(ref.t5_relative_position_bucket(rel), expected)
    np.testing.assert_array_equal(
        ref.t5_relative_position_bucket(-rel[1:]), np.array(expected[1:]) + 16
    )


def test_t5_bucket_range_and_16_never_produced():
    got = ref.t5_relative_position_bucket(ref.relative_positions(300, 300))
    assert set(np.unique(got)) == set(range(32)) - {16}


def test_t5_bucket_keeps_shape():
    rel = np.array([[[1, -1], [0, 100]]])
    got = ref.t5_relative_position_bucket(rel)
    assert got.shape == rel.shape
    np.testing.assert_array_equal(got, [[[17, 1], [0, 31]]])  # 100 >= 91 -> 15 + 16


def test_t5_bucket_unidirectional():
    # num_buckets 32, max_exact 16: n < 16 -> n; else 16 + int(log(n/16)/log(8)*16).
    # n=32: log2/log8*16 = 5.33 -> 21; n=64: 10.67 -> 26; n=127: 15.94 -> 31;
    # n=128: 16 -> 32, capped at 31. Keys after the query (rel > 0) -> 0.
    rel = np.array([0, -1, -15, -16, -32, -64, -127, -128, -5000, 1, 50])
    expected = [0, 1, 15, 16, 21, 26, 31, 31, 31, 0, 0]
    np.testing.assert_array_equal(
        ref.t5_relative_position_bucket(rel, bidirectional=False), expected
    )


def test_relative_positions_is_key_minus_query():
    np.testing.assert_array_equal(ref.relative_positions(2, 3), [[0, 1, 2], [-1, 0, 1]])


def test_t5_bias_gathers_per_head():
    num_buckets = 32
    table = np.array([[100.0 * h + b for h in range(2)] for b in range(num_buckets)])
    got = ref.t5_bias(table, 3, 3)
    # rel = [[0, 1, 2], [-1, 0, 1], [-2, -1, 0]] -> buckets:
    buckets = np.array([[0, 17, 18], [1, 0, 17], [2, 1, 0]])
    assert got.shape == (2, 3, 3)
    np.testing.assert_array_equal(got[0], buckets)
    np.testing.assert_array_equal(got[1], buckets + 100)


# ---------------------------------------------------------------------------
# Building blocks
# ---------------------------------------------------------------------------


def test_layer_norm_biased_variance_and_affine():
    # x = [1, 3]: mean 2, biased var 1 -> [-1, 1]; * [2, 3] + [0.5, -1] -> [-1.5, 2].
    got = ref.layer_norm(np.array([[1.0, 3.0]]), np.array([2.0, 3.0]), np.array([0.5, -1.0]), 0.0)
    np.testing.assert_allclose(got, [[-1.5, 2.0]], rtol=0, atol=1e-15)
    # epsilon is added to the variance: var 1 + eps 3 -> divide by 2.
    got = ref.layer_norm(np.array([1.0, 3.0]), np.ones(2), np.zeros(2), 3.0)
    np.testing.assert_allclose(got, [-0.5, 0.5], rtol=0, atol=1e-15)


def test_gelu_is_exact_erf_form():
    got = ref.gelu(np.array([-1.0, 0.0, 1.0, 2.0]))
    # x * Phi(x): Phi(1) = 0.8413447460685429, Phi(2) = 0.9772498680518208.
    expected = [-(1 - 0.8413447460685429), 0.0, 0.8413447460685429, 2 * 0.9772498680518208]
    # The tanh approximation gives 0.841192 at x = 1, far outside this tolerance.
    np.testing.assert_allclose(got, expected, rtol=1e-13, atol=1e-15)


def test_softmax_values_and_stability():
    np.testing.assert_allclose(ref.softmax(np.array([0.0, math.log(2.0)])), [1 / 3, 2 / 3])
    np.testing.assert_allclose(ref.softmax(np.array([1000.0, 1000.0 + math.log(3.0)])), [0.25, 0.75])
    np.testing.assert_allclose(ref.softmax(np.array([[0.0, -np.inf]]), axis=-1), [[1.0, 0.0]])


def test_split_heads_takes_contiguous_columns():
    x = np.arange(12.0).reshape(2, 6)
    got = ref.split_heads(x, 3)
    assert got.shape == (3, 2, 2)
    np.testing.assert_array_equal(got[1], [[2, 3], [8, 9]])
    np.testing.assert_array_equal(got[2], [[4, 5], [10, 11]])


# ---------------------------------------------------------------------------
# TUPE
# ---------------------------------------------------------------------------


def test_untied_correlation_one_head_by_hand():
    # d = 2, h = 1, eps = 0. LN([3, 5]) = [-1, 1]; LN([7, 1]) = [1, -1].
    # Row 2 is unused at seq_len 2 (and would change the answer if used).
    p = np.array([[3.0, 5.0], [7.0, 1.0], [0.0, 100.0]])
    wq, bq = np.eye(2), np.zeros(2)
    wk, bk = np.array([[2.0, 0.0], [0.0, 1.0]]), np.array([1.0, 0.0])
    args = (p, np.ones(2), np.zeros(2), wq, bq, wk, bk, 1, 2, 0.0)
    pq, pk = ref.untied_projections(*args)
    np.testing.assert_allclose(pq[0], [[-1, 1], [1, -1]], atol=1e-12)
    # PK = P wk + bk: [-2, 1] + [1, 0] = [-1, 1]; [2, -1] + [1, 0] = [3, -1].
    np.testing.assert_allclose(pk[0], [[-1, 1], [3, -1]], atol=1e-12)
    # A = PQ PK^T / sqrt(2 * 2).
    got = ref.untied_correlation(*args)
    np.testing.assert_allclose(got, [[[1.0, -2.0], [-1.0, 2.0]]], atol=1e-12)


def test_untied_correlation_two_heads_by_hand():
    # Rows already normalized (mean 0, var 1), so LN with eps 0 keeps them.
    p = np.array([[1.0, -1.0, 1.0, -1.0], [1.0, 1.0, -1.0, -1.0]])
    wk = np.diag([1.0, 2.0, 3.0, 4.0])
    got = ref.untied_correlation(
        p, np.ones(4), np.zeros(4), np.eye(4), np.zeros(4), wk, np.zeros(4), 2, 2, 0.0
    )
    # d_h = 2, scale 1/sqrt(4) = 1/2.
    # head 0: PQ [1,-1], [1,1]; PK [1,-2], [1,2]
    # head 1: PQ [1,-1], [-1,-1]; PK [3,-4], [-3,-4]
    expected = [[[1.5, -0.5], [-0.5, 1.5]], [[3.5, 0.5], [0.5, 3.5]]]
    np.testing.assert_allclose(got, expected, atol=1e-12)


def test_untied_rejects_sequence_longer_than_table():
    p = np.zeros((3, 2))
    with pytest.raises(ValueError, match="3 positions"):
        ref.untied_correlation(p, np.ones(2), np.zeros(2), np.eye(2), np.zeros(2),
                               np.eye(2), np.zeros(2), 1, 4, 1e-12)


def test_cls_reset_3x3_by_hand():
    v = np.array([[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]]] * 2)
    v[1] *= 10
    got = ref.cls_reset(v, theta1=np.array([-1.0, -10.0]), theta2=np.array([-2.0, -20.0]))
    expected0 = [[-1, -1, -1], [-2, 5, 6], [-2, 8, 9]]
    expected1 = [[-10, -10, -10], [-20, 50, 60], [-20, 80, 90]]
    np.testing.assert_array_equal(got, [expected0, expected1])
    assert v[0, 0, 0] == 1.0  # input untouched


# ---------------------------------------------------------------------------
# Attention logits
# ---------------------------------------------------------------------------

# A 3-token, 1-head, d_h = 1 example: q = [1, 2, 3], k = [1, 1, 2].
Q3 = np.array([1.0, 2.0, 3.0]).reshape(1, 3, 1)
K3 = np.array([1.0, 1.0, 2.0]).reshape(1, 3, 1)
# q_i k_j = [[1, 1, 2], [2, 2, 4], [3, 3, 6]]; j - i = [[0,1,2],[-1,0,1],[-2,-1,0]].


def test_relative_index_clips():
    np.testing.assert_array_equal(ref.relative_index(3, 3, 1), [[0, 1, 1], [-1, 0, 1], [-1, -1, 0]])


def test_bert_logits_scale_and_bias():
    q = np.array([[[1.0, 2.0, 0.0, 0.0], [0.0, 0.0, 1.0, 1.0]]])  # (1, 2, 4)
    k = np.array([[[3.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]]])
    # q.k = [[5, 3], [0, 2]]; / sqrt(4).
    np.testing.assert_allclose(ref.attention_logits(q, k, "bert"), [[[2.5, 1.5], [0.0, 1.0]]])
    bias = np.array([[[10.0, 20.0], [30.0, 40.0]]])
    np.testing.assert_allclose(
        ref.attention_logits(q, k, "bert", positional_bias=bias), [[[12.5, 21.5], [30.0, 41.0]]]
    )


def test_untied_logits_use_sqrt_2dh():
    q = np.array([[[1.0, 1.0]]])  # d_h = 2
    k = np.array([[[2.0, 2.0]]])
    # q.k = 4; / sqrt(2 * 2) = 2; + bias 0.5.
    got = ref.attention_logits(q, k, "untied", positional_bias=np.array([[[0.5]]]))
    np.testing.assert_allclose(got, [[[2.5]]])


def test_untied_cross_logits_by_hand():
    q = np.array([[[1.0, 0.0]]])
    k = np.array([[[0.0, 1.0]]])
    pq = np.array([[[0.0, 3.0]]])
    pk = np.array([[[2.0, 0.0]]])
    # (q + pq).(k + pk) = [1, 3].[2, 1] = 5; the four terms 0 + 2 + 3 + 0.
    got = ref.attention_logits(q, k, "untied_cross", pq=pq, pk=pk)
    np.testing.assert_allclose(got, [[[5.0 / 2.0]]])
    got = ref.attention_logits(q, k, "untied_cross", pq=pq, pk=pk, positional_bias=np.ones((1, 1, 1)))
    np.testing.assert_allclose(got, [[[3.5]]])


def test_method1_by_hand():
    # k = 2, w[|r|] = [1, 2, 3]: weights [[1,2,3],[2,1,2],[3,2,1]].
    got = ref.attention_logits(Q3, K3, "method1", table=np.array([1.0, 2.0, 3.0]), max_relative_distance=2)
    np.testing.assert_allclose(got, [[[1, 2, 6], [4, 2, 8], [9, 6, 6]]])
    # k = 1 clips |r| = 2 to row 1: weights [[1,2,2],[2,1,2],[2,2,1]].
    got = ref.attention_logits(Q3, K3, "method1", table=np.array([1.0, 2.0]), max_relative_distance=1)
    np.testing.assert_allclose(got, [[[1, 2, 4], [4, 2, 8], [6, 6, 6]]])


def test_method2_by_hand():
    # k = 2, rows r + 2 for r = -2..2 hold [10, 20, 30, 40, 50]:
    # weights [[30,40,50],[20,30,40],[10,20,30]].
    table = np.array([10.0, 20.0, 30.0, 40.0, 50.0])
    got = ref.attention_logits(Q3, K3, "method2", table=table, max_relative_distance=2)
    np.testing.assert_allclose(got, [[[30, 40, 100], [40, 60, 160], [30, 60, 180]]])


def test_scalar_methods_divide_by_sqrt_dh():
    # Padding q and k with zeros to d_h = 4 keeps q.k and halves the logits.
    q = np.concatenate([Q3, np.zeros((1, 3, 3))], axis=-1)
    k = np.concatenate([K3, np.zeros((1, 3, 3))], axis=-1)
    table = np.array([10.0, 20.0, 30.0, 40.0, 50.0])
    got = ref.attention_logits(q, k, "method2", table=table, max_relative_distance=2)
    np.testing.assert_allclose(got, np.array([[[30, 40, 100], [40, 60, 160], [30, 60, 180]]]) / 2)


# Shaw / method 3 / method 4 with k = 1, d_h = 1, table rows r + 1 for r = -1, 0, 1
# holding [-1, 0, 2]: a_ij = [[0, 2, 2], [-1, 0, 2], [-1, -1, 0]].
VEC_TABLE = np.array([[-1.0], [0.0], [2.0]])


def test_shaw_by_hand():
    # q.k + q_i a_ij: [[1,1,2],[2,2,4],[3,3,6]] + [[0,2,2],[-2,0,4],[-3,-3,0]].
    got = ref.attention_logits(Q3, K3, "shaw", table=VEC_TABLE, max_relative_distance=1)
    np.testing.assert_allclose(got, [[[1, 3, 4], [0, 2, 8], [0, 0, 6]]])


def test_method3_by_hand():
    # q_i k_j a_ij: [[1*0, 1*2, 2*2], [2*-1, 2*0, 4*2], [3*-1, 3*-1, 6*0]].
    got = ref.attention_logits(Q3, K3, "method3", table=VEC_TABLE, max_relative_distance=1)
    np.testing.assert_allclose(got, [[[0, 2, 4], [-2, 0, 8], [-3, -3, 0]]])


def test_method4_by_hand():
    # shaw + k_j a_ij, k_j a_ij = [[0, 2, 4], [-1, 0, 4], [-1, -1, 0]].
    got = ref.attention_logits(Q3, K3, "method4", table=VEC_TABLE, max_relative_distance=1)
    np.testing.assert_allclose(got, [[[1, 5, 8], [-1, 2, 12], [-1, -1, 6]]])


def _random(shape, seed):
    return np.random.default_rng(seed).normal(size=shape)


def test_relations_between_methods():
    q, k = _random((2, 5, 3), 0), _random((2, 5, 3), 1)
    table = _random((5, 3), 2)  # k = 2
    kw = {"table": table, "max_relative_distance": 2}
    bert = ref.attention_logits(q, k, "bert")
    shaw = ref.attention_logits(q, k, "shaw", **kw)
    m4 = ref.attention_logits(q, k, "method4", **kw)
    # method4 = shaw + the key part, which is method4 with zero queries.
    key_part = ref.attention_logits(np.zeros_like(q), k, "method4", **kw)
    np.testing.assert_allclose(m4, shaw + key_part, atol=1e-12)
    assert np.abs(key_part).max() > 0.1
    # With zero keys (k-part zero) method4 equals shaw.
    np.testing.assert_allclose(
        ref.attention_logits(q, np.zeros_like(k), "method4", **kw),
        ref.attention_logits(q, np.zeros_like(k), "shaw", **kw), atol=1e-12,
    )
    # Zero vector tables give plain BERT; a table of ones in method 3 too.
    zeros = {"table": np.zeros((5, 3)), "max_relative_distance": 2}
    np.testing.assert_allclose(ref.attention_logits(q, k, "shaw", **zeros), bert, atol=1e-12)
    np.testing.assert_allclose(ref.attention_logits(q, k, "method4", **zeros), bert, atol=1e-12)
    np.testing.assert_allclose(
        ref.attention_logits(q, k, "method3", table=np.ones((5, 3)), max_relative_distance=2),
        bert, atol=1e-12,
    )
    # Scalar tables of ones (the spec's initialization) give plain BERT.
    np.testing.assert_allclose(
        ref.attention_logits(q, k, "method1", table=np.ones(3), max_relative_distance=2), bert, atol=1e-12
    )
    np.testing.assert_allclose(
        ref.attention_logits(q, k, "method2", table=np.ones(5), max_relative_distance=2), bert, atol=1e-12
    )
    # method2 with a symmetric table equals method1 with its non-negative half.
    w1 = np.array([0.5, 2.0, -1.0])
    w2 = np.concatenate([w1[::-1], w1[1:]])
    np.testing.assert_allclose(
        ref.attention_logits(q, k, "method1", table=w1, max_relative_distance=2),
        ref.attention_logits(q, k, "method2", table=w2, max_relative_distance=2), atol=1e-12,
    )
    # positional_bias is added after, unscaled.
    bias = _random((2, 5, 5), 3)
    np.testing.assert_allclose(
        ref.attention_logits(q, k, "shaw", positional_bias=bias, **kw), shaw + bias, atol=1e-12
    )


def _loop_logits(q, k, method, table, kmax):
    """Naive per-entry version of the spec's formulas."""
    h, n, d_h = q.shape
    out = np.zeros((h, n, n))
    for hh in range(h):
        for i in range(n):
            for j in range(n):
                r = max(-kmax, min(kmax, j - i))
                qi, kj = q[hh, i], k[hh, j]
                dot = sum(qi[c] * kj[c] for c in range(d_h))
                if method == "method1":
                    val = dot * table[min(abs(j - i), kmax)]
                elif method == "method2":
                    val = dot * table[r + kmax]
                else:
                    a = table[r + kmax]
                    if method == "shaw":
                        val = dot + sum(qi[c] * a[c] for c in range(d_h))
                    elif method == "method3":
                        val = sum(qi[c] * kj[c] * a[c] for c in range(d_h))
                    else:
                        val = dot + sum((qi[c] + kj[c]) * a[c] for c in range(d_h))
                out[hh, i, j] = val / math.sqrt(d_h)
    return out


@pytest.mark.parametrize("method", ["shaw", "method1", "method2", "method3", "method4"])
def test_relative_methods_match_loops(method):
    q, k = _random((2, 6, 3), 10), _random((2, 6, 3), 11)
    kmax = 2
    rows = kmax + 1 if method == "method1" else 2 * kmax + 1
    table = _random((rows,) if method in ("method1", "method2") else (rows, 3), 12)
    got = ref.attention_logits(q, k, method, table=table, max_relative_distance=kmax)
    np.testing.assert_allclose(got, _loop_logits(q, k, method, table, kmax), atol=1e-12)


def test_attention_logits_rejects_bad_arguments():
    q = np.zeros((1, 3, 2))
    with pytest.raises(ValueError):
        ref.attention_logits(q, q, "shaw")  # no table
    with pytest.raises(ValueError):
        ref.attention_logits(q, q, "shaw", table=np.zeros((3, 2)), max_relative_distance=2)  # wrong rows
    with pytest.raises(ValueError):
        ref.attention_logits(q, q, "untied_cross")  # no pq/pk
    with pytest.raises(ValueError):
        ref.attention_logits(q, q, "relative_key")  # unknown


# ---------------------------------------------------------------------------
# Multi-head attention
# ---------------------------------------------------------------------------


def test_mha_uniform_attention_averages_valid_keys():
    # W^Q = W^K = 0 -> all logits 0 -> uniform over the unpadded keys.
    x = np.array([[1.0, 2.0], [3.0, 4.0], [100.0, -100.0]])
    z, eye, b0 = np.zeros((2, 2)), np.eye(2), np.zeros(2)
    got = ref.multi_head_attention(x, z, b0, z, b0, eye, b0, eye, b0, 2, np.array([1, 1, 0]), "bert")
    np.testing.assert_allclose(got, np.tile([[2.0, 3.0]], (3, 1)), atol=1e-12)


def test_mha_matches_loops():
    n, d, h = 4, 6, 2
    x = _random((n, d), 20)
    w = [_random((d, d), 21 + i) for i in range(4)]
    b = [_random((d,), 31 + i) for i in range(4)]
    mask = np.array([1, 1, 1, 0])
    got = ref.multi_head_attention(x, w[0], b[0], w[1], b[1], w[2], b[2], w[3], b[3], h, mask, "bert")
    q, k, v = (x @ w[i] + b[i] for i in range(3))
    d_h = d // h
    heads = []
    for hh in range(h):
        cols = slice(hh * d_h, (hh + 1) * d_h)
        ctx = np.zeros((n, d_h))
        for i in range(n):
            scores = [math.exp(q[i, cols] @ k[j, cols] / math.sqrt(d_h)) for j in range(3)]
            ctx[i] = sum(s * v[j, cols] for j, s in enumerate(scores)) / sum(scores)
        heads.append(ctx)
    expected = np.concatenate(heads, axis=1) @ w[3] + b[3]
    np.testing.assert_allclose(got, expected, atol=1e-12)


# ---------------------------------------------------------------------------
# Encoder
# ---------------------------------------------------------------------------


def _params(seed=0, d=4, h=2, f=8, vocab=11, max_len=8, num_layers=2, num_buckets=32, kmax=3, **config):
    rng = np.random.default_rng(seed)

    def nrm(*shape):
        return rng.normal(size=shape)

    def ln():
        return (1.0 + 0.1 * nrm(d), 0.1 * nrm(d))

    params = {
        "num_heads": h, "layer_norm_epsilon": 1e-12,
        "absolute_position": "added", "absolute_correlation": "none",
        "relative_position": "none", "cls_reset": False,
        "max_relative_distance": kmax, "num_buckets": num_buckets, "max_distance": 128,
        "token_embedding": nrm(vocab, d), "segment_embedding": nrm(2, d),
        "position_embedding": nrm(max_len, d), "embeddings_layer_norm": ln(),
        "untied": {"position_embedding": nrm(max_len, d), "layer_norm": ln(),
                   "wq": nrm(d, d), "bq": nrm(d), "wk": nrm(d, d), "bk": nrm(d)},
        "t5_bias_table": nrm(num_buckets, h),
        "cls_theta": (nrm(h), nrm(h)),
        "layers": [],
        "pooler": (nrm(d, d), nrm(d)),
    }
    params.update(config)
    for _ in range(num_layers):
        relative = params["relative_position"]
        if relative == "method1":
            table = nrm(kmax + 1)
        elif relative == "method2":
            table = nrm(2 * kmax + 1)
        elif relative in ("shaw", "method3", "method4"):
            table = nrm(2 * kmax + 1, d // h)
        else:
            table = None
        params["layers"].append({
            "wq": nrm(d, d), "bq": nrm(d), "wk": nrm(d, d), "bk": nrm(d),
            "wv": nrm(d, d), "bv": nrm(d), "wo": nrm(d, d), "bo": nrm(d),
            "attention_layer_norm": ln(), "w1": nrm(d, f), "b1": nrm(f),
            "w2": nrm(f, d), "b2": nrm(d), "output_layer_norm": ln(),
            "relative_table": table,
        })
    return params


CONFIGS = {
    "bert_a": {},
    "bert_r": {"relative_position": "t5_bias"},
    "tupe_a": {"absolute_position": "none", "absolute_correlation": "untied", "cls_reset": True},
    "tupe_r": {"absolute_position": "none", "absolute_correlation": "untied",
               "relative_position": "t5_bias", "cls_reset": True},
    "tupe_a_tie_cls": {"absolute_position": "none", "absolute_correlation": "untied"},
    "bert_a_d": {"absolute_position": "none", "absolute_correlation": "untied_cross"},
    "shaw": {"absolute_position": "none", "relative_position": "shaw"},
    "method1": {"absolute_position": "none", "relative_position": "method1"},
    "method2": {"absolute_position": "none", "relative_position": "method2"},
    "method3": {"absolute_position": "none", "relative_position": "method3"},
    "method4": {"absolute_position": "none", "relative_position": "method4"},
}

WORDS = np.array([1, 5, 7, 2, 9])
TYPES = np.array([0, 0, 1, 1, 1])


def test_encoder_embeddings_by_hand():
    # No layers: sequence_output = LN(w + s + p). d = 2, eps 0: LN([a, b]) = sign(b - a) * [-1, 1].
    params = _params(d=2, h=1, num_layers=0, layer_norm_epsilon=0.0,
                     token_embedding=np.array([[1.0, 0.0], [0.0, 0.0]]),
                     segment_embedding=np.array([[0.0, 0.0], [0.0, 2.0]]),
                     position_embedding=np.array([[0.0, 0.0], [0.0, 0.5]]),
                     embeddings_layer_norm=(np.array([1.0, 2.0]), np.array([0.0, 1.0])),
                     pooler=(np.eye(2), np.array([0.0, 0.5])))
    # token 0: [1, 0] + seg 1 [0, 2] + pos 0 -> [1, 2] -> [-1, 1] -> [-1, 3];
    # token 1: [1, 0] + seg 0 + pos 1 [0, 0.5] -> [1, 0.5] -> [1, -1] -> [1, -1].
    out = ref.encoder_forward(params, np.array([0, 0]), np.array([1, 1]), np.array([1, 0]))
    np.testing.assert_allclose(out["sequence_output"], [[-1.0, 3.0], [1.0, -1.0]], atol=1e-12)
    np.testing.assert_allclose(out["pooled_output"], np.tanh([-1.0, 3.5]), atol=1e-12)
    assert out["encoder_outputs"] == []


def _manual_forward(params, words, mask, types, bias, method, **extra):
    """Composition of the (separately tested) reference pieces, for one example."""
    eps = params["layer_norm_epsilon"]
    n = len(words)
    e = params["token_embedding"][words] + params["segment_embedding"][types]
    if params["absolute_position"] == "added":
        e = e + params["position_embedding"][:n]
    x = ref.layer_norm(e, *params["embeddings_layer_norm"], eps)
    outs = []
    for layer in params["layers"]:
        kw = dict(extra)
        if method in ref.RELATIVE_METHODS:
            kw.update(table=layer["relative_table"], max_relative_distance=params["max_relative_distance"])
        a = ref.multi_head_attention(x, *(layer[key] for key in ("wq", "bq", "wk", "bk", "wv", "bv", "wo", "bo")),
                                     params["num_heads"], mask, method, positional_bias=bias, **kw)
        x = ref.layer_norm(x + a, *layer["attention_layer_norm"], eps)
        ff = ref.gelu(x @ layer["w1"] + layer["b1"]) @ layer["w2"] + layer["b2"]
        x = ref.layer_norm(x + ff, *layer["output_layer_norm"], eps)
        outs.append(x)
    return x, np.tanh(x[0] @ params["pooler"][0] + params["pooler"][1]), outs


@pytest.mark.parametrize("name", ["bert_a", "bert_r", "tupe_a", "tupe_r", "tupe_a_tie_cls", "bert_a_d", "method4"])
def test_encoder_wiring_matches_manual_composition(name):
    params = _params(**CONFIGS[name])
    n, h, eps = len(WORDS), params["num_heads"], params["layer_norm_epsilon"]
    mask = np.array([1, 1, 1, 1, 0])
    u = params["untied"]
    untied_args = (u["position_embedding"], *u["layer_norm"], u["wq"], u["bq"], u["wk"], u["bk"], h, n, eps)
    t5 = ref.t5_bias(params["t5_bias_table"], n, n, num_buckets=32, max_distance=128)
    extra, bias = {}, None
    if name == "bert_a":
        method = "bert"
    elif name == "bert_r":
        method, bias = "bert", t5
    elif name == "tupe_a":
        method, bias = "untied", ref.cls_reset(ref.untied_correlation(*untied_args), *params["cls_theta"])
    elif name == "tupe_r":
        method = "untied"
        bias = ref.cls_reset(ref.untied_correlation(*untied_args) + t5, *params["cls_theta"])
    elif name == "tupe_a_tie_cls":
        method, bias = "untied", ref.untied_correlation(*untied_args)
    elif name == "bert_a_d":
        pq, pk = ref.untied_projections(*untied_args)
        method, extra = "untied_cross", {"pq": pq, "pk": pk}
    else:
        method = "method4"
    x, pooled, outs = _manual_forward(params, WORDS, mask, TYPES, bias, method, **extra)
    got = ref.encoder_forward(params, WORDS, mask, TYPES)
    np.testing.assert_allclose(got["sequence_output"], x, atol=1e-12)
    np.testing.assert_allclose(got["pooled_output"], pooled, atol=1e-12)
    assert len(got["encoder_outputs"]) == 2
    for a, b in zip(got["encoder_outputs"], outs):
        np.testing.assert_allclose(a, b, atol=1e-12)
    # The variants really differ from BERT-A (the test would catch a silent fallback).
    if name != "bert_a":
        base = ref.encoder_forward(_params(), WORDS, mask, TYPES)["sequence_output"]
        assert np.abs(got["sequence_output"] - base).max() > 1e-3


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_encoder_right_padding_invariance_and_batch(name):
    params = _params(**CONFIGS[name])
    short = ref.encoder_forward(params, WORDS[:4], np.ones(4), TYPES[:4])
    # Append padding with arbitrary ids: the 4 real tokens must not change.
    words = np.array([WORDS[:4].tolist() + [3, 4], WORDS.tolist() + [6]])
    mask = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 0]])
    types = np.array([TYPES[:4].tolist() + [1, 0], TYPES.tolist() + [0]])
    batch = ref.encoder_forward(params, words, mask, types)
    assert batch["sequence_output"].shape == (2, 6, 4)
    assert batch["pooled_output"].shape == (2, 4)
    assert [o.shape for o in batch["encoder_outputs"]] == [(2, 6, 4)] * 2
    np.testing.assert_allclose(batch["sequence_output"][0, :4], short["sequence_output"], atol=1e-10)
    np.testing.assert_allclose(batch["pooled_output"][0], short["pooled_output"], atol=1e-10)
    # Batch = loop over examples.
    one = ref.encoder_forward(params, words[1], mask[1], types[1])
    np.testing.assert_allclose(batch["sequence_output"][1], one["sequence_output"], atol=1e-12)


def test_drop_in_method4_with_zero_tables_reproduces_bert_a():
    bert = _params(seed=3)
    # Same weights and absolute embeddings, plus zero-initialized method-4 tables.
    drop_in = dict(bert, relative_position="method4")
    drop_in["layers"] = [dict(layer, relative_table=np.zeros((7, 2))) for layer in bert["layers"]]
    mask = np.array([1, 1, 1, 1, 0])
    a = ref.encoder_forward(bert, WORDS, mask, TYPES)["sequence_output"]
    b = ref.encoder_forward(drop_in, WORDS, mask, TYPES)["sequence_output"]
    np.testing.assert_allclose(a, b, atol=1e-12)
    drop_in["layers"][0]["relative_table"] = np.full((7, 2), 0.5)
    c = ref.encoder_forward(drop_in, WORDS, mask, TYPES)["sequence_output"]
    assert np.abs(a - c).max() > 1e-3


def test_encoder_length_limits():
    mask = np.ones(9, np.int64)
    words = np.ones(9, np.int64)
    types = np.zeros(9, np.int64)
    with pytest.raises(ValueError, match="position_embedding limit of 8"):
        ref.encoder_forward(_params(), words, mask, types)
    with pytest.raises(ValueError, match="untied position_embedding limit of 8"):
        ref.encoder_forward(_params(**CONFIGS["tupe_a"]), words, mask, types)
    # Relative methods accept sequences longer than any absolute table.
    out = ref.encoder_forward(_params(**CONFIGS["method3"]), words, mask, types)
    assert out["sequence_output"].shape == (9, 4)
