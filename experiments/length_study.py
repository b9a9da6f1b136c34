"""Length generalization (Huang et al. Table 4): masked-LM loss at longer sequences.

Every checkpoint of the named pre-training studies (trained at one sequence
length, e.g. 128) is evaluated on the same text of the validation corpus at
each length of the config (e.g. 128, 256, 512). The batches are fixed and
deterministic: `mlm_dataset` in corpus order (no shuffle) with the config's
masking seed and the pre-training masking rates, `tokens_per_batch / length`
sequences a batch, the first `batches` batches. So every length covers the same
`batches * tokens_per_batch` tokens of text (less one [CLS] a sequence), and
every model sees exactly the same masked batches at a given length. Where TensorFlow is
missing (a GPU stage), the batches and the unigram reference's probabilities are read from
`prepared_dir`, where `write_prepared` saved what the tf.data route made on a machine with
it: the same arrays, so the same scores.

The loss is the weighted mean cross-entropy over the masked positions, computed
here from the logits in float64 (no dropout), and the accuracy likewise.

A context-free reference is evaluated on the same batches: `baseline/unigram`,
the unigram distribution of the WordPiece ids of the text the shared
vocabulary was trained on (its `lines` first lines of its corpus; add-one
smoothing; [CLS], [SEP] and [PAD], never predicted, get no mass beyond the
smoothing). A model near it has learned word frequencies and little else.

An encoder with an absolute table shorter than the length gets `n/a` with the
reason. One whose table is long enough (the `mini` presets have 512 rows) is
evaluated, noting that its positions beyond the pre-training length were never
trained. Results are appended one (checkpoint, length) at a time to the study's
committed record, `<results_dir>/records/<study>/results.jsonl`, so a stopped study
continues where it was (in this checkout or the next: a model whose lengths are all
recorded is not needed on disk), and `experiments.report_length` reads that file alone, beside
each encoder's pre-training step time (the median of its committed `metrics.csv`).

Here: the batches, the losses and the reference; the loop is `experiments.run.run_length`.
"""

import json
import os
import time

import numpy as np

from experiments import config as study_config
from experiments import records
from experiments.config import StudyError
from experiments.plans import UNIGRAM, length_key, masking
from keras_tupe_base.files import file_sha256


class Batches:
    """The fixed masked batches of each (vocabulary, length, masking), built once: through
    tf.data, or read from `prepared_dir` where `write_prepared` left them for a machine
    without TensorFlow (the same arrays, so the same scores)."""

    def __init__(self, config):
        self.config = config
        self._cache = {}

    def get(self, job, length):
        key = _batches_key(self.config, job, length)
        cached = json.dumps(key, sort_keys=True)
        if cached not in self._cache:
            self._cache[cached] = _unstack(_prepared(
                self.config, f"length_{length}.npz", key,
                lambda: _stack(self._tf_data(job, length))))
        return self._cache[cached]

    def _tf_data(self, job, length):
        from keras_tupe import data

        config = self.config
        tokenizer = data.load_tokenizer(job["vocab"], lowercase=job["lowercase"])
        corpus = config["valid_corpus"]
        dataset = data.mlm_dataset(
            [corpus] if isinstance(corpus, str) else corpus, tokenizer, length,
            config["tokens_per_batch"] // length, seed=config["seed"], shuffle_buffer=0,
            repeat=False, max_lines=config.get("max_lines"), **job["masking"],
        ).take(config["batches"])
        batches = list(dataset.as_numpy_iterator())
        if len(batches) < config["batches"]:
            raise StudyError(
                f"{corpus} gives only {len(batches)} batches of {config['tokens_per_batch']} "
                f"tokens at length {length}; the config asks for {config['batches']}.")
        return batches


def _batches_key(config, job, length):
    """What the batches of `length` are a function of."""
    return {"vocabulary_sha256": file_sha256(job["vocab"]), "lowercase": job["lowercase"],
            "length": length, "masking": job["masking"],
            **{k: config.get(k) for k in ("valid_corpus", "max_lines", "seed",
                                          "tokens_per_batch", "batches")}}


def _unigram_key(vocabulary):
    return {"vocabulary_sha256": file_sha256(vocabulary["file"]),
            **study_config.vocabulary_settings(vocabulary)}


def prepared_dir(config):
    """Where a machine without TensorFlow finds the study's batches (`write_prepared`)."""
    return os.path.join(study_config.study_dir(config), "batches")


def _prepared(config, name, key, make):
    """`make()`'s arrays (TensorFlow), or those `write_prepared` saved as `name` for `key`."""
    path = os.path.join(prepared_dir(config), name)
    if not os.path.exists(path):
        try:
            return make()
        except ImportError as error:
            raise StudyError(f"{path} is missing and the tf.data route needs TensorFlow "
                             f"({error}): prepare it where TensorFlow is (`python -m "
                             "experiments.stage prepare` for a GPU stage).") from error
    with np.load(path) as saved:
        arrays = {k: saved[k] for k in saved.files}
    stored = json.loads(str(arrays.pop("key")))
    if stored != key:
        raise StudyError(f"{path} was prepared for {stored}, but this study needs {key}: "
                         "prepare it again.")
    return arrays


def _stack(batches):
    """`[(x, y, sample_weight)]` as arrays with a leading batch axis (`_unstack` reverses)."""
    names = list(batches[0][0])
    return {**{n: np.stack([x[n] for x, _, _ in batches]) for n in names},
            "y": np.stack([y for _, y, _ in batches]),
            "sample_weight": np.stack([w for _, _, w in batches])}


def _unstack(arrays):
    names = [n for n in arrays if n not in ("y", "sample_weight")]
    return [({n: arrays[n][i] for n in names}, arrays["y"][i], arrays["sample_weight"][i])
            for i in range(len(arrays["y"]))]


def write_prepared(config, out):
    """Writes into `out` the masked batches of every length and the unigram reference as
    the tf.data route makes them here, for a machine without TensorFlow (the study reads
    them from `prepared_dir`). Returns the files."""
    pretrain = study_config.related_configs(config, "pretrain_configs")[0]
    vocabulary = pretrain["vocabulary"]
    job = {"vocab": vocabulary["file"], "lowercase": vocabulary["lowercase"],
           "masking": masking(pretrain["settings"])}
    os.makedirs(out, exist_ok=True)
    batches, paths = Batches(config), []
    for length in config["lengths"]:
        paths.append(save_prepared(os.path.join(out, f"length_{length}.npz"),
                                   _batches_key(config, job, length),
                                   _stack(batches.get(job, length))))
    paths.append(save_prepared(os.path.join(out, "unigram.npz"), _unigram_key(vocabulary),
                               {"log_probs": unigram_log_probs(vocabulary)}))
    return paths


def save_prepared(path, key, arrays):
    """One prepared file: `arrays` and the settings `key` it was made for (`_prepared`
    refuses it for any other). Returns `path`."""
    np.savez_compressed(path, key=json.dumps(key), **arrays)
    return path


def unigram_log_probs(vocabulary):
    """float64 log-probabilities of the unigram model of a study vocabulary's training text
    (`vocabulary`: a pre-training config's `vocabulary` entry)."""
    from keras_tupe import data
    from keras_tupe.data.packing import ragged_ids, special_ids

    tokenizer = data.load_tokenizer(vocabulary["file"], lowercase=vocabulary["lowercase"])
    corpus = vocabulary["corpus"]
    lines = data.line_dataset([corpus] if isinstance(corpus, str) else corpus,
                              max_lines=vocabulary["lines"])
    size = tokenizer.vocabulary_size()
    counts = np.zeros(size, dtype=np.float64)
    for batch in lines.batch(1024):
        ids = ragged_ids(tokenizer(batch)).flat_values.numpy()
        counts += np.bincount(ids, minlength=size)
    counts[list(special_ids(tokenizer))] = 0.0  # [CLS], [SEP], [PAD]: never a target
    counts += 1.0
    return np.log(counts / counts.sum())


def unigram_loss(log_probs, batches):
    """`(loss, accuracy, masked_tokens)` of the context-free unigram predictor."""
    total = correct = weight = 0.0
    best = int(np.argmax(log_probs))
    for _, y, w in batches:
        total += float((-log_probs[y.astype(np.int64)] * w).sum())
        correct += float(((y == best) * w).sum())
        weight += float(w.sum())
    return total / weight, correct / weight, int(weight)


def masked_lm_loss(model, batches):
    """`(loss, accuracy, masked_tokens)`: weighted over the masked positions, float64."""
    total = correct = weight = 0.0
    for x, y, w in batches:
        logits = np.asarray(model.predict_on_batch(x), dtype=np.float64)  # (B, P, V)
        top = logits.max(axis=-1, keepdims=True)
        log_norm = np.log(np.exp(logits - top).sum(axis=-1)) + top[..., 0]  # (B, P)
        target = np.take_along_axis(logits, y[..., None].astype(np.int64), axis=-1)[..., 0]
        total += float(((log_norm - target) * w).sum())
        correct += float(((logits.argmax(axis=-1) == y) * w).sum())
        weight += float(w.sum())
    return total / weight, correct / weight, int(weight)


def note(backbone, length, trained):
    limit = backbone.absolute_length_limit
    notes = []
    if limit is not None and length > limit:
        return None, (f"n/a: the absolute position table has {limit} rows "
                      f"(max_sequence_length={limit}), shorter than {length}")
    if limit is not None and length > trained:
        notes.append(f"absolute positions {trained}-{length - 1} never trained")
    if backbone.relative_position in ("shaw", "method1", "method2", "method3", "method4"):
        k = backbone.max_relative_distance
        if length > trained and length - 1 > k:
            notes.append(f"distances beyond k={k} clipped")
        if length > trained and k > trained - 1:
            notes.append(f"relative distances {trained}-{min(k, length - 1)} never trained")
    return True, "; ".join(notes)


def unigram_rows(config, job, batches, done, path, command):
    """The context-free reference at every length not `done` (evaluated or recorded)."""
    todo = [n for n in config["lengths"] if length_key({**UNIGRAM, "length": n}) not in done]
    if not todo:
        return
    # The first pre-training study's vocabulary: every study shares it (the configs are
    # checked to), so the batches of `job` are the ones the models were scored on.
    vocabulary = study_config.related_configs(config, "pretrain_configs")[0]["vocabulary"]
    log_probs = _prepared(config, "unigram.npz", _unigram_key(vocabulary),
                          lambda: {"log_probs": unigram_log_probs(vocabulary)})["log_probs"]
    for length in todo:
        start = time.perf_counter()
        loss, accuracy, tokens = unigram_loss(log_probs, batches.get(job, length))
        row = {**{k: UNIGRAM[k] for k in ("pretrain_study", "variant", "preset", "step")},
               "trained_seq_len": None, "length": length,
               "batch_size": config["tokens_per_batch"] // length, "batches": config["batches"],
               "loss": loss, "accuracy": accuracy, "masked_tokens": tokens,
               "note": "context-free: unigram of the vocabulary's training text",
               "seconds": time.perf_counter() - start, "command": command}
        records.append_jsonl(path, row)
        print(f"[{config['study']}] baseline/unigram length {length}: loss {loss:.4f}",
              flush=True)
