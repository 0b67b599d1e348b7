"""Read a ``torch.save``d state dict, or the tensors of a TorchScript archive, into NumPy arrays,
without torch and without trusting pickle.

``torch.save`` has written two formats:

* the zip archive (torch >= 1.6): ``<name>/data.pkl`` holds the pickled dict, and each tensor
  storage is the raw little-endian record ``<name>/data/<key>``;
* the older pickle stream (torch 0.4 .. 1.5): four pickles in a row (a magic number, the
  protocol version 1001, a dict of system facts, then the dict itself), a pickled list of storage
  keys, and then, per key, the storage's element count as an int64 and its raw bytes.

In both, a tensor is pickled as ``torch._utils._rebuild_tensor_v2(storage, offset, size, stride,
...)`` and a storage as a persistent id naming its type (``torch.FloatStorage`` ...). The
unpickler here admits exactly those names and ``collections.OrderedDict``, and gives them
stand-ins of its own: torch is never imported, and any other global (``os.system``, a class of
some package ...) raises before anything is called. Tensors become NumPy arrays of their dtype,
copied out of the storage with their offset and strides, bounds checked.

A TorchScript archive (``torch.jit.save``) is the zip format too: its ``<name>/data.pkl`` pickles
the module tree, each module as ``__torch__.<path>.<Class>`` built with no arguments and then
given its attributes (``training``, sub-modules, tensors, ints ...) by pickle's BUILD; lists of
ints or floats come through ``torch.jit._pickle.build_intlist`` and its siblings. With
``modules=True`` these names are admitted too, as inert stand-ins: a ``__torch__`` class becomes
a plain record of its qualified name and attributes (its code, under ``code/``, is never read,
let alone run), and a ``build_*list`` returns the list it is given. The module tree's tensors come
back named as ``module.state_dict()`` names them (``layers.conv.weight``).
"""
import collections
import io
import os
import pickle
import struct
import tarfile
import zipfile

import numpy

from gpgan.files import RefusedPickle, RestrictedUnpickler

__all__ = ["load_torch_state_dict", "ModuleTensors", "NotTorchFile", "STORAGE_DTYPES"]

# TorchScript's list builders (torch/jit/_pickle.py): each takes the list itself.
_JIT_LIST_BUILDERS = ("build_intlist", "build_doublelist", "build_boollist", "build_tensorlist")

# The legacy stream's first two pickles: torch's serialization.MAGIC_NUMBER and PROTOCOL_VERSION.
_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
_LEGACY_PROTOCOL = 1001

# Storage type name -> dtype of its elements (little-endian, as written). bfloat16 has no NumPy
# dtype: its 16-bit patterns are the top halves of float32s.
STORAGE_DTYPES = {
    "FloatStorage": "<f4", "DoubleStorage": "<f8", "HalfStorage": "<f2", "BFloat16Storage": "<u2",
    "LongStorage": "<i8", "IntStorage": "<i4", "ShortStorage": "<i2", "CharStorage": "|i1",
    "ByteStorage": "|u1", "BoolStorage": "|b1",
}


class NotTorchFile(ValueError):
    """A file in neither of ``torch.save``'s formats (nor a TorchScript archive): another kind of
    zip archive (an ``.npz``, say), or a file that is no pickle stream at all. ``path``: the file;
    ``detail``: what it is instead, in words. The message is ``"<path>: not a torch weights file
    (<detail>)"``."""

    def __init__(self, detail, path=None):
        self.path, self.detail = path, detail
        super().__init__(f"{path}: not a torch weights file ({detail})" if path is not None else
                         f"not a torch weights file ({detail})")


class _StorageType:
    """Stand-in for ``torch.<Name>Storage``: only its element type is used."""

    def __init__(self, name):
        self.name = name
        self.dtype = numpy.dtype(STORAGE_DTYPES[name])


class _Storage:
    """One storage: its element type, element count, and (once read) its bytes."""

    def __init__(self, storage_type, numel):
        self.type, self.numel, self.data = storage_type, int(numel), None

    def elements(self, big_endian):
        dtype = self.type.dtype.newbyteorder(">") if big_endian else self.type.dtype
        return numpy.frombuffer(self.data, dtype=dtype, count=self.numel)


class _StorageView:
    """A legacy view: ``numel`` elements of ``root`` from element ``offset`` on."""

    def __init__(self, root, offset, numel):
        self.root, self.offset, self.numel = root, int(offset), int(numel)
        self.type = root.type


class _PendingTensor:
    """A tensor whose storage bytes may come after the pickle (legacy format)."""

    def __init__(self, storage, offset, size, stride):
        self.storage, self.offset, self.size, self.stride = storage, offset, tuple(size), tuple(stride)


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad=False, backward_hooks=None,
                       metadata=None):
    if not isinstance(storage, (_Storage, _StorageView)):
        raise pickle.UnpicklingError(f"_rebuild_tensor_v2 got {type(storage).__name__} instead of a storage")
    return _PendingTensor(storage, int(storage_offset), size, stride)


class _ScriptModule:
    """Stand-in for a TorchScript module class ``__torch__.<path>.<Class>``: pickle creates it with
    no arguments and BUILD hands it the attribute dict, which is all it keeps."""

    type_name = "__torch__"

    def __init__(self):
        self.attributes = {}

    def __setstate__(self, state):
        if not isinstance(state, dict) or not all(isinstance(k, str) for k in state):
            raise pickle.UnpicklingError(f"the state of TorchScript module {self.type_name} is not a dict of "
                                         "attribute names")
        self.attributes = state


def _script_class(qualified):
    """A fresh :class:`_ScriptModule` subclass that records the TorchScript class name."""
    return type("ScriptModule", (_ScriptModule,), {"type_name": qualified})


def _jit_list(values):
    if not isinstance(values, list):
        raise pickle.UnpicklingError(f"a TorchScript list builder got {type(values).__name__}, not a list")
    return values


class _TorchUnpickler(RestrictedUnpickler):
    """Admits ``collections.OrderedDict``, ``torch._utils._rebuild_tensor_v2`` and the
    ``torch.<Type>Storage`` names of :data:`STORAGE_DTYPES`, and with ``modules`` TorchScript's
    ``__torch__.*`` classes and ``torch.jit._pickle`` list builders, as stand-ins; refuses the rest
    with :class:`RefusedPickle` naming the global. Persistent ids go to ``storage_for(pid)``."""

    def __init__(self, file, storage_for, modules=False):
        super().__init__(file)
        self._storage_for = storage_for
        self._modules = modules
        self._classes = {}
        self.what = ("a torch state dict may only name tensor storages, torch._utils._rebuild_tensor_v2 and "
                     "collections.OrderedDict" + (", and a TorchScript archive also __torch__ module classes and "
                                                  "torch.jit._pickle list builders" if modules else ""))

    def allowed(self, module, name):
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _rebuild_tensor_v2
        if module == "torch" and name in STORAGE_DTYPES:
            return _StorageType(name)
        if self._modules:
            if module == "torch.jit._pickle" and name in _JIT_LIST_BUILDERS:
                return _jit_list
            if (module == "__torch__" or module.startswith("__torch__.")) and name.isidentifier():
                return self._classes.setdefault(f"{module}.{name}", _script_class(f"{module}.{name}"))
        return None

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and pid and pid[0] in ("storage", b"storage")):
            raise pickle.UnpicklingError(f"unexpected persistent id {pid!r:.80}")
        if not isinstance(pid[1], _StorageType):
            raise pickle.UnpicklingError(f"persistent id names {pid[1]!r:.80}, not a storage type")
        return self._storage_for(pid)


def _plain_load(f):
    """A header pickle (number, dict, list of keys): needs no global at all."""
    return _TorchUnpickler(f, _no_storage).load()


def _no_storage(pid):
    raise pickle.UnpicklingError("a storage inside a header record")


# -- the two formats -------------------------------------------------------------------------------
def _read_zip(path, modules=False):
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        pickles = [n for n in names if n.endswith("/data.pkl") and n.count("/") == 1]
        if len(pickles) != 1:
            raise NotTorchFile(f"a zip archive of {len(names)} records, none of them the <name>/data.pkl torch writes"
                               if not pickles else
                               f"a zip archive with {len(pickles)} <name>/data.pkl records, where torch writes one")
        prefix = pickles[0][:-len("data.pkl")]
        big_endian = False
        if prefix + "byteorder" in names:
            order = archive.read(prefix + "byteorder").decode("ascii", "replace").strip()
            if order not in ("little", "big"):
                raise ValueError(f"unknown byteorder record {order!r}")
            big_endian = order == "big"
        storages = {}

        def storage_for(pid):
            _, storage_type, key, _location, numel = pid
            key = str(key)
            if key not in storages:
                storage = _Storage(storage_type, numel)
                record = f"{prefix}data/{key}"
                if record not in names:
                    raise ValueError(f"storage record {record} is missing")
                storage.data = archive.read(record)
                if len(storage.data) < storage.numel * storage.type.dtype.itemsize:
                    raise ValueError(f"storage record {record} holds {len(storage.data)} bytes, fewer than "
                                     f"its {storage.numel} {storage_type.name} elements need")
                storages[key] = storage
            return storages[key]

        result = _TorchUnpickler(io.BytesIO(archive.read(pickles[0])), storage_for, modules).load()
    return result, big_endian


def _read_legacy(f):
    neither = "neither a zip archive nor torch's older pickle stream"
    try:
        magic = _plain_load(f)
    except RefusedPickle:
        raise
    except (pickle.UnpicklingError, EOFError, struct.error, KeyError, IndexError, TypeError, AttributeError,
            UnicodeDecodeError, ValueError):  # no pickle at all (text, an image ...), or an empty file
        f.seek(0)
        if f.read(4) == b"PK\x03\x04":  # a zip archive's first record, without the directory at its end
            raise ValueError("truncated or corrupt torch file (a zip archive without its central directory: "
                             "cut short?)") from None
        raise NotTorchFile("an empty file" if os.fstat(f.fileno()).st_size == 0 else neither) from None
    if magic != _LEGACY_MAGIC:
        raise NotTorchFile(f"{neither}: a pickle without torch's magic number")
    protocol = _plain_load(f)
    if protocol != _LEGACY_PROTOCOL:
        raise ValueError(f"legacy torch file of protocol version {protocol!r}; only {_LEGACY_PROTOCOL} is known")
    info = _plain_load(f)
    big_endian = isinstance(info, dict) and info.get("little_endian") is False
    roots, views = {}, {}

    def storage_for(pid):
        _, storage_type, root_key, _location, numel, view = pid
        root = roots.setdefault(str(root_key), _Storage(storage_type, numel))
        if view is None:
            return root
        view_key, offset, view_numel = view
        return views.setdefault(str(view_key), _StorageView(root, offset, view_numel))

    result = _TorchUnpickler(f, storage_for).load()
    keys = _plain_load(f)
    remaining = os.fstat(f.fileno()).st_size - f.tell()
    if not isinstance(keys, list):
        raise ValueError("the storage key list after the pickle is missing")
    for key in keys:
        storage = roots.get(str(key))
        if storage is None:
            raise ValueError(f"storage {key!r} listed but never used")
        head = f.read(8)
        if len(head) < 8:
            raise ValueError(f"the file ends before storage {key!r}")
        numel, = struct.unpack(">q" if big_endian else "<q", head)
        if numel != storage.numel:
            raise ValueError(f"storage {key!r} records {numel} elements, its tensors expect {storage.numel}")
        nbytes = numel * storage.type.dtype.itemsize
        remaining -= 8 + nbytes
        if remaining < 0:  # checked before reading: a forged count must not allocate gigabytes
            raise ValueError(f"the file ends inside storage {key!r}")
        storage.data = f.read(nbytes)
    return result, big_endian


# -- tensors to arrays -----------------------------------------------------------------------------
def _to_array(tensor, big_endian):
    storage, offset = tensor.storage, tensor.offset
    if isinstance(storage, _StorageView):
        if storage.offset + storage.numel > storage.root.numel:
            raise ValueError("a storage view reaches past its storage")
        offset += storage.offset
        limit = storage.offset + storage.numel
        storage = storage.root
    else:
        limit = storage.numel
    if storage.data is None:
        raise ValueError("a tensor's storage bytes are missing from the file")
    size, stride = tensor.size, tensor.stride
    if len(size) != len(stride) or any(int(n) < 0 for n in size) or any(int(s) < 0 for s in stride):
        raise ValueError(f"a tensor has an invalid size {size} / stride {stride}")
    elements = storage.elements(big_endian)
    if 0 not in size:
        last = offset + sum((int(n) - 1) * int(s) for n, s in zip(size, stride))
        if offset < 0 or last >= limit:
            raise ValueError(f"a tensor of size {size}, stride {stride} and offset {offset} reaches past "
                             f"its storage of {limit} elements")
    itemsize = elements.dtype.itemsize
    view = numpy.lib.stride_tricks.as_strided(elements[offset:] if 0 not in size else elements[:0],
                                              shape=tuple(int(n) for n in size),
                                              strides=tuple(int(s) * itemsize for s in stride),
                                              writeable=False)
    array = numpy.array(view, dtype=view.dtype.newbyteorder("="), order="C")
    if storage.type.name == "BFloat16Storage":
        array = (array.astype(numpy.uint32) << 16).view(numpy.float32)
    return array


class ModuleTensors(dict):
    """The tensors of a TorchScript archive's module tree (name -> array); ``type_name`` is the
    root module's TorchScript class (``__torch__.wrap_net.WrapNet``)."""

    def __init__(self, items, type_name):
        super().__init__(items)
        self.type_name = type_name


def _module_tensors(module, prefix, out, depth=0):
    """``out[prefix + name] = tensor`` for every tensor attribute of a TorchScript module tree,
    sub-modules depth first in attribute order (``state_dict()``'s names and order)."""
    if depth > 64:
        raise ValueError("the TorchScript module tree is deeper than 64 levels (or cyclic)")
    for name, value in module.attributes.items():
        if isinstance(value, _PendingTensor):
            out[prefix + name] = value
        elif isinstance(value, _ScriptModule):
            _module_tensors(value, f"{prefix}{name}.", out, depth + 1)
    return out


def load_torch_state_dict(path, modules=False):
    """Read a ``torch.save``d state dict (zip archive or legacy pickle stream), or with ``modules``
    also the tensors of a TorchScript archive.

    Args:
        path: the file.
        modules: also accept a TorchScript archive (``torch.jit.save``): its module tree's
            tensors are returned, named as ``module.state_dict()`` names them; nothing of its
            code is read or run (module docstring).

    Returns:
        A dict ``name -> numpy.ndarray`` in the file's order (a :class:`ModuleTensors` for a
        TorchScript archive); each array is a C-contiguous copy of the tensor (float32, float64,
        float16, int64 ... as saved; bfloat16 becomes float32).

    Raises:
        ValueError: naming ``path`` and what is wrong: a refused global (anything but tensors and
            OrderedDict, and TorchScript's module classes with ``modules``; nothing is executed),
            not a torch file (a :class:`NotTorchFile`), truncated or inconsistent data, or a pickle
            that is not a mapping of names to tensors (or a TorchScript module, with ``modules``).
    """
    try:
        if zipfile.is_zipfile(path):
            result, big_endian = _read_zip(path, modules)
        else:
            if tarfile.is_tarfile(path):
                raise ValueError("this is torch's tar format (torch < 0.4), which is not supported; "
                                 "re-save it with a newer torch")
            with open(path, "rb") as f:
                result, big_endian = _read_legacy(f)
    except NotTorchFile as exc:
        raise NotTorchFile(exc.detail, path) from None
    except RefusedPickle as exc:
        raise ValueError(f"{path}: refused to unpickle ({exc}); nothing in it was run") from None
    except (pickle.UnpicklingError, EOFError, zipfile.BadZipFile, struct.error, KeyError, IndexError,
            TypeError, AttributeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: truncated or corrupt torch file{f' ({exc})' if str(exc) else ''}") from None
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    type_name = None
    if isinstance(result, _ScriptModule):
        type_name = result.type_name
        try:
            result = _module_tensors(result, "", {})
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None
    elif not isinstance(result, dict):
        raise ValueError(f"{path}: holds a {type(result).__name__}, not a state dict (a mapping of names "
                         "to tensors)" + (" or a TorchScript module" if modules else ""))
    arrays = {}
    for name, tensor in result.items():
        if not isinstance(tensor, _PendingTensor):
            raise ValueError(f"{path}: entry {name!r} is a {type(tensor).__name__}, not a tensor")
        try:
            arrays[str(name)] = _to_array(tensor, big_endian)
        except ValueError as exc:
            raise ValueError(f"{path}: entry {name!r}: {exc}") from None
    return arrays if type_name is None else ModuleTensors(arrays, type_name)
