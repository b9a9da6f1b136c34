"""The settings of one fine-tuning run: `FinetuneConfig` (GLUE) and `SquadConfig` (SQuAD),
the papers' grid and the data loaders.

Plain dataclasses and constants of the standard library alone, so a command reads them
before Keras is imported (`keras_tupe_cli.common.plumbing`): `keras-tupe-finetune-squad`'s
flags are `SquadConfig`'s fields, `keras-tupe-finetune-glue`'s defaults `FinetuneConfig`'s.
The runs themselves are `keras_tupe.finetuning.glue` and `keras_tupe.finetuning.squad`.
"""

import dataclasses

# The papers' grid (TUPE; Huang et al.): 4 learning rates x 5 seeds.
PAPER_LEARNING_RATES = (2e-5, 3e-5, 4e-5, 5e-5)
PAPER_SEEDS = (0, 1, 2, 3, 4)
LOADERS = ("tf.data", "grain")  # `keras_tupe.finetuning.batches.resolve_loader`


@dataclasses.dataclass
class FinetuneConfig:
    task: str
    init: str
    learning_rate: float = 2e-5
    seed: int = 0
    epochs: int = None  # None: the paper's (10; 5 for MNLI, QQP, QNLI)
    batch_size: int = 32
    seq_len: int = 128
    warmup_ratio: float = 0.06
    weight_decay: float = 0.01
    dropout: float = 0.1
    data_dir: str = None
    vocab: str = None
    lowercase: bool = True
    max_train_examples: int = None
    # Pad each split only to its longest example (rounded up to 8, at most `seq_len`), and
    # with `pad_each_batch` each training batch to its longest (rounded up to 16): padding
    # is masked, so the outputs are the same with less work. Off by default: dropout then
    # draws other masks, so a seed's run is not bitwise the one padded to `seq_len`.
    pad_to_longest: bool = False
    pad_each_batch: bool = False
    xla: bool = True
    steps_per_execution: int = 1  # Keras `fit`'s: steps a call of the train function runs
    verbose: int = 0
    progress: bool = False  # a line per epoch and every 10 s instead of fit's output
    save_dir: str = None  # keep the fine-tuned classifier as a preset folder
    data_loader: str = None  # "tf.data", "grain", or None (`batches.resolve_loader`)


@dataclasses.dataclass
class SquadConfig:
    """SQuAD v1.1 fine-tuning (Huang et al.'s downstream task)."""

    init: str
    out: str = None
    train: str = "train"  # a SQuAD json path, or a tfds split (online)
    eval: str = "validation"
    offline_split: str = None  # a SQuAD json to split by article into train/eval (not official)
    eval_fraction: float = 0.2
    # The offline split's seed; None: `seed`. A study with several fine-tuning seeds
    # fixes it, so every seed trains and evaluates on the same articles.
    split_seed: int = None
    learning_rate: float = 3e-5
    seed: int = 0
    epochs: int = 2
    batch_size: int = 32
    seq_len: int = 384
    doc_stride: int = 128
    max_query_length: int = 64
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    vocab: str = None
    lowercase: bool = True
    max_train_examples: int = None
    xla: bool = True
    steps_per_execution: int = 1  # Keras `fit`'s: steps a call of the train function runs
    verbose: int = 0
    # "tf.data" or "grain"; None: tf.data where TensorFlow imports, else Grain.
    data_loader: str = None
    # Keep the fine-tuned span-QA model with its preprocessor as a preset folder
    # (`keras_hub.models.Task.from_preset(save_dir)`); refused where a folder holds files.
    save_dir: str = None
