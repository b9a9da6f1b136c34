"""The settings of a run: `PretrainConfig` (masked-LM pre-training), `FinetuneConfig` (GLUE)
and `SquadConfig` (SQuAD), with their choices and the papers' fine-tuning grid.

Plain dataclasses of the standard library alone. A field made by `setting` carries what its
flag needs (help, choices, the least value, a switch's name): every command's flags are a
config's fields (`keras_tupe_cli.common.add_settings`), parsed and checked (`check`) before
Keras is imported. The studies build configs from their settings; the runs themselves are
`keras_tupe.pretraining`, `keras_tupe.finetuning.glue` and `keras_tupe.finetuning.squad`,
which check the same way.
"""

import dataclasses

from keras_tupe_base.checks import check_choice, check_int, check_rate, check_seed
from keras_tupe_base.presets import PRESETS, absolute_length_limit, unknown_preset

# The papers' grid (TUPE; Huang et al.): 4 learning rates x 5 seeds.
PAPER_LEARNING_RATES = (2e-5, 3e-5, 4e-5, 5e-5)
PAPER_SEEDS = (0, 1, 2, 3, 4)
LOADERS = ("tf.data", "grain")  # `keras_tupe.finetuning.batches.resolve_loader`
STRATEGIES = ("default", "mirrored", "multiworker")  # `keras_tupe.pretraining`'s
PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")  # Keras's dtype policies
GRID_PRECISIONS = ("float32", "mixed_bfloat16")  # `keras_tupe.grid.GridTrainer`'s
# The shortest pre-training sequence: [CLS], [SEP] and room to mask (`keras_tupe.data`).
MIN_SEQUENCE_LENGTH = 8
# Fields of a `PretrainConfig` that may differ when a killed run is started again.
RESUME_FREE_FIELDS = ("overwrite", "verbose", "vocab",  # the vocab is checked by content
                      "steps_per_execution",  # speed only: the same steps
                      # The process layout: every layout trains the same global batches.
                      "coordinator", "num_processes", "process_id", "coordinator_timeout")
# The fields of a process layout under JAX (`keras_tupe.processes`): `--strategy multiworker`'s
# (pre-training) and GLUE fine-tuning's.
LAYOUT_FIELDS = ("coordinator", "num_processes", "process_id")


def setting(default=dataclasses.MISSING, help=None, *, factory=None, choices=None, minimum=None,
            rate=False, seed=False, switch=None, nargs=None, parse=None, flag=True,
            required=None):
    """A config field and its flag.

    Args:
        default: the field's default; left out, the flag is required.
        help: str. The flag's help line.
        factory: a callable making the default (a list), instead of `default`.
        choices: the values allowed (checked, and the flag's choices).
        minimum: int. The value is an int at least this (checked).
        rate: bool. The value is a number in [0, 1] (checked).
        seed: bool. The value is a seed NumPy takes, an int in 0 .. 2**32 - 1 (checked).
        switch: str. A bool's flag, which turns its default around (`--no-xla`).
        nargs: argparse's, for a list field (`"+"`).
        parse: the flag's `type` where it is not the field's (a comma list of steps).
        flag: bool. False: a setting with no flag (set by the library or a study).
        required: bool. Whether the flag must be given; defaults to whether the field has
            no default (False for `corpus`, which `--shards` replaces).
    """
    if required is None:
        required = default is dataclasses.MISSING and factory is None
    metadata = {"help": help, "choices": choices, "minimum": minimum, "rate": rate,
                "seed": seed, "switch": switch, "nargs": nargs, "parse": parse, "flag": flag,
                "required": required}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


# The flags of a process layout: (help, default, least value).
LAYOUT_SETTINGS = {
    "coordinator": ("HOST:PORT of process 0, which serves the coordination (every process the "
                    "same)", None, None),
    "num_processes": ("how many processes train together", None, 1),
    "process_id": ("this process's index, 0 .. --num-processes - 1 (0 writes --out)", None, 0),
    "coordinator_timeout": ("seconds to wait for every process to join", 300, 1),
}


def layout_setting(name, when):
    """The field `name` of a process layout (`LAYOUT_SETTINGS`), its help led by `when`
    (the setting that trains across processes)."""
    text, default, minimum = LAYOUT_SETTINGS[name]
    return setting(default, f"{when}: {text}", minimum=minimum)


def check(config):
    """Raises ValueError (a line a problem) for each field outside what its `setting`
    allows (a field left None where its default is None is not set, so not checked), then
    for the conflicts between fields that the config's `problems()` names. Returns `config`."""
    problems = []
    for field in dataclasses.fields(config):
        value, meta = getattr(config, field.name), field.metadata
        if value is None and field.default is None:
            continue
        try:
            # A list field (`nargs`) is checked value by value.
            for one in value if meta.get("nargs") and isinstance(value, list) else [value]:
                if meta.get("minimum") is not None:
                    check_int(field.name, one, meta["minimum"])
                if meta.get("seed"):
                    check_seed(field.name, one)
                if meta.get("rate"):
                    check_rate(field.name, one)
                if meta.get("choices"):
                    check_choice(field.name, one, meta["choices"])
        except ValueError as error:
            problems.append(str(error))
    # The conflicts between fields (each of which `problems` checks only where its fields
    # are what they may be: no divisor of 0).
    problems += config.problems() if hasattr(config, "problems") else []
    if problems:
        raise ValueError("\n".join(problems))
    return config


def int_list(text):
    """A comma list of step numbers (`100000,300000`), as `--save-steps` takes it."""
    try:
        return [int(float(s)) for s in text.split(",") if s.strip()]
    except ValueError:
        raise ValueError(f"expected comma-separated step numbers, got {text!r}") from None


@dataclasses.dataclass
class PretrainConfig:
    """Every setting of a pre-training run; defaults are TUPE's Table 1."""

    preset: str = setting(help="backbone preset, e.g. tupe_r_mini (`keras-tupe-presets`)")
    corpus: list = setting(
        help="training text: text files (a paragraph a line, a blank line between documents), "
             "WikiText .tokens files, folders of .txt files, or tfds:NAME[:SPLIT]; or --shards",
        nargs="+", required=False)
    out: str = setting(help="run directory (created; resumed if unfinished)")
    # Backbone config fields that differ from the preset's for this run, e.g.
    # `{"max_relative_distance": 8}` (as `TupeBackbone.from_preset(preset, **overrides)`).
    backbone_overrides: dict = setting(None, flag=False)
    valid_corpus: list = setting(None, "validation text, logged every --eval-every", nargs="+")
    # Token-id shard folders (`keras-tupe-shard-corpus`), read with NumPy, instead of
    # `corpus` / `valid_corpus`: exactly one of `corpus` and `shards`.
    shards: str = setting(None, "token-id shard folder (keras-tupe-shard-corpus) instead of "
                                "--corpus; its vocabulary is the run's")
    valid_shards: str = setting(None, "validation shard folder, with --shards")
    vocab: str = setting(None, "WordPiece vocabulary file; trained on --corpus if absent")
    vocabulary_size: int = setting(30522, "largest number of tokens", minimum=1)
    lowercase: bool = setting(True, switch="--cased", help="keep case")
    vocab_lines: int = setting(200_000, "corpus lines used to train the vocabulary", minimum=1)
    steps: int = setting(1_000_000, "optimizer steps", minimum=1)
    batch_size: int = setting(256, "global batch size", minimum=1)
    seq_len: int = setting(512, "tokens a sequence (default: 512, or the preset's position "
                                "table when shorter; with --shards, theirs)",
                           minimum=MIN_SEQUENCE_LENGTH)
    learning_rate: float = setting(1e-4, "peak learning rate")
    warmup_ratio: float = setting(0.01, "share of --steps warming up, in [0, 1)")
    weight_decay: float = setting(0.01, "AdamW's decoupled weight decay")
    adam_beta1: float = setting(0.9, "AdamW's beta 1")
    adam_beta2: float = setting(0.999, "AdamW's beta 2")
    adam_epsilon: float = setting(1e-6, "AdamW's epsilon")
    clip_norm: float = setting(1.0, "global norm of the aggregated gradient")
    dropout: float = setting(0.1, "dropout rate", rate=True)
    mask_rate: float = setting(0.15, "share of tokens selected for the masked LM", rate=True)
    mask_token_rate: float = setting(0.8, "share of the selected replaced by [MASK]", rate=True)
    random_token_rate: float = setting(0.1, "share of the selected replaced by a random token",
                                       rate=True)
    eval_every: int = setting(1000, "steps between validation, CSV rows and backups (default: "
                                    "1000 when it divides --steps, else about a tenth of "
                                    "--steps)", minimum=1)
    valid_batches: int = setting(50, "validation batches", minimum=1)
    save_steps: list = setting(
        factory=list, parse=int_list,
        help="steps at which to keep a checkpoint (a preset folder, RUN/checkpoints/"
             "step_NNNNNNN/), e.g. 100000,300000; 0 keeps the random initialization (a "
             "control for fine-tuning)")
    strategy: str = setting("default", "how the batch is spread over devices",
                            choices=STRATEGIES)
    # The process layout of `--strategy multiworker` under JAX (`keras_tupe.processes`); left
    # out, JAX's cluster detection (SLURM, Open MPI, Cloud TPU) finds it.
    coordinator: str = layout_setting("coordinator", "JAX, --strategy multiworker")
    num_processes: int = layout_setting("num_processes", "JAX, --strategy multiworker")
    process_id: int = layout_setting("process_id", "JAX, --strategy multiworker")
    coordinator_timeout: int = layout_setting("coordinator_timeout", "JAX, --strategy multiworker")
    precision: str = setting("float32", "Keras's dtype policy", choices=PRECISIONS)
    xla: bool = setting(True, switch="--no-xla", help="turn XLA off")
    # Steps one call of the compiled train function runs (Keras `fit`'s argument): fewer
    # Python round trips a step, the same numbers. It divides eval_every and each save step.
    steps_per_execution: int = setting(
        1, "steps one call of the compiled train function runs (Keras fit's argument): fewer "
           "Python round trips, the same numbers; a divisor of --eval-every and of each "
           "--save-steps", minimum=1)
    seed: int = setting(0, "seed of the initialization, dropout, masking and data order",
                        seed=True)
    shuffle_buffer: int = setting(10_000, "lines in the shuffle buffer", minimum=1)
    max_lines: int = setting(None, "read at most this many corpus lines", minimum=1)
    overwrite: bool = setting(False, switch="--overwrite", help="delete an existing --out first")
    verbose: int = setting(1, "0: silent, 1: a progress bar of steps, 2: a line per block",
                           choices=(0, 1, 2))

    def resume_key(self):
        """The fields that must match for a run directory to be resumed."""
        # No overrides is the preset itself: such a run's key is the same without the field.
        return {k: v for k, v in dataclasses.asdict(self).items()
                if k not in RESUME_FREE_FIELDS and (k != "backbone_overrides" or v)}

    def backbone_config(self):
        """The preset's backbone config with the run's overrides (the vocabulary size and
        dropout aside, which the run sets)."""
        return {**PRESETS[self.preset], **(self.backbone_overrides or {})}

    def problems(self):
        """The conflicts between settings, a line each (those of a field whose own value is
        wrong are left to `check`'s field checks)."""
        if self.preset not in PRESETS:
            return [unknown_preset(self.preset)]
        problems = []
        limit = absolute_length_limit(**self.backbone_config())
        if limit is not None and _counts(self.seq_len) and self.seq_len > limit:
            problems.append(
                f"--seq-len {self.seq_len} is longer than the absolute position table of "
                f"{self.preset} (max_sequence_length={limit}). Use --seq-len <= {limit}, or a "
                "relative-only preset.")
        if not 0 <= self.warmup_ratio < 1:
            problems.append(f"--warmup-ratio must be in [0, 1). Received: {self.warmup_ratio}")
        problems += layout_problems(self, "--strategy multiworker", self.strategy != "multiworker"
                                    and f"the run has --strategy {self.strategy}")
        if not _counts(self.steps, self.eval_every, self.steps_per_execution):
            return problems
        if self.steps_per_execution > self.steps:
            problems.append(f"--steps-per-execution ({self.steps_per_execution}) is more than "
                            f"--steps ({self.steps}): a call of the train function would run "
                            "past the end of training.")
        elif self.steps % self.eval_every:
            problems.append(
                f"--steps ({self.steps}) must be a positive multiple of --eval-every "
                f"({self.eval_every}): training runs, validates and backs up in blocks of "
                "--eval-every steps.")
        elif any(step % self.steps_per_execution
                 for step in (self.eval_every, *self.save_steps)):
            saves = " ".join(map(str, self.save_steps))
            problems.append(
                f"--steps-per-execution ({self.steps_per_execution}) must be a positive divisor "
                f"of --eval-every ({self.eval_every})"
                + (f" and of each --save-steps ({saves})" if saves else "")
                + ": validation and backups happen between executions, which run "
                "--steps-per-execution steps each.")
        bad_saves = [s for s in self.save_steps if not 0 <= s <= self.steps]
        if bad_saves:
            problems.append(f"--save-steps must lie in [0, --steps={self.steps}] (0: the "
                            f"initialization, before the first step). Received: {bad_saves}")
        return problems


def layout_problems(config, switch, without):
    """The conflicts of `config`'s process layout (`LAYOUT_FIELDS`), a line each: the layout
    given without `switch`, the setting that trains across processes (`without`: what the
    run does instead, or None when `switch` is on or there is none); a process id outside
    the count; a coordinator not of the form HOST:PORT."""
    given = [f"--{name.replace('_', '-')}" for name in LAYOUT_FIELDS
             if getattr(config, name) is not None]
    if given and without:
        return [f"{' '.join(given)} set the process layout of {switch} (JAX); {without}. "
                f"Add {switch}, or leave them out."]
    problems = []
    count, index = config.num_processes, config.process_id
    if _counts(count) and index is not None and _counts(index + 1) and index >= count:
        problems.append(f"--process-id {index} is out of range for --num-processes "
                        f"{count}: give each process one of 0 .. {count - 1}.")
    host, _, port = (config.coordinator or "").rpartition(":")
    if config.coordinator is not None and not (host and port.isdigit()
                                               and 0 < int(port) < 2**16):
        problems.append(f"--coordinator must be HOST:PORT (process 0's address and a free "
                        f"port, e.g. 10.0.0.1:1234). Received: {config.coordinator!r}")
    return problems


def _counts(*values):
    """Whether each value is a whole number of at least 1 (what a divisor must be)."""
    return all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in values)


@dataclasses.dataclass
class ShardConfig:
    """A corpus packed into token-id shards (`keras-tupe-shard-corpus`); the vocabulary and
    the sequence length default to pre-training's."""

    corpus: list = setting(help="text files, directories of .txt files, or tfds:NAME[:SPLIT]",
                           nargs="+")
    out: str = setting(help="shard folder to create")
    overwrite: bool = setting(False, switch="--overwrite", help="replace a non-empty --out")
    vocab: str = setting(None, "WordPiece vocabulary file; trained on --corpus if absent")
    vocabulary_size: int = setting(PretrainConfig.vocabulary_size,
                                   "largest number of tokens of a trained vocabulary", minimum=1)
    vocab_lines: int = setting(PretrainConfig.vocab_lines,
                               "corpus lines used to train the vocabulary", minimum=1)
    lowercase: bool = setting(True, switch="--cased", help="keep case")
    seq_len: int = setting(PretrainConfig.seq_len, "tokens a sequence",
                           minimum=MIN_SEQUENCE_LENGTH)
    sequences_per_shard: int = setting(100_000, "sequences a shard file", minimum=1)
    max_lines: int = setting(None, "read at most this many corpus lines", minimum=1)


INIT_HELP = "a preset folder, or a pre-training run folder (its preset/)"
LOADER_HELP = ("feed the preprocessor through tf.data or Grain (default: tf.data where "
               "TensorFlow imports, else Grain)")
SPE_HELP = ("steps one call of the compiled train function runs (Keras fit's argument): fewer "
            "Python round trips, the same numbers")


@dataclasses.dataclass
class FinetuneConfig:
    """One GLUE fine-tuning run; defaults are the papers' (TUPE; Huang et al.)."""

    task: str = setting(help="a GLUE task", flag=False)
    init: str = setting(help=INIT_HELP)
    learning_rate: float = setting(2e-5, "peak learning rate", flag=False)
    seed: int = setting(0, "seed of the head's initialization, dropout and data order",
                        seed=True, flag=False)
    # None: the paper's (10; 5 for MNLI, QQP, QNLI)
    epochs: int = setting(None, "default: 10, or 5 for MNLI, QQP, QNLI", minimum=1)
    batch_size: int = setting(32, "batch size", minimum=1)
    seq_len: int = setting(128, "tokens a packed example", minimum=1)
    warmup_ratio: float = setting(0.06, "share of the steps warming up", rate=True)
    weight_decay: float = setting(0.01, "AdamW's decoupled weight decay")
    dropout: float = setting(0.1, "dropout rate", rate=True)
    data_dir: str = setting(None, "folder with the glue_data TSV layout (or its parent); "
                                  "without it, tensorflow-datasets (online)")
    vocab: str = setting(None, "vocabulary (default: the run directory's vocab.txt)")
    lowercase: bool = setting(True, switch="--cased", help="keep case")
    max_train_examples: int = setting(None, "use only the first N training examples",
                                      minimum=1)
    # Pad each split only to its longest example (rounded up to 8, at most `seq_len`), and
    # with `pad_each_batch` each training batch to its longest (rounded up to 16): padding
    # is masked, so the outputs are the same with less work. Off by default: dropout then
    # draws other masks, so a seed's run is not bitwise the one padded to `seq_len`.
    pad_to_longest: bool = setting(
        False, switch="--pad-to-longest",
        help="pad each split only to its longest example (multiple of 8, at most --seq-len): "
             "same outputs, faster on short-sentence tasks")
    pad_each_batch: bool = setting(
        False, switch="--pad-each-batch",
        help="pad each batch only to its longest example (multiple of 16, at most the split's "
             "length): same batches and outputs, less work on [PAD]")
    xla: bool = setting(True, switch="--no-xla", help="turn XLA off")
    steps_per_execution: int = setting(1, SPE_HELP, minimum=1)
    verbose: int = setting(0, "0: progress lines, 1: Keras's progress bar, 2: a line an epoch",
                           choices=(0, 1, 2))
    # A line per epoch and every 10 s instead of fit's output (the command's with --verbose 0).
    progress: bool = setting(False, flag=False)
    save_dir: str = setting(None, flag=False)  # keep the fine-tuned classifier as a preset
    data_loader: str = setting(None, LOADER_HELP, choices=LOADERS)


@dataclasses.dataclass
class ProtocolConfig:
    """The papers' protocol (`keras-tupe-finetune-glue`; `keras_tupe.finetuning.run_protocol`
    over GLUE tasks, `run_squad_protocol` over `tasks=["squad"]`): the grid of learning
    rates and seeds, how a task's rate is chosen, how the runs train. Each run's own
    settings are a `FinetuneConfig`'s (GLUE) or a `SquadConfig`'s."""

    tasks: list = setting(help="GLUE tasks, e.g. cola sst2 mrpc", nargs="+")
    out: str = setting(help="results directory (resumed if it exists)")
    learning_rates: list = setting(factory=lambda: list(PAPER_LEARNING_RATES), nargs="+",
                                   parse=float, help="the grid's peak learning rates")
    seeds: list = setting(factory=lambda: list(PAPER_SEEDS), nargs="+", parse=int, seed=True,
                          help="the fine-tuning seeds")
    selection_seed: int = setting(
        None, "choose each task's learning rate with this seed (one of --seeds) alone, then run "
              "the other seeds at the chosen rate only (default: every rate runs every seed)",
        seed=True)
    edge_learning_rates: list = setting(
        factory=list, nargs="+", parse=float,
        help="with --selection-seed: rates tried one at a time, nearest first, while the "
             "chosen rate is the lowest / highest tried")
    save_models: bool = setting(
        False, switch="--save-models",
        help="keep every fine-tuned classifier as the preset folder "
             "OUT/models/<task>_lr<lr>_seed<seed>/ (TextClassifier.from_preset; "
             "keras-tupe-export classifier)")
    grid: bool = setting(False, switch="--grid",
                         help="JAX only: train each task's learning rates x seeds at once, in "
                              "one compiled program (keras_tupe.grid; docs/finetuning.md)")
    precision: str = setting(None, "with --grid: the members' dtype policy (default: float32)",
                             choices=GRID_PRECISIONS)
    steps_per_dispatch: int = setting(
        None, "with --grid: steps one call of the compiled program runs (default 100)",
        minimum=1)
    # The runs across processes under JAX (`keras_tupe.processes.join`; then each run
    # data-parallel over every process's devices, or with --grid a grid's members spread
    # over them): given, the command joins them; what is left out JAX's cluster detection
    # (SLURM, Open MPI) fills in.
    coordinator: str = layout_setting("coordinator", "JAX")
    num_processes: int = layout_setting("num_processes", "JAX")
    process_id: int = layout_setting("process_id", "JAX")
    coordinator_timeout: int = layout_setting("coordinator_timeout", "JAX")

    def problems(self):
        """The conflicts between settings, a line each."""
        problems = []
        if not self.grid:
            given = [flag for flag, value in (("--precision", self.precision),
                                              ("--steps-per-dispatch", self.steps_per_dispatch))
                     if value is not None]
            if given:
                problems.append(f"{' and '.join(given)} set how a grid trains: add --grid")
        elif self.save_models:
            problems.append("--grid keeps no classifier: drop --save-models, or drop --grid to "
                            "keep them")
        problems += layout_problems(self, None, None)
        try:
            check_selection(self.seeds, self.selection_seed, self.edge_learning_rates,
                            self.learning_rates)
        except ValueError as error:
            problems.append(str(error))
        return problems


def check_selection(seeds, selection_seed, edge_learning_rates, learning_rates):
    """Raises ValueError for a `selection_seed` not among `seeds`, or edge rates without
    one, not positive or already in `learning_rates`."""
    if selection_seed is None:
        if edge_learning_rates:
            raise ValueError("`edge_learning_rates` widen the grid of a `selection_seed`; "
                             "without one every rate runs every seed (put them in "
                             "`learning_rates`).")
        return
    if selection_seed not in seeds:
        raise ValueError(f"`selection_seed` {selection_seed!r} is not one of `seeds` "
                         f"{' '.join(map(str, seeds))}: the chosen rate's score is the median "
                         "over all of them.")
    bad = [rate for rate in edge_learning_rates
           if not isinstance(rate, (int, float)) or rate <= 0 or rate in learning_rates]
    if bad:
        raise ValueError(f"`edge_learning_rates` {' '.join(f'{rate:g}' for rate in bad)}: each "
                         "must be a positive rate that is not already in `learning_rates` "
                         f"{' '.join(f'{rate:g}' for rate in learning_rates)}.")


@dataclasses.dataclass
class SquadConfig:
    """SQuAD v1.1 fine-tuning (Huang et al.'s downstream task)."""

    init: str = setting(help=INIT_HELP)
    out: str = setting(None, "folder of the run's records and lock (default: none)")
    train: str = setting("train", "a SQuAD json path, or a tfds split (online)")
    eval: str = setting("validation", "a SQuAD json path, or a tfds split (online)")
    offline_split: str = setting(
        None, "a SQuAD json to split by article into train/eval (not the official split)")
    eval_fraction: float = setting(0.2, "with --offline-split: the share of articles "
                                        "evaluated on", rate=True)
    # The offline split's seed; None: `seed`. A study with several fine-tuning seeds
    # fixes it, so every seed trains and evaluates on the same articles.
    split_seed: int = setting(None, "with --offline-split: its seed (default: --seed)",
                              seed=True)
    learning_rate: float = setting(3e-5, "peak learning rate")
    seed: int = setting(0, "seed of the head's initialization, dropout and data order",
                        seed=True)
    epochs: int = setting(2, "epochs", minimum=1)
    batch_size: int = setting(32, "batch size", minimum=1)
    seq_len: int = setting(384, "tokens a window (question and context)", minimum=1)
    doc_stride: int = setting(128, "tokens between the starts of a context's windows",
                              minimum=1)
    max_query_length: int = setting(64, "tokens of a question kept", minimum=1)
    warmup_ratio: float = setting(0.1, "share of the steps warming up", rate=True)
    weight_decay: float = setting(0.01, "AdamW's decoupled weight decay")
    vocab: str = setting(None, "vocabulary (default: the run directory's vocab.txt)")
    lowercase: bool = setting(True, switch="--cased", help="keep case")
    max_train_examples: int = setting(None, "use only the first N training examples",
                                      minimum=1)
    xla: bool = setting(True, switch="--no-xla", help="turn XLA off")
    steps_per_execution: int = setting(1, SPE_HELP, minimum=1)
    verbose: int = setting(0, "Keras fit's verbosity", choices=(0, 1, 2))
    data_loader: str = setting(None, LOADER_HELP, choices=LOADERS)
    # Keep the fine-tuned span-QA model with its preprocessor as a preset folder
    # (`keras_hub.models.Task.from_preset(save_dir)`); refused where a folder holds files.
    save_dir: str = setting(None, "keep the fine-tuned span-QA model with its preprocessor as "
                                  "this preset folder")
