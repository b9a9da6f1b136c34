"""keras_tupe.convert.torch_files: torch.save files read without PyTorch.

The zip format (PyTorch >= 1.6) is checked on the reference checkpoints, which
PyTorch itself wrote. The legacy format (PyTorch < 1.6; checkpoints released in
2019-2020 may be in it) cannot be written here without PyTorch, so a file is
built byte for byte as `torch/serialization.py::_legacy_save` writes one: three
pickles (magic number, protocol 1001, system info), the object pickled with
persistent ids `('storage', <torch.XStorage>, key, location, numel, view)` for
storages and `torch._utils._rebuild_tensor_v2` for tensors, the sorted storage
keys, then each storage as an int64 element count and its raw little-endian bytes.
"""

import collections
import os
import pickle
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from keras_tupe.convert.torch_files import (
    LEGACY_MAGIC_NUMBER,
    TorchFileError,
    UnknownObject,
    load_torch_file,
)

REPO = Path(__file__).resolve().parents[2]
DATA_DIR = Path(os.environ.get("KERAS_TUPE_DATA_DIR") or REPO.parent / "shared" / "data")
REFERENCE = DATA_DIR / "reference_checkpoints"


class _Storage:
    def __init__(self, key, array):
        self.key, self.array = key, np.ascontiguousarray(array).ravel()


class _StorageView:
    """`numel` elements of `base` from `offset`, pickled as PyTorch < 1.6 pickled a storage
    view: the base's persistent id with `(view_key, offset, numel)`."""

    def __init__(self, base, key, offset, numel):
        self.base, self.key, self.offset, self.numel = base, key, offset, numel


class _Tensor:
    """Pickles as PyTorch pickles a tensor: `_rebuild_tensor_v2(storage, offset, size, stride, ...)`."""

    def __init__(self, storage, offset, shape, stride):
        self.storage, self.offset, self.shape, self.stride = storage, offset, shape, stride

    def __reduce_ex__(self, protocol):
        torch_utils = sys.modules["torch._utils"]
        return (torch_utils._rebuild_tensor_v2,
                (self.storage, self.offset, self.shape, self.stride, False,
                 collections.OrderedDict()))


@pytest.fixture
def fake_torch(monkeypatch):
    """Modules `torch`, `torch._utils` and `fairseq.meters` for pickling only."""
    torch = types.ModuleType("torch")
    for name in ("FloatStorage", "HalfStorage", "LongStorage"):
        setattr(torch, name, type(name, (), {"__module__": "torch", "__qualname__": name}))
    torch_utils = types.ModuleType("torch._utils")

    def _rebuild_tensor_v2(*args):  # never called here: only pickled by name
        raise AssertionError

    _rebuild_tensor_v2.__module__ = "torch._utils"
    _rebuild_tensor_v2.__qualname__ = "_rebuild_tensor_v2"
    torch_utils._rebuild_tensor_v2 = _rebuild_tensor_v2
    meters = types.ModuleType("fairseq.meters")
    meters.AverageMeter = type(
        "AverageMeter", (), {"__module__": "fairseq.meters", "__qualname__": "AverageMeter"})
    for name, module in (("torch", torch), ("torch._utils", torch_utils),
                         ("fairseq", types.ModuleType("fairseq")), ("fairseq.meters", meters)):
        monkeypatch.setitem(sys.modules, name, module)
    return torch, meters


def legacy_save(obj, path, storages, torch):
    types_by_dtype = {np.dtype("float32"): torch.FloatStorage,
                      np.dtype("float16"): torch.HalfStorage, np.dtype("int64"): torch.LongStorage}

    class Pickler(pickle.Pickler):
        def persistent_id(self, value):
            view = None
            if isinstance(value, _StorageView):
                view, value = (value.key, value.offset, value.numel), value.base
            if isinstance(value, _Storage):
                return ("storage", types_by_dtype[value.array.dtype], value.key, "cpu",
                        value.array.size, view)
            return None

    with open(path, "wb") as f:
        for header in (LEGACY_MAGIC_NUMBER, 1001,
                       {"protocol_version": 1001, "little_endian": True,
                        "type_sizes": {"short": 2, "int": 4, "long": 4}}):
            pickle.dump(header, f, protocol=2)
        Pickler(f, protocol=2).dump(obj)
        keys = sorted(storages)
        pickle.dump(keys, f, protocol=2)
        for key in keys:
            array = storages[key].array
            f.write(np.int64(array.size).astype("<i8").tobytes())
            f.write(array.astype(array.dtype.newbyteorder("<")).tobytes())


def test_legacy_storage_views_read_their_part_of_the_base_storage(fake_torch, tmp_path):
    torch, _ = fake_torch
    base = _Storage("0", np.arange(12, dtype="float32"))
    view = _StorageView(base, "0_view", offset=5, numel=6)
    path = tmp_path / "views.pt"
    legacy_save({"row": _Tensor(view, 1, (2, 2), (2, 1)), "whole": _Tensor(base, 0, (12,), (1,))},
                path, {"0": base}, torch)
    loaded = load_torch_file(path)
    np.testing.assert_array_equal(loaded["row"], [[6, 7], [8, 9]])
    np.testing.assert_array_equal(loaded["whole"], base.array)


def test_legacy_format_tensors_views_and_unknown_objects(fake_torch, tmp_path):
    torch, meters = fake_torch
    rng = np.random.default_rng(0)
    weight = rng.normal(size=(6, 4)).astype("float32")
    half = rng.normal(size=(5,)).astype("float16")
    counts = np.arange(7, dtype="int64")
    storages = {"0": _Storage("0", weight), "1": _Storage("1", half), "2": _Storage("2", counts)}
    meter = meters.AverageMeter()
    meter.avg, meter.count = 1.5, 3
    obj = {
        "args": types.SimpleNamespace(),  # replaced below: Namespace must pickle as argparse's
        "model": collections.OrderedDict([
            ("weight", _Tensor(storages["0"], 0, (6, 4), (4, 1))),
            # Tied weights share a storage; a transposed view has other strides.
            ("tied", _Tensor(storages["0"], 0, (6, 4), (4, 1))),
            ("transposed", _Tensor(storages["0"], 0, (4, 6), (1, 4))),
            ("row_2", _Tensor(storages["0"], 8, (4,), (1,))),
            ("half", _Tensor(storages["1"], 0, (5,), (1,))),
            ("scalar", _Tensor(storages["2"], 3, (), ())),
        ]),
        "meters": {"train_loss": meter},
    }
    import argparse

    obj["args"] = argparse.Namespace(rel_pos=True, encoder_layers=2)
    path = tmp_path / "checkpoint_legacy.pt"
    legacy_save(obj, path, storages, torch)

    loaded = load_torch_file(path)
    model = loaded["model"]
    np.testing.assert_array_equal(model["weight"], weight)
    np.testing.assert_array_equal(model["tied"], weight)
    np.testing.assert_array_equal(model["transposed"], weight.T)
    np.testing.assert_array_equal(model["row_2"], weight[2])
    assert model["half"].dtype == np.float16
    np.testing.assert_array_equal(model["half"], half)
    assert model["scalar"] == 3 and model["scalar"].dtype == np.int64
    assert loaded["args"].rel_pos is True and loaded["args"].encoder_layers == 2
    stub = loaded["meters"]["train_loss"]
    assert isinstance(stub, UnknownObject)
    assert (stub.module, stub.name) == ("fairseq.meters", "AverageMeter")
    assert stub.state == {"avg": 1.5, "count": 3}


def test_legacy_format_truncated_file_is_refused(fake_torch, tmp_path):
    torch, _ = fake_torch
    storage = _Storage("0", np.ones(10, "float32"))
    path = tmp_path / "cut.pt"
    legacy_save({"w": _Tensor(storage, 0, (10,), (1,))}, path, {"0": storage}, torch)
    path.write_bytes(path.read_bytes()[:-8])
    with pytest.raises(TorchFileError, match="truncated"):
        load_torch_file(path)


@pytest.mark.parametrize("content", [b"", b"not a checkpoint at all", b"PK\x03\x04broken"])
def test_other_files_are_refused_clearly(tmp_path, content):
    path = tmp_path / "model.pt"
    path.write_bytes(content)
    with pytest.raises(TorchFileError, match="model.pt"):
        load_torch_file(path)


def test_missing_file_is_refused(tmp_path):
    with pytest.raises(TorchFileError, match="no such file"):
        load_torch_file(tmp_path / "absent.pt")


@pytest.mark.skipif(not REFERENCE.is_dir(), reason=f"no reference checkpoints at {REFERENCE}")
def test_zip_format_written_by_pytorch_equals_safetensors():
    from safetensors.numpy import load_file

    folder = REFERENCE / "hf" / "relative_key_query" / "bert_for_masked_lm"
    from_bin = load_torch_file(folder / "pytorch_model.bin")
    from_safetensors = load_file(folder / "model.safetensors")
    # The .bin also holds the tied decoder copies (README section 6).
    assert set(from_bin) - set(from_safetensors) == {
        "cls.predictions.decoder.weight", "cls.predictions.decoder.bias"}
    for name, value in from_safetensors.items():
        assert from_bin[name].dtype == value.dtype
        np.testing.assert_array_equal(from_bin[name], value, err_msg=name)
