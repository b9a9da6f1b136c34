"""Reads PyTorch checkpoint files (`torch.save`) into NumPy, without PyTorch.

Hugging Face's `pytorch_model.bin` and fairseq's `checkpoint*.pt` (which also pickles
`fairseq.meters` objects) are `torch.save` pickles, in either container PyTorch writes: the
zip format (PyTorch >= 1.6: `<name>/data.pkl` and one file a storage, `<name>/data/<key>`)
or the legacy one (four pickles in a row: magic number, protocol, system info, the object;
the list of storage keys; each storage as an int64 element count and its raw bytes).

Tensors become `numpy.ndarray` (float16 stays float16). Only a short list of known
callables is ever called (tensor rebuilding, `OrderedDict`, `argparse.Namespace`, NumPy
scalars); any other class becomes an inert `UnknownObject` keeping its pickled state, so
nothing in the file can run code, unlike `torch.load(weights_only=False)`.
"""

import argparse
import collections
import io
import os
import pickle
import zipfile

import numpy as np

LEGACY_MAGIC_NUMBER = 0x1950A86A20F9469CFC6C
# NumPy 2 moved `numpy.core` to `numpy._core`; pickles name either.
_NUMPY_SCALAR = getattr(np, "_core", np.core).multiarray.scalar

_STORAGE_DTYPES = {
    "DoubleStorage": np.float64,
    "FloatStorage": np.float32,
    "HalfStorage": np.float16,
    "LongStorage": np.int64,
    "IntStorage": np.int32,
    "ShortStorage": np.int16,
    "CharStorage": np.int8,
    "ByteStorage": np.uint8,
    "BoolStorage": np.bool_,
    "UntypedStorage": np.uint8,
}


class TorchFileError(ValueError):
    """A file that is not a readable `torch.save` checkpoint."""


class UnknownObject:
    """Stands for an object of a class this reader does not import.

    `module` and `name` say which class (e.g. `fairseq.meters`, `AverageMeter`);
    `args` and `state` hold what the pickle gave it.
    """

    module = name = None

    def __init__(self, *args, **kwargs):
        self.args = args
        self.kwargs = kwargs
        self.state = None

    def __setstate__(self, state):
        self.state = state

    def __repr__(self):
        return f"<unknown {self.module}.{self.name}>"


def _unknown_class(module, name):
    return type(name, (UnknownObject,), {"module": module, "name": name})


class _Storage:
    """A storage named in the pickle; its bytes are read after unpickling (legacy)."""

    def __init__(self, dtype, key, numel):
        self.dtype = np.dtype(dtype)
        self.key = key
        self.numel = numel
        self.array = None


class _Tensor:
    """A tensor whose storage may not be read yet: `as_array()` once it is."""

    def __init__(self, storage, offset, size, stride):
        self.storage, self.offset, self.size, self.stride = storage, offset, size, stride

    def as_array(self):
        data = self.storage.array
        if data is None:
            raise TorchFileError(f"storage {self.storage.key!r} was never read")
        if not self.size:
            return data[self.offset].copy()
        itemsize = data.dtype.itemsize
        view = np.lib.stride_tricks.as_strided(
            data[self.offset :],
            shape=tuple(self.size),
            strides=tuple(s * itemsize for s in self.stride),
            writeable=False,
        )
        return np.array(view)


def _storage_dtype(storage_type):
    if isinstance(storage_type, type) and issubclass(storage_type, UnknownObject):
        name = storage_type.name
    else:
        name = str(storage_type)
    if name not in _STORAGE_DTYPES:
        raise TorchFileError(f"unsupported tensor storage type {name!r}")
    return _STORAGE_DTYPES[name]


def _rebuild_tensor(storage, storage_offset, size, stride, *_):
    return _Tensor(storage, storage_offset, size, stride)


def _rebuild_parameter(data, *_):
    return data


# The only callables a pickle may reach; anything else becomes an UnknownObject.
_SAFE_GLOBALS = {
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("argparse", "Namespace"): argparse.Namespace,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("builtins", "slice"): slice,
    ("numpy", "dtype"): np.dtype,
    ("numpy.core.multiarray", "scalar"): _NUMPY_SCALAR,
    ("numpy._core.multiarray", "scalar"): _NUMPY_SCALAR,
}


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, storages, read_storage):
        super().__init__(file, encoding="latin1")
        self.storages = storages
        self.read_storage = read_storage

    def find_class(self, module, name):
        if (module, name) in _SAFE_GLOBALS:
            return _SAFE_GLOBALS[(module, name)]
        if module == "torch" and name in _STORAGE_DTYPES:
            return name  # a storage type, only ever used in persistent ids
        return _unknown_class(module, name)

    def persistent_load(self, saved_id):
        kind = saved_id[0].decode() if isinstance(saved_id[0], bytes) else saved_id[0]
        if kind == "module":  # legacy: a pickled nn.Module class
            return saved_id[1]
        if kind != "storage":
            raise TorchFileError(f"unknown persistent id {kind!r}")
        storage_type, key, _location, numel = saved_id[1:5]
        view = saved_id[5] if len(saved_id) > 5 else None
        key = str(key)
        if key not in self.storages:
            self.storages[key] = _Storage(_storage_dtype(storage_type), key, numel)
            self.read_storage(self.storages[key])
        storage = self.storages[key]
        if view is not None:  # legacy storage views: (view_key, offset, size)
            _, offset, size = view
            return _View(storage, offset, size)
        return storage


class _View:
    """`numel` elements of a storage from `offset` (legacy files); read as its base is."""

    def __init__(self, base, offset, numel):
        self.base, self.offset, self.numel, self.key = base, offset, numel, base.key

    @property
    def array(self):
        data = self.base.array
        return None if data is None else data[self.offset : self.offset + self.numel]


def _materialize(obj, seen=None):
    """Replaces every `_Tensor` in `obj` (dicts, lists, objects' state) by its array."""
    seen = set() if seen is None else seen
    if isinstance(obj, _Tensor):
        return obj.as_array()
    if id(obj) in seen:
        return obj
    if isinstance(obj, dict):
        seen.add(id(obj))
        for key in list(obj):
            obj[key] = _materialize(obj[key], seen)
        return obj
    if isinstance(obj, list):
        seen.add(id(obj))
        obj[:] = [_materialize(item, seen) for item in obj]
        return obj
    if isinstance(obj, tuple):
        return tuple(_materialize(item, seen) for item in obj)
    if isinstance(obj, (argparse.Namespace, UnknownObject)):
        seen.add(id(obj))
        _materialize(vars(obj), seen)
    return obj


def _load_zip(path):
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        pickles = [name for name in names if name.endswith("data.pkl")]
        if len(pickles) != 1:
            raise TorchFileError(f"{path}: a zip file without one `data.pkl` (not torch.save)")
        prefix = pickles[0][: -len("data.pkl")]
        byteorder = "little"
        if prefix + "byteorder" in names:
            byteorder = archive.read(prefix + "byteorder").decode().strip()

        def read_storage(storage):
            raw = archive.read(f"{prefix}data/{storage.key}")
            dtype = storage.dtype.newbyteorder("<" if byteorder == "little" else ">")
            storage.array = np.frombuffer(raw, dtype=dtype).astype(storage.dtype)

        with archive.open(pickles[0]) as f:
            obj = _Unpickler(io.BytesIO(f.read()), {}, read_storage).load()
    return _materialize(obj)


def _load_legacy(path):
    with open(path, "rb") as f:
        try:
            magic = pickle.load(f)
        except Exception as error:
            raise TorchFileError(f"{path}: not a torch.save file ({error})") from None
        if magic != LEGACY_MAGIC_NUMBER:
            raise TorchFileError(f"{path}: not a torch.save file (no PyTorch magic number)")
        pickle.load(f)  # protocol version
        pickle.load(f)  # system info (little-endian, type sizes)
        storages = {}
        obj = _Unpickler(f, storages, lambda storage: None).load()
        keys = pickle.load(f)
        for key in keys:
            storage = storages[str(key)]
            (numel,) = np.frombuffer(f.read(8), "<i8")
            raw = f.read(int(numel) * storage.dtype.itemsize)
            if len(raw) != int(numel) * storage.dtype.itemsize:
                raise TorchFileError(f"{path}: truncated (storage {key})")
            storage.array = np.frombuffer(raw, storage.dtype.newbyteorder("<")).astype(
                storage.dtype
            )
    return _materialize(obj)


def load_torch_file(path):
    """The object a `torch.save` file holds, with tensors as NumPy arrays.

    Args:
        path: a `pytorch_model.bin`, a fairseq `checkpoint*.pt`, or any file
            written by `torch.save` (zip or legacy format).

    Returns:
        The unpickled object: dicts (`OrderedDict` for state dicts) of
        `numpy.ndarray`, `argparse.Namespace`, and `UnknownObject` for classes
        of other packages.

    Raises:
        TorchFileError: the file is not a `torch.save` checkpoint.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise TorchFileError(f"{path}: no such file")
    if zipfile.is_zipfile(path):
        return _load_zip(path)
    return _load_legacy(path)
