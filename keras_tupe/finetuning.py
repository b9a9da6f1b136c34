"""GLUE fine-tuning with the papers' protocol: the library behind `training.finetune_glue`.

`finetune_glue` fine-tunes one encoder on one task with one learning rate and
seed and returns its dev metrics after the last epoch (no model selection on
the dev set). `run_protocol` runs the grid of TUPE / Huang et al. (learning
rates {2e-5, 3e-5, 4e-5, 5e-5} x 5 seeds, 10 epochs, 5 for MNLI/QQP/QNLI, batch
32, 6% warm-up, linear decay, AdamW as in pre-training), takes the median over
seeds per learning rate, reports the best learning rate per task, and writes a
Markdown table and a CSV with the average. Each finished run is appended to
`results.jsonl`, so an interrupted protocol continues where it stopped.
"""

import dataclasses
import json
import math
import os
import statistics
import time

import keras
import numpy as np

PAPER_LEARNING_RATES = (2e-5, 3e-5, 4e-5, 5e-5)
PAPER_SEEDS = (0, 1, 2, 3, 4)
SHORT_TASKS = ("mnli", "qqp", "qnli")  # 5 epochs instead of 10


def paper_epochs(task):
    return 5 if task in SHORT_TASKS else 10


def load_backbone(init):
    """A `TupeBackbone` from a preset folder, a pre-training run or a `.keras` file.

    Accepts a keras-hub preset folder (`save_to_preset`; a run's `preset/`), a
    pre-training run directory (its `preset/`, else its `backbone.keras`), a
    backbone `.keras`, or a task `.keras` (masked LM, classifier: its `.backbone`).
    """
    import keras_tupe  # noqa: F401  (registers the classes for loading)
    from keras_tupe.models import TupeBackbone
    from keras_tupe.models.preset_folders import is_preset_folder

    run_preset = os.path.join(init, "preset")
    if is_preset_folder(init) or is_preset_folder(run_preset):
        return TupeBackbone.from_preset(init if is_preset_folder(init) else run_preset)
    path = os.path.join(init, "backbone.keras") if os.path.isdir(init) else init
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"No encoder at {init}: give a preset folder (with config.json), a pre-training "
            "run directory (with preset/ or backbone.keras) or a .keras file."
        )
    model = keras.saving.load_model(path, compile=False)
    backbone = model if isinstance(model, TupeBackbone) else getattr(model, "backbone", None)
    if not isinstance(backbone, TupeBackbone):
        raise ValueError(f"{path} holds a {type(model).__name__}, not a keras_tupe encoder.")
    return backbone


def default_vocabulary(init):
    """The vocabulary of a preset folder or run directory (or of a `.keras` file's directory)."""
    from keras_tupe.models.preset_folders import VOCABULARY_ASSET

    directory = init if os.path.isdir(init) else os.path.dirname(os.path.abspath(init))
    for candidate in (os.path.join(directory, VOCABULARY_ASSET),
                      os.path.join(directory, "vocab.txt")):
        if os.path.exists(candidate):
            return candidate
    raise FileNotFoundError(
        f"No vocabulary in {directory} (neither {VOCABULARY_ASSET} nor vocab.txt); pass the "
        "vocabulary the encoder was pre-trained with."
    )


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
    # Pad each split only to its longest packed example (rounded up to a multiple of 8),
    # at most `seq_len`: nothing more is truncated and padding is masked, so the encoder
    # computes the same outputs with less work on short-sentence tasks (CoLA, SST-2).
    # Off by default: dropout then draws other random masks than at `seq_len`, so a
    # seed's run is not bitwise the one padded to `seq_len`.
    pad_to_longest: bool = False
    xla: bool = True
    verbose: int = 0
    save_dir: str = None  # keep the fine-tuned classifier (see `save_classifier`)


CLASSIFIER_FILE = "classifier.keras"
CLASSIFIER_INFO = "finetune.json"


def save_classifier(model, save_dir, vocabulary_file, info):
    """Writes `save_dir/` with `classifier.keras`, its `vocab.txt` and `finetune.json`.

    Everything `keras_tupe.export.export_classifier` needs to serve raw strings
    (`python -m training.export classifier --init SAVE_DIR`). An existing `save_dir`
    is refused: nothing a user has is replaced.
    """
    import shutil

    if os.path.exists(save_dir):
        raise FileExistsError(f"{save_dir} already exists; choose another directory for the "
                              "fine-tuned classifier or remove it.")
    staging = save_dir.rstrip("/") + ".partial"
    shutil.rmtree(staging, ignore_errors=True)  # a previous interrupted save
    os.makedirs(staging)
    model.save(os.path.join(staging, CLASSIFIER_FILE))
    shutil.copyfile(vocabulary_file, os.path.join(staging, "vocab.txt"))
    with open(os.path.join(staging, CLASSIFIER_INFO), "w") as f:
        json.dump(info, f, indent=2)
    os.replace(staging, save_dir)
    return save_dir


def load_classifier(save_dir):
    """`(classifier, vocabulary_file, info)` from a directory of `save_classifier`."""
    import keras_tupe  # noqa: F401  (registers the classes for loading)

    path = os.path.join(save_dir, CLASSIFIER_FILE)
    if not os.path.exists(path):
        raise FileNotFoundError(f"No {CLASSIFIER_FILE} in {save_dir}: give a directory written by "
                                "fine-tuning with --save-models (or save_classifier).")
    with open(os.path.join(save_dir, CLASSIFIER_INFO)) as f:
        info = json.load(f)
    model = keras.saving.load_model(path, compile=False)
    return model, os.path.join(save_dir, "vocab.txt"), info


def load_matching_tokenizer(backbone, vocab, lowercase=True):
    """The tokenizer of `vocab`, refused unless its size is the encoder's vocabulary size."""
    from keras_tupe import data

    tokenizer = data.load_tokenizer(vocab, lowercase=lowercase)
    if tokenizer.vocabulary_size() != backbone.vocabulary_size:
        raise ValueError(
            f"{vocab} has {tokenizer.vocabulary_size()} tokens but the encoder was built for "
            f"{backbone.vocabulary_size}: not the vocabulary it was pre-trained with."
        )
    return tokenizer


def finetune_glue(config):
    """Fine-tunes `config.init` on one GLUE task; returns the dev metrics and timings."""
    from keras_tupe.data import glue
    from keras_tupe.metrics import glue_metrics, glue_score
    from keras_tupe.models import TupeTextClassifier
    from keras_tupe.optimization import create_optimizer

    if config.task not in glue.GLUE_TASKS:
        raise ValueError(f"Unknown GLUE task {config.task!r}. Valid tasks: {sorted(glue.GLUE_TASKS)}")
    spec = glue.GLUE_TASKS[config.task]
    keras.utils.set_random_seed(config.seed)
    backbone = load_backbone(config.init)
    backbone.check_sequence_length(config.seq_len)
    vocabulary_file = config.vocab or default_vocabulary(config.init)
    tokenizer = load_matching_tokenizer(backbone, vocabulary_file, config.lowercase)
    train_examples = glue.load_glue(config.task, "train", config.data_dir)
    if config.max_train_examples:
        train_examples = _head(train_examples, config.max_train_examples)
    if config.save_dir and os.path.exists(config.save_dir):
        raise FileExistsError(f"{config.save_dir} already exists; the fine-tuned classifier "
                              "would replace it. Choose another directory or remove it.")
    epochs = config.epochs or paper_epochs(config.task)
    lengths = {"train": _padded_length(config, tokenizer, train_examples)}
    train = glue.glue_dataset(config.task, "train", tokenizer, lengths["train"], config.batch_size,
                              shuffle=True, seed=config.seed, examples=train_examples)
    steps = epochs * int(np.ceil(len(train_examples.labels) / config.batch_size))
    # Dropout of the pre-trained encoder: the fine-tuning value.
    backbone = _with_dropout(backbone, config.dropout)
    model = TupeTextClassifier(backbone, num_classes=spec.num_classes, dropout=config.dropout)
    model.compile(
        optimizer=create_optimizer(model, config.learning_rate, total_steps=steps,
                                   warmup_steps=int(config.warmup_ratio * steps),
                                   weight_decay=config.weight_decay),
        jit_compile=config.xla,
    )
    start = time.perf_counter()
    model.fit(train, epochs=epochs, verbose=config.verbose, shuffle=False)
    seconds = time.perf_counter() - start
    results = {}
    for split in spec.eval_splits:
        examples = glue.load_glue(config.task, split, config.data_dir)
        lengths[split] = _padded_length(config, tokenizer, examples)
        dataset = glue.glue_dataset(config.task, split, tokenizer, lengths[split],
                                    config.batch_size, examples=examples)
        outputs = model.predict(dataset, verbose=0)
        predictions = outputs if spec.num_classes == 1 else np.argmax(outputs, axis=-1)
        metrics = glue_metrics(config.task, predictions, examples.labels)
        results[split] = {**metrics, "score": glue_score(config.task, metrics)}
    if config.save_dir:
        save_classifier(model, config.save_dir, vocabulary_file, {
            "task": config.task, "seq_len": config.seq_len, "lowercase": config.lowercase,
            "num_segments": 2 if spec.is_pair else 1, "label_names": list(spec.label_names),
            "init": config.init, "learning_rate": config.learning_rate, "seed": config.seed,
            "epochs": epochs, "dev": results})
    return {"task": config.task, "learning_rate": config.learning_rate, "seed": config.seed,
            "epochs": epochs, "train_examples": len(train_examples.labels),
            "sequence_lengths": lengths, "train_seconds": seconds, "dev": results}


def _padded_length(config, tokenizer, examples):
    """The packed length of a split: `seq_len`, or with `pad_to_longest` its longest
    example rounded up to a multiple of 8, at most `seq_len`."""
    from keras_tupe.data import glue

    if not config.pad_to_longest:
        return config.seq_len
    longest = glue.longest_packed_length(tokenizer, examples)
    return min(config.seq_len, 8 * math.ceil(longest / 8))


def _head(examples, n):
    return dataclasses.replace(
        examples,
        sentence1=examples.sentence1[:n],
        sentence2=None if examples.sentence2 is None else examples.sentence2[:n],
        labels=examples.labels[:n],
    )


def _with_dropout(backbone, dropout):
    from keras_tupe.models import TupeBackbone

    if backbone.dropout == dropout:
        return backbone
    config = {**backbone.get_config(), "dropout": dropout}
    rebuilt = TupeBackbone.from_config(config)
    rebuilt.set_weights(backbone.get_weights())
    return rebuilt


def summarize(rows, tasks):
    """Median over seeds per (task, learning rate); the best learning rate per task."""
    table = []
    for task in tasks:
        by_rate = {}
        for row in rows:
            if row["task"] == task:
                by_rate.setdefault(row["learning_rate"], []).append(_main_score(row))
        if not by_rate:
            continue
        medians = {rate: statistics.median(scores) for rate, scores in by_rate.items()}
        best = max(medians, key=medians.get)
        table.append({
            "task": task,
            "score": 100 * medians[best],
            "best_learning_rate": best,
            "seeds": len(by_rate[best]),
            "seed_min": 100 * min(by_rate[best]),
            "seed_max": 100 * max(by_rate[best]),
            "medians_by_learning_rate": {str(r): 100 * m for r, m in sorted(medians.items())},
        })
    return table


def _main_score(row):
    scores = [split["score"] for split in row["dev"].values()]
    return float(np.mean(scores))  # MNLI: the mean of matched and mismatched


def write_tables(table, out_dir, title):
    """`summary.md` and `summary.csv`, one row per task and the average."""
    average = float(np.mean([row["score"] for row in table])) if table else float("nan")
    lines = [f"# {title}", "", "| task | score | best LR | seeds | seed range |",
             "| --- | ---: | ---: | ---: | --- |"]
    for row in table:
        lines.append(f"| {row['task']} | {row['score']:.2f} | {row['best_learning_rate']:g} | "
                     f"{row['seeds']} | {row['seed_min']:.2f} – {row['seed_max']:.2f} |")
    lines.append(f"| **average** | **{average:.2f}** | | | |")
    with open(os.path.join(out_dir, "summary.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(out_dir, "summary.csv"), "w") as f:
        f.write("task,score,best_learning_rate,seeds,seed_min,seed_max\n")
        for row in table:
            f.write(f"{row['task']},{row['score']:.4f},{row['best_learning_rate']},{row['seeds']},"
                    f"{row['seed_min']:.4f},{row['seed_max']:.4f}\n")
        f.write(f"average,{average:.4f},,,,\n")
    return average


def _preflight(tasks, init, config_kwargs):
    """Loads the encoder, vocabulary and every split once: errors before any training."""
    from keras_tupe.data import glue

    backbone = load_backbone(init)
    backbone.check_sequence_length(config_kwargs.get("seq_len", FinetuneConfig.seq_len))
    load_matching_tokenizer(backbone, config_kwargs.get("vocab") or default_vocabulary(init),
                            config_kwargs.get("lowercase", True))
    for task in tasks:
        for split in ("train",) + tuple(glue.GLUE_TASKS[task].eval_splits):
            glue.load_glue(task, split, config_kwargs.get("data_dir"))


def run_protocol(tasks, init, out_dir, learning_rates=PAPER_LEARNING_RATES, seeds=PAPER_SEEDS,
                 save_models=False, **config_kwargs):
    """The papers' grid over tasks x learning rates x seeds, resumable; returns the table.

    With `save_models`, each run's classifier is kept in
    `out_dir/models/<task>_lr<rate>_seed<seed>/` (`save_classifier`), ready for export.
    """
    from keras_tupe.data import glue

    unknown = [t for t in tasks if t not in glue.GLUE_TASKS]
    if unknown:
        raise ValueError(f"Unknown GLUE task(s) {unknown}. Valid tasks: {sorted(glue.GLUE_TASKS)}")
    _preflight(tasks, init, config_kwargs)  # every input checked before anything is written
    os.makedirs(out_dir, exist_ok=True)
    results_path = os.path.join(out_dir, "results.jsonl")
    rows = []
    if os.path.exists(results_path):
        with open(results_path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    done = {(r["task"], r["learning_rate"], r["seed"]) for r in rows}
    for task in tasks:
        for rate in learning_rates:
            for seed in seeds:
                if (task, rate, seed) in done:
                    continue
                save_dir = (os.path.join(out_dir, "models", f"{task}_lr{rate:g}_seed{seed}")
                            if save_models else None)
                start = time.perf_counter()
                row = finetune_glue(FinetuneConfig(task=task, init=init, learning_rate=rate,
                                                   seed=seed, save_dir=save_dir, **config_kwargs))
                row["wall_seconds"] = time.perf_counter() - start  # data, training, evaluation
                rows.append(row)
                with open(results_path, "a") as f:
                    f.write(json.dumps(row) + "\n")
                print(f"{task} lr={rate:g} seed={seed}: "
                      f"{ {s: round(100 * m['score'], 2) for s, m in row['dev'].items()} }", flush=True)
    table = summarize([r for r in rows if r["learning_rate"] in learning_rates
                       and r["seed"] in seeds], tasks)
    write_tables(table, out_dir, f"GLUE dev, {os.path.basename(os.path.normpath(init))}")
    return table


@dataclasses.dataclass
class SquadConfig:
    """SQuAD v1.1 fine-tuning (Huang et al.'s downstream task)."""

    init: str
    out: str = None
    train: str = "train"  # a SQuAD json path, or a tfds split (online)
    eval: str = "validation"
    offline_split: str = None  # a SQuAD json to split by article into train/eval (not official)
    eval_fraction: float = 0.2
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
    verbose: int = 0


def finetune_squad(config):
    """Fine-tunes a span-QA head; returns official EM/F1 on the evaluation questions."""
    from keras_tupe.data import squad
    from keras_tupe.metrics import squad_evaluate
    from keras_tupe.models import TupeSpanQA
    from keras_tupe.optimization import create_optimizer

    keras.utils.set_random_seed(config.seed)
    backbone = load_backbone(config.init)
    backbone.check_sequence_length(config.seq_len)
    vocab = config.vocab or default_vocabulary(config.init)
    load_matching_tokenizer(backbone, vocab, config.lowercase)
    if config.offline_split:
        articles = squad.load_squad(config.offline_split)
        train_articles, eval_articles = squad.split_articles(
            articles, eval_fraction=config.eval_fraction, seed=config.seed)
        label = (f"article-level split of {config.offline_split} "
                 f"({1 - config.eval_fraction:.0%}/{config.eval_fraction:.0%}, seed {config.seed}); "
                 "NOT the official SQuAD train/dev split")
    else:
        train_articles, eval_articles = squad.load_squad(config.train), squad.load_squad(config.eval)
        label = f"train={config.train}, eval={config.eval}"
    featurize = dict(sequence_length=config.seq_len, doc_stride=config.doc_stride,
                     max_query_length=config.max_query_length, lowercase=config.lowercase)
    train_features = squad.featurize(train_articles, vocab, training=True, **featurize)
    if config.max_train_examples:
        train_features = train_features.head(config.max_train_examples)
    eval_features = squad.featurize(eval_articles, vocab, training=False, **featurize)
    train = squad.squad_dataset(train_features, config.batch_size, training=True, shuffle=True,
                                seed=config.seed)
    steps = config.epochs * int(np.ceil(len(train_features.token_ids) / config.batch_size))
    model = TupeSpanQA(backbone)
    model.compile(optimizer=create_optimizer(model, config.learning_rate, total_steps=steps,
                                             warmup_steps=int(config.warmup_ratio * steps),
                                             weight_decay=config.weight_decay),
                  jit_compile=config.xla)
    model.fit(train, epochs=config.epochs, verbose=config.verbose, shuffle=False)
    outputs = model.predict(squad.squad_dataset(eval_features, config.batch_size, training=False),
                            verbose=0)
    predictions = squad.postprocess(eval_features, outputs["start_positions"],
                                    outputs["end_positions"], eval_articles)
    result = {"data": label, **squad_evaluate(eval_articles, predictions),
              "train_features": int(len(train_features.token_ids)),
              "eval_questions": len(predictions)}
    if config.out:
        os.makedirs(config.out, exist_ok=True)
        with open(os.path.join(config.out, "squad_results.json"), "w") as f:
            json.dump({"config": dataclasses.asdict(config), "result": result}, f, indent=2)
        with open(os.path.join(config.out, "squad_predictions.json"), "w") as f:
            json.dump(predictions, f)
    return result
