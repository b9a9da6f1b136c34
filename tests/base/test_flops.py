"""`keras_tupe_base.flops`: the model FLOPs of a preset's step against a count by hand (the
studies' equal-FLOP shares and the benchmarks' TFLOP/s and MFU both read it)."""

from keras_tupe_base.flops import variant_flops_per_token as flops


def test_model_flops_against_a_hand_count():
    # tiny: L = 2, d = 64, d_ff = 128, h = 4; n = 32, batch B = 2.
    # Per layer and token: 2 (4 d² + 2 d d_ff) = 2 (16,384 + 16,384) = 65,536
    #   + 2 x 2 n d = 4 · 32 · 64 = 8,192 -> 73,728; x 2 layers = 147,456.
    # tupe_r, once per batch: 2 x 2 n d² = 524,288 + 2 n² d = 131,072 -> 655,360,
    #   over B n = 64 tokens = 10,240. Forward 157,696; training x 3 = 473,088.
    # huang_m4: + 2 x 2 n d = 8,192 per layer -> 2 (73,728 + 8,192) = 163,840; x 3 = 491,520.
    # shaw: + 2 n d = 4,096 per layer -> 2 · 77,824 = 155,648; x 3 = 466,944.
    # bert_a: 147,456 x 3 = 442,368; inference (forward only) 147,456.
    assert flops("tupe_r", "tiny", 32, 2) == 473_088
    assert flops("huang_m4", "tiny", 32, 2) == 491_520
    assert flops("shaw", "tiny", 32, 2) == 466_944
    assert flops("bert_a", "tiny", 32, 2) == 442_368
    # Rotary and ALiBi add no counted FLOPs; DeBERTa at tiny (k = 128 // 2, r = 2k = 128):
    # per layer + 2·2·128·64 = 32,768; per batch 2 layers x 2·2·128·64² / (2·32 tokens).
    assert flops("rope", "tiny", 32, 2) == flops("alibi", "tiny", 32, 2) == 442_368
    assert flops("deberta", "tiny", 32, 2) == 3 * (2 * (73_728 + 32_768) + 65_536)
    assert flops("bert_a", "tiny", 32, 2, training=False) == 147_456
    # mini (d = 256, d_ff = 1024), n = 512: (24 d² + 8 n d) / (24 d² + 4 n d) = 1.25.
    assert flops("huang_m4", "mini", 512, 8) / flops("bert_a", "mini", 512, 8) == 1.25
