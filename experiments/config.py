"""Studies: loading, checking, and the exact settings of every run.

A study is an entry of `experiments/studies.json` (or a JSON file of its own, `--config`);
its keys, kinds and how one study builds on another (`extends`: every key it does not set,
`settings` and `vocabulary` key by key; a replicate is `extends` and `settings.seed`) are in
`experiments/README.md`. Paths are relative to the repository root; `extends`, `references`
and `pretrain_configs` name studies (a `.json` file relative to the naming one).
"""

import copy
import dataclasses
import json
import os
import re
import time

from experiments import records
from keras_tupe_base.files import file_sha256
from keras_tupe_base.presets import PRESETS, SIZES, VARIANTS
from keras_tupe_base.settings import (GRID_PRECISIONS, FinetuneConfig, PretrainConfig,
                                      SquadConfig, check_selection)
from keras_tupe_base.staging import copy_file, staged

KINDS = ("pretrain", "finetune", "length")
# Entries over other studies' records, which run nothing: the pages of several studies
# (`compare`: studies that differ only in their settings, the reference first;
# `compare_seeds`: seed groups in one figure, `[study, label]` each) and the claims' runs.
OVER_KINDS = {"compare": ("studies",), "compare_seeds": ("groups",),
              "claims": ("t2", "plateau", "pipelines")}
# The only fields a variant may change: they define the architecture, not the training.
STRUCTURAL_FIELDS = (
    "max_relative_distance", "num_buckets", "max_distance", "layer_norm_position",
)
# PretrainConfig fields that are not study settings: set per run or from `vocabulary`.
PER_RUN_FIELDS = ("preset", "out", "vocab", "overwrite", "verbose")
VOCABULARY_FIELDS = {"vocabulary_size": "vocabulary_size", "lines": "vocab_lines",
                     "lowercase": "lowercase"}
# The settings in which compared studies may differ (`compare`), the same for all their
# variants: how a step is computed (precision, XLA: the speed study, which checks that the
# curves stay the same) and the optimizer's tuning (the learning-rate x warm-up sweep, one
# study a grid point). A study that changes only these of the study it extends is described
# by them in a comparison. Data, budget and model stay the same.
OVERRIDABLE_FIELDS = ("precision", "xla", "learning_rate", "warmup_ratio")
_NAME = re.compile(r"^[a-z0-9][a-z0-9_]*$")
# Every study, by name; a study in a file of its own (`--config FILE`) is loaded as well.
STUDIES_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "studies.json")
# Shared vocabularies committed with their records (`vocab_v2.txt` took 343-466 s to train):
# a study's vocabulary file of the same name and settings is copied from here, not trained.
VOCABULARIES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vocabularies")
# The keys an entry that `extends` another overrides key by key; it replaces any other.
EXTENDED_BY_KEY = ("settings", "vocabulary")


class StudyError(ValueError):
    """A study config, or the runs on disk, do not allow the requested step."""


def _fail(path, message):
    raise StudyError(f"{path}: {message}")


def _read_json(path):
    with open(path) as f:
        try:
            return json.load(f)
        except json.JSONDecodeError as error:
            raise StudyError(f"{path} is not valid JSON: {error}") from error


def studies():
    """`{name: entry}` of `STUDIES_FILE`, as written (an entry may `extend` another)."""
    return _read_json(STUDIES_FILE)


def _entry(reference, chain=()):
    """`(entry, path, flag, folder)` of the study `reference` (a name in `STUDIES_FILE` or a
    `.json` file), its `extends` resolved: an entry takes every key of the study it extends
    that it does not set, `settings` and `vocabulary` key by key; that study may extend
    another in turn. The entry's own `settings` are kept as `_own_settings`."""
    if reference.endswith(".json"):
        if not os.path.exists(reference):
            raise StudyError(f"Study config {reference} does not exist.")
        entry = _read_json(reference)
        path, flag, folder = reference, ["--config", reference], os.path.dirname(reference)
    else:
        table = studies()
        if reference not in table:
            raise StudyError(f"There is no study {reference!r} in "
                             f"{os.path.relpath(STUDIES_FILE)}. Studies: "
                             f"{', '.join(sorted(table))}")
        entry = {"study": reference, **copy.deepcopy(table[reference])}
        path = f"{os.path.relpath(STUDIES_FILE)}: {reference}"
        flag, folder = ["--study", reference], os.path.dirname(STUDIES_FILE)
    for old, new in (("base", "`extends`"), ("overrides", "`settings`, key by key")):
        if old in entry:
            _fail(path, f"`{old}` is not a study key: write {new} (experiments/README.md).")
    own = entry.get("settings", {})
    if "extends" in entry:
        extended = locate(entry.pop("extends"), folder)
        if os.path.normpath(extended) in map(os.path.normpath, (*chain, reference)):
            _fail(path, f"`extends` goes round: {' -> '.join((*chain, reference, extended))}.")
        parent = _entry(extended, (*chain, reference))[0]
        entry = {**parent, **entry, **{key: {**parent[key], **entry[key]} for key in
                                        EXTENDED_BY_KEY if key in parent and key in entry}}
    entry["_own_settings"] = own
    return entry, path, flag, folder


def locate(reference, folder):
    """What `load_config` takes for a study a config names: a study of `STUDIES_FILE`
    by name, or a `.json` file relative to `folder` (the naming config's)."""
    return os.path.join(folder, reference) if reference.endswith(".json") else reference


def load_config(reference, kind=None):
    """The study named `reference` in `STUDIES_FILE`, or the one in the `.json` file at that
    path: `extends` resolved, checked; `kind` if given must match.

    The returned dict also holds `_path` (where it is written, for messages and pages),
    `_flag` (the command-line flags that name it), `_dir` (the folder its `.json`
    references are relative to) and `_own_settings` (the settings it sets itself);
    `resolved` leaves them out.
    """
    config, path, flag, folder = _entry(os.fspath(reference))
    config.update(_path=path, _flag=flag, _dir=folder)
    _check(config, path)
    if kind is not None and config["kind"] != kind:
        raise StudyError(f"{path} is a {config['kind']!r} study, not a {kind!r} one: use "
                         f"`python -m experiments.run {config['kind']} {' '.join(flag)}`.")
    return config


def resolved(config):
    """What a study is, its `extends` resolved: the record a report writes."""
    return {key: value for key, value in config.items() if not key.startswith("_")}


def _require(config, path, keys):
    missing = [key for key in keys if key not in config]
    if missing:
        _fail(path, f"missing {missing}.")


def _check(config, path):
    if config.get("kind") in OVER_KINDS:
        _check_over(config, path)
        return
    _require(config, path, ("study", "kind", "runs_dir", "results_dir"))
    if config["kind"] not in KINDS:
        _fail(path, f"`kind` must be one of {KINDS + tuple(OVER_KINDS)}. "
                    f"Received: {config['kind']!r}")
    if config["kind"] == "pretrain" and "seed" in config:
        _fail(path, "`seed` is not a pre-training study's key: a replicate `extends` the study "
                    "it repeats and sets `settings.seed`.")
    if not _NAME.match(str(config["study"])):
        _fail(path, f"`study` must be lowercase letters, digits and _. Received: {config['study']!r}")
    if config["kind"] == "pretrain":
        _check_pretrain(config, path)
    elif config["kind"] == "finetune":
        _require(config, path, ("pretrain_configs", "checkpoints", "tasks", "learning_rates",
                                "seeds", "settings"))
        if "squad" in config["tasks"]:
            if config["tasks"] != ["squad"] or config.get("task_settings"):
                _fail(path, "a SQuAD study fine-tunes SQuAD alone: `tasks` must be [\"squad\"] "
                            "without `task_settings` (GLUE tasks go in a study of their own). "
                            f"Received tasks {config['tasks']}")
            _require(config, path, ("squad_file",))
            fields, fixed = SquadConfig, {"init", "out", "train", "eval", "offline_split",
                                          "learning_rate", "seed", "vocab", "lowercase",
                                          "verbose"}
        else:
            fields, fixed = FinetuneConfig, {"task", "init", "learning_rate", "seed",
                                             "data_dir", "vocab", "lowercase", "verbose",
                                             "save_dir"}
        allowed = {f.name for f in dataclasses.fields(fields)} - fixed
        unknown = sorted(set(config["settings"]) - allowed)
        if unknown:
            _fail(path, f"unknown fine-tuning settings {unknown}. Allowed: {sorted(allowed)}")
        from keras_tupe.finetuning.glue import check_task_settings

        try:
            check_task_settings(config["tasks"], config.get("task_settings", {}))
            check_selection(config["seeds"], config.get("selection_seed"),
                            config.get("edge_learning_rates", []), config["learning_rates"])
        except ValueError as error:
            _fail(path, str(error))
        _check_fractions(config, path)
        _check_checkpoint_variants(config, path)
        _check_ceiling(config, path)
        grid = config.get("grid")
        if grid is not None and (not isinstance(grid, dict) or set(grid) - {
                "precision", "steps_per_dispatch"} or config["settings"].get("pad_each_batch")
                or ("squad" in config["tasks"] and config["settings"].get("split_seed") is None)):
            _fail(path, "`grid` trains each task's rates x seeds as one program: "
                        "{\"precision\": \"float32\" or \"mixed_bfloat16\", "
                        "\"steps_per_dispatch\": N}, without `pad_each_batch` (one shape a "
                        "task), and for SQuAD with `settings.split_seed` (one article split "
                        f"for every member). Received: {grid!r}")
    else:
        _require(config, path, ("pretrain_configs", "lengths", "valid_corpus",
                                "tokens_per_batch", "batches", "seed"))
        for length in config["lengths"]:
            if config["tokens_per_batch"] % length:
                _fail(path, f"`tokens_per_batch` ({config['tokens_per_batch']}) must be a "
                            f"multiple of every length, so each length sees the same text. "
                            f"Received length {length}.")
        config.setdefault("checkpoints", [1.0])
        _check_fractions(config, path)


def _check_over(config, path):
    """An entry of `OVER_KINDS`: its keys, and the studies it names by name."""
    _require(config, path, OVER_KINDS[config["kind"]])
    named = {"compare": lambda: config["studies"],
             "compare_seeds": lambda: [study for study, _ in config["groups"]],
             "claims": lambda: config["t2"]["replicates"] + [
                 study for _, study, _ in config["plateau"]["runs"]] + [
                 study for study, _ in [config["pipelines"]["run"], *config["pipelines"]["band"]]]}
    try:
        names = named[config["kind"]]()
    except (KeyError, TypeError, ValueError) as error:
        _fail(path, f"a {config['kind']!r} entry as experiments/README.md describes it; "
                    f"{type(error).__name__}: {error}")
    if config["kind"] != "claims" and len(set(names)) < 2:
        _fail(path, f"a {config['kind']!r} entry names at least two studies, each once. "
                    f"Received: {names}")
    unknown = sorted(set(names) - set(studies()))
    if unknown:
        _fail(path, f"names {unknown}, which are not studies of {os.path.relpath(STUDIES_FILE)}.")


def _check_fractions(config, path):
    for fraction in config["checkpoints"]:
        if not 0 <= fraction <= 1:
            _fail(path, f"`checkpoints` are fractions of the pre-training budget in [0, 1] "
                        f"(0: the random initialization, 1: the final model). "
                        f"Received: {fraction}")


def _check_checkpoint_variants(config, path):
    chosen = config.get("checkpoint_variants", {})
    example = '{"0.0": ["long/bert_a"], "0.3": ["tupe_a"]}'
    if not isinstance(chosen, dict) or not all(
            isinstance(names, list) and names and all(
                isinstance(n, str) and all(_NAME.match(part) for part in n.split("/"))
                and n.count("/") <= 1 for n in names)
            for names in chosen.values()):
        _fail(path, "`checkpoint_variants` maps a checkpoint fraction to a non-empty list of "
                    f"variant names (or study/variant), e.g. {example}. Received: {chosen!r}")
    for key in chosen:
        try:
            fraction = float(key)
        except ValueError:
            fraction = None
        if fraction not in config["checkpoints"]:
            _fail(path, f"`checkpoint_variants` names checkpoint {key!r}, which is not one of "
                        f"`checkpoints` {config['checkpoints']}.")


def _check_ceiling(config, path):
    """`ceiling`: `{"name": str, "scores": {task: score, or {metric: value}}}`, the
    published scores of a stronger encoder the table shows as its last row."""
    if "ceiling" not in config:
        return
    from keras_tupe.metrics import GLUE_METRICS

    ceiling = config["ceiling"]
    example = '{"name": "BERT-Mini", "scores": {"sst2": 85.9, "mrpc": {"f1": 81.1}}}'
    if (not isinstance(ceiling, dict) or set(ceiling) != {"name", "scores"}
            or not isinstance(ceiling["scores"], dict)):
        _fail(path, f"`ceiling` must be {{\"name\": ..., \"scores\": {{task: score or "
                    f"{{metric: value}}}}}}, e.g. {example}. Received: {ceiling!r}")
    for task, value in ceiling["scores"].items():
        if task not in config["tasks"]:
            _fail(path, f"`ceiling` scores task {task!r}, which is not one of the tasks "
                        f"{config['tasks']}.")
        metrics = GLUE_METRICS.get(task, ())
        if isinstance(value, dict):
            bad = [name for name in value if name not in metrics]
            if bad or not value:
                _fail(path, f"`ceiling` {task}: metrics {bad or '{}'} are not metrics of {task}. "
                            f"Valid: {list(metrics)}")
        elif not isinstance(value, (int, float)):
            _fail(path, f"`ceiling` {task}: a score (x100) or {{metric: value}}. "
                        f"Received: {value!r}")


def checkpoint_variants(config, fraction):
    """The names (`variant` or `study/variant`) fine-tuned at `fraction`, or None: all."""
    for key, names in config.get("checkpoint_variants", {}).items():
        if float(key) == fraction:
            return names
    return None


def _check_pretrain(config, path):
    _require(config, path, ("size", "vocabulary", "settings", "variants"))
    if config["size"] not in SIZES:
        _fail(path, f"`size` must be one of {sorted(SIZES)}. Received: {config['size']!r}")
    vocabulary = config["vocabulary"]
    _require(vocabulary, f"{path} (vocabulary)",
             ("file", "corpus", "vocabulary_size", "lines", "lowercase"))
    fields = {f.name for f in dataclasses.fields(PretrainConfig)}
    allowed = fields - set(PER_RUN_FIELDS) - set(VOCABULARY_FIELDS.values())
    unknown = sorted(set(config["settings"]) - allowed)
    if unknown:
        _fail(path, f"unknown or per-run settings {unknown}. `settings` holds the PretrainConfig "
                    f"fields shared by every variant: {sorted(allowed)}; the vocabulary's size, "
                    "lines and case come from `vocabulary`.")
    _require(config["settings"], f"{path} (settings)", ("steps", "batch_size", "seq_len",
                                                         "learning_rate", "seed"))
    if bool(config["settings"].get("corpus")) == bool(config["settings"].get("shards")):
        # Checked here too: the library's check comes after the vocabulary is trained.
        _fail(path, "`settings` needs exactly one of `corpus` (text) and `shards` (a token-id "
                    "shard folder of `keras-tupe-shard-corpus`, for a machine without "
                    "TensorFlow).")
    if not config["variants"]:
        _fail(path, "`variants` is empty.")
    references = config.get("references", {})
    if not isinstance(references, dict) or not all(
            isinstance(file, str) and isinstance(names, list) and names
            and all(isinstance(n, str) and _NAME.match(n) for n in names)
            for file, names in references.items()):
        _fail(path, "`references` maps another pre-training study's config file (relative to "
                    "this one) to a non-empty list of its variant names, e.g. "
                    f"{{\"pretrain.json\": [\"bert_a\"]}}. Received: {references!r}")
    for name, spec in config["variants"].items():
        if not _NAME.match(name):
            _fail(path, f"variant name {name!r} must be lowercase letters, digits and _.")
        bad = sorted(set(spec) - {"variant", *STRUCTURAL_FIELDS})
        if bad:
            _fail(path, f"variant {name!r} overrides {bad}. A variant may only choose its preset "
                        f"variant and the structural fields {list(STRUCTURAL_FIELDS)}: training "
                        "settings are the same for every variant (no per-variant tuning).")
        base = spec.get("variant", name)
        if base not in VARIANTS:
            _fail(path, f"variant {name!r}: {base!r} is not a preset variant. "
                        f"Valid: {sorted(VARIANTS)}")
        if base == name and any(key in spec for key in STRUCTURAL_FIELDS):
            _fail(path, f"variant {name!r} changes {base!r}'s structure, so it needs a name of its "
                        f"own, e.g. \"{name}_k8\": {{\"variant\": \"{base}\", ...}}.")
    _check_grid(config, path)


def _check_grid(config, path):
    """A study with `grid` pre-trains each variant's `seeds` as one program (JAX,
    `pretrain_grid`): from token-id shards, in a grid precision, no save step at the end."""
    if "grid" not in config:
        return
    grid, settings = config["grid"], config["settings"]
    seeds = grid.get("seeds") if isinstance(grid, dict) else None
    if (not isinstance(seeds, list) or not seeds or len(set(seeds)) != len(seeds) or not all(
            isinstance(s, int) and not isinstance(s, bool) for s in seeds)
            or set(grid) - {"seeds", "steps_per_dispatch"}):
        _fail(path, "`grid` is {\"seeds\": [distinct integers], \"steps_per_dispatch\": N}"
                    f" (each variant's seeds as one program). Received: {grid!r}")
    if not settings.get("shards") or settings.get("precision") not in GRID_PRECISIONS:
        _fail(path, f"a `grid` study pre-trains from `shards` in {' or '.join(GRID_PRECISIONS)}; "
                    f"received shards {settings.get('shards')!r}, precision "
                    f"{settings.get('precision')!r}.")
    if "seed" in config:
        _fail(path, "a `grid` study names its seeds in `grid.seeds`, not as a replicate's `seed`.")


@dataclasses.dataclass
class Variant:
    """One run of a pre-training study."""

    name: str           # the key in `variants`, the run directory's name
    variant: str        # the preset variant, e.g. "huang_m4"
    overrides: dict     # structural fields changed from the preset
    preset: str         # the preset the run is built from, e.g. "huang_m4_k8_mini"
    base_preset: str    # the library preset it derives from, e.g. "huang_m4_mini"
    run_dir: str
    group: str = ""     # the key in `variants`: in a `grid` study, the seeds' one program
    seed: int = None    # in a `grid` study, this run's seed (else `settings.seed`)

    @property
    def is_finished(self):
        return os.path.exists(run_model(self.run_dir))


def run_model(run_dir, step=None):
    """A pre-training run's final model, or its checkpoint at `step` (step 0: the
    initialization it started from): `keras_tupe.models.preset_folders`' run layout."""
    from keras_tupe.models import preset_folders

    return (preset_folders.run_model(run_dir) if step is None
            else preset_folders.run_checkpoint(run_dir, step))


def run_backbone_config(run_dir):
    """The encoder config a run saved (its preset's `config.json`), or in
    `backbone_config.json` beside a run brought back from another machine without its
    models; None without either."""
    preset_config = os.path.join(run_model(run_dir), "config.json")
    if os.path.exists(preset_config):
        return records.read_json(preset_config)["config"]
    return (records.read_json(os.path.join(run_dir, "backbone_config.json")) or {}).get("config")


def require_models(paths):
    """Raises `StudyError` naming the models in `paths` that are not there yet."""
    missing = [path for path in paths if not os.path.exists(path)]
    if missing:
        raise StudyError("Not pre-trained yet (run the pre-training studies first):\n  "
                         + "\n  ".join(missing))


def study_dir(config):
    return os.path.join(config["runs_dir"], config["study"])


def variants(config):
    """The `Variant`s of a pre-training study, in config order. In a `grid` study each
    variant's seeds are runs of their own, `<name>_seed<s>` in `<name>/seed_<s>` (the
    folders `pretrain_grid` leaves), seed by seed."""
    result = []
    for name, spec in config["variants"].items():
        base = spec.get("variant", name)
        overrides = {k: spec[k] for k in STRUCTURAL_FIELDS if k in spec}
        base_preset = f"{base}_{config['size']}"
        preset = f"{name}_{config['size']}" if overrides else base_preset
        folder = os.path.join(study_dir(config), name)
        result += [Variant(f"{name}_seed{seed}", base, overrides, preset, base_preset,
                           os.path.join(folder, f"seed_{seed}"), group=name, seed=seed)
                   for seed in config["grid"]["seeds"]] if "grid" in config else [
            Variant(name, base, overrides, preset, base_preset, folder, group=name)]
    return result


def expected_backbone(variant):
    """The preset fields a variant's encoder must have (the vocabulary size aside)."""
    return {**PRESETS[variant.base_preset], **variant.overrides}


def pretrain_config(config, variant, verbose=2):
    """The exact `PretrainConfig` of one variant: the study's settings, nothing else."""
    vocabulary = config["vocabulary"]
    settings = copy.deepcopy(config["settings"])
    if variant.seed is not None:  # a grid study's run: its own seed
        settings["seed"] = variant.seed
    for key in ("corpus", "valid_corpus"):
        if isinstance(settings.get(key), str):
            settings[key] = [settings[key]]
    return PretrainConfig(
        preset=variant.base_preset,
        backbone_overrides=variant.overrides or None,
        out=variant.run_dir,
        vocab=vocabulary["file"],
        **{field: vocabulary[key] for key, field in VOCABULARY_FIELDS.items()},
        verbose=verbose,
        **settings,
    )


def checkpoint_path(config, variant, fraction):
    """`(step, path)` of a variant's masked-LM model at `fraction` of the budget.

    The final model, or a checkpoint of the study's `save_steps` (`run_model`).
    """
    step = round(fraction * config["settings"]["steps"])
    if step == config["settings"]["steps"]:
        return step, run_model(variant.run_dir)
    if step not in config["settings"].get("save_steps", []):
        raise StudyError(
            f"{config['_path']}: no checkpoint at {fraction:g} of the budget (step {step}); "
            f"`save_steps` is {config['settings'].get('save_steps', [])}. Add {step} to "
            "`save_steps` before pre-training (0: the initialization), or choose another "
            "fraction."
        )
    return step, run_model(variant.run_dir, step)


def differing_settings(config, other, free=()):
    """What two pre-training studies' runs differ in: `settings` but `free`, `size`,
    `vocabulary`."""
    ours, theirs = config["settings"], other["settings"]
    return sorted(k for k in set(ours) | set(theirs)
                  if k not in free and ours.get(k) != theirs.get(k)) + [
        k for k in ("size", "vocabulary") if config[k] != other[k]]


def require_alike(configs, free, why):
    """Raises `StudyError` unless every study of `configs` was trained as the first one,
    the settings `free` aside; `why` ends the message."""
    for other in configs[1:]:
        differing = differing_settings(configs[0], other, free=free)
        if differing:
            raise StudyError(f"{other['_path']} and {configs[0]['_path']} differ in "
                             f"{differing}: {why}")


def related_configs(config, key):
    """The pre-training study configs a finetune/length study names (relative paths)."""
    paths = config[key] if isinstance(config[key], list) else [config[key]]
    return [load_config(locate(p, config["_dir"]), kind="pretrain") for p in paths]


def checkpoints(config, only_variants=None, only_checkpoints=None):
    """`(pretrain config, variant, step, path)` of every checkpoint a fine-tuning or length
    study reads: each variant of its `pretrain_configs` (those its `variants`,
    `only_variants` and, at a fraction, `checkpoint_variants` name) at each of its
    `checkpoints` (those in `only_checkpoints`)."""
    for pretrain in related_configs(config, "pretrain_configs"):
        for variant in variants(pretrain):
            if any(names and variant.name not in names
                   for names in (config.get("variants"), only_variants)):
                continue
            for fraction in config["checkpoints"]:
                chosen = checkpoint_variants(config, fraction)
                if (only_checkpoints and fraction not in only_checkpoints) or (
                        chosen is not None and variant.name not in chosen
                        and f"{pretrain['study']}/{variant.name}" not in chosen):
                    continue
                yield (pretrain, variant, *checkpoint_path(pretrain, variant, fraction))


# === The shared vocabulary ===

def vocabulary_record_path(vocabulary):
    return os.path.splitext(vocabulary["file"])[0] + ".json"


def vocabulary_settings(vocabulary):
    corpus = vocabulary["corpus"]
    return {"corpus": [corpus] if isinstance(corpus, str) else list(corpus),
            "vocabulary_size": vocabulary["vocabulary_size"], "lines": vocabulary["lines"],
            "lowercase": vocabulary["lowercase"]}


def ensure_vocabulary(config, command=None, verbose=True):
    """Trains the study's shared vocabulary once; returns its sha256.

    Next to the file, `<name>.json` records the settings it was trained with,
    its sha256 and the time it took. An existing vocabulary with other settings
    (or of unknown origin, or changed since) is refused: every run of every
    study with this vocabulary file must tokenize identically. A missing one that
    `VOCABULARIES` holds with the same name and settings is copied from there with
    its record (its sha256 checked), not trained again.
    """
    vocabulary = config["vocabulary"]
    path, record_path = vocabulary["file"], vocabulary_record_path(vocabulary)
    settings = vocabulary_settings(vocabulary)
    committed = os.path.join(VOCABULARIES, os.path.basename(path))
    committed_record = records.read_json(vocabulary_record_path({"file": committed}), {})
    if not os.path.exists(path) and committed_record.get("settings") == settings:
        recorded, sha = committed_record["sha256"], file_sha256(committed)
        if sha != recorded:
            raise StudyError(f"{committed} is not the vocabulary its record names (sha256 "
                             f"{sha}, recorded {recorded}): restore it from git.")
        copy_file(vocabulary_record_path({"file": committed}), record_path)
        copy_file(committed, path)  # last: the vocabulary exists only with its record
        if verbose:
            print(f"Copied the committed vocabulary {committed} -> {path} (sha256 {recorded}; "
                  "not trained again)", flush=True)
    if os.path.exists(path):
        if not os.path.exists(record_path):
            raise StudyError(f"{path} exists but {record_path} (its settings) does not: refusing "
                             "a vocabulary of unknown origin. Delete it or restore the record.")
        record = records.read_json(record_path)
        if record["settings"] != settings:
            raise StudyError(f"{path} was trained with {record['settings']}, but "
                             f"{config['_path']} asks for {settings}. Every study sharing this "
                             "file must use the same vocabulary settings.")
        sha = file_sha256(path)
        if sha != record["sha256"]:
            raise StudyError(f"{path} changed since it was trained (sha256 {sha}, recorded "
                             f"{record['sha256']}).")
        return sha
    if verbose:
        print(f"Training the shared {settings['vocabulary_size']}-token vocabulary on "
              f"{settings['lines']} lines of {settings['corpus']} -> {path}", flush=True)
    from keras_tupe import data

    with staged(path) as partial:  # renamed last: the vocabulary exists only with its record
        start = time.perf_counter()
        data.train_vocabulary(settings["corpus"], settings["vocabulary_size"], partial,
                              lowercase=settings["lowercase"], max_lines=settings["lines"])
        seconds = time.perf_counter() - start
        sha = file_sha256(partial)
        records.write_json(record_path, {
            "settings": settings, "sha256": sha, "seconds": seconds, "command": command,
            "created": records.now(), "versions": records.machine()})
    return sha

