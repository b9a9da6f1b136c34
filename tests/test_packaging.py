"""The wheel: the library alone, its commands in `keras_tupe_cli`, TensorFlow an extra.

- pyproject.toml packages `keras_tupe*` only; every console script is a `keras_tupe_cli`
  command, and `training/` keeps a thin script of each for the checkout.
- TensorFlow and the packages that only its routes use are the `tensorflow` extra, and a
  route that needs it where it is missing says so in one error naming the extra.
- `import keras_tupe` registers the model family with Keras in every process, commands'
  included; a command reads its flags before it imports the library (and Keras), so a usage
  error imports neither.

The jax-only install itself needs the package index, so it is not a test here. keras-hub 0.32
declares tensorflow-text (and so TensorFlow) on Linux, so keras-hub and the wheel go in with
`--no-deps` and the other requirements by name (`-c constraints.txt` on each `pip install`):

    pip install --no-deps keras-hub
    pip install absl-py numpy packaging regex rich kagglehub kagglesdk sentencepiece tokenizers
    pip install --no-deps keras_tupe-0.1.0-py3-none-any.whl
    pip install keras safetensors sacremoses subword-nmt "jax[cpu]" grain
    KERAS_BACKEND=jax keras-tupe-finetune-glue --init encoder.keras --vocab vocab.txt \\
        --tasks sst2 --data-dir glue --out ft --max-train-examples 32 --batch-size 32 \\
        --epochs 1 --learning-rates 1e-3 --seeds 0 --data-loader grain
"""

import importlib
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from keras_tupe_base.extras import TENSORFLOW_EXTRA, require_tensorflow, tensorflow_missing

REPO = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
# Distributions only the TensorFlow routes import (tf.data, tensorflow-text, SavedModels,
# tensorflow-datasets corpora, the TensorBoard callback).
TENSORFLOW_ONLY = ("tensorflow", "tensorflow-text", "tensorflow-datasets", "tensorboard")


def distribution(requirement):
    """`tensorflow-text` of `"tensorflow-text>=2.21,<2.22"`."""
    for stop in "<>=!~[; ":
        requirement = requirement.split(stop)[0]
    return requirement.lower()


def test_the_wheel_packages_the_library_only():
    assert PROJECT["tool"]["setuptools"]["packages"]["find"]["include"] == ["keras_tupe*"]


@pytest.mark.parametrize("script,target", sorted(PROJECT["project"]["scripts"].items()))
def test_every_console_script_is_a_command_with_its_thin_script(script, target):
    module, _, function = target.partition(":")
    name = module.removeprefix("keras_tupe_cli.")
    assert (module, function, script) == (f"keras_tupe_cli.{name}", "main",
                                          f"keras-tupe-{name.replace('_', '-')}")
    command = importlib.import_module(module)
    assert callable(command.main)
    # `python -m training.<name>`: the command's own `main`
    assert importlib.import_module(f"training.{name}").main is command.main


def test_tensorflow_is_an_extra():
    required = {distribution(r) for r in PROJECT["project"]["dependencies"]}
    extra = {distribution(r) for r in PROJECT["project"]["optional-dependencies"]["tensorflow"]}
    assert not required & set(TENSORFLOW_ONLY)
    assert set(TENSORFLOW_ONLY) <= extra
    assert {"jax", "grain"} <= {distribution(r) for r in
                                PROJECT["project"]["optional-dependencies"]["jax"]}


def test_the_tensorflow_extra_excludes_tensorflow_text_2_21_0():
    """tensorflow-text 2.21.0 broke keras-hub's tokenizers on every backend (keras-hub PR
    #2979 capped it out); TensorFlow 2.21 needs a 2.21 tensorflow-text, so 2.21.0 is skipped."""
    requirement, = [Requirement(r) for r in PROJECT["project"]["optional-dependencies"]
                    ["tensorflow"] if distribution(r) == "tensorflow-text"]
    assert not requirement.specifier.contains("2.21.0")
    assert requirement.specifier.contains("2.21.1")


def test_a_missing_tensorflow_is_one_error_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorflow_text", None)  # `import` raises ImportError
    with pytest.raises(ImportError) as raised:
        require_tensorflow("SavedModel export", "tensorflow_text")
    message = str(raised.value)
    assert message.startswith("SavedModel export needs TensorFlow (tensorflow_text does not "
                              "import here")
    assert TENSORFLOW_EXTRA in message and message.count(TENSORFLOW_EXTRA) == 1
    assert tensorflow_missing(raised.value) == message  # said once, not wrapped again
    assert tensorflow_missing(ImportError("No module named 'torch'", name="torch")) is None
    assert tensorflow_missing(ValueError("tensorflow")) is None


def run_python(argv, **env):
    return subprocess.run([sys.executable, *argv], cwd=REPO, capture_output=True, text=True,
                          timeout=900, env={**os.environ, **env})


def test_a_command_without_tensorflow_says_which_extra_to_install(tmp_path):
    """`tests/no_tensorflow` makes `import tensorflow` fail, as on a machine without it; under
    Keras's TensorFlow backend `import keras_tupe` (Keras's import) says so."""
    result = run_python(["-m", "keras_tupe_cli.export", "preprocessor", "--vocab",
                         str(REPO / "pyproject.toml"), "--out", str(tmp_path / "o")],
                        PYTHONPATH=os.pathsep.join([str(REPO / "tests" / "no_tensorflow"),
                                                    str(REPO)]),
                        KERAS_BACKEND="tensorflow")
    assert result.returncode == 2
    assert result.stderr.startswith("error: Keras's TensorFlow backend (KERAS_BACKEND) needs "
                                    "TensorFlow (tensorflow does not import here")
    assert len(result.stderr.splitlines()) == 1 and TENSORFLOW_EXTRA in result.stderr
    assert result.stderr.rstrip().endswith("Or run with KERAS_BACKEND=jax.")
    assert not (tmp_path / "o").exists()


def imported_modules(argv, **env):
    """The process's result and the modules it imported (`-X importtime`'s list)."""
    result = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1", **env})
    return result, {line.split("|")[-1].strip() for line in result.stderr.splitlines()
                    if line.startswith("import time:")}


COMMAND = str(Path(sys.executable).parent / "keras-tupe-finetune-glue")


PRETRAIN = [sys.executable, "-m", "keras_tupe_cli.pretrain", "--corpus", "README.md",
            "--out", "o", "--steps", "300"]
GLUE = [sys.executable, "-m", "keras_tupe_cli.finetune_glue", "--init", "r", "--tasks", "rte",
        "--out", "o"]


@pytest.mark.parametrize("argv,says", [
    ([COMMAND, "--bogus"], "required"),
    ([sys.executable, "-m", "keras_tupe_cli.finetune_glue", "--bogus"], "required"),
    ([sys.executable, "-m", "training.finetune_glue", "--bogus"], "required"),
    ([sys.executable, "-m", "keras_tupe_cli.presets", "--sizes", "huge"], "invalid choice"),
    # Values of the settings, checked by their dataclass before Keras (issue 66).
    ([*PRETRAIN, "--preset", "tupe_r_tinny"], "Unknown preset tupe_r_tinny. The nearest: "
                                              "tupe_r_tiny"),
    ([*PRETRAIN, "--preset", "tupe_r_tiny", "--steps-per-execution", "0"],
     "--steps-per-execution must be an int >= 1. Received: --steps-per-execution 0"),
    ([*PRETRAIN, "--preset", "tupe_r_tiny", "--steps-per-execution", "-3"],
     "--steps-per-execution must be an int >= 1. Received: --steps-per-execution -3"),
    ([*PRETRAIN, "--preset", "tupe_r_tiny", "--steps-per-execution", "600"],
     "--steps-per-execution (600) is more than --steps (300)"),
    ([*PRETRAIN, "--preset", "tupe_r_tiny", "--steps-per-execution", "7"],
     "--steps-per-execution (7) must be a positive divisor of --eval-every (30)"),
    ([*GLUE, "--steps-per-execution", "0"], "--steps-per-execution must be an int >= 1"),
    ([*GLUE, "--selection-seed", "9"], "--selection-seed 9 is not one of --seeds 0 1 2 3 4"),
    ([sys.executable, "-m", "keras_tupe_cli.finetune_squad", "--init", "r",
      "--steps-per-execution", "-1"], "--steps-per-execution must be an int >= 1"),
    ([sys.executable, "-m", "keras_tupe_cli.shard_corpus", "--corpus", "README.md", "--out",
      "o", "--seq-len", "7"], "--seq-len must be an int >= 8"),
], ids=["console-script", "keras_tupe_cli", "training", "presets", "pretrain-preset",
        "pretrain-spe-0", "pretrain-spe-negative", "pretrain-spe-above-steps",
        "pretrain-spe-not-dividing", "glue-spe-0", "glue-selection", "squad-spe", "shard-seq"])
def test_a_usage_error_imports_neither_keras_nor_the_library(argv, says):
    result, imported = imported_modules(argv)
    errors = [line for line in result.stderr.splitlines() if not line.startswith("import time")]
    assert result.returncode == 2 and len(errors) == 1 and errors[0].startswith("error: ")
    assert says in errors[0]
    assert "keras_tupe_cli.common" in imported and "keras_tupe_base.settings" in imported
    assert not imported & {"keras", "tensorflow", "jax", "keras_hub", "keras_tupe", "numpy"}
    assert not (REPO / "o").exists()


# Started as a console script is (`keras-tupe-*`, argv[0]) or after `import keras_tupe_cli`: where
# keras_tupe once deferred its family. The object must be registered at `import keras_tupe`.
PROBE = """
import keras
import keras_tupe
registered = keras.saving.get_registered_object("keras_tupe>TupeBackbone")
print(registered is not None and registered.__name__ == "TupeBackbone")
"""


@pytest.mark.parametrize("started_as", ["console-script", "keras_tupe_cli"])
def test_import_keras_tupe_registers_the_family_in_a_command_process(started_as, tmp_path):
    if started_as == "console-script":
        script = tmp_path / "keras-tupe-probe"
        script.write_text(PROBE)
        argv = [sys.executable, str(script)]
    else:
        argv = [sys.executable, "-c", "import keras_tupe_cli\n" + PROBE]
    result = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert (result.returncode, result.stdout) == (0, "True\n"), result.stderr[-3000:]


ENCODER = """
import sys
import keras_tupe
keras_tupe.TupeBackbone.from_preset("tupe_r_tiny", vocabulary_size=int(sys.argv[2])
                                    ).save_to_preset(sys.argv[1])
print(sys.modules.get("tensorflow") is not None)  # tests/no_tensorflow puts None there
"""


@pytest.mark.jax
def test_one_fine_tuning_step_through_the_command_without_tensorflow(tmp_path):
    """`keras-tupe-finetune-glue` on JAX where TensorFlow does not import: one Grain step."""
    good, bad = ["a fine film", "a great good film"], ["a dull film", "a bad boring film"]
    rows = [(sentence, 1) for sentence in good] + [(sentence, 0) for sentence in bad]
    folder = tmp_path / "glue" / "SST-2"
    folder.mkdir(parents=True)
    for split, count in (("train", 8), ("dev", 4)):
        lines = [f"{rows[i % 4][0]}\t{rows[i % 4][1]}\n" for i in range(count)]
        (folder / f"{split}.tsv").write_text("sentence\tlabel\n" + "".join(lines))
    words = sorted({word for sentence, _ in rows for word in sentence.split()})
    vocabulary = ["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]", *words]
    (tmp_path / "vocab.txt").write_text("\n".join(vocabulary) + "\n")
    env = {"KERAS_BACKEND": "jax",
           "PYTHONPATH": os.pathsep.join([str(REPO / "tests" / "no_tensorflow"), str(REPO)])}
    encoder = str(tmp_path / "encoder")  # a preset folder
    built = run_python(["-c", ENCODER, encoder, str(len(vocabulary))], **env)
    assert (built.returncode, built.stdout) == (0, "False\n"), built.stderr[-3000:]
    tuned = run_python(["-m", "keras_tupe_cli.finetune_glue", "--init", encoder, "--vocab",
                        str(tmp_path / "vocab.txt"), "--tasks", "sst2", "--data-dir",
                        str(tmp_path / "glue"), "--out", str(tmp_path / "ft"), "--batch-size",
                        "8", "--epochs", "1", "--learning-rates", "1e-3", "--seeds", "0",
                        "--seq-len", "16", "--data-loader", "grain"], **env)
    assert tuned.returncode == 0, tuned.stderr[-3000:]
    assert "step 1/1:" in tuned.stdout and "data on grain" in tuned.stdout
    assert (tmp_path / "ft" / "summary.md").exists()
