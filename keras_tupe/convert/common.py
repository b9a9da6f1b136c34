"""What every converter shares: its error, reading inputs, mapping tensors, writing the preset."""

import os

import numpy as np

from keras_tupe.models.preset_folders import refuse_existing_folder, write_preset_folder
from keras_tupe_base.files import file_sha256


class ConversionError(ValueError):
    """A checkpoint that cannot be converted; the message names the file and the fix."""


def require_file(folder, names, what):
    """The path of the first of `names` in `folder`, or a clear `ConversionError`."""
    for name in names:
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            return path
    raise ConversionError(
        f"{folder}: no {what} (expected {' or '.join(names)})."
    )


def refuse_existing_output(out):
    """The one writer's rule (`preset_folders.refuse_existing_folder`) as a `ConversionError`:
    `out` must not exist, or be an empty folder; checked before a checkpoint is read."""
    refuse_existing_folder(out, ConversionError)


sha256 = file_sha256  # the name this module has always offered


def file_records(files):
    """`{role: {"path", "sha256"}}` of the files a conversion read, for its metadata."""
    return {
        role: {"path": os.path.abspath(path), "sha256": file_sha256(path)}
        for role, path in files.items()
    }


class StateDict:
    """A checkpoint's tensors, taken one by one so that leftovers can be refused.

    `missing` and `leftover` end the messages for a tensor the model needs but the file
    lacks, and for tensors nothing took.
    """

    def __init__(self, tensors, path, missing, leftover):
        self.tensors, self.path = dict(tensors), path
        self.missing, self.leftover = missing, leftover

    def pop(self, name):
        if name not in self.tensors:
            raise ConversionError(f"{self.path}: no tensor {name!r}; {self.missing}")
        return np.asarray(self.tensors.pop(name))

    def pop_tied(self, name, tied_to, problem, required=True):
        """Takes `name`, a decoder weight that must equal `tied_to` (keras-hub's masked-LM
        head reuses the word embeddings); `problem` ends the refusal. Without `required`,
        a file that lacks `name` is fine."""
        if (required or name in self.tensors) and not np.array_equal(self.pop(name), tied_to):
            raise ConversionError(f"{self.path}: {problem}")

    def discard(self, name):
        self.tensors.pop(name, None)

    def dense(self, ours, theirs):
        # torch.nn.Linear stores (out, in); Keras kernels are (in, out).
        return {f"{ours}/kernel": self.pop(f"{theirs}.weight").T,
                f"{ours}/bias": self.pop(f"{theirs}.bias")}

    def layer_norm(self, ours, theirs):
        return {f"{ours}/gamma": self.pop(f"{theirs}.weight"),
                f"{ours}/beta": self.pop(f"{theirs}.bias")}

    def check_all_used(self):
        if self.tensors:
            raise ConversionError(f"{self.path}: {self.leftover}: {sorted(self.tensors)}")


def heads_dense(ours, weight, bias, num_heads):
    """A torch `(out, in)` projection as an `EinsumDense` "btd,dnh" one: kernel (d, h, d_h),
    bias (h, d_h); the heads are contiguous blocks of d_h output rows."""
    return {f"{ours}/kernel": weight.T.reshape(weight.shape[1], num_heads, -1),
            f"{ours}/bias": bias.reshape(num_heads, -1)}


def attention_values(ours, query, key, value, output, num_heads):
    """A self-attention's weights from torch's `(weight, bias)` pairs of its q, k, v and
    output projections."""
    values = {}
    for name, (weight, bias) in zip(("query", "key", "value"), (query, key, value)):
        values.update(heads_dense(f"{ours}/{name}", weight, bias, num_heads))
    weight, bias = output
    values[f"{ours}/attention_output/kernel"] = weight.T.reshape(num_heads, -1, len(weight))
    values[f"{ours}/attention_output/bias"] = bias  # kernel (h, d_h, d) above
    return values


def assign_weights(values, target, what):
    """Assigns `values` ({weight path: array}) to every weight of `target`.

    Every weight of `target` must have a value and every value a weight, with
    equal shapes (a converter that drops or invents a tensor is wrong).
    """
    values = dict(values)
    missing = []
    for weight in target.weights:
        if "seed_generator" in weight.path:
            continue
        if weight.path not in values:
            missing.append(weight.path)
            continue
        value = np.asarray(values.pop(weight.path))
        if tuple(value.shape) != tuple(weight.shape):
            raise ConversionError(
                f"{what}: {weight.path} has shape {tuple(value.shape)} in the checkpoint "
                f"but {tuple(weight.shape)} in the model."
            )
        weight.assign(value.astype(weight.dtype))
    if missing or values:
        raise ConversionError(
            f"{what}: weights not mapped. Model weights without a checkpoint tensor: "
            f"{missing}; checkpoint tensors without a model weight: {sorted(values)}"
        )


def write_preset(out, model, conversion, preprocessor=None):
    """Writes `model` (a backbone or a task; `preprocessor` beside a backbone) to the
    preset folder `out` with `write_preset_folder`, the one preset writer (staged and
    renamed; a folder that holds files is refused). `conversion` (source, kind, files
    with their sha256, ...) goes into `metadata.json` under `keras_tupe_conversion`.
    """
    refuse_existing_output(out)
    return write_preset_folder(model, out, "keras_tupe_conversion", conversion,
                               preprocessor=preprocessor)
