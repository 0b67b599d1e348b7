"""The training configuration: one schema, YAML files that may extend each other, typed overrides.

A config is a nested mapping (see :data:`SCHEMA`). Loading a file resolves ``base:`` (a path
relative to the file, extended recursively), applies ``--set key.sub=value`` overrides typed by
the schema, fills defaults, and validates everything before any work starts:

* an unknown key fails and names the closest valid key (difflib);
* a wrong type or an out-of-range value names the key, the value and what is accepted.

Only ``yaml.safe_load`` is used. ``python -m gpgan.train.config`` prints the reference table
that README.md embeds (a test keeps the two in sync).
"""
import copy
import difflib
import math
import os

import yaml

__all__ = [
    "SCHEMA", "Field", "ConfigError", "load_config", "validate_config", "apply_overrides",
    "parse_override", "default_config", "diff_configs", "get_key", "config_reference_markdown",
    "dump_config", "TOY_DATA_NAMES", "IMAGE_DATA_NAMES",
]


class ConfigError(ValueError):
    """A config that cannot be used; the message names every offending key."""


# --- choices that live in other packages (looked up lazily, when a config is validated) -------
def _model_names():
    from gpgan.models import MODELS
    return sorted(MODELS)


def _loss_names():
    from gpgan.losses import LOSSES
    return sorted(LOSSES)


def _penalty_names():
    from gpgan.losses import PENALTIES
    return sorted(PENALTIES)


IMAGE_DATA_NAMES = ("cifar10", "image_folder")


def _toy_names():
    from gpgan.data.toy import TOY_DATASETS
    return sorted(TOY_DATASETS)


def _data_names():
    return list(IMAGE_DATA_NAMES) + _toy_names()


def TOY_DATA_NAMES():  # noqa: N802  (a lazily evaluated constant)
    """Names of the toy 2-D data sets (from gpgan.data.toy)."""
    return _toy_names()


class Field:
    """One leaf of the schema.

    Args:
        kind: "int", "float", "bool", "str", "floats" (a list of floats) or "dict" (a free-form
            mapping passed on as keyword options).
        default: the value when the key is absent.
        doc: one line saying what the key does.
        choices: accepted values (a list, or a callable returning one, evaluated on validation).
        minimum, maximum: inclusive bounds for numbers; ``exclusive_min``/``exclusive_max`` make
            them strict.
        nullable: whether ``null`` is accepted.
        length: required length of a "floats" list.
    """

    def __init__(self, kind, default, doc, choices=None, minimum=None, maximum=None,
                 exclusive_min=False, exclusive_max=False, nullable=False, length=None):
        self.kind = kind
        self.default = default
        self.doc = doc
        self._choices = choices
        self.minimum = minimum
        self.maximum = maximum
        self.exclusive_min = exclusive_min
        self.exclusive_max = exclusive_max
        self.nullable = nullable
        self.length = length

    @property
    def choices(self):
        return self._choices() if callable(self._choices) else self._choices

    def accepted(self):
        """What the field accepts, in words (used in error messages and the reference table)."""
        if self.kind == "str" and self._choices is not None:
            text = "one of " + ", ".join(repr(c) for c in self.choices)
        else:
            text = {
                "int": "an integer", "float": "a number", "bool": "true or false",
                "str": "a string", "dict": "a mapping of keyword options",
                "floats": f"a list of {self.length} numbers" if self.length else "a list of numbers",
            }[self.kind]
            bounds = []
            if self.minimum is not None:
                bounds.append(f"{'>' if self.exclusive_min else '>='} {self.minimum:g}")
            if self.maximum is not None:
                bounds.append(f"{'<' if self.exclusive_max else '<='} {self.maximum:g}")
            if bounds:
                joined = " and ".join(bounds)
                text += f", each {joined}" if self.kind == "floats" else f" {joined}"
        if self.nullable:
            text += ", or null"
        return text

    def type_name(self):
        name = "list[float]" if self.kind == "floats" else self.kind
        return name + (" or null" if self.nullable else "")

    # -- checking -----------------------------------------------------------------------------
    def _in_range(self, x):
        if isinstance(x, float) and math.isnan(x):
            return False
        if self.minimum is not None and (x < self.minimum or (self.exclusive_min and x == self.minimum)):
            return False
        if self.maximum is not None and (x > self.maximum or (self.exclusive_max and x == self.maximum)):
            return False
        return True

    def check(self, value):
        """The value converted to the field's type; raises ValueError (a short reason) if not accepted."""
        if value is None:
            if self.nullable:
                return None
            raise ValueError("null is not accepted")
        kind = self.kind
        if kind == "int":
            if isinstance(value, bool):
                raise ValueError("a boolean is not an integer")
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            if isinstance(value, str):
                try:
                    value = int(value.strip())
                except ValueError:
                    raise ValueError("not an integer") from None
            if not isinstance(value, int):
                raise ValueError(f"{type(value).__name__} is not an integer")
            if not self._in_range(value):
                raise ValueError("out of range")
            return value
        if kind == "float":
            if isinstance(value, bool):
                raise ValueError("a boolean is not a number")
            if isinstance(value, str):
                # PyYAML reads "1e-4" (no dot) as a string: accept anything float() reads.
                try:
                    value = float(value.strip())
                except ValueError:
                    raise ValueError("not a number") from None
            if not isinstance(value, (int, float)):
                raise ValueError(f"{type(value).__name__} is not a number")
            value = float(value)
            if not math.isfinite(value):
                raise ValueError("not a finite number")
            if not self._in_range(value):
                raise ValueError("out of range")
            return value
        if kind == "bool":
            if not isinstance(value, bool):
                raise ValueError(f"{type(value).__name__} is not a boolean")
            return value
        if kind == "str":
            if not isinstance(value, str):
                raise ValueError(f"{type(value).__name__} is not a string")
            choices = self.choices
            if choices is not None and value not in choices:
                raise ValueError("not one of the accepted values")
            return value
        if kind == "floats":
            if not isinstance(value, (list, tuple)):
                raise ValueError(f"{type(value).__name__} is not a list")
            if self.length is not None and len(value) != self.length:
                raise ValueError(f"has {len(value)} entries, not {self.length}")
            item = Field("float", None, "", minimum=self.minimum, maximum=self.maximum,
                         exclusive_min=self.exclusive_min, exclusive_max=self.exclusive_max)
            return [item.check(v) for v in value]
        if kind == "dict":
            if not isinstance(value, dict):
                raise ValueError(f"{type(value).__name__} is not a mapping")
            for k in value:
                if not isinstance(k, str):
                    raise ValueError(f"key {k!r} is not a string")
            return copy.deepcopy(value)
        raise AssertionError(f"unknown field kind {kind!r}")


def _optimizer_section(who, lr, betas):
    return {
        "lr": Field("float", lr, f"Adam learning rate of the {who}", minimum=0, exclusive_min=True),
        "betas": Field("floats", betas, f"Adam (beta1, beta2) of the {who}", length=2,
                       minimum=0, maximum=1, exclusive_max=True),
        "eps": Field("float", 1e-8, f"Adam epsilon of the {who}", minimum=0, exclusive_min=True),
        "schedule": Field("str", "constant", f"learning-rate schedule of the {who} over train.steps "
                          "generator steps ('linear' decays to 0)", choices=["constant", "linear"]),
    }


SCHEMA = {
    "device": Field("str", "cpu", "where to train: 'cuda' runs on the GPU through CuPy",
                    choices=["cpu", "cuda"]),
    "model": {
        "generator": Field("str", "mlp_generator", "generator architecture (gpgan.models.make_model name)",
                           choices=_model_names),
        "generator_options": Field("dict", {}, "keyword options of the generator, e.g. {latent_dim: 128, width: 64}"),
        "critic": Field("str", "mlp_critic", "critic architecture (gpgan.models.make_model name)",
                        choices=_model_names),
        "critic_options": Field("dict", {}, "keyword options of the critic"),
    },
    "loss": Field("str", "non_saturating", "adversarial loss (gpgan.losses.make_loss name)", choices=_loss_names),
    "penalty": {
        "type": Field("str", "none", "gradient penalty (gpgan.losses.make_penalty name)", choices=_penalty_names),
        "weight": Field("float", None, "penalty weight: lambda (wgan_gp, dragan, lp) or gamma (r1, r2, "
                        "zero_gp: gamma / 2 * E||g||^2); null takes the penalty's default (10)",
                        nullable=True, minimum=0),
        "center": Field("float", None, "target gradient norm; null takes the penalty's own default "
                        "(1 for wgan_gp/lp, 0 for r1/r2/zero_gp)", nullable=True, minimum=0),
        "interval": Field("int", 1, "lazy regularization: apply the penalty every N critic steps "
                          "(scaled by N, as in StyleGAN2)", minimum=1),
        "options": Field("dict", {}, "extra keyword options of make_penalty"),
    },
    "optim": {
        "generator": _optimizer_section("generator", 1e-4, [0.5, 0.9]),
        "critic": _optimizer_section("critic", 1e-4, [0.5, 0.9]),
    },
    "train": {
        "steps": Field("int", 1000, "number of generator steps", minimum=1),
        "batch_size": Field("int", 64, "critic batch size (real and fake samples per critic step)", minimum=1),
        "generator_batch_size": Field("int", None, "fake samples per generator step; null: batch_size",
                                      nullable=True, minimum=1),
        "critic_steps": Field("int", 1, "critic steps per generator step", minimum=1),
        "seed": Field("int", 0, "seed of weights, noise, data order and penalties", minimum=0),
        "ema": {
            "enabled": Field("bool", False, "keep an exponential moving average of the generator's "
                             "weights (used for samples and evaluation)"),
            "decay": Field("float", 0.999, "EMA decay per generator step", minimum=0, maximum=1,
                           exclusive_max=True),
            "start_step": Field("int", 0, "generator step at which averaging starts (copies before)",
                                minimum=0),
        },
        "log_interval": Field("int", 10, "write metrics.jsonl / TensorBoard scalars every N steps", minimum=1),
        "sample_interval": Field("int", 500, "write samples/step_N.png every N steps (0: only final.png)",
                                 minimum=0),
        "checkpoint_interval": Field("int", 1000, "save checkpoints/ckpt_N.npz every N steps "
                                     "(0: only at the end and on Ctrl-C)", minimum=0),
        "keep_checkpoints": Field("int", 3, "how many of the latest checkpoints to keep", minimum=1),
        "eval_interval": Field("int", 0, "toy 2-D data: evaluate mode metrics every N steps "
                               "(0: only at the end)", minimum=0),
        "eval_samples": Field("int", 2500, "toy 2-D data: generated samples per evaluation", minimum=1),
        "n_samples": Field("int", 64, "images in each sample grid (points in each scatter plot: "
                           "eval_samples)", minimum=1),
        "stop_after": Field("int", None, "stop as if interrupted (checkpoint, exit 130) after this "
                            "step; for tests and scheduled jobs", nullable=True, minimum=1),
    },
    "data": {
        "name": Field("str", "grid25", "data set: cifar10, image_folder, or a toy 2-D data set "
                      "(gpgan.data.toy)", choices=_data_names),
        "root": Field("str", None, "folder of the data (cifar10: the cifar-10-batches-py folder; "
                      "image_folder: a folder of PNG/JPEG files); '~' is expanded", nullable=True),
        "download": Field("bool", False, "cifar10: download the official archive when root is missing"),
        "split": Field("str", "train", "cifar10: which images (train = data_batch_1..5)",
                       choices=["train", "test"]),
        "hflip": Field("bool", False, "images: random horizontal flips"),
        "options": Field("dict", {}, "toy data: keyword options of gpgan.data.toy.make_toy (e.g. scale)"),
    },
}

# Keys a resumed run may change (see gpgan.train.trainer.resume).
RESUMABLE_CHANGES = ("train.steps", "train.stop_after", "device")


# --- helpers over the nested schema -----------------------------------------------------------
def _walk(schema, prefix=""):
    """(dotted key, Field) for every leaf, in schema order."""
    for key, node in schema.items():
        path = f"{prefix}{key}"
        if isinstance(node, Field):
            yield path, node
        else:
            yield from _walk(node, path + ".")


def _all_keys(schema=SCHEMA):
    keys = []
    for path, _ in _walk(schema):
        keys.append(path)
    # Sections too, so a misspelt section name finds its match.
    def sections(s, prefix=""):
        for k, v in s.items():
            if isinstance(v, dict):
                keys.append(prefix + k)
                sections(v, prefix + k + ".")
    sections(schema)
    return keys


def _lookup(path):
    """The schema node (Field or section dict) at a dotted path, or None."""
    node = SCHEMA
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _closest(key, prefix, siblings):
    """A ' did you mean ...?' hint: the closest sibling, else the closest dotted key anywhere."""
    match = difflib.get_close_matches(key, list(siblings), n=1, cutoff=0.5)
    if match:
        return f"; did you mean '{prefix}{match[0]}'?"
    match = difflib.get_close_matches(prefix + key, _all_keys(), n=1, cutoff=0.5)
    if match:
        return f"; did you mean '{match[0]}'?"
    return f"; valid keys here: {', '.join(prefix + s for s in siblings)}"


def default_config():
    """The config with every key at its default."""
    def build(schema):
        return {k: (copy.deepcopy(v.default) if isinstance(v, Field) else build(v)) for k, v in schema.items()}
    return build(SCHEMA)


def _short(value):
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def validate_config(raw, source="config"):
    """Check ``raw`` against the schema and return the complete config (defaults filled in).

    Raises:
        ConfigError: listing every unknown key (with the closest valid key), every wrong type and
            every out-of-range value (key, value, what is accepted).
    """
    errors = []

    def visit(schema, data, prefix):
        out = {}
        if not isinstance(data, dict):
            errors.append(f"{prefix.rstrip('.') or 'config'}: got {_short(data)}; accepted: a mapping "
                          f"with keys {', '.join(schema)}")
            data = {}
        for key in data:
            if key not in schema:
                errors.append(f"unknown key '{prefix}{key}'{_closest(str(key), prefix, schema)}")
        for key, node in schema.items():
            path = prefix + key
            if isinstance(node, Field):
                if key not in data:
                    out[key] = copy.deepcopy(node.default)
                    continue
                try:
                    out[key] = node.check(data[key])
                except ValueError as exc:
                    errors.append(f"{path}: got {_short(data[key])} ({exc}); accepted: {node.accepted()}")
                    out[key] = copy.deepcopy(node.default)
            else:
                sub = data.get(key, {})
                if sub is None:
                    sub = {}
                out[key] = visit(node, sub, path + ".")
        return out

    resolved = visit(SCHEMA, raw if raw is not None else {}, "")
    if not errors:
        errors.extend(_check_model_options(resolved))
    if errors:
        raise ConfigError(f"invalid config ({source}):\n  " + "\n  ".join(errors))
    return resolved


def _check_model_options(config):
    """Unknown keys in model.*_options, with the closest option the model accepts."""
    try:
        from gpgan.models import model_options
    except ImportError:  # models not importable: make_model reports it later
        return []
    errors = []
    for role in ("generator", "critic"):
        accepted = [k for k in model_options(config["model"][role]) if k != "rng"]
        for key in config["model"][f"{role}_options"]:
            if key not in accepted:
                prefix = f"model.{role}_options."
                match = difflib.get_close_matches(key, accepted, n=1, cutoff=0.5)
                hint = f"did you mean '{prefix}{match[0]}'?" if match else "accepted options: " + ", ".join(accepted)
                errors.append(f"unknown key '{prefix}{key}' for model {config['model'][role]!r}; {hint}")
    return errors


# --- overrides --------------------------------------------------------------------------------
_NULLS = ("null", "none", "~", "")


def parse_override(text):
    """Split ``"key.sub=value"`` into (dotted key, typed value), typed by the schema.

    Numbers, booleans (true/false/yes/no/on/off) and lists (``[0.5, 0.9]`` or ``0.5,0.9``) are
    converted for their fields; strings stay as typed; ``null`` clears a nullable field. Keys
    inside a free-form mapping (``model.generator_options.width=8``) are read as YAML scalars.
    """
    if "=" not in text:
        raise ConfigError(f"override {text!r}: expected key.sub=value, e.g. train.steps=200")
    key, value = text.split("=", 1)
    key = key.strip()
    node = _lookup(key)
    if node is None:
        parts = key.split(".")
        # Inside a free-form mapping?
        for i in range(len(parts) - 1, 0, -1):
            parent = _lookup(".".join(parts[:i]))
            if isinstance(parent, Field) and parent.kind == "dict":
                return key, yaml.safe_load(value) if value.strip() else None
        parent_path = ".".join(parts[:-1])
        parent = _lookup(parent_path) if parent_path else SCHEMA
        siblings = parent if isinstance(parent, dict) else {}
        prefix = parent_path + "." if parent_path else ""
        raise ConfigError(f"override {text!r}: unknown key '{key}'{_closest(parts[-1], prefix, siblings)}")
    if isinstance(node, dict):
        raise ConfigError(f"override {text!r}: '{key}' is a section; set one of its keys: "
                          + ", ".join(f"{key}.{k}" for k in node))
    stripped = value.strip()
    if node.nullable and stripped.lower() in _NULLS:
        return key, None
    if node.kind == "str":
        return key, value
    if node.kind == "bool":
        lowered = stripped.lower()
        if lowered in ("true", "yes", "on", "1"):
            return key, True
        if lowered in ("false", "no", "off", "0"):
            return key, False
        raise ConfigError(f"override {text!r}: {key}: got {value!r}; accepted: {node.accepted()}")
    if node.kind == "floats":
        if stripped.startswith("["):
            parsed = yaml.safe_load(stripped)
        else:
            parsed = [p.strip() for p in stripped.split(",") if p.strip()]
        return key, parsed
    if node.kind == "dict":
        parsed = yaml.safe_load(value)
        return key, {} if parsed is None else parsed
    return key, stripped  # int / float: converted (and checked) by Field.check


def apply_overrides(config, overrides):
    """A copy of ``config`` (a raw or resolved mapping) with ``overrides`` applied.

    ``overrides``: strings ``"key.sub=value"`` or (dotted key, value) pairs.
    """
    config = copy.deepcopy(config) if config is not None else {}
    for item in overrides:
        key, value = parse_override(item) if isinstance(item, str) else item
        node = config
        parts = key.split(".")
        for part in parts[:-1]:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[parts[-1]] = value
    return config


# --- files ------------------------------------------------------------------------------------
def _deep_merge(base, over):
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _read_yaml(path, chain):
    path = os.path.abspath(path)
    if path in chain:
        cycle = " -> ".join(chain + [path])
        raise ConfigError(f"config files extend each other in a cycle: {cycle}")
    if not os.path.isfile(path):
        if chain:
            raise ConfigError(f"{chain[-1]}: base config {path} does not exist (base paths are "
                              "relative to the file that names them)")
        raise ConfigError(f"config file {path} does not exist")
    with open(path, encoding="utf-8") as f:
        try:
            data = yaml.safe_load(f)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config must be a mapping of keys, got {type(data).__name__}")
    base = data.pop("base", None)
    if base is None:
        return data
    if not isinstance(base, str):
        raise ConfigError(f"{path}: base: got {_short(base)}; accepted: a path to another YAML config")
    base_path = os.path.join(os.path.dirname(path), os.path.expanduser(base))
    parent = _read_yaml(base_path, chain + [path])
    return _deep_merge(parent, data)


def load_config(path, overrides=()):
    """Read a YAML config (resolving ``base:``), apply overrides, validate, fill defaults.

    Returns:
        The complete config as nested dicts.
    Raises:
        ConfigError: with a message naming the file and every offending key.
    """
    raw = _read_yaml(path, [])
    raw = apply_overrides(raw, overrides)
    return validate_config(raw, source=str(path))


def dump_config(config):
    """The config as YAML text (key order of the schema)."""
    return yaml.safe_dump(config, sort_keys=False, default_flow_style=None)


def get_key(config, dotted):
    node = config
    for part in dotted.split("."):
        node = node[part]
    return node


def diff_configs(a, b, prefix=""):
    """Dotted keys whose values differ between two resolved configs (free-form mappings compared
    key by key)."""
    keys = []
    for key in sorted(set(a) | set(b), key=lambda k: (list(a) + list(b)).index(k)):
        path = prefix + str(key)
        if key not in a or key not in b:
            keys.append(path)
        elif isinstance(a[key], dict) and isinstance(b[key], dict):
            keys.extend(diff_configs(a[key], b[key], path + "."))
        elif a[key] != b[key]:
            keys.append(path)
    return keys


# --- reference table --------------------------------------------------------------------------
def _fmt_default(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, list):
        return "[" + ", ".join(_fmt_default(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{}" if not v else yaml.safe_dump(v, default_flow_style=True).strip()
    return str(v)


def config_reference_markdown():
    """A Markdown table of every key: type, default, what is accepted, meaning."""
    lines = ["| key | type | default | accepted | meaning |", "|---|---|---|---|---|"]
    for path, field in _walk(SCHEMA):
        try:
            accepted = field.accepted()
        except ImportError:  # a registry not written yet
            accepted = "see " + field.doc
        lines.append(f"| `{path}` | {field.type_name()} | `{_fmt_default(field.default)}` | "
                     f"{accepted.replace('|', '/')} | {field.doc.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(config_reference_markdown(), end="")
