"""Model FLOPs of an encoder's step, counted from its configuration: what the studies'
equal-FLOP comparisons (`experiments.claims`) and the benchmarks' TFLOP/s and MFU
(`benchmarks.encoders`) both use."""

from keras_tupe_base.presets import SIZES, VARIANTS


def model_flops_per_token(num_layers, hidden_dim, intermediate_dim, num_heads, seq_len,
                          relative_position="none", absolute_correlation="none",
                          batch_size=1, training=True, relative_table_rows=None):
    """Model FLOPs per token of one step (multiply and add counted as 2).

    Training step = 3 x forward (the backward pass costs 2 x forward). Forward,
    per layer and token, with d = `hidden_dim`, d_ff = `intermediate_dim`,
    n = `seq_len`, h = `num_heads`:

        2 x (4 d² [Q, K, V, O projections] + 2 d d_ff [feed-forward])
        + 2 x 2 n d [QKᵀ and PV]

    (24 d² + 4 n d with d_ff = 4 d), plus the variant's positional logits,
    per layer and token:

        shaw:    + 2 n d      q_i·a_ij (keys only: this Shaw has no value-side term)
        method4: + 2 x 2 n d  q_i·a_ij and k_j·a_ij
        method3: + n d        Σ_c q_ic k_jc a_ijc: one more multiply per term than QKᵀ
        method1, method2: + h n  the logits multiplied by a scalar per pair
        t5_bias (bert_r, tupe_r), alibi: 0  a gathered or fixed bias, added
        rotary: 0      elementwise rotations of q and k (like the additions, not counted)
        disentangled: + 2 x 2 r d  c2p and p2c scores against the r = 2k rows of the
                       shared table (`relative_table_rows`)

    and, once per forward pass for the whole batch (not per layer: the encoder
    computes it once and every layer shares it), divided by the batch's B n
    tokens:

        untied (tupe_a, tupe_a_tie_cls, tupe_r): 2 x 2 n d² [U_Q, U_K projections
            of the positions] + 2 n² d [their correlation, (h, n, n)]
        untied_cross (bert_a_d): 2 x 2 n d² [the position projections]
        disentangled: 2 x 2 r d² per layer [each layer's W_Q, W_K of the table]

    Not counted: embeddings (gathers), additions (biases, residuals), softmax,
    layer norms, the pooler (one d x d product per sequence, < 0.1 % at mini,
    n = 128), any head and loss (`benchmarks.encoders` has no MLM head; a study
    comparing two encoders pre-trained alike has the same head on both).
    Inference: `training=False`, the forward pass alone.
    """
    d, d_ff, n, h = hidden_dim, intermediate_dim, seq_len, num_heads
    layer = 2 * (4 * d * d + 2 * d * d_ff) + 2 * 2 * n * d
    r = relative_table_rows or 0
    layer += {"shaw": 2 * n * d, "method4": 2 * 2 * n * d, "method3": n * d,
              "method1": h * n, "method2": h * n,
              "disentangled": 2 * 2 * r * d}.get(relative_position, 0)
    shared = {"untied": 2 * 2 * n * d * d + 2 * n * n * d,
              "untied_cross": 2 * 2 * n * d * d}.get(absolute_correlation, 0)
    if relative_position == "disentangled":
        shared += num_layers * 2 * 2 * r * d * d
    forward = num_layers * layer + shared / (batch_size * n)
    return 3 * forward if training else forward


def variant_flops_per_token(variant, size, seq_len, batch_size, training=True):
    """`model_flops_per_token` of preset `variant` at `size` (`keras_tupe_base.presets`'s
    names), with `batch_size` sequences of `seq_len` tokens a step."""
    fields = VARIANTS[variant]
    size_config = SIZES[size]
    return model_flops_per_token(
        size_config["num_layers"], size_config["hidden_dim"], size_config["intermediate_dim"],
        size_config["num_heads"], seq_len,
        relative_position=fields.get("relative_position", "none"),
        absolute_correlation=fields.get("absolute_correlation", "none"),
        batch_size=batch_size, training=training,
        # DeBERTa's table: 2k rows, k = bucket_size (default max_len // 2).
        relative_table_rows=2 * fields.get("bucket_size",
                                           size_config["max_sequence_length"] // 2),
    )
