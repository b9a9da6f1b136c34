"""What every command does alike, tested over the commands (or several of them): an argument
or usage error is one line naming the flag, given before TensorFlow's import; a path
mistake too, and an `--out` held by another process before Keras's; an `--out` that cannot
be written is named as given, with the fix; the flags are the settings' fields, of their
types and defaults; Ctrl-C while starting is one line; the fine-tuning data fail at once
offline.

The inputs at the edges (issue 38) tested here (all failed on the code before):

- a `--vocab` with a repeated token (pretrain, finetune_glue, export preprocessor):
  `test_a_vocabulary_with_a_repeated_token_is_named`
- Ctrl-C in the first seconds of an entry point:
  `test_ctrl_c_while_starting_is_one_line_and_exit_130`
- a usage error (answered before TensorFlow's import):
  `test_usage_errors_come_before_tensorflow_is_imported`,
  `test_the_commands_defaults_are_their_settings_defaults`
"""

import os
import subprocess
import sys

import pytest

from keras_tupe import data
from keras_tupe_cli import pretrain as pretrain_cli
from tests.commands.entry_points import (CTRL_C_AT_TENSORFLOW, KERAS_AT_EXIT, NO_TENSORFLOW,
                                         REPO, FakeEncoder, _held_by_another_process,
                                         run_entry_point, run_main, write_vocabulary)

ENTRY_POINTS = ["training.pretrain", "training.finetune_glue", "training.finetune_squad",
                "training.export", "training.predict", "training.presets", "training.demo",
                "training.plot_metrics", "training.shard_corpus", "experiments.run",
                "benchmarks.encoders"]


def prog(module):
    """The command a user types: the console script, else the module."""
    name = module.removeprefix("training.")
    if name == module:  # no console script
        return f"python -m {module}"
    return f"keras-tupe-{name.replace('_', '-')}"


@pytest.mark.parametrize("module", ENTRY_POINTS)
def test_argument_errors_are_one_line_naming_the_flag_and_help(module, capsys, tmp_path,
                                                               monkeypatch):
    import importlib

    monkeypatch.chdir(tmp_path)
    entry = importlib.import_module(module)
    with pytest.raises(SystemExit) as exit:
        # argparse reports the unknown flag (after the missing required ones, if any).
        (getattr(entry, "parse_args", None) or entry.main)(["--no-such-flag", "x"])
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "usage:" not in err
    assert err.endswith(f"(`{prog(module)} --help` lists the flags)\n")
    assert "--no-such-flag" in err or "required" in err or "invalid choice" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("loader,what", [
    ("glue", "GLUE task 'sst2' (tensorflow-datasets 'glue/sst2')"),
    ("squad", "SQuAD v1.1 'validation' (tensorflow-datasets 'squad/v1.1')"),
])
def test_offline_glue_and_squad_fail_at_once_leaving_the_tfds_folder_empty(
        tmp_path, monkeypatch, loader, what):
    import socket

    from keras_tupe.data import glue, squad

    load = {"glue": lambda: glue.load_glue("sst2", "validation"),
            "squad": lambda: squad.load_squad("validation")}[loader]

    def no_network(*args, **kwargs):
        raise OSError("Network is unreachable")

    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setenv("TFDS_DATA_DIR", str(tmp_path))
    with pytest.raises(ConnectionError) as error:
        load()
    assert str(error.value).startswith(
        f"{what} is not prepared locally and storage.googleapis.com cannot be reached")
    assert list(tmp_path.rglob("*")) == []


@pytest.mark.parametrize("entry", ["pretrain", "finetune_glue", "export preprocessor"])
def test_a_vocabulary_with_a_repeated_token_is_named(entry, tmp_path, monkeypatch, capsys):
    """Was a 30-line tensorflow-text traceback naming neither the file nor the token."""
    from keras_tupe.finetuning import glue as protocol
    from keras_tupe_cli import export, finetune_glue

    vocab = write_vocabulary(tmp_path / "my vocab.txt",
                             data.SPECIAL_TOKENS + ["the", "film", "the", "a"])
    out = tmp_path / "out"
    if entry == "pretrain":
        corpus = tmp_path / "c.txt"
        corpus.write_text("the film\n")
        main, argv = pretrain_cli.main, [
            "--preset", "tupe_r_tiny", "--corpus", str(corpus), "--out", str(out),
            "--vocab", str(vocab), "--steps", "10", "--verbose", "0"]
    elif entry == "finetune_glue":
        monkeypatch.setattr(protocol, "load_backbone", lambda init: FakeEncoder())
        main, argv = finetune_glue.main, [
            "--init", str(tmp_path / "run"), "--tasks", "sst2", "--out", str(out),
            "--vocab", str(vocab)]
    else:
        main, argv = export.main, ["preprocessor", "--vocab", str(vocab), "--out", str(out)]
    code, _, err = run_main(main, argv, capsys)
    message = (f"Vocabulary file {vocab} has the token 'the' twice, on lines 6 and 8: a "
               "token's line is its id, so each token may appear once. Remove line 8 (and "
               "any other repeat).")
    assert code == 2
    assert err.splitlines()[-1] == f"error: {'--vocab: ' if entry == 'pretrain' else ''}{message}"
    assert not out.exists()


@pytest.mark.parametrize("module,argv", [
    # Any file that exists: --corpus is checked before TensorFlow's import, read after it.
    ("training.pretrain", ["--preset", "tupe_r_tiny", "--corpus", "README.md", "--out", "o"]),
    ("training.finetune_glue", ["--init", "r", "--tasks", "sst2", "--out", "o"]),
    # Any file that exists: --vocab is checked before TensorFlow's import, read after it.
    ("training.export", ["preprocessor", "--vocab", "pyproject.toml", "--out", "o"]),
])
def test_ctrl_c_while_starting_is_one_line_and_exit_130(module, argv, tmp_path):
    """Was a 40-line KeyboardInterrupt traceback (TensorFlow was imported before `run`)."""
    result = run_entry_point(module, argv, CTRL_C_AT_TENSORFLOW, cwd=tmp_path)
    assert (result.returncode, result.stderr) == (130, "interrupted\n")
    assert not (tmp_path / "o").exists()
    # Before `run` (while the entry point's modules import): one line too; Python then
    # ends by SIGINT, status 130 as the shell reports it.
    script = "import keras_tupe_cli\nraise KeyboardInterrupt\n"
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                            text=True, timeout=120)
    assert (result.returncode, result.stderr) in ((-2, "interrupted\n"), (130, "interrupted\n"))


@pytest.mark.parametrize("module,argv", [
    ("training.pretrain", ["--preset", "tupe_r_tiny", "--corpus", "c.txt", "--out", "o",
                           "--precision", "float64"]),
    ("training.finetune_glue", ["--init", "r", "--tasks", "sst2", "--out", "o",
                                "--seeds", "zero"]),
    ("training.finetune_squad", ["--init", "r", "--epochs", "two"]),
    ("training.export", ["encoder", "--out", "o"]),
    ("training.predict", ["saved_models/x"]),
    ("training.presets", ["--sizes", "huge"]),
    ("training.shard_corpus", ["--corpus", "c.txt"]),
    ("training.demo", ["--steps", "many"]),
    ("training.plot_metrics", []),
])
def test_usage_errors_come_before_tensorflow_is_imported(module, argv):
    """Was 4.5 s: `training/__init__.py` imported TensorFlow before the flags were read."""
    report = ("import atexit\n"  # after the entry point's exit: was TensorFlow imported?
              "atexit.register(lambda: sys.stdout.write(str('tensorflow' in sys.modules)))\n")
    result = run_entry_point(module, argv, report)
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and len(result.stderr.splitlines()) == 1
    assert result.stdout == "False"


def test_the_commands_defaults_are_their_settings_defaults(tmp_path):
    """A command's flags are its dataclass's fields, read before Keras: left out, each is the
    field's default (pre-training's sequence length and evaluation interval then fitted to
    the preset and the steps)."""
    import dataclasses

    from keras_tupe_base.settings import (PAPER_LEARNING_RATES, PAPER_SEEDS, FinetuneConfig,
                                          ProtocolConfig, PretrainConfig, ShardConfig,
                                          SquadConfig)
    from keras_tupe_cli import finetune_glue, finetune_squad, shard_corpus

    protocol, run = finetune_glue.parse_configs(["--init", "r", "--tasks", "sst2", "--out", "o"])
    assert run == FinetuneConfig(task="sst2", init="r")
    assert protocol == ProtocolConfig(tasks=["sst2"], out="o")
    assert (protocol.learning_rates, protocol.seeds) == (
        list(PAPER_LEARNING_RATES), list(PAPER_SEEDS))
    corpus, out = str(tmp_path / "c"), str(tmp_path / "o")  # the corpus must exist
    (tmp_path / "c").write_text("")
    config = pretrain_cli.parse_config(["--preset", "tupe_r_tiny", "--corpus", corpus,
                                        "--out", out])
    assert dataclasses.replace(config, seq_len=512, eval_every=1000) == PretrainConfig(
        preset="tupe_r_tiny", corpus=[corpus], out=out)
    assert (config.seq_len, config.eval_every) == (128, 1000)  # tiny's table; 1000 | 1M steps
    assert finetune_squad.parse_config(["--init", "r"]) == SquadConfig(init="r")
    assert shard_corpus.parse_config(["--corpus", corpus, "--out", out]) == ShardConfig(
        corpus=[corpus], out=out)


SAMPLES = {str: "x", int: "9", float: "0.5"}  # 9: at least every least value


def flag_cases():
    """(command, argv that parses, settings class, skipped fields) of every command whose
    flags are a dataclass's fields."""
    from keras_tupe_base.settings import (FinetuneConfig, ProtocolConfig, PretrainConfig,
                                          ShardConfig, SquadConfig)
    from keras_tupe_cli import finetune_glue

    glue = ["--init", "r", "--tasks", "sst2", "--out", "o"]
    return [("finetune_squad", ["--init", "r"], SquadConfig, ()),
            ("finetune_glue", glue, FinetuneConfig, finetune_glue.RUN_SKIP),
            ("finetune_glue", glue, ProtocolConfig, ()),
            ("pretrain", ["--preset", "tupe_r_tiny", "--corpus", "README.md", "--out", "o"],
             PretrainConfig, ()),
            ("shard_corpus", ["--corpus", "README.md", "--out", "o"], ShardConfig, ())]


@pytest.mark.parametrize("case", range(5))
def test_every_setting_is_a_flag_of_its_type(case, monkeypatch):
    """Each field of the command's dataclass but those it sets otherwise (and those made
    `flag=False`) has its flag, `--seq-len` for `seq_len`, which parses to the field's type;
    a bool field is a switch turning its default around. A field without a flag, or a flag
    of another type than its field, fails here."""
    import dataclasses
    import importlib

    monkeypatch.chdir(REPO)  # README.md: a corpus that exists
    monkeypatch.setenv("KERAS_BACKEND", "jax")  # where --grid is allowed
    name, argv, settings_class, skip = flag_cases()[case]
    command = importlib.import_module(f"keras_tupe_cli.{name}")
    parse = getattr(command, "parse_configs", None) or command.parse_config

    def parsed(given):
        configs = parse([*argv, *given])
        configs = configs if isinstance(configs, tuple) else (configs,)
        config, = [c for c in configs if isinstance(c, settings_class)]
        return config

    flagged = [f for f in dataclasses.fields(settings_class)
               if f.metadata.get("flag") and f.name not in skip]
    assert len(flagged) >= 7
    for field in flagged:
        meta = field.metadata
        if field.type is bool:
            given, value = [meta["switch"]], not field.default
        elif field.name in ("corpus", "tasks", "preset", "init", "out"):
            continue  # given above
        else:
            flag = "--" + field.name.replace("_", "-")
            if meta["choices"]:
                text = str(meta["choices"][-1])
            elif field.name == "save_steps":
                text = "0,14"
            elif field.name.endswith("shards"):
                text = "docs"  # a folder that exists
            elif field.name in ("vocab", "valid_corpus"):
                text = "README.md"  # a file that exists
            elif field.name == "coordinator":
                text = "10.0.0.1:1234"  # HOST:PORT
            else:
                text = SAMPLES[meta["parse"] or (str if field.type is list else field.type)]
            given = [flag, text]
            kind = meta["parse"] or (str if field.type is list else field.type)
            value = [0, 14] if field.name == "save_steps" else (
                [kind(text)] if field.type is list else kind(text))
            if name == "pretrain" and field.name in ("steps", "eval_every"):
                given += ["--steps", "9", "--eval-every", "9"]  # a multiple of each other
            if name == "pretrain" and field.name == "steps_per_execution":
                given += ["--eval-every", "18", "--steps", "18000"]  # 9 divides 18
            if field.name in ("coordinator", "num_processes", "process_id"):
                # The layout of pre-training's multiworker alone, of fine-tuning's grid alone.
                given += ["--strategy", "multiworker"] if name == "pretrain" else ["--grid"]
            if field.name == "selection_seed":
                given += ["--seeds", "9"]
            if field.name == "edge_learning_rates":
                given += ["--selection-seed", "0"]
            if name == "finetune_glue" and field.name in ("precision", "steps_per_dispatch"):
                given += ["--grid"]
        config = parsed(given)
        assert getattr(config, field.name) == value, field.name
        if field.type is not list:
            assert type(getattr(config, field.name)) is field.type, field.name


@pytest.mark.parametrize("module, argv", [
    ("export", ["encoder", "--init", "{tmp}", "--out", "{out}"]),
    ("convert", ["fairseq", "{tmp}/model.pt", "--out", "{out}"]),
    ("shard_corpus", ["--corpus", "{tmp}/model.pt", "--vocab", "{tmp}/model.pt",
                      "--out", "{out}"]),
])
def test_a_second_command_on_a_held_out_is_refused_naming_the_holder(
        tmp_path, capsys, module, argv):
    import importlib

    (tmp_path / "model.pt").write_text("x")
    out = tmp_path / "out"
    argv = [a.format(tmp=tmp_path, out=out) for a in argv]
    holder = _held_by_another_process(out)
    try:
        main = importlib.import_module(f"training.{module}").main
        code, _, err = run_main(main, argv, capsys)
    finally:
        holder.kill()
        holder.wait()
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"error: --out {out} is being written by process {holder.pid} on "), err
    assert not out.exists()


@pytest.mark.parametrize("module, argv", [
    ("pretrain", ["--preset", "tupe_r_tiny", "--corpus", "README.md", "--out", "{out}"]),
    ("finetune_glue", ["--init", "{tmp}", "--tasks", "sst2", "--out", "{out}"]),
    ("finetune_squad", ["--init", "{tmp}", "--out", "{out}"]),
    ("export", ["encoder", "--init", "{tmp}", "--out", "{out}"]),
    ("convert", ["huggingface", "{tmp}", "--out", "{out}"]),
    ("shard_corpus", ["--corpus", "README.md", "--out", "{out}"]),
])
def test_a_held_out_is_refused_before_keras_is_imported(tmp_path, module, argv):
    """Issue 59, item 5: was refused only after Keras's import (5.6 s on an idle machine,
    35 s on a busy one; finetune-glue after loading the encoder and the data, finetune-squad
    after the whole training)."""
    out = tmp_path / "out"
    argv = [a.format(tmp=tmp_path, out=out) for a in argv]
    holder = _held_by_another_process(out)
    try:
        result = run_entry_point(f"training.{module}", argv, KERAS_AT_EXIT)
    finally:
        holder.kill()
        holder.wait()
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(
        f"error: --out {out} is being written by process {holder.pid} on "), result.stderr
    assert result.stdout == "False"  # Keras (and with it TensorFlow or JAX) never imported


@pytest.mark.parametrize("module, argv, message", [
    ("training.convert", ["fairseq", "missing.pt", "--out", "o"], "SOURCE missing.pt does not exist"),
    ("training.convert", ["huggingface", ".", "--out", "README.md"],
     "--out README.md already exists and is not an empty folder"),
    ("training.export", ["encoder", "--init", "missing_run", "--out", "o"],
     "--init missing_run does not exist"),
    ("training.shard_corpus", ["--corpus", "missing.txt", "--out", "o"],
     "--corpus missing.txt does not exist"),
    ("training.shard_corpus", ["--corpus", "README.md", "--vocab", "missing.txt", "--out", "o"],
     "--vocab missing.txt does not exist"),
    ("training.pretrain", ["--preset", "tupe_r_tiny", "--corpus", "missing.txt", "--out", "o"],
     "--corpus missing.txt does not exist"),
    ("training.pretrain", ["--preset", "tupe_r_tiny", "--corpus", "README.md", "--out", "o",
                           "--vocab", "missing.txt"], "--vocab missing.txt does not exist"),
    ("training.pretrain", ["--preset", "tupe_r_tiny", "--corpus", "README.md", "--out",
                           "README.md"], "--out README.md is a file"),
    ("training.finetune_glue", ["--init", "r", "--tasks", "rte", "--out", "README.md"],
     "--out README.md is a file; keras-tupe-finetune-glue writes a results folder there"),
    ("training.pretrain", ["--preset", "tupe_r_tiny", "--shards", "README.md", "--out", "o"],
     "--shards README.md is not a folder. Make it with `keras-tupe-shard-corpus"),
])
def test_path_mistakes_are_reported_before_tensorflow_is_imported(module, argv, message):
    result = run_entry_point(module, argv, NO_TENSORFLOW)
    assert result.returncode == 2 and result.stderr.startswith(f"error: {message}"), result.stderr
    assert result.stderr.count("\n") == 1


@pytest.fixture(params=["read-only", "immutable", "a file"])
def unwritable(request, tmp_path):
    """(kind, folder, why): a place this process cannot create files in, as a user meets one.

    Read-only: a tmpfs mounted read-only where this process may mount (root), else a
    folder without write permission; immutable: `chattr +i` (root, a file system that has
    the flag); a file: `--out` under a regular file. Skipped where the machine cannot make it.
    """
    kind, folder = request.param, tmp_path / "place"
    if kind == "a file":
        folder.write_text("a regular file\n")
        yield kind, folder, f"{folder} is a file, not a folder"
        return
    folder.mkdir()
    if kind == "read-only" and os.geteuid() != 0:
        folder.chmod(0o555)
        yield kind, folder, f"this process cannot create files in {folder} (Permission denied)"
        folder.chmod(0o755)
        return
    make, undo, why = {
        "read-only": (["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(folder)],
                      ["umount", str(folder)], "Read-only file system"),
        "immutable": (["chattr", "+i", str(folder)], ["chattr", "-i", str(folder)],
                      "Operation not permitted"),
    }[kind]
    if os.geteuid() != 0 or subprocess.run(make, capture_output=True).returncode != 0:
        pytest.skip(f"this machine cannot make a {kind} folder here")
    try:
        yield kind, folder, f"this process cannot create files in {folder} ({why})"
    finally:
        subprocess.run(undo, check=True)


@pytest.fixture(scope="module")
def tiny_preset(tmp_path_factory):
    """A preset folder an encoder export reads (the old code got as far as its writing)."""
    from keras_tupe.models import TupeBackbone

    folder = tmp_path_factory.mktemp("encoder") / "preset"
    TupeBackbone.from_preset("tupe_r_tiny", vocabulary_size=64).save_to_preset(str(folder))
    return folder


def unwritable_out_argv(command, tmp_path, out, request, monkeypatch):
    """The command line of `command` writing `out`, everything else fine up to the writing."""
    if command == "export":
        preset = request.getfixturevalue("tiny_preset")
        return ["encoder", "--init", str(preset), "--out", str(out)]
    if command == "convert":
        return ["huggingface", str(tmp_path), "--out", str(out)]
    if command == "pretrain":
        corpus = tmp_path / "c.txt"
        corpus.write_text("some text\n")
        return ["--preset", "tupe_r_tiny", "--corpus", str(corpus), "--out", str(out),
                "--steps", "10", "--verbose", "0"]
    from keras_tupe.finetuning import glue as protocol

    monkeypatch.setattr(protocol, "_preflight", lambda *args: None)  # an encoder and data
    return ["--init", str(tmp_path), "--tasks", "sst2", "--out", str(out)]


@pytest.mark.parametrize("command", ["export", "convert", "pretrain", "finetune_glue"])
@pytest.mark.parametrize("where", ["inside", "itself"])
def test_an_out_that_cannot_be_written_is_named_as_given_with_the_fix(
        command, where, unwritable, tmp_path, request, monkeypatch, capsys):
    """Was `Read-only file system: .../.out.lock` (the hidden lock file), `Operation not
    permitted: ...` or `Not a directory: ...`, or for an unwritable --out itself the export's
    staging folder `.../1.partial`: never --out, never the fix."""
    import importlib

    kind, folder, why = unwritable
    if where == "itself" and kind == "a file":
        pytest.skip("an --out that is a file is refused by each command as such")
    out = folder / "out" if where == "inside" else folder
    if command == "convert" and where == "itself":
        pytest.skip("convert takes an empty --out folder only; a read-only one stays empty")
    main = importlib.import_module(f"training.{command}").main
    argv = unwritable_out_argv(command, tmp_path, out, request, monkeypatch)
    code, _, err = run_main(main, argv, capsys)
    assert code == 2, err
    assert err.splitlines()[-1] == (
        f"error: --out {out} cannot be written: {why}. Choose another --out, in a folder this "
        "process can write."), err
    assert err.count("error:") == 1 and ".lock" not in err and ".partial" not in err
    assert not (folder.is_dir() and where == "inside" and out.exists())
    assert not list(tmp_path.glob("*.lock")) and not list(tmp_path.glob(".*.lock"))


def test_the_python_api_names_the_argument_of_an_out_that_cannot_be_written(tmp_path):
    from keras_tupe.convert import convert
    from keras_tupe_base.output_lock import OutputNotWritableError
    from keras_tupe.pretraining import pretrain
    from keras_tupe_base.settings import PretrainConfig

    (tmp_path / "file").write_text("x")
    out = tmp_path / "file" / "preset"
    with pytest.raises(OutputNotWritableError) as refused:
        convert("huggingface", str(tmp_path), str(out))
    assert str(refused.value) == (
        f"`out=` {out} cannot be written: {tmp_path / 'file'} is a file, not a folder. Choose "
        "another `out=`, in a folder this process can write.")
    # Was "--out ...", a flag the Python caller never gave.
    with pytest.raises(OutputNotWritableError, match=r"^`out=` .* Choose another `out=`, "):
        pretrain(PretrainConfig(preset="tupe_r_tiny", corpus=[str(tmp_path / "file")],
                                out=str(out)))


@pytest.mark.parametrize("value", ["0", "-3"])
@pytest.mark.parametrize("command", ["finetune_glue", "finetune_squad"])
def test_steps_per_execution_below_one_is_refused_as_the_flag(command, value, capsys, tmp_path):
    """Issue 67: 0 reached Keras (`range() arg 3 must not be zero`), -3 too (`Cannot get
    result() since the metric has not yet been built.`)."""
    import importlib

    main = importlib.import_module(f"training.{command}").main
    argv = ["--init", "run", "--out", str(tmp_path / "out"), f"--steps-per-execution={value}"]
    argv += ["--tasks", "rte"] if command == "finetune_glue" else []
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        f"error: --steps-per-execution must be an int >= 1. Received: --steps-per-execution "
        f"{value}\n")
    assert not (tmp_path / "out").exists()
    assert os.listdir(tmp_path) == []
