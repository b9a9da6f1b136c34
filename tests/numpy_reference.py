"""Independent NumPy float64 reference for the positional-encoding math.

Written only from `shared/docs/positional-encodings.md` (the spec), without
reading `keras_tupe`, so that the Keras layers can be checked against it.
Everything is float64 (the T5 bucket log is float32, as the spec says), every
function is pure, and the code favours reading like the formulas over speed.

Shapes: `h` heads, `n` (or `q_len`, `k_len`) tokens, `d` hidden size,
`d_h = d / h` head size, `k` max relative distance.

Conventions fixed by the project:
- relative distance is `r = j - i` (key position minus query position);
- signed relative tables (Shaw, methods 2-4) hold distance `r` in row `r + k`;
  the unsigned scalar table of method 1 holds `|r|` in row `|r|`;
- token 0 is `[CLS]`; padding is on the right; `input_mask` is 1 for tokens.

The authors' fairseq code (`cls_reset_style="fairseq"`, `mask_padding_embeddings`)
is written from `shared/data/reference_checkpoints/README.md`, section 5.
"""

import math

import numpy as np

ABSOLUTE_POSITIONS = ("none", "added")
ABSOLUTE_CORRELATIONS = ("none", "untied", "untied_cross")
RELATIVE_POSITIONS = (
    "none",
    "t5_bias",
    "shaw",
    "method1",
    "method2",
    "method3",
    "method4",
    "alibi",
    "rotary",
    "disentangled",
)
RELATIVE_METHODS = ("shaw", "method1", "method2", "method3", "method4")
LOGIT_METHODS = ("bert", "untied", "untied_cross") + RELATIVE_METHODS
CLS_RESET_STYLES = ("paper", "fairseq")


def _f64(x):
    return np.asarray(x, dtype=np.float64)


# ---------------------------------------------------------------------------
# T5 relative position bias (spec section 1)
# ---------------------------------------------------------------------------


def t5_relative_position_bucket(
    relative_position, bidirectional=True, num_buckets=32, max_distance=128
):
    """T5 bucket of `rel = j - i` (key position minus query position).

    With the defaults: |rel| 0..7 -> |rel|; 8-11 -> 8; 12-15 -> 9; 16-22 -> 10;
    23-31 -> 11; 32-45 -> 12; 46-63 -> 13; 64-90 -> 14; >= 91 -> 15; plus 16
    when rel > 0 (so bucket 16 is never produced).

    Args:
        relative_position: int array of any shape, `j - i`.
        bidirectional: if True, half the buckets are for keys after the query.
        num_buckets: total number of buckets.
        max_distance: distances at or beyond this share the last bucket.

    Returns:
        int64 array, same shape as `relative_position`.
    """
    rel = np.asarray(relative_position, dtype=np.int64)
    ret = np.zeros_like(rel)
    if bidirectional:
        num_buckets //= 2
        ret = ret + (rel > 0).astype(np.int64) * num_buckets
        n = np.abs(rel)
    else:
        n = np.maximum(-rel, 0)
    max_exact = num_buckets // 2
    is_small = n < max_exact
    # The log branch is only used where n >= max_exact; clamping the other
    # entries avoids log(0) warnings without changing any used value.
    # The spec computes the log in float32 (as T5 does); the truncation to int
    # then matches the float32 implementations at the bucket boundaries.
    n_large = np.maximum(n, max_exact).astype(np.float32)
    scaled = (
        np.log(n_large / np.float32(max_exact))
        / np.float32(math.log(max_distance / max_exact))
        * np.float32(num_buckets - max_exact)
    )
    val_if_large = np.minimum(max_exact + scaled.astype(np.int64), num_buckets - 1)
    return (ret + np.where(is_small, n, val_if_large)).astype(np.int64)


def relative_positions(q_len, k_len):
    """Signed relative distance `j - i`.

    Returns:
        int64 array [q_len, k_len] with entry (i, j) = j - i.
    """
    i = np.arange(q_len, dtype=np.int64)[:, None]  # (q_len, 1)
    j = np.arange(k_len, dtype=np.int64)[None, :]  # (1, k_len)
    return j - i  # (q_len, k_len)


def t5_bias(table, q_len, k_len, bidirectional=True, num_buckets=32, max_distance=128,
            cls_buckets=False):
    """T5 relative bias `b^h[bucket(j - i)]`, one table shared by all layers.

    With `cls_buckets` (the authors' code, README section 5.4) the table has
    one more row: column 0 gets bucket `num_buckets`, then row 0 gets
    `num_buckets / 2` (unused by the bidirectional buckets).

    Args:
        table: [num_buckets (+ 1 with cls_buckets), h] float array.

    Returns:
        float64 array [h, q_len, k_len].
    """
    table = _f64(table)
    rows = num_buckets + (1 if cls_buckets else 0)
    if table.ndim != 2 or table.shape[0] != rows:
        raise ValueError(
            f"t5_bias table must be [{rows}, h] (num_buckets={num_buckets}, "
            f"cls_buckets={cls_buckets}). Received: table.shape={table.shape}"
        )
    buckets = t5_relative_position_bucket(
        relative_positions(q_len, k_len),
        bidirectional=bidirectional,
        num_buckets=num_buckets,
        max_distance=max_distance,
    )  # (q_len, k_len)
    if cls_buckets:
        buckets = np.array(buckets)
        buckets[:, 0] = num_buckets  # others -> [CLS] first ...
        buckets[0, :] = num_buckets // 2  # ... then [CLS] -> others, (0, 0) included
    return np.transpose(table[buckets], (2, 0, 1))  # (q_len, k_len, h) -> (h, q_len, k_len)


# ---------------------------------------------------------------------------
# Small building blocks
# ---------------------------------------------------------------------------


def layer_norm(x, gamma, beta, epsilon):
    """LayerNorm over the last axis with the biased (1/d) variance.

    Args:
        x: [..., d]; gamma, beta: [d]; epsilon: float added to the variance.

    Returns:
        float64 [..., d].
    """
    x = _f64(x)
    mean = x.mean(axis=-1, keepdims=True)  # (..., 1)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)  # (..., 1), biased
    return (x - mean) / np.sqrt(var + epsilon) * _f64(gamma) + _f64(beta)


_erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu(x):
    """Exact (erf) GELU: 0.5 x (1 + erf(x / sqrt(2))), not the tanh approximation."""
    x = _f64(x)
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def softmax(x, axis=-1):
    """Numerically stable softmax in float64; entries equal to -inf get weight 0."""
    x = _f64(x)
    shifted = x - np.max(x, axis=axis, keepdims=True)
    e = np.exp(shifted)
    return e / np.sum(e, axis=axis, keepdims=True)


def split_heads(x, num_heads):
    """[n, d] -> [h, n, d_h]; head `h` takes columns h*d_h:(h+1)*d_h."""
    x = _f64(x)
    n, d = x.shape
    if d % num_heads:
        raise ValueError(
            f"hidden size must be divisible by num_heads. "
            f"Received: d={d}, num_heads={num_heads}"
        )
    d_h = d // num_heads
    return x.reshape(n, num_heads, d_h).transpose(1, 0, 2)  # (n, h, d_h) -> (h, n, d_h)


def _merge_heads(x):
    """[h, n, d_h] -> [n, d] (inverse of split_heads)."""
    h, n, d_h = x.shape
    return x.transpose(1, 0, 2).reshape(n, h * d_h)  # (n, h, d_h) -> (n, d)


def _check_length(table, seq_len, what):
    max_len = table.shape[0]
    if seq_len > max_len:
        raise ValueError(
            f"Sequence length {seq_len} exceeds the {what} limit of "
            f"{max_len} positions (an absolute table cannot extrapolate)."
        )


# ---------------------------------------------------------------------------
# TUPE (spec section 2)
# ---------------------------------------------------------------------------


def untied_projections(p, ln_gamma, ln_beta, wq, bq, wk, bk, num_heads, seq_len, epsilon):
    """Position-only queries and keys of TUPE (Eq. 7).

    P = LayerNorm(p[:seq_len]) with its own LayerNorm; PQ = P U^Q + b^Q,
    PK = P U^K + b^K, each split into heads.

    Args:
        p: [max_len, d] the full absolute table; rows 0..seq_len-1 are used.
        ln_gamma, ln_beta: [d]; wq, wk: [d, d]; bq, bk: [d].

    Returns:
        (pq, pk), each float64 [h, seq_len, d_h].

    Raises:
        ValueError: if seq_len > max_len.
    """
    p = _f64(p)
    _check_length(p, seq_len, "untied position_embedding")
    big_p = layer_norm(p[:seq_len], ln_gamma, ln_beta, epsilon)  # (n, d)
    pq = big_p @ _f64(wq) + _f64(bq)  # (n, d)
    pk = big_p @ _f64(wk) + _f64(bk)  # (n, d)
    return split_heads(pq, num_heads), split_heads(pk, num_heads)  # (h, n, d_h) each


def untied_correlation(p, ln_gamma, ln_beta, wq, bq, wk, bk, num_heads, seq_len, epsilon):
    """Untied absolute positional correlation A^h_ij = PQ^h_i . PK^h_j / sqrt(2 d_h).

    Same arguments as `untied_projections`.

    Returns:
        float64 [h, seq_len, seq_len].
    """
    pq, pk = untied_projections(
        p, ln_gamma, ln_beta, wq, bq, wk, bk, num_heads, seq_len, epsilon
    )
    d_h = pq.shape[-1]
    return np.einsum("hid,hjd->hij", pq, pk) / math.sqrt(2.0 * d_h)  # (h, n, n)


def cls_reset(v, theta1, theta2):
    """Untie [CLS] (Eq. 9), the paper's version (the project default).

    reset(v)_ij = v_ij  if i != 0 and j != 0;
                  theta1^h  if i == 0 (row 0, including (0, 0));
                  theta2^h  if i != 0 and j == 0 (column 0 below row 0).

    Args:
        v: [h, q_len, k_len] position-only correlation; theta1, theta2: [h].

    Returns:
        float64 [h, q_len, k_len] (a new array; `v` is not modified).
    """
    out = _f64(v).copy()
    theta1 = _f64(theta1)
    theta2 = _f64(theta2)
    out[:, 1:, 0] = theta2[:, None]  # (h, q_len - 1): others attending to [CLS]
    out[:, 0, :] = theta1[:, None]  # (h, k_len): [CLS] attending to all, incl. (0, 0)
    return out


def fairseq_cls_reset(a_full):
    """The authors' [CLS] reset of the untied term (README section 5.3).

    `a_full` is the correlation of table rows 0..n; token position t uses row
    t + 1. Column 0 becomes A_full[1, 1], then row 0 becomes A_full[0, 0].

    Args:
        a_full: [h, n + 1, n + 1].

    Returns:
        float64 [h, n, n].
    """
    a_full = _f64(a_full)
    out = a_full[:, 1:, 1:].copy()  # (h, n, n)
    out[:, :, 0] = a_full[:, 1, 1][:, None]
    out[:, 0, :] = a_full[:, 0, 0][:, None]
    return out


# ---------------------------------------------------------------------------
# Relative position embeddings (spec section 3)
# ---------------------------------------------------------------------------


def relative_index(q_len, k_len, max_distance):
    """clip(j - i, -k, k) with k = max_distance.

    Returns:
        int64 [q_len, k_len]. Add k to get the row of a signed table.
    """
    return np.clip(relative_positions(q_len, k_len), -max_distance, max_distance)


def _relative_table(table, rows, name, vector_size=None):
    """Validates a relative table: [rows] (or [rows, 1]) scalar, or [rows, d_h]."""
    table = _f64(table)
    if vector_size is None:
        if table.shape not in ((rows,), (rows, 1)):
            raise ValueError(
                f"{name} needs a scalar table of shape [{rows}]. "
                f"Received: table.shape={table.shape}"
            )
        return table.reshape(rows)
    if table.shape != (rows, vector_size):
        raise ValueError(
            f"{name} needs a table of shape [{rows}, d_h={vector_size}]. "
            f"Received: table.shape={table.shape}"
        )
    return table


def attention_logits(
    q,
    k,
    method,
    positional_bias=None,
    table=None,
    max_relative_distance=None,
    pq=None,
    pk=None,
):
    """Attention logits of one example, before the padding mask.

    Args:
        q: [h, q_len, d_h] queries; k: [h, k_len, d_h] keys (one example).
        method: one of
            "bert": q.k / sqrt(d_h) (+ positional_bias; BERT-R when that is
                the T5 bias);
            "untied": q.k / sqrt(2 d_h) + positional_bias (TUPE-A / TUPE-R;
                the bias already holds the untied correlation, T5 bias and
                [CLS] reset; None counts as zero);
            "untied_cross": (q + pq).(k + pk) / sqrt(2 d_h) (BERT-A^d)
                (+ positional_bias);
            "shaw": (q.k + q.a_ij) / sqrt(d_h), a_ij = table[clip(j-i, k) + k];
            "method1": (q.k) * w[min(|j-i|, k)] / sqrt(d_h);
            "method2": (q.k) * w[clip(j-i, k) + k] / sqrt(d_h);
            "method3": sum_c q_ic k_jc a_ijc / sqrt(d_h);
            "method4": (q.k + q.a_ij + k_j.a_ij) / sqrt(d_h).
        positional_bias: optional [h, q_len, k_len], added unscaled (after the
            relative term for the relative methods).
        table: relative table, required for the relative methods:
            [2k+1, d_h] for shaw/method3/method4, [2k+1] for method2,
            [k+1] for method1 ([rows, 1] also accepted for the scalar tables).
        max_relative_distance: k, required for the relative methods.
        pq, pk: [h, q_len, d_h], [h, k_len, d_h], required for "untied_cross".

    Returns:
        float64 [h, q_len, k_len].
    """
    if method not in LOGIT_METHODS:
        raise ValueError(f"Unknown method. Expected one of {LOGIT_METHODS}. Received: method={method!r}")
    q = _f64(q)
    k = _f64(k)
    h, q_len, d_h = q.shape
    k_len = k.shape[1]
    is_relative = method in RELATIVE_METHODS
    if is_relative:
        if table is None or max_relative_distance is None:
            raise ValueError(f"method={method!r} needs `table` and `max_relative_distance`.")
    elif table is not None or max_relative_distance is not None:
        raise ValueError(f"method={method!r} does not use `table` or `max_relative_distance`.")
    if method == "untied_cross":
        if pq is None or pk is None:
            raise ValueError("method='untied_cross' needs `pq` and `pk`.")
    elif pq is not None or pk is not None:
        raise ValueError(f"method={method!r} does not use `pq` or `pk`.")

    content = np.einsum("hid,hjd->hij", q, k)  # (h, q_len, k_len)

    if method == "bert":
        logits = content / math.sqrt(d_h)
    elif method == "untied":
        logits = content / math.sqrt(2.0 * d_h)
    elif method == "untied_cross":
        qp = q + _f64(pq)  # (h, q_len, d_h)
        kp = k + _f64(pk)  # (h, k_len, d_h)
        logits = np.einsum("hid,hjd->hij", qp, kp) / math.sqrt(2.0 * d_h)
    else:
        kmax = int(max_relative_distance)
        if kmax < 0:
            raise ValueError(f"max_relative_distance must be >= 0. Received: {max_relative_distance}")
        signed_rows = relative_index(q_len, k_len, kmax) + kmax  # (q_len, k_len) in [0, 2k]
        if method == "method1":
            w = _relative_table(table, kmax + 1, method)
            unsigned_rows = np.minimum(np.abs(relative_positions(q_len, k_len)), kmax)
            logits = content * w[unsigned_rows] / math.sqrt(d_h)  # (h, q_len, k_len)
        elif method == "method2":
            w = _relative_table(table, 2 * kmax + 1, method)
            logits = content * w[signed_rows] / math.sqrt(d_h)  # (h, q_len, k_len)
        else:
            w = _relative_table(table, 2 * kmax + 1, method, vector_size=d_h)
            a = w[signed_rows]  # (q_len, k_len, d_h)
            if method == "shaw":
                q_a = np.einsum("hid,ijd->hij", q, a)  # (h, q_len, k_len)
                logits = (content + q_a) / math.sqrt(d_h)
            elif method == "method3":
                qka = np.einsum("hic,hjc,ijc->hij", q, k, a)  # (h, q_len, k_len)
                logits = qka / math.sqrt(d_h)
            else:  # method4
                q_a = np.einsum("hid,ijd->hij", q, a)  # (h, q_len, k_len)
                k_a = np.einsum("hjd,ijd->hij", k, a)  # (h, q_len, k_len)
                logits = (content + q_a + k_a) / math.sqrt(d_h)

    if positional_bias is not None:
        logits = logits + _f64(positional_bias)  # (h, q_len, k_len), unscaled
    return logits


def multi_head_attention(
    x, wq, bq, wk, bk, wv, bv, wo, bo, num_heads, input_mask, method, **logit_kwargs
):
    """Multi-head self-attention of one example (inference, no dropout).

    Padded keys are excluded exactly (logit -inf, weight 0): the float64 limit
    of adding a large negative mask. If no key is valid, the mask is the same
    constant for every key, so (as with an additive mask) softmax runs over all
    keys.

    Args:
        x: [n, d]; wq, wk, wv, wo: [d, d]; bq, bk, bv, bo: [d].
        input_mask: [n], 1 = token, 0 = padding.
        method, **logit_kwargs: passed to `attention_logits`.

    Returns:
        float64 [n, d] after W^O.
    """
    x = _f64(x)
    q = split_heads(x @ _f64(wq) + _f64(bq), num_heads)  # (h, n, d_h)
    k = split_heads(x @ _f64(wk) + _f64(bk), num_heads)  # (h, n, d_h)
    v = split_heads(x @ _f64(wv) + _f64(bv), num_heads)  # (h, n, d_h)
    if logit_kwargs.pop("rotary", False):
        q, k = rotate_half_layout(q), rotate_half_layout(k)  # (h, n, d_h)
    disentangled = logit_kwargs.pop("disentangled", None)
    if disentangled is not None:  # {"relative_embeddings": [2k, d] (normalized), ...}
        positions = _f64(disentangled["relative_embeddings"])
        logits = disentangled_logits(
            q, k,
            split_heads(positions @ _f64(wq) + _f64(bq), num_heads),
            split_heads(positions @ _f64(wk) + _f64(bk), num_heads),
            disentangled["bucket_size"], disentangled["max_position"],
        )  # (h, n, n)
        if logit_kwargs.get("positional_bias") is not None:
            logits = logits + _f64(logit_kwargs["positional_bias"])
    else:
        logits = attention_logits(q, k, method, **logit_kwargs)  # (h, n, n)
    key_is_token = np.asarray(input_mask).astype(bool)  # (n,)
    if key_is_token.any():
        logits = np.where(key_is_token[None, None, :], logits, -np.inf)  # (h, n, n)
    weights = softmax(logits, axis=-1)  # (h, n, n)
    context = np.einsum("hij,hjd->hid", weights, v)  # (h, n, d_h)
    return _merge_heads(context) @ _f64(wo) + _f64(bo)  # (n, d)


# ---------------------------------------------------------------------------
# Beyond the two papers (issue 37): ALiBi, RoFormer, DeBERTa
# ---------------------------------------------------------------------------
# Written from the papers' formulas (and, for DeBERTa's buckets, the code of
# DeBERTaV3, which the paper does not spell out), not from keras_tupe.


def alibi_slopes(num_heads):
    """Press et al. (ICLR 2022) §3: geometric slopes 2^(-8/n), 2^(-16/n), ..., 2^(-8).

    For n not a power of 2: the 2^floor(log2 n) slopes, then slopes 1, 3, 5, ...
    (0-based: every other one starting at the first) of 2^(floor(log2 n) + 1)
    heads until there are n.
    """
    def geometric(n):
        return [2.0 ** (-8.0 * (i + 1) / n) for i in range(n)]

    if math.log2(num_heads).is_integer():
        return np.array(geometric(num_heads))
    closest = 2 ** math.floor(math.log2(num_heads))
    extra = alibi_slopes(2 * closest)[0::2][: num_heads - closest]
    return np.concatenate([geometric(closest), extra])


def alibi_bias(num_heads, q_len, k_len):
    """Bidirectional ALiBi: -m_h |i - j|, float64 [h, q_len, k_len]."""
    distance = np.abs(relative_positions(q_len, k_len))  # (q, k)
    return -alibi_slopes(num_heads)[:, None, None] * distance[None]


def roformer_rotate(x, base=10000.0):
    """RoFormer Eq. 34 on interleaved pairs (2c, 2c + 1), float64.

    x: [..., n, d_h] (positions along the second-to-last axis, 0..n-1).
    f(x, m)_{2c}   = x_{2c} cos(m θ_c) - x_{2c+1} sin(m θ_c)
    f(x, m)_{2c+1} = x_{2c+1} cos(m θ_c) + x_{2c} sin(m θ_c),  θ_c = base^(-2c/d_h).
    """
    x = _f64(x)
    n, d_h = x.shape[-2:]
    theta = base ** (-2.0 * np.arange(d_h // 2) / d_h)  # (d_h/2,)
    angle = np.arange(n)[:, None] * theta[None, :]  # (n, d_h/2)
    even, odd = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = even * np.cos(angle) - odd * np.sin(angle)
    out[..., 1::2] = odd * np.cos(angle) + even * np.sin(angle)
    return out


def half_to_interleaved(d_h):
    """Index `perm` with `x_interleaved = x_half[..., perm]`: 2c <- c, 2c+1 <- c + d_h/2."""
    half = np.arange(d_h // 2)
    return np.stack([half, half + d_h // 2], axis=1).reshape(-1)


def rotate_half_layout(x, base=10000.0):
    """The RoFormer rotation for heads whose pairs are (c, c + d_h/2) (GPT-NeoX layout)."""
    perm = half_to_interleaved(_f64(x).shape[-1])
    rotated = roformer_rotate(_f64(x)[..., perm], base)  # interleaved layout
    return rotated[..., np.argsort(perm)]  # back to the half layout


def deberta_log_bucket(delta, bucket_size, max_position):
    """DeBERTaV3's `make_log_bucket_position` of `delta = i - j`, int64.

    mid = bucket_size // 2; |delta| <= mid: delta; otherwise
    sign(delta) * (mid + ceil(log(|delta| / mid) (mid - 1) / log((max_position - 1) / mid))),
    the logs in float32 as the code computes them.
    """
    delta = np.asarray(delta, np.int64)
    mid = bucket_size // 2
    distance = np.where(np.abs(delta) < mid, mid - 1, np.abs(delta))
    # Only used where distance > mid; the clamp keeps log(0) out of the rest.
    numerator = np.log(np.maximum(distance, 1).astype(np.float32) / np.float32(mid)) * np.float32(
        mid - 1
    )
    denominator = np.log(np.float32(max_position - 1) / np.float32(mid))
    log_position = np.ceil(numerator / denominator).astype(np.int64) + mid
    return np.where(distance <= mid, delta, log_position * np.sign(delta))


def disentangled_logits(q, k, pos_query, pos_key, bucket_size, max_position,
                        p2c_delta="code"):
    """DeBERTa Eq. 4: (q_i.k_j + q_i.K^r_d(i,j) + k_j.Q^r_d(.,.)) / sqrt(3 d_h).

    q, k: [h, n, d_h]; pos_query = P W^Q + b^Q, pos_key = P W^K + b^K: [h, 2k, d_h].
    d(i, j) = clip(bucket(i - j) + k, 0, 2k - 1). The p2c term uses d(i, j)
    as DeBERTa's code does (`p2c_delta="code"`), or the paper's d(j, i)
    (`"paper"`, for negative controls).
    """
    q, k, pos_query, pos_key = (_f64(a) for a in (q, k, pos_query, pos_key))
    h, n, d_h = q.shape
    delta = -relative_positions(n, k.shape[1])  # (q, k): i - j
    rows = np.clip(deberta_log_bucket(delta, bucket_size, max_position) + bucket_size,
                   0, 2 * bucket_size - 1)  # (q, k)
    p2c_rows = rows if p2c_delta == "code" else rows.T
    content = np.einsum("hid,hjd->hij", q, k)
    c2p = np.einsum("hid,hijd->hij", q, pos_key[:, rows])  # (h, q, k)
    p2c = np.einsum("hjd,hijd->hij", k, pos_query[:, p2c_rows])  # (h, q, k)
    return (content + c2p + p2c) / math.sqrt(3.0 * d_h)


# ---------------------------------------------------------------------------
# Whole encoder
# ---------------------------------------------------------------------------


def _logit_method(params):
    relative = params["relative_position"]
    correlation = params["absolute_correlation"]
    if relative in RELATIVE_METHODS:
        if correlation == "untied_cross":
            # The spec does not define how BERT-A^d's cross terms combine with a
            # relative method; refuse rather than silently drop pq/pk.
            raise ValueError(
                "absolute_correlation='untied_cross' cannot be combined with "
                f"relative_position={relative!r} in this reference."
            )
        return relative
    if correlation == "untied":
        return "untied"
    if correlation == "untied_cross":
        return "untied_cross"
    return "bert"


def _encode_one(params, word_ids, input_mask, type_ids):
    num_heads = params["num_heads"]
    eps = params["layer_norm_epsilon"]
    absolute_position = params["absolute_position"]
    correlation = params["absolute_correlation"]
    relative = params["relative_position"]
    word_ids = np.asarray(word_ids, dtype=np.int64)
    n = word_ids.shape[0]
    input_mask = np.ones(n, np.int64) if input_mask is None else np.asarray(input_mask)
    type_ids = np.zeros(n, np.int64) if type_ids is None else np.asarray(type_ids, np.int64)

    # Embeddings: e_i = w_i (+ s_i) (+ p_i), then LayerNorm.
    e = _f64(params["token_embedding"])[word_ids]  # (n, d)
    if params.get("segment_embedding") is not None:
        e = e + _f64(params["segment_embedding"])[type_ids]  # (n, d)
    if absolute_position == "added":
        p = _f64(params["position_embedding"])
        _check_length(p, n, "position_embedding")
        e = e + p[:n]  # (n, d)
    x = layer_norm(e, *params["embeddings_layer_norm"], eps)  # (n, d)
    if params.get("mask_padding_embeddings"):
        x = x * input_mask[:, None]  # (n, d): the fork zeroes padded embeddings
    fairseq_reset = params.get("cls_reset") and params.get("cls_reset_style") == "fairseq"

    # Position-only terms: computed once, shared by every layer.
    bias = None
    pq = pk = None
    if correlation in ("untied", "untied_cross"):
        u = params["untied"]
        rows = n + 1 if fairseq_reset and correlation == "untied" else n
        untied_args = (
            u["position_embedding"], *u["layer_norm"], u["wq"], u["bq"], u["wk"], u["bk"],
            num_heads, rows, eps,
        )
        if correlation == "untied":
            bias = untied_correlation(*untied_args)  # (h, rows, rows)
            if fairseq_reset:
                bias = fairseq_cls_reset(bias)  # (h, n, n)
        else:
            pq, pk = untied_projections(*untied_args)  # (h, n, d_h) each
    if relative == "t5_bias":
        b = t5_bias(
            params["t5_bias_table"], n, n, bidirectional=True,
            num_buckets=params["num_buckets"], max_distance=params["max_distance"],
            cls_buckets=bool(fairseq_reset),
        )  # (h, n, n)
        bias = b if bias is None else bias + b
    if relative == "alibi":
        b = alibi_bias(num_heads, n, n)  # (h, n, n)
        bias = b if bias is None else bias + b
    if params.get("cls_reset") and not fairseq_reset:
        if bias is None:
            bias = np.zeros((num_heads, n, n))
        bias = cls_reset(bias, *params["cls_theta"])  # (h, n, n)

    method = _logit_method(params)
    pre_ln = params.get("layer_norm_position", "post") == "pre"
    encoder_outputs = []
    for layer in params["layers"]:
        logit_kwargs = {"positional_bias": bias}
        if method in RELATIVE_METHODS:
            logit_kwargs["table"] = layer["relative_table"]
            logit_kwargs["max_relative_distance"] = params["max_relative_distance"]
        if relative == "rotary":
            logit_kwargs["rotary"] = True
        if relative == "disentangled":
            table = params["disentangled"]
            logit_kwargs["disentangled"] = {
                "relative_embeddings": layer_norm(
                    table["relative_embeddings"], *table["layer_norm"], eps
                ),  # (2k, d), shared by all layers
                "bucket_size": params["bucket_size"],
                "max_position": params["max_sequence_length"],
            }
        if method == "untied_cross":
            logit_kwargs["pq"] = pq
            logit_kwargs["pk"] = pk
        # Pre-LN: q, k and v all come from LN_1(x) (Xiong et al. 2020).
        attention_input = (
            layer_norm(x, *layer["attention_layer_norm"], eps) if pre_ln else x
        )  # (n, d)
        a = multi_head_attention(
            attention_input, layer["wq"], layer["bq"], layer["wk"], layer["bk"],
            layer["wv"], layer["bv"], layer["wo"], layer["bo"],
            num_heads, input_mask, method, **logit_kwargs,
        )  # (n, d)
        if pre_ln:
            x = x + a  # (n, d): the residual stream stays unnormalized
            h = layer_norm(x, *layer["output_layer_norm"], eps)  # (n, d)
        else:
            x = h = layer_norm(x + a, *layer["attention_layer_norm"], eps)  # (n, d)
        f = gelu(h @ _f64(layer["w1"]) + _f64(layer["b1"]))  # (n, f)
        f = f @ _f64(layer["w2"]) + _f64(layer["b2"])  # (n, d)
        x = x + f if pre_ln else layer_norm(x + f, *layer["output_layer_norm"], eps)  # (n, d)
        encoder_outputs.append(x)
    if pre_ln:
        x = layer_norm(x, *params["final_layer_norm"], eps)  # (n, d)

    w_pool, b_pool = params["pooler"]
    pooled = np.tanh(x[0] @ _f64(w_pool) + _f64(b_pool))  # (d,)
    return {"sequence_output": x, "pooled_output": pooled, "encoder_outputs": encoder_outputs}


def encoder_forward(params, input_word_ids, input_mask, input_type_ids):
    """BERT-style encoder with the project's positional encodings.

    Inference only (no dropout). For each layer, post-LN (the default):
        a = MHA(x); x = LN(x + a); f = gelu(x W1 + b1) W2 + b2; x = LN(x + f).
    pre-LN (layer_norm_position == "pre", Xiong et al. 2020):
        a = MHA(LN_1(x)); x = x + a; f = gelu(LN_2(x) W1 + b1) W2 + b2; x = x + f;
        after the last layer x = LN_final(x) (encoder_outputs keep the raw x).
    pooled_output = tanh(x_0 W + b) on the final [CLS] vector.

    The position-only bias is computed once and shared by all layers: zeros,
    plus the untied correlation if absolute_correlation == "untied", plus the
    T5 bias if relative_position == "t5_bias", then [CLS] reset if cls_reset
    (the authors' version with cls_reset_style == "fairseq": rows 0/1 of a
    table of max_len + 1 rows, buckets num_buckets / 2 and num_buckets).
    For "untied_cross", PQ/PK (computed once) go to every layer.
    Logit method per layer: the relative method if relative_position is
    shaw/method1..4; else "untied" / "untied_cross" per absolute_correlation;
    else "bert".

    Args:
        params: a plain dict:
            params = {
              "num_heads": int, "layer_norm_epsilon": float,
              "absolute_position": "none" | "added",
              "absolute_correlation": "none" | "untied" | "untied_cross",
              "relative_position": "none" | "t5_bias" | "shaw" | "method1"
                                   | "method2" | "method3" | "method4",
              "cls_reset": bool,
              "cls_reset_style": "paper" | "fairseq" (optional, default "paper"),
              "layer_norm_position": "post" | "pre" (optional, default "post"),
              "final_layer_norm": (gamma, beta) (pre-LN only),
              "mask_padding_embeddings": bool (optional, default False),
              "max_relative_distance": int (for shaw/method*),
              "num_buckets": int, "max_distance": int (T5),
              "token_embedding": [V, d],
              "segment_embedding": [S, d] or None,
              "position_embedding": [max_len, d] or None,
              "embeddings_layer_norm": (gamma [d], beta [d]),
              "untied": None or {"position_embedding": [max_len, d],
                                 "layer_norm": (gamma, beta),
                                 "wq": [d, d], "bq": [d], "wk": [d, d], "bk": [d]},
              "t5_bias_table": [num_buckets (+ 1 for "fairseq"), h] or None,
              "cls_theta": None or (theta1 [h], theta2 [h]),
              "layers": [ { "wq", "bq", "wk", "bk", "wv", "bv", "wo", "bo",  # [d, d] / [d]
                            "attention_layer_norm": (gamma, beta),
                            "w1": [d, f], "b1": [f], "w2": [f, d], "b2": [d],
                            "output_layer_norm": (gamma, beta),
                            "relative_table": None or array } ... ],
              "pooler": (w [d, d], b [d]),
            }
            Keys not needed by the chosen configuration may be omitted.
        input_word_ids: int [n] (one example) or [B, n] (a batch).
        input_mask: [n] or [B, n], 1 = token, 0 = padding (None: all tokens).
        input_type_ids: [n] or [B, n] segment ids (None: all zeros; ignored
            when segment_embedding is None).

    Returns:
        dict with "sequence_output" [(B,) n, d], "pooled_output" [(B,) d],
        "encoder_outputs": list (one per layer) of [(B,) n, d]; float64.

    Raises:
        ValueError: unknown option values, or a sequence longer than an
            absolute table (position_embedding or untied position_embedding).
    """
    params = {"cls_reset_style": "paper", "layer_norm_position": "post", **params}
    for key, allowed in (
        ("cls_reset_style", CLS_RESET_STYLES),
        ("layer_norm_position", ("post", "pre")),
        ("absolute_position", ABSOLUTE_POSITIONS),
        ("absolute_correlation", ABSOLUTE_CORRELATIONS),
        ("relative_position", RELATIVE_POSITIONS),
    ):
        if params[key] not in allowed:
            raise ValueError(f"{key} must be one of {allowed}. Received: {key}={params[key]!r}")

    word_ids = np.asarray(input_word_ids)
    if word_ids.ndim == 1:
        return _encode_one(params, word_ids, input_mask, input_type_ids)
    if word_ids.ndim != 2:
        raise ValueError(f"input_word_ids must be [n] or [B, n]. Received: shape={word_ids.shape}")

    def row(a, b):
        return None if a is None else np.asarray(a)[b]

    results = [
        _encode_one(params, word_ids[b], row(input_mask, b), row(input_type_ids, b))
        for b in range(word_ids.shape[0])
    ]
    num_layers = len(params["layers"])
    return {
        "sequence_output": np.stack([r["sequence_output"] for r in results]),  # (B, n, d)
        "pooled_output": np.stack([r["pooled_output"] for r in results]),  # (B, d)
        "encoder_outputs": [
            np.stack([r["encoder_outputs"][l] for r in results]) for l in range(num_layers)
        ],  # L x (B, n, d)
    }
