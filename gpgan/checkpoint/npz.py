"""One ``.npz`` file per checkpoint: model, optimizer and EMA state, random-number states, meta.

Layout of the file (read back with ``numpy.load(path, allow_pickle=False)``):

- ``module/<name>/<key>``, ``optimizer/<name>/<key>``, ``ema/<name>/<key>``: every array of each
  object's ``state_dict()`` (CuPy arrays are copied to the host first);
- ``__meta__``: a uint8 array holding UTF-8 JSON with the format tag, the user's ``meta``, the
  non-array entries of each state dict (numbers, strings, booleans; Python's JSON keeps ints of
  any size and floats exactly), the list of array keys of each object, and the random-number
  generators' ``bit_generator.state`` (ints beyond 2**53, such as PCG64's 128-bit state, are
  written as ``{"__int__": "<decimal>"}`` so that no JSON reader rounds them).

No entry is a pickle. The file is written to a temporary file in the same folder, flushed and
fsync'ed, then moved over ``path`` with ``os.replace``: a crash leaves either the old file or the
new one, never a torn one.
"""
import json
import os
import types

import numpy

from gpgan.autograd import Variable
from gpgan.backend import device_of, get_array_module, to_device
from gpgan.files import NpzError, atomic_write, open_npz, read_entry

__all__ = ["save_checkpoint", "load_checkpoint", "read_meta", "verify", "CheckpointError", "FORMAT", "VERSION"]

FORMAT = "gpgan.checkpoint"
VERSION = 1
META_KEY = "__meta__"
_GROUPS = ("module", "optimizer", "ema")
_MAX_EXACT_JSON_INT = 2 ** 53  # JSON readers other than Python's may round larger ints


class CheckpointError(ValueError):
    """A checkpoint file that cannot be read, or that does not match the objects it is loaded into."""


# -- value encoding ------------------------------------------------------------------------------
def _is_array(value):
    return isinstance(value, numpy.ndarray) or get_array_module(value) is not numpy


def _flatten(group, name, state, arrays):
    """Split ``state`` into npz entries (arrays, added to ``arrays``) and a JSON description."""
    if not hasattr(state, "items"):
        raise TypeError(f"save_checkpoint: {group} {name!r}: state_dict() returned a "
                        f"{type(state).__name__}, expected a dict")
    desc = {"arrays": [], "numpy_scalars": [], "values": {}}
    for key, value in state.items():
        where = f"{group}/{name}/{key}"
        if not isinstance(key, str):
            raise TypeError(f"save_checkpoint: entry {where!r}: state dict keys must be strings")
        if isinstance(value, Variable):
            value = value.data
        if _is_array(value) or isinstance(value, numpy.generic):
            array = to_device(value, "cpu") if _is_array(value) else numpy.asarray(value)
            if array.dtype.hasobject:
                raise TypeError(f"save_checkpoint: entry {where!r} is an object array; only numeric, "
                                "boolean and string arrays can be stored without pickling")
            arrays[where] = array
            desc["arrays" if _is_array(value) else "numpy_scalars"].append(key)
        elif value is None or isinstance(value, (bool, int, float, str)):
            desc["values"][key] = _encode(value)
        else:
            raise TypeError(f"save_checkpoint: entry {where!r} is a {type(value).__name__}; accepted: "
                            "arrays, numbers, strings, booleans, None")
    return desc


def _unflatten(path, group, name, desc, arrays):
    state = {}
    for key in desc["arrays"] + desc["numpy_scalars"]:
        where = f"{group}/{name}/{key}"
        if where not in arrays:
            raise CheckpointError(f"checkpoint {path}: entry {where!r} is listed in its meta but missing "
                                  "from the file (corrupt file)")
        state[key] = arrays[where]
    for key in desc["numpy_scalars"]:
        state[key] = state[key][()]
    state.update({key: _decode(value) for key, value in desc["values"].items()})
    return state


def _encode(obj):
    """JSON-able form of a random-number state / state-dict value, losslessly."""
    if isinstance(obj, dict):
        return {str(k): _encode(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_encode(v) for v in obj]
    if isinstance(obj, numpy.ndarray):
        return {"__ndarray__": [_encode(v) for v in obj.ravel().tolist()], "dtype": obj.dtype.str,
                "shape": list(obj.shape)}
    if isinstance(obj, numpy.generic):
        obj = obj.item()
    if isinstance(obj, int) and not isinstance(obj, bool) and abs(obj) >= _MAX_EXACT_JSON_INT:
        return {"__int__": str(obj)}
    return obj


def _decode(obj):
    if isinstance(obj, list):
        return [_decode(v) for v in obj]
    if isinstance(obj, dict):
        if set(obj) == {"__int__"}:
            return int(obj["__int__"])
        if "__ndarray__" in obj:
            values = [_decode(v) for v in obj["__ndarray__"]]
            return numpy.array(values, dtype=numpy.dtype(obj["dtype"])).reshape(obj["shape"])
        return {k: _decode(v) for k, v in obj.items()}
    return obj


def _json_default(obj):
    # meta may carry NumPy numbers (metrics); store them as plain numbers / lists
    if isinstance(obj, numpy.generic):
        return obj.item()
    if isinstance(obj, numpy.ndarray):
        return obj.tolist()
    raise TypeError(f"meta: a {type(obj).__name__} is not JSON-serializable")


# -- random-number generators --------------------------------------------------------------------
def _generator(name, value):
    """The object whose state is saved/restored for ``rngs[name]``."""
    if isinstance(value, types.ModuleType) and hasattr(value, "get_rng"):
        return value.get_rng()  # gpgan.backend.random: the global generator at the time of the call
    if isinstance(value, (numpy.random.Generator, numpy.random.BitGenerator, numpy.random.RandomState)):
        return value
    raise TypeError(f"rngs[{name!r}] is a {type(value).__name__}; accepted: numpy.random.Generator, "
                    "BitGenerator, RandomState, or the module gpgan.backend.random (the global generator)")


def _get_rng_state(gen):
    if isinstance(gen, numpy.random.Generator):
        return gen.bit_generator.state
    if isinstance(gen, numpy.random.RandomState):
        return gen.get_state(legacy=False)
    return gen.state


def _set_rng_state(gen, state):
    if isinstance(gen, numpy.random.Generator):
        gen.bit_generator.state = state
    elif isinstance(gen, numpy.random.RandomState):
        gen.set_state(state)
    else:
        gen.state = state


# -- writing -------------------------------------------------------------------------------------
def _check_name(group, name):
    if not isinstance(name, str) or not name or "/" in name:
        raise ValueError(f"{group} names must be non-empty strings without '/', got {name!r}")


def save_checkpoint(path, modules, optimizers, emas=None, rngs=None, meta=None):
    """Write everything needed to continue a run exactly into one ``.npz`` file, atomically.

    Args:
        path: the file to write (its folder is created if needed), e.g. ``ckpt_00001000.npz``.
        modules: ``name -> module`` (anything with ``state_dict()``: parameters and buffers).
        optimizers: ``name -> optimizer`` (anything with ``state_dict()``; schedules fit too).
        emas: ``name -> EMA``.
        rngs: ``name -> numpy.random.Generator`` (or BitGenerator, RandomState, or the module
            ``gpgan.backend.random`` for gpgan's global generator); their exact states are stored.
        meta: a JSON-able dict (step, config, metrics...), returned by :func:`load_checkpoint`.

    Returns:
        ``path``.
    """
    path = os.fspath(path)
    doc = {"format": FORMAT, "version": VERSION, "meta": {} if meta is None else meta,
           "entries": {group: {} for group in _GROUPS}, "rngs": {}}
    arrays = {}
    for group, objects in zip(_GROUPS, (modules, optimizers, emas or {})):
        for name, obj in objects.items():
            _check_name(group, name)
            doc["entries"][group][name] = _flatten(group, name, obj.state_dict(), arrays)
    for name, value in (rngs or {}).items():
        _check_name("rng", name)
        doc["rngs"][name] = _encode(_get_rng_state(_generator(name, value)))
    try:
        text = json.dumps(doc, default=_json_default)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"save_checkpoint: meta is not JSON-serializable: {exc}") from exc
    arrays[META_KEY] = numpy.frombuffer(text.encode("utf-8"), dtype=numpy.uint8)
    atomic_write(path, lambda f: numpy.savez(f, allow_pickle=False, **arrays))
    return path


# -- reading -------------------------------------------------------------------------------------
_ADVICE = "; delete it, or use another checkpoint of the run"


def _open(path):
    try:
        return open_npz(path, "checkpoint")
    except NpzError as exc:
        raise CheckpointError(f"{exc}{_ADVICE}") from exc


def _entry(path, npz, key):
    """The array ``key`` of an open checkpoint; a pickled entry or a damaged one is refused."""
    try:
        return read_entry(npz, key, path, "checkpoint")
    except NpzError as exc:
        raise CheckpointError(f"{exc}{_ADVICE}") from exc


def _parse_meta(path, npz):
    if META_KEY not in npz.files:
        raise CheckpointError(f"checkpoint {path} has no {META_KEY!r} entry; it was not written by "
                              "gpgan.checkpoint.save_checkpoint")
    raw = _entry(path, npz, META_KEY)
    try:
        doc = json.loads(raw.tobytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"checkpoint {path}: its {META_KEY!r} entry is not UTF-8 JSON: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise CheckpointError(f"checkpoint {path}: not a {FORMAT} file")
    if doc.get("version") != VERSION:
        raise CheckpointError(f"checkpoint {path}: format version {doc.get('version')} is not supported "
                              f"(this gpgan reads version {VERSION})")
    return doc


def _read(path):
    """``(doc, states)``: the parsed JSON and the state of every stored object, ``{group: {name:
    state}}`` (every entry read, so that an object array, a damaged entry anywhere in the file or
    one its meta lists but the file lacks is refused up front)."""
    with _open(path) as npz:
        doc = _parse_meta(path, npz)
        arrays = {key: _entry(path, npz, key) for key in npz.files if key != META_KEY}
    states = {group: {name: _unflatten(path, group, name, desc, arrays) for name, desc in objects.items()}
              for group, objects in doc.get("entries", {}).items()}
    return doc, states


def verify(path):
    """Read every entry of the checkpoint at ``path`` (CRC-checked) and return its meta; raises
    :class:`CheckpointError` for a damaged or foreign file, FileNotFoundError for a missing one."""
    return _read(path)[0]["meta"]


def read_meta(path):
    """The ``meta`` dict stored in the checkpoint at ``path``, without loading any array."""
    with _open(path) as npz:
        return _parse_meta(path, npz)["meta"]


def _shape(value):
    return tuple(numpy.shape(value)) if not _is_array(value) else tuple(value.shape)


def _module_state(path, name, module, state):
    """Check ``state`` (from the file) against ``module.state_dict()``; return it with every
    array on the device of the module's corresponding array."""
    current = module.state_dict()
    problems = []
    for key, value in current.items():
        where = f"module/{name}/{key}"
        if key not in state:
            problems.append(f"missing key {where!r} (the model has it, the checkpoint does not)")
        elif _shape(state[key]) != _shape(value):
            problems.append(f"shape mismatch for {where!r}: checkpoint has {_shape(state[key])}, "
                            f"model has {_shape(value)}")
    for key in state:
        if key not in current:
            problems.append(f"unexpected key 'module/{name}/{key}' (in the checkpoint, not in the model)")
    if problems:
        more = f" (and {len(problems) - 1} more mismatches)" if len(problems) > 1 else ""
        raise CheckpointError(f"checkpoint {path} does not match module {name!r}: {problems[0]}{more}")
    out = {}
    for key, value in current.items():
        if isinstance(value, Variable):
            value = value.data
        loaded = state[key]
        out[key] = to_device(loaded, device_of(value)) if _is_array(value) and _is_array(loaded) else loaded
    return out


def load_checkpoint(path, modules, optimizers, emas=None, rngs=None):
    """Restore modules, optimizers, EMAs and random generators, in place, from ``path``.

    Only the objects passed are restored (a sampler may load just the generator); each must be
    present in the file. Everything is checked before anything is changed: a file that does not
    fit raises :class:`CheckpointError` naming the first mismatching entry (missing key,
    unexpected key, or a shape mismatch with both shapes). Module arrays are restored onto the
    device of the module's current arrays; optimizers and EMAs place their state themselves.

    Returns:
        the ``meta`` dict given to :func:`save_checkpoint`.
    """
    path = os.fspath(path)
    doc, states = _read(path)
    loads = []
    for group, objects in zip(_GROUPS, (modules, optimizers, emas or {})):
        stored = states.get(group, {})
        for name, obj in objects.items():
            if name not in stored:
                have = ", ".join(map(repr, stored)) or "none"
                raise CheckpointError(f"checkpoint {path} has no {group} named {name!r} (it has: {have})")
            state = stored[name]
            if group == "module":
                state = _module_state(path, name, obj, state)
            elif hasattr(obj, "validate_state_dict"):
                try:
                    obj.validate_state_dict(state)
                except (ValueError, KeyError, TypeError) as exc:
                    raise CheckpointError(f"checkpoint {path} does not match {group} {name!r}: {exc}") from exc
            loads.append((obj, state))
    rng_loads = []
    for name, value in (rngs or {}).items():
        if name not in doc["rngs"]:
            have = ", ".join(map(repr, doc["rngs"])) or "none"
            raise CheckpointError(f"checkpoint {path} has no random generator named {name!r} (it has: {have})")
        gen = _generator(name, value)
        state = _decode(doc["rngs"][name])
        kind = _get_rng_state(gen).get("bit_generator")
        if state.get("bit_generator") != kind:
            raise CheckpointError(f"checkpoint {path}: random generator {name!r} was a "
                                  f"{state.get('bit_generator')}, the one given is a {kind}")
        rng_loads.append((gen, state))
    for obj, state in loads:
        obj.load_state_dict(state)
    for gen, state in rng_loads:
        _set_rng_state(gen, state)
    return doc["meta"]
