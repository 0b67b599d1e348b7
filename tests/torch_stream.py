"""Assemble torch.save's legacy pickle stream by hand (protocol-2 opcodes), without torch.

Used by the tests of gpgan.metrics.torch_file (crafted and broken files) and of the Inception
loader (a full state dict in torch's format)."""
import pickle
import struct

import numpy as np

MAGIC, PROTOCOL = 0x1950A86A20F9469CFC6C, 1001


def op_global(module, name):
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def op_str(text):
    data = text.encode()
    return b"X" + struct.pack("<I", len(data)) + data


def op_int(value):
    return b"J" + struct.pack("<i", value)


def op_tuple(*items):
    return b"(" + b"".join(items) + b"t"


def storage_pid(key, numel, view=None, kind="FloatStorage"):
    """A legacy persistent id; ``view`` is (view_key, offset, numel) or None."""
    view_op = b"N" if view is None else op_tuple(op_str(view[0]), op_int(view[1]), op_int(view[2]))
    return op_tuple(op_str("storage"), op_global("torch", kind), op_str(key), op_str("cpu"), op_int(numel), view_op)


def tensor(pid, offset, size, stride):
    hooks = op_global("collections", "OrderedDict") + b")R"
    args = op_tuple(pid + b"Q", op_int(offset), op_tuple(*map(op_int, size)), op_tuple(*map(op_int, stride)),
                    b"\x89", hooks)
    return op_global("torch._utils", "_rebuild_tensor_v2") + args + b"R"


def state_dict_pickle(entries):
    """An OrderedDict pickle of (name, tensor opcodes) pairs."""
    body = b"".join(op_str(name) + t for name, t in entries)
    return b"\x80\x02" + op_global("collections", "OrderedDict") + b")R(" + body + b"u."


def legacy_stream(payload, keys, storages, dtype="<f4"):
    """Header, ``payload`` (the main pickle), the key list, then each storage's count and bytes."""
    head = b"".join(pickle.dumps(v, protocol=2) for v in
                    (MAGIC, PROTOCOL, {"protocol_version": PROTOCOL, "little_endian": True}))
    parts = [head, payload, pickle.dumps(keys, protocol=2)]
    for values in storages:
        parts += [struct.pack("<q", len(values)), np.asarray(values, dtype).tobytes()]
    return b"".join(parts)


def write_legacy_torch_file(path, arrays):
    """``arrays`` (name -> float32 array) as torch < 1.6 would have saved the state dict."""
    entries, keys, storages = [], [], []
    for i, (name, value) in enumerate(arrays.items()):
        value = np.ascontiguousarray(value, dtype=np.float32)
        strides = tuple(s // 4 for s in value.strides)
        entries.append((name, tensor(storage_pid(str(i), value.size), 0, value.shape, strides)))
        keys.append(str(i))
        storages.append(value.reshape(-1))
    with open(path, "wb") as f:
        f.write(legacy_stream(state_dict_pickle(entries), keys, storages))


# -- TorchScript archives (torch.jit.save's zip: a pickled module tree) ------------------------------
def _zip_pid(key, numel):
    return op_tuple(op_str("storage"), op_global("torch", "FloatStorage"), op_str(key), op_str("cpu"), op_int(numel))


def _script_value(value, storages):
    """Opcodes of one module attribute: a sub-module (dict), a tensor (array), an int list, an int or
    a bool."""
    if isinstance(value, dict):
        kind = value.get("__type__", ("__torch__.fake", "Module"))
        items = b"".join(op_str(k) + _script_value(v, storages) for k, v in value.items() if k != "__type__")
        return op_global(*kind) + b")\x81}(" + op_str("training") + b"\x89" + items + b"ub"
    if isinstance(value, bool):
        return b"\x88" if value else b"\x89"
    if isinstance(value, int):
        return op_int(value)
    if isinstance(value, list):
        return op_global("torch.jit._pickle", "build_intlist") + b"(](" + b"".join(map(op_int, value)) + b"etR"
    value = np.ascontiguousarray(value, dtype=np.float32)
    key = str(len(storages))
    storages[key] = value
    return tensor(_zip_pid(key, value.size), 0, value.shape, tuple(s // 4 for s in value.strides))


def write_torchscript_file(path, tree, prefix="archive"):
    """A TorchScript-like archive of the module ``tree`` (nested dicts: sub-modules; arrays: float32
    tensors; ``__type__``: the module's ``(module, class)``), with a ``code/`` file that must never
    run."""
    import zipfile

    storages = {}
    payload = b"\x80\x02" + _script_value(tree, storages) + b"."
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{prefix}/data.pkl", payload)
        archive.writestr(f"{prefix}/code/__torch__/fake.py", "raise SystemExit('TorchScript code was run')\n")
        archive.writestr(f"{prefix}/constants.pkl", b"\x80\x02).")
        archive.writestr(f"{prefix}/version", "3\n")
        for key, value in storages.items():
            archive.writestr(f"{prefix}/data/{key}", value.tobytes())
