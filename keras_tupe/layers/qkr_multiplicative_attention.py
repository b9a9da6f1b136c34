"""Relative position embeddings in the attention logits (Shaw; Huang methods 1-4)."""

import math

import keras
from keras import ops

from keras_tupe.layers.positional_attention_base import PositionalAttentionBase
from keras_tupe.layers.utils import relative_positions

METHODS = ("shaw", "method1", "method2", "method3", "method4")


def clipped_relative_positions(query_length, key_length, max_distance):
    """`clip(j - i, -k, k)`, shape `(query_length, key_length)`."""
    return ops.clip(relative_positions(query_length, key_length), -max_distance, max_distance)


# Method 3 runs over chunks of queries; a chunk of `C` queries materializes
# (B, C, n, h, d_h) products. `C = METHOD3_CHUNK_ELEMENTS // d_h` gives each as
# many elements as 512 query rows of the (B, h, n, n) logits: from n = 512 on,
# no product is larger than the logits themselves.
METHOD3_CHUNK_ELEMENTS = 512


def method3_chunk_size(head_dim):
    """Queries per chunk of `method3_logits` for heads of size `head_dim`."""
    return max(1, METHOD3_CHUNK_ELEMENTS // head_dim)


def _chunk_table_rows(start, chunk_size, key_length, max_distance):
    """Table rows `clip(j - i, -k, k) + k` of queries `start..start + C - 1`, `(C, m)`."""
    query = start + ops.arange(chunk_size, dtype="int32")
    key = ops.arange(key_length, dtype="int32")
    relative = key[None, :] - query[:, None]  # (C, m)
    return ops.clip(relative, -max_distance, max_distance) + max_distance


def method3_logits(query, key, table, max_distance, chunk_size):
    """Huang's method 3, `Σ_c q_ic k_jc w[clip(j - i, k) + k]_c`, in bounded memory.

    The one-einsum form `einsum("bqhd,bkhd,qkd->bhqk")` materializes a
    (B, n, h, n, d_h) product, which is why Huang et al. needed ten times the
    memory of the other methods. Here the forward pass loops over chunks of
    `chunk_size` queries (the queries are zero-padded to a multiple of it), so
    no step holds more than a few (B, C, n, h, d_h) products. The backward pass
    is written out (a custom gradient) with the same loop: autodiff through the
    loop would keep every chunk's product for the backward pass, which is the
    full tensor again. Only `query`, `key` and `table` are kept for it; the
    table's gradient is summed chunk by chunk into its `2k + 1` rows.

    Each chunk is a multiply-and-sum rather than a matmul: the sum over `c`
    runs over three factors, so there is no matrix product to hand to BLAS.

    Works with a dynamic batch and length, on any backend, under XLA.

    Args:
        query: `(B, n, h, d_h)` queries, already scaled by `1 / sqrt(d_h)`.
        key: `(B, m, h, d_h)` keys.
        table: `(2k + 1, d_h)` relative embeddings; row `r + k` holds distance `r`.
        max_distance: int `k`.
        chunk_size: int `C`, queries per chunk.

    Returns:
        `(B, h, n, m)` logits in the dtype of the inputs.
    """
    num_rows = 2 * max_distance + 1

    @ops.custom_gradient
    def logits_fn(query, key, table):
        # A TensorFlow tape records the ops of the forward pass even under a
        # custom gradient, and would keep every chunk's product alive.
        query, key, table = (ops.stop_gradient(x) for x in (query, key, table))
        batch, query_length, num_heads, depth = ops.shape(query)
        key_length = ops.shape(key)[1]
        num_chunks = (query_length + chunk_size - 1) // chunk_size
        padding = num_chunks * chunk_size - query_length
        padded = ops.pad(query, [[0, 0], [0, padding], [0, 0], [0, 0]])  # (B, N_c·C, h, d_h)
        starts = ops.arange(num_chunks, dtype="int32") * chunk_size  # (N_c,)

        def chunk(start):
            """Queries `(B, C, h, d_h)`, table rows `(C, m)` and their vectors `(C, m, d_h)`."""
            query_rows = ops.slice(padded, [0, start, 0, 0], [batch, chunk_size, num_heads, depth])
            table_rows = _chunk_table_rows(start, chunk_size, key_length, max_distance)
            return query_rows, table_rows, ops.take(table, table_rows, axis=0)

        def chunk_logits(start):
            query_rows, _, embeddings = chunk(start)
            key_embeddings = key[:, None] * embeddings[None, :, :, None, :]  # (B, C, m, h, d_h)
            return ops.sum(query_rows[:, :, None] * key_embeddings, axis=-1)  # (B, C, m, h)

        logits = ops.map(chunk_logits, starts)  # (N_c, B, C, m, h)
        logits = ops.transpose(logits, (1, 4, 0, 2, 3))  # (B, h, N_c, C, m)
        logits = ops.reshape(logits, (batch, num_heads, num_chunks * chunk_size, key_length))
        logits = logits[:, :, :query_length]  # (B, h, n, m)

        def grad(*args, upstream=None):
            if upstream is None:
                (upstream,) = args
            upstream = ops.transpose(ops.cast(upstream, query.dtype), (0, 2, 3, 1))  # (B, n, m, h)
            # The padded queries get a zero gradient and contribute nothing.
            upstream = ops.pad(upstream, [[0, 0], [0, padding], [0, 0], [0, 0]])

            def chunk_gradients(index, gradients):
                d_query, d_key, d_table = gradients
                start = index * chunk_size
                query_rows, table_rows, embeddings = chunk(start)
                upstream_rows = ops.slice(
                    upstream, [0, start, 0, 0], [batch, chunk_size, key_length, num_heads]
                )[..., None]  # (B, C, m, h, 1)
                embeddings = embeddings[None, :, :, None, :]  # (1, C, m, 1, d_h)
                key_embeddings = key[:, None] * embeddings  # (B, C, m, h, d_h)
                d_query = ops.slice_update(
                    d_query, [0, start, 0, 0], ops.sum(upstream_rows * key_embeddings, axis=2)
                )  # (B, N_c·C, h, d_h)
                upstream_queries = upstream_rows * query_rows[:, :, None]  # (B, C, m, h, d_h)
                d_key = d_key + ops.sum(upstream_queries * embeddings, axis=1)  # (B, m, h, d_h)
                d_embeddings = ops.sum(upstream_queries * key[:, None], axis=(0, 3))  # (C, m, d_h)
                # The gather's gradient: each (query, key) pair adds into its table row.
                d_table = d_table + ops.segment_sum(
                    ops.reshape(d_embeddings, (-1, depth)),  # (C·m, d_h)
                    ops.reshape(table_rows, (-1,)),  # (C·m,)
                    num_segments=num_rows,
                )  # (2k + 1, d_h)
                return d_query, d_key, d_table

            d_query, d_key, d_table = ops.fori_loop(
                0,
                num_chunks,
                chunk_gradients,
                (ops.zeros_like(padded), ops.zeros_like(key), ops.zeros_like(table)),
            )
            return d_query[:, :query_length], d_key, d_table

        return logits, grad

    return logits_fn(query, key, table)


# Method 4's relative terms run over blocks of this many queries (keys). A
# block's matmul computes `m + b - 1` products per row for the `m` it keeps;
# the matmuls stay large at any `b` (the blocks, batch and heads are batched).
# 16, 32 and 64 ran within a few percent of each other (mini, n = 512, CPU).
METHOD4_BLOCK_SIZE = 16


def relative_products(x, table, max_distance, other_length, block_size, keys=False):
    """Method 4's relative terms without the `(n, m, d_h)` embeddings, `(B, h, n_q, n_k)`.

    With `w` the table and `r(i, j) = clip(j - i, -k, k) + k` for query `i`
    and key `j`: for queries `x` (`keys=False`) the term `x_i · w[r(i, j)]`,
    for keys `x` (`keys=True`) the term `x_j · w[r(i, j)]`; `other_length` is
    the length of the other side.

    The gather `take(table, r)` materializes (n_q, n_k, d_h) embeddings and its
    backward pass scatter-adds that many values into the table. Here block `c`
    of `b` rows of `x` (`x_{c·b + u}`) meets only `m + b - 1` distances, `m`
    the other length: a window of table rows, gathered once per block
    ((n/b)·(m + b - 1)·d_h values). One matmul per block gives `x · window[l]`
    for every `l`, and the product a row `u` needs for position `t` of the
    other side sits at `l = t + b - 1 - u`: a skew, which slicing the
    flattened block undoes (rows then advance by `m + b - 2`), without a
    gather; its backward pass is a pad. The matmuls cost (m + b - 1) / m of
    the products they keep.

    Needs static lengths (Python ints) and `block_size >= 2`; `x` is
    zero-padded to a multiple of `block_size`.

    Args:
        x: `(B, n, h, d_h)` queries, or keys with `keys=True`.
        table: `(2k + 1, d_h)` relative embeddings; row `r + k` holds distance `r`.
        max_distance: int `k`.
        other_length: int, the number of keys (of queries with `keys=True`).
        block_size: int `b >= 2`, rows of `x` per block.
        keys: bool, whether `x` holds the keys.

    Returns:
        `(B, h, n_q, n_k)` in the dtype of `x`.
    """
    _, length, num_heads, depth = x.shape
    num_blocks = -(-length // block_size)
    padded_length = num_blocks * block_size
    window = other_length + block_size - 1
    x = ops.pad(x, [[0, 0], [0, padded_length - length], [0, 0], [0, 0]])
    x = ops.reshape(x, (-1, num_blocks, block_size, num_heads, depth))  # (B, c, b, h, d_h)
    x = ops.transpose(x, (1, 0, 3, 2, 4))  # (c, B, h, b, d_h)
    # Block c sees the distances -(c·b + b - 1) .. m - 1 - c·b from its rows,
    # which are j - i for queries and i - j for keys.
    first = -(ops.arange(num_blocks, dtype="int32") * block_size + block_size - 1)  # (c,)
    distances = first[:, None] + ops.arange(window, dtype="int32")[None, :]  # (c, L)
    rows = ops.clip(-distances if keys else distances, -max_distance, max_distance)
    windows = ops.cast(ops.take(table, rows + max_distance, axis=0), x.dtype)  # (c, L, d_h)
    products = ops.einsum("cbhud,cld->cbhul", x, windows)  # (c, B, h, b, L)
    # Row u wants l = t + b - 1 - u: from b - 1 on, the flattened block read in
    # rows of L - 1 = m + b - 2 holds it at column t. `ops.slice` rather than
    # `[...]`: without XLA, TensorFlow's strided slice and its gradient took
    # three times as long as `tf.slice` here.
    products = ops.reshape(products, (-1, block_size * window))  # (c·B·h, b·L)
    products = ops.slice(products, (0, block_size - 1), (-1, block_size * (window - 1)))
    products = ops.reshape(products, (-1, window - 1))  # (c·B·h·b, L - 1)
    products = ops.slice(products, (0, 0), (-1, other_length))  # (c·B·h·b, m)
    products = ops.reshape(
        products, (num_blocks, -1, num_heads, block_size, other_length)
    )  # (c, B, h, b, m)
    if keys:
        products = ops.transpose(products, (1, 2, 4, 0, 3))  # (B, h, m, c, b)
        products = ops.reshape(products, (-1, num_heads, other_length, padded_length))
        return products[..., :length] if padded_length > length else products  # (B, h, m, n)
    products = ops.transpose(products, (1, 2, 0, 3, 4))  # (B, h, c, b, m)
    products = ops.reshape(products, (-1, num_heads, padded_length, other_length))
    return products[:, :, :length] if padded_length > length else products  # (B, h, n, m)


@keras.saving.register_keras_serializable(package="keras_tupe")
class QKRMultiplicativeAttention(PositionalAttentionBase):
    """Self-attention with per-layer relative position embeddings.

    With `r = clip(j - i, k)`, the table `w` shared by the heads of this layer,
    and `a_ij = w[r]` (Shaw et al. 2018; Huang et al., Findings of EMNLP 2020):

        shaw:    α_ij = (q_i·k_j + q_i·a_ij) / sqrt(d_h)          a ∈ R^{d_h}
        method1: α_ij = (q_i·k_j) · w[|r|] / sqrt(d_h)             w scalar
        method2: α_ij = (q_i·k_j) · w[r] / sqrt(d_h)               w scalar, signed
        method3: α_ij = Σ_c q_ic k_jc a_ijc / sqrt(d_h)            a ∈ R^{d_h}
        method4: α_ij = (q_i·k_j + q_i·a_ij + k_j·a_ij) / sqrt(d_h)

    Tables: `(2k + 1, d_h)` for shaw/method3/method4 (row `r + k` holds distance
    `r`), `(k + 1,)` for method1 (row `|r|`), `(2k + 1,)` for method2. Scalar
    tables start at 1 (plain attention), vector tables at N(0, 0.02), or zeros
    with `zero_init_tables=True` (the drop-in of Huang §4.4 for method 4).

    Relative methods accept any sequence length; distances beyond `k` share the
    table's last rows.

    Method 3 runs in float32 over chunks of queries (`method3_logits`), so its
    memory stays that of the other methods (Huang et al. report ten times).
    Method 4 with static lengths runs by blocks (`relative_products`): the same
    numbers without gathering `(n, n, d_h)` embeddings (at `mini`, n = 512 on a
    CPU, a training step went from 1.59x to 1.25x `bert_a`'s; docs/benchmarks.md).

    Args:
        method: one of `"shaw"`, `"method1"`, `"method2"`, `"method3"`,
            `"method4"`. Defaults to `"method4"`.
        max_relative_distance: int `k`, the clipping distance. Defaults to `512`.
        zero_init_tables: bool. Start vector tables at zero. Defaults to `False`.
        num_heads, dropout, kernel_initializer, bias_initializer: as in
            `PositionalAttentionBase`.

    Call arguments and output: as in `PositionalAttentionBase`.

    Example:
    >>> attention = QKRMultiplicativeAttention(num_heads=4, method="shaw",
    ...                                        max_relative_distance=16)
    >>> attention(keras.ops.ones((2, 10, 64))).shape
    (2, 10, 64)
    """

    def __init__(
        self,
        num_heads,
        method="method4",
        max_relative_distance=512,
        zero_init_tables=False,
        **kwargs,
    ):
        super().__init__(num_heads, **kwargs)
        if method not in METHODS:
            raise ValueError(f"`method` must be one of {METHODS}. Received: method={method!r}")
        if not isinstance(max_relative_distance, int) or max_relative_distance < 1:
            raise ValueError(
                "`max_relative_distance` must be a positive int. "
                f"Received: max_relative_distance={max_relative_distance}"
            )
        self.method = method
        self.max_relative_distance = max_relative_distance
        self.zero_init_tables = zero_init_tables

    def build_positional(self, hidden_dim):
        k = self.max_relative_distance
        if self.method == "method1":
            shape, initializer = (k + 1,), "ones"
        elif self.method == "method2":
            shape, initializer = (2 * k + 1,), "ones"
        else:
            shape = (2 * k + 1, self.head_dim)
            initializer = (
                "zeros"
                if self.zero_init_tables
                else keras.initializers.TruncatedNormal(stddev=0.02)
            )
        self.relative_embeddings = self.add_weight(
            name="relative_embeddings", shape=shape, initializer=initializer
        )

    @property
    def decay_exempt_weights(self):
        """The scalar table of methods 1 and 2; nothing for the other methods.

        Methods 1/2 multiply the logits by `w[r]`, which starts at 1 (plain
        attention): decay would pull it towards 0 and flatten the attention.
        The vector tables (shaw, methods 3/4) start near 0 and are decayed like
        embeddings. The projection biases are `EinsumDense` biases, which
        `keras_tupe.optimization.decay_exclusions` excludes by its own rule.
        """
        if self.method in ("method1", "method2"):
            return [self.relative_embeddings]
        return []

    def attention_logits(self, query, key):
        k = self.max_relative_distance
        table = self.relative_embeddings
        if self.method == "method3":
            # In float32, as the logits are: a float16 three-way product summed
            # over d_h overflows sooner than a dot product.
            return method3_logits(
                ops.cast(query, "float32") * (1.0 / math.sqrt(self.head_dim)),
                ops.cast(key, "float32"),
                ops.cast(ops.convert_to_tensor(table), "float32"),
                k,
                chunk_size=method3_chunk_size(self.head_dim),
            )  # (B, h, q, k)
        relative = clipped_relative_positions(ops.shape(query)[1], ops.shape(key)[1], k)
        query = query * (1.0 / math.sqrt(self.head_dim))
        logits = ops.einsum("bqhd,bkhd->bhqk", query, key)  # (B, h, q, k)
        if self.method in ("method1", "method2"):
            index = ops.abs(relative) if self.method == "method1" else relative + k
            return ops.cast(logits, "float32") * ops.cast(ops.take(table, index), "float32")
        if self.method == "method4":
            # The key term carries no query: undo the query scaling by scaling here.
            key = key * (1.0 / math.sqrt(self.head_dim))
            if self._blocked_method4(query, key):
                block_size = min(METHOD4_BLOCK_SIZE, query.shape[1], key.shape[1])
                query_term = relative_products(query, table, k, key.shape[1], block_size)
                key_term = relative_products(key, table, k, query.shape[1], block_size, keys=True)
                return ops.cast(logits + query_term + key_term, "float32")
        embeddings = ops.take(table, relative + k, axis=0)  # (q, k, d_h)
        logits = logits + ops.einsum("bqhd,qkd->bhqk", query, embeddings)
        if self.method == "method4":
            logits = logits + ops.einsum("bkhd,qkd->bhqk", key, embeddings)
        return ops.cast(logits, "float32")

    @staticmethod
    def _blocked_method4(query, key):
        """Method 4 runs by blocks with static lengths of 2 or more; a dynamic length (a
        TensorFlow graph traced without one, e.g. an export for any length) gathers."""
        return all(isinstance(n, int) and n >= 2 for n in (query.shape[1], key.shape[1]))

    def get_config(self):
        return {
            **super().get_config(),
            "method": self.method,
            "max_relative_distance": self.max_relative_distance,
            "zero_init_tables": self.zero_init_tables,
        }
