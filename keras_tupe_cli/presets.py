"""Build every preset, print its parameter count and (tiny) output shapes.

Each positional-encoding variant at each size, its parameter count, and the
outputs of one forward pass of the tiny models.

    keras-tupe-presets [--sizes tiny mini small base]
"""

import sys
import time

# keras_tupe (with Keras: seconds) is imported inside the functions, after the flags parse.
from keras_tupe_base.presets import SIZES, VARIANTS
from keras_tupe_cli.common import at_least, command_parser, entry_point


def parse_args(argv=None):
    parser = command_parser("keras-tupe-presets", __doc__)
    parser.add_argument(
        "--sizes", nargs="+", default=list(SIZES), choices=list(SIZES),
        help="preset sizes to build (default: all)",
    )
    parser.add_argument("--seq-len", type=at_least(1), default=32, help="length of the tiny forward pass")
    return parser.parse_args(argv)


@entry_point()
def main(argv=None):
    args = parse_args(argv)
    import numpy as np

    from keras_tupe import TupeBackbone

    rng = np.random.default_rng(0)
    print(f"{'preset':<22}{'parameters':>14}   outputs of one forward pass (batch 2)")
    for variant in VARIANTS:
        for size in args.sizes:
            start = time.perf_counter()
            backbone = TupeBackbone.from_preset(f"{variant}_{size}")
            line = f"{variant + '_' + size:<22}{backbone.count_params():>14,}"
            if size == "tiny":
                n = args.seq_len
                inputs = {
                    "token_ids": rng.integers(1, backbone.vocabulary_size, (2, n)).astype("int32"),
                    "padding_mask": np.ones((2, n), "int32"),
                    "segment_ids": np.zeros((2, n), "int32"),
                }
                outputs = backbone.layer_outputs()(inputs)  # with each layer's output
                line += (
                    f"   sequence_output {tuple(outputs['sequence_output'].shape)}"
                    f", pooled_output {tuple(outputs['pooled_output'].shape)}"
                    f", encoder_outputs {len(outputs['encoder_outputs'])} x "
                    f"{tuple(outputs['encoder_outputs'][0].shape)}"
                )
            print(f"{line}   [{time.perf_counter() - start:.1f}s]", flush=True)
            del backbone
    bert = TupeBackbone.from_preset("bert_a_base").count_params()
    tupe = TupeBackbone.from_preset("tupe_a_base").count_params()
    print(f"\nTUPE-A base adds {tupe - bert:,} parameters to BERT-A base "
          f"({100 * (tupe - bert) / bert:.2f}%; the paper: about 1%).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
