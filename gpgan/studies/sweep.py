"""Sweep files: schema, validation and expansion into individual gpgan-train runs.

A sweep file (YAML) names a base config and the axes to vary::

    base: ../quickstart.yaml            # relative to the sweep file
    axes:                               # dotted config key -> list of values (full product)
      penalty.type: [none, wgan_gp, r1]
      penalty.weight: [0.1, 1, 10]
      train.seed: [0, 1, 2]
    set: {train.steps: 2000}            # fixed overrides for every run (optional)
    metrics:                            # optional; "name" or {name: direction} (max | min)
      - eval/modes: max
      - eval/reverse_kl: min
    seed_axis: train.seed               # mean/std are taken over this axis (optional)
    x_axis: penalty.weight              # figures: x axis ...
    series_axis: penalty.type           # ... and one line per value of this axis
    ignore:                             # axes that do not matter for some settings (optional)
      - when: {penalty.type: none}
        axes: [penalty.weight]
    exclude:                            # combinations not to run (optional)
      - {penalty.type: r2, penalty.weight: 0.1}
    out: experiments/ablations/mine     # default output folder (optional)
    title: My ablation                  # REPORT.md heading (optional)
    notes: |                            # Markdown for REPORT.md's "Findings" (optional)
      R1 and LP cover every mode ...

``variants``: named bundles of overrides that serve as the values of an axis with a plain name
(no dot), e.g. a penalty in its paper's pairing beside the common setting::

    variants:
      pairing:
        common: {}
        wgan_gp_paper: {loss: wgan, train.critic_steps: 5, optim.critic.lr: 1.0e-4}
    axes:
      pairing: [common, wgan_gp_paper]

A variant's keys override ``set:``; they may not also be axes.

``ignore``: in a combination matching ``when`` (every listed key has the listed value, or one of
the listed values when a list is given) the listed axes are dropped: no override is passed for
them (the base config's value applies, which does not matter by the rule's premise) and the
combinations that differ only in those axes collapse into a single run. ``penalty.type: none``
with three weights is therefore one run per seed, not three identical ones.

``exclude``: each entry is a mapping of axis keys to a value (or a list of values); a combination
matching every key of an entry is not run.

``adjust``: overrides for the combinations matching ``when`` (as in ``ignore``), e.g. a longer run
for the one setting whose curves still rise::

    adjust:
      - when: {pairing: wgan_gp_paper, penalty.weight: 10}
        set: {train.steps: 400000}

They come after ``set:``, the axes and the variants (so they win), in file order; run names do
not change. An axis that ``ignore`` dropped from a run matches no ``when`` value. A key of
``set`` may not be an axis.

``reference_scores``: a JSON file (relative to the sweep file) that ``gpgan-eval real ... --out``
wrote: real images scored against the runs' reference, e.g. CIFAR-10's test images against its
training images. The report shows it as the "real data" row of its tables and as a dashed line in
the figures of the metrics it holds::

    reference_scores: real_floor.json
"""

import itertools
import json
import os
import re
from dataclasses import dataclass, field

from gpgan.metrics import METRIC_KEYS
from gpgan.metrics import direction as metric_direction
from gpgan.metrics.direction import KNOWN as KNOWN_METRICS
from gpgan.metrics.real_scores import read_real_scores
from gpgan.schema import Field, Schema, did_you_mean, parse_yaml, problems_line, read_yaml_file, yaml_scalar

__all__ = [
    "SweepError",
    "Sweep",
    "RunSpec",
    "IGNORED",
    "load_sweep",
    "parse_sweep",
    "expand_runs",
    "select_runs",
    "run_config",
    "format_value",
    "override_text",
    "SWEEP_SCHEMA",
    "sweep_reference_markdown",
]

IGNORE_KEYS = ("when", "axes")
ADJUST_KEYS = ("when", "set")
DIRECTIONS = ("max", "min")
DEFAULT_SEED_AXIS = "train.seed"
DEFAULT_X_AXIS = "penalty.weight"
DEFAULT_SERIES_AXIS = "penalty.type"

_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")

#: A sweep file's top-level keys: their types, defaults and what they mean. gpgan.schema checks
#: the file against it (unknown keys with the closest valid one, required keys, each key's type);
#: parse_sweep then checks what only a sweep knows (axis names, rule contents, the trainer's keys).
SWEEP_SCHEMA = Schema({
    "base": Field("str", None, "the config every run starts from (relative to the sweep file)",
                  required=True, accepts="a path to a config file"),
    "axes": Field("dict", None, "dotted config key or variant axis -> list of values; every "
                  "combination is a run (file order: the last axis varies fastest)", required=True,
                  accepts="a non-empty mapping of dotted config keys (or variant axes) to lists of values"),
    "set": Field("dict", {}, "fixed overrides for every run (a key of set may not be an axis)",
                 nullable=True, accepts="a mapping of dotted config keys to values"),
    "variants": Field("dict", {}, "named bundles of overrides that serve as the values of an axis "
                      "with a plain name (no dot)", nullable=True,
                      accepts="a mapping {axis name: {variant name: {dotted key: value}}}"),
    "metrics": Field("list", [], "the metrics the report shows, with the direction that is better; "
                     "empty: every eval/ metric found", nullable=True,
                     accepts="a list of metric names or {name: max|min} mappings"),
    "seed_axis": Field("str", DEFAULT_SEED_AXIS, "mean and std are taken over this axis (the default "
                       "only when it is an axis)", nullable=True, accepts="an axis key"),
    "x_axis": Field("str", DEFAULT_X_AXIS, "the figures' x axis (the default only when it is an axis)",
                    nullable=True, accepts="an axis key"),
    "series_axis": Field("str", DEFAULT_SERIES_AXIS, "the figures draw one line per value of this "
                         "axis (the default only when it is an axis)", nullable=True, accepts="an axis key"),
    "ignore": Field("list", [], "axes dropped from the combinations matching when (they collapse "
                    "into one run)", nullable=True,
                    accepts="a list of {when: {axis: value}, axes: [axis, ...]} rules"),
    "exclude": Field("list", [], "combinations not to run", nullable=True,
                     accepts="a list of {axis: value or [values]} rules"),
    "adjust": Field("list", [], "overrides for the combinations matching when, after set, the axes "
                    "and the variants", nullable=True,
                    accepts="a list of {when: {axis: value}, set: {key: value}} rules"),
    "out": Field("str", None, "the default output folder (else experiments/ablations/<sweep file's "
                 "name>)", nullable=True, accepts="a folder path"),
    "title": Field("str", None, "REPORT.md's heading", nullable=True),
    "notes": Field("str", None, "Markdown placed in REPORT.md under Findings", nullable=True,
                   accepts="Markdown text (a string)"),
    "reference_scores": Field("str", None, "real images' scores, shown as the real-data row and line",
                              nullable=True, accepts="the path of a JSON file that `gpgan-eval real ... "
                              "--out FILE` wrote (relative to the sweep file)"),
})

#: The Markdown table of the sweep keys that docs/studies.md embeds between its sweep-reference
#: markers (a test keeps them in sync).
sweep_reference_markdown = SWEEP_SCHEMA.reference_markdown


class SweepError(ValueError):
    """A sweep file is malformed; the message names the file, the key and what is accepted."""


class _Ignored:
    """Marker for an axis that does not apply to a run (see ``ignore:``)."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self):
        return "IGNORED"

    def __reduce__(self):
        return (_Ignored, ())


IGNORED = _Ignored()


@dataclass
class Sweep:
    """A validated sweep file.

    ``axes`` keeps the file's order (it fixes run order, table columns and name order);
    ``metrics`` is a list of (name, direction) or empty, meaning "every eval/ metric found".
    """

    path: str                    # the sweep file
    base: str                    # the base config (resolved against the sweep file's folder)
    axes: dict                   # dotted key or variant axis -> list of values
    fixed: dict = field(default_factory=dict)
    metrics: list = field(default_factory=list)      # [(name, "max" | "min")]
    seed_axis: str = DEFAULT_SEED_AXIS               # or None
    x_axis: str = DEFAULT_X_AXIS                     # or None
    series_axis: str = DEFAULT_SERIES_AXIS           # or None
    ignore: list = field(default_factory=list)       # [({axis: [values]}, [axes dropped])]
    exclude: list = field(default_factory=list)      # [{axis: [values]}]
    out: str = None
    title: str = None
    base_text: str = ""          # ``base`` exactly as written in the file (for the report)
    variants: dict = field(default_factory=dict)     # axis -> variant -> {dotted key: value}
    notes: str = None            # Markdown placed in REPORT.md under "Findings"
    adjust: list = field(default_factory=list)       # [({axis: [values]}, {dotted key: value})]
    reference_scores: dict = None    # what gpgan.metrics.real_scores.read_real_scores read, or None
    reference_scores_path: str = None  # that file (resolved against the sweep file's folder)

    @property
    def stem(self):
        return os.path.splitext(os.path.basename(self.path))[0]

    @property
    def varied_keys(self):
        """Config keys that variants or ``adjust`` rules set, in file order (first mention): they
        differ between runs, but no axis column shows them (a variant's name stands for its
        bundle), so results.csv has a column for each with every run's resolved value."""
        keys = []
        bundles = [settings for bundle in self.variants.values() for settings in bundle.values()]
        for settings in bundles + [settings for _, settings in self.adjust]:
            keys += [k for k in settings if k not in keys]
        return keys

    @property
    def setting_axes(self):
        """Axes that define a setting (all but the seed axis)."""
        return [k for k in self.axes if k != self.seed_axis]

    def default_out(self):
        return self.out if self.out is not None else os.path.join("experiments", "ablations", self.stem)


@dataclass
class RunSpec:
    """One gpgan-train run of a sweep.

    ``values``: axis key -> value (``IGNORED`` for axes an ``ignore`` rule dropped);
    ``overrides``: (dotted key, value) pairs passed as ``--set key=value``, fixed ones first;
    ``setting``: the non-seed axis values as text (runs sharing it are averaged over seeds).
    """

    name: str
    values: dict
    overrides: list
    setting: tuple
    seed: object


# ----------------------------------------------------------------------------------------------
# value formatting

def format_value(value):
    """Human/filename-friendly text of an axis value: 0.1 -> '0.1', True -> 'true', None -> 'null'."""
    if value is IGNORED:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, float):
        return repr(value)  # '10.0' stays distinct from the int 10: the text is what the user wrote
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(format_value(v) for v in value) + "]"
    return str(value)


def override_text(value):
    """The ``value`` part of ``--set key=value``: gpgan-train takes strings as typed and parses
    numbers, booleans, null and lists itself (YAML flow text for those)."""
    return value if isinstance(value, str) else yaml_scalar(value)


def _safe_fragment(text):
    return re.sub(r"[^A-Za-z0-9._+-]", "_", text)


# ----------------------------------------------------------------------------------------------
# validation helpers

def _err(path, where, message):
    return SweepError(f"sweep file {path}: {where}: {message}")


def _refuse_empty(path, key, value):
    """The schema checks a top-level key's type, not whether it is empty: ``''`` (or ``{}``) is
    refused here, in the schema's words."""
    if value is not None and len(value) == 0:
        raise _err(path, key, f"got {value!r}; accepted: {SWEEP_SCHEMA.tree[key].accepted()}")


def _check_key(path, where, key):
    if not isinstance(key, str) or not _KEY_RE.match(key):
        raise _err(path, where, f"{key!r} is not a dotted config key like 'penalty.weight'")


def _check_value(path, where, value, allow_mapping=False):
    ok = (isinstance(value, (str, bool, int, float)) or value is None
          or (isinstance(value, list) and all(isinstance(v, (str, bool, int, float)) for v in value))
          or (allow_mapping and isinstance(value, dict) and all(isinstance(k, str) for k in value)))
    if not ok:
        what = "a scalar, a list of scalars or a mapping" if allow_mapping else "a scalar (or a list of scalars)"
        raise _err(path, where, f"value {value!r} must be {what}")


def _as_list(value):
    return value if isinstance(value, list) else [value]


def _check_axis_values(path, where, axes, mapping):
    """``mapping``: axis key -> value or list of values; keys must be axes, values on the axis."""
    if not isinstance(mapping, dict) or not mapping:
        raise _err(path, where, "must be a non-empty mapping of axis keys to values")
    out = {}
    for key, val in mapping.items():
        if key not in axes:
            raise _err(path, where, f"{key!r} is not an axis; axes are {list(axes)}{did_you_mean(key, axes)}")
        vals = _as_list(val)
        for v in vals:
            if not any(_same(v, a) for a in axes[key]):
                raise _err(path, where, f"{key}={v!r} is not among the axis values {axes[key]}")
        out[key] = vals
    return out


def _same(a, b):
    """YAML-level equality (1 == 1.0 but True != 1)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    return a == b


def _check_overrides(path, where, axes, mapping, allow_empty=False):
    """``mapping``: dotted config key -> value, none of them one of ``axes``; returns a copy."""
    if not isinstance(mapping, dict) or (not mapping and not allow_empty):
        raise _err(path, where, "must be a " + ("" if allow_empty else "non-empty ")
                   + "mapping of dotted config keys to values")
    out = {}
    for key, value in mapping.items():
        _check_key(path, where, key)
        _check_value(path, f"{where}.{key}", value, allow_mapping=True)
        if key in axes:
            raise _err(path, f"{where}.{key}", "is also an axis; a key is either set or varied")
        out[key] = value
    return out


def _rules(path, section, raw, keys, shape):
    """``[(where, rule)]`` for a list of rules (``raw``, already a list or None: the schema checked
    it) that each take exactly ``keys`` (as ``ignore:``'s and ``adjust:``'s do); ``shape`` is the
    rule's form for the messages."""
    out = []
    for i, rule in enumerate(raw or []):
        where = f"{section}[{i}]"
        if not isinstance(rule, dict):
            raise _err(path, where, f"must be a mapping {shape}")
        bad = [k for k in rule if k not in keys]
        if bad:
            raise _err(path, where, "unknown key(s) " + ", ".join(f"{k!r}{did_you_mean(k, keys)}" for k in bad)
                       + f"; valid keys are {list(keys)}")
        if any(k not in rule for k in keys):
            raise _err(path, where, "needs both " + " and ".join(f"'{k}'" for k in keys))
        out.append((where, rule))
    return out


def _parse_adjust(path, axes, raw):
    """``adjust: [{when: {axis: value or [values]}, set: {dotted key: value}}]``."""
    return [(_check_axis_values(path, where + ".when", axes, rule["when"]),
             _check_overrides(path, where + ".set", axes, rule["set"]))
            for where, rule in _rules(path, "adjust", raw, ADJUST_KEYS, "{when: {axis: value}, set: {key: value}}")]


def _check_evaluation_key(path, where, name):
    """An evaluation's key (``eval/...``, ``eval_std/...``) must be one a run logs; other names
    (losses, gradient norms, schedules, timings) are whatever the runs' metrics.jsonl holds."""
    if not name.startswith(("eval/", "eval_std/")):
        return
    logged = set(KNOWN_METRICS) | {key for keys in METRIC_KEYS.values() for key in keys}
    if name not in logged:
        raise _err(path, where, f"metric {name!r} is no evaluation a run logs{did_you_mean(name, logged)}; "
                   f"accepted: {', '.join(sorted(logged))}, or another key of the runs' metrics.jsonl (loss/critic ...)")


def _parse_metrics(path, raw):
    metrics = []
    for i, item in enumerate(raw or []):  # a list or None: the schema checked it
        where = f"metrics[{i}]"
        if isinstance(item, str):
            name, direction = item, None
        elif isinstance(item, dict) and set(item) <= {"name", "direction"} and "name" in item:
            name, direction = item["name"], item.get("direction")
        elif isinstance(item, dict) and len(item) == 1:
            (name, direction), = item.items()
        else:
            raise _err(path, where, f"{item!r} must be a name, {{name: max|min}} or {{name: ..., direction: ...}}")
        if not isinstance(name, str) or not name:
            raise _err(path, where, f"metric name {name!r} must be a non-empty string")
        _check_evaluation_key(path, where, name)
        if direction is None:
            direction = metric_direction(name)
        if direction not in DIRECTIONS:
            raise _err(path, where, f"direction {direction!r} for {name!r} must be one of {list(DIRECTIONS)}"
                       + did_you_mean(direction, DIRECTIONS))
        if any(name == m for m, _ in metrics):
            raise _err(path, where, f"metric {name!r} is listed twice")
        metrics.append((name, direction))
    return metrics


# ----------------------------------------------------------------------------------------------
# loading

def load_sweep(path):
    """Read and validate a sweep file (``yaml.safe_load``); raises :class:`SweepError`."""
    path = os.fspath(path)
    raw = read_yaml_file(path, f"sweep file {path}", "a sweep file", error=SweepError)
    return parse_sweep(raw, path)


def parse_sweep(raw, path):
    """Validate an already-parsed sweep mapping; ``path`` locates ``base`` and names errors.

    :data:`SWEEP_SCHEMA` checks the top-level keys and their types; then come the rules only a
    sweep knows (axis names and values, rule contents, the trainer's own keys and values)."""
    path = os.fspath(path)
    config, errors = SWEEP_SCHEMA.problems(raw, root="top level")  # absent keys: their defaults
    if errors:
        raise SweepError(f"sweep file {path}: {problems_line(errors)}")

    for key in ("base", "axes", "out", "reference_scores"):
        _refuse_empty(path, key, config[key])
    base_text = config["base"]
    base = os.path.join(os.path.dirname(path), base_text)
    if not os.path.isfile(base):
        found = "is a folder, not a YAML file" if os.path.isdir(base) else "does not exist"
        raise _err(path, "base", f"config file {base} (relative to the sweep file) {found}")

    variants = _parse_variants(path, config["variants"])
    axes_raw = config["axes"]
    axes = {}
    for key, values in axes_raw.items():
        where = f"axes.{key}" if isinstance(key, str) else "axes"
        _check_key(path, where, key)
        if not isinstance(values, list) or not values:
            raise _err(path, where, f"must be a non-empty list of values, got {values!r}")
        for v in values:
            _check_value(path, where, v)
        for i, v in enumerate(values):
            if any(_same(v, w) for w in values[:i]):
                raise _err(path, where, f"value {v!r} is listed twice")
        if key in variants:
            for v in values:
                if not isinstance(v, str) or v not in variants[key]:
                    raise _err(path, where, f"{v!r} is not a variant of {key!r}; its variants are "
                                            f"{list(variants[key])}{did_you_mean(v, variants[key])}")
        elif "." not in key:
            raise _err(path, where, f"{key!r} is neither a dotted config key like 'penalty.weight' nor a "
                                    f"variant axis (variants: {list(variants)}){did_you_mean(key, variants)}")
        axes[key] = list(values)
    for name in variants:
        if name not in axes:
            raise _err(path, f"variants.{name}", f"is not used as an axis; add `{name}: [...]` to axes")
        for variant, settings in variants[name].items():
            for key in settings:
                if key in axes:
                    raise _err(path, f"variants.{name}.{variant}.{key}", "is also an axis; a key is either "
                                                                        "set by a variant or varied")

    fixed = _check_overrides(path, "set", axes, config["set"] or {}, allow_empty=True)

    def axis_option(name, default):
        if name not in raw:  # the default applies only when it is an axis
            return default if default in axes else None
        value = config[name]
        if value is None:
            return None
        if value not in axes:
            raise _err(path, name, f"{value!r} is not an axis; axes are {list(axes)}{did_you_mean(value, axes)}")
        return value

    seed_axis = axis_option("seed_axis", DEFAULT_SEED_AXIS)
    x_axis = axis_option("x_axis", DEFAULT_X_AXIS)
    series_axis = axis_option("series_axis", DEFAULT_SERIES_AXIS)
    if seed_axis is not None and seed_axis in (x_axis, series_axis):
        raise _err(path, "seed_axis", f"{seed_axis!r} cannot also be the x or series axis of the figures")
    if x_axis is not None and x_axis == series_axis:
        raise _err(path, "x_axis", f"{x_axis!r} cannot also be the series axis")

    ignore = []
    for where, rule in _rules(path, "ignore", config["ignore"], IGNORE_KEYS,
                              "{when: {axis: value}, axes: [axis, ...]}"):
        when = _check_axis_values(path, where + ".when", axes, rule["when"])
        dropped = rule["axes"]
        if isinstance(dropped, str):
            dropped = [dropped]
        if not isinstance(dropped, list) or not dropped:
            raise _err(path, where + ".axes", "must be a non-empty list of axis keys")
        for key in dropped:
            if key not in axes:
                raise _err(path, where + ".axes", f"{key!r} is not an axis; axes are {list(axes)}{did_you_mean(key, axes)}")
            if key in when:
                raise _err(path, where + ".axes", f"{key!r} cannot be both tested in 'when' and ignored")
            if key == seed_axis:
                raise _err(path, where + ".axes", f"the seed axis {key!r} cannot be ignored")
        ignore.append((when, list(dropped)))

    exclude = [_check_axis_values(path, f"exclude[{i}]", axes, rule) for i, rule in
               enumerate(config["exclude"] or [])]
    adjust = _parse_adjust(path, axes, config["adjust"])

    out = config["out"]

    reference_scores, reference_scores_path = _parse_reference_scores(path, config["reference_scores"])

    sweep = Sweep(
        path=path, base=base, axes=axes, fixed=fixed, metrics=_parse_metrics(path, config["metrics"]),
        seed_axis=seed_axis, x_axis=x_axis, series_axis=series_axis, ignore=ignore, exclude=exclude,
        out=out, title=config["title"], base_text=base_text,
        variants=variants, notes=config["notes"], adjust=adjust,
        reference_scores=reference_scores, reference_scores_path=reference_scores_path,
    )
    _check_config_keys(sweep)
    specs = expand_runs(sweep)  # surfaces name collisions and empty sweeps now
    if not specs:
        raise _err(path, "exclude", "excludes every combination; nothing to run")
    _check_run_configs(sweep, specs)
    return sweep


def _parse_reference_scores(path, text):
    """``(record, path)`` of ``reference_scores:`` (a ``gpgan-eval real --out`` file, relative to
    the sweep file), checked now so that a report never fails on it; ``(None, None)`` when the key
    is absent."""
    if text is None:
        return None, None
    file = os.path.join(os.path.dirname(path), text)
    if not os.path.isfile(file):
        raise _err(path, "reference_scores", f"{file} (relative to the sweep file) does not exist; "
                                             "`gpgan-eval real SOURCE --ref REF --out FILE` writes it")
    try:
        return read_real_scores(file), file
    except ValueError as exc:
        raise _err(path, "reference_scores", str(exc)) from None


def _parse_variants(path, raw):
    """``variants: {axis name: {variant name: {dotted key: value}}}``: named bundles of
    overrides, used as the values of an axis (e.g. a penalty in its paper's pairing of loss,
    critic steps and optimizer beside the common one)."""
    if raw is None:
        return {}
    variants = {}  # raw is a mapping: the schema checked it
    for name, bundle in raw.items():
        where = f"variants.{name}"
        if not isinstance(name, str) or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
            raise _err(path, "variants", f"{name!r} must be a plain name (no dots): it names an axis, not a key")
        if not isinstance(bundle, dict) or not bundle:
            raise _err(path, where, "must be a non-empty mapping {variant name: {dotted key: value}}")
        variants[name] = {}
        for variant, settings in bundle.items():
            if not isinstance(variant, str) or not variant:
                raise _err(path, where, f"variant name {variant!r} must be a non-empty string")
            settings = {} if settings is None else settings
            # The axes are not known yet (they are checked against the variants): parse_sweep
            # rejects a variant key that is also an axis.
            variants[name][variant] = _check_overrides(path, f"{where}.{variant}", (), settings, allow_empty=True)
    return variants


def run_config(sweep, spec):
    """The resolved config the sweep asks run ``spec`` to train with: the base config with its
    overrides, read and validated by gpgan-train's own schema (raises ConfigError, ValueError or
    OSError where the trainer would refuse it)."""
    from gpgan.train.config import load_config

    return load_config(str(sweep.base), override_args(spec))


def override_args(spec):
    """Run ``spec``'s overrides as gpgan-train's ``--set`` takes them (``key=value``), in order."""
    return [f"{k}={override_text(v)}" for k, v in spec.overrides]


def _check_config_keys(sweep):
    """Reject keys gpgan-train would reject (unknown keys, sections) before any run starts, using
    the trainer's own override parser, naming the section of the sweep file they are in."""
    try:
        from gpgan.train.config import ConfigError, parse_override
    except ImportError:  # the training package is not importable here: the trainer will judge
        return
    items = [("set", k, v) for k, v in sweep.fixed.items()]
    items += [("axes", k, v) for k, vals in sweep.axes.items() for v in vals if k not in sweep.variants]
    items += [(f"variants.{name}.{variant}", k, v) for name, bundle in sweep.variants.items()
              for variant, settings in bundle.items() for k, v in settings.items()]
    items += [(f"adjust[{i}].set", k, v) for i, (_, settings) in enumerate(sweep.adjust) for k, v in settings.items()]
    for section, key, value in items:
        try:
            parse_override(f"{key}={override_text(value)}")
        except ConfigError as exc:
            raise _err(sweep.path, f"{section}.{key}", str(exc)) from None


def _check_run_configs(sweep, specs):
    """Reject, before any run starts, a run whose whole config gpgan-train would refuse (a value
    out of range or not among a key's choices, such as ``penalty.type: r9``), naming the run and
    its axis values; the first such run is named. Also two runs that would train one config (axis
    values that the schema reads as one, such as 1 and 1e0, or variants with the same settings):
    they would be counted as two seeds' worth of evidence for one run."""
    try:
        from gpgan.train.config import ConfigError
    except ImportError:  # the training package is not importable here: the trainer will judge
        return
    seen = {}
    for spec in specs:
        values = ", ".join(f"{k}={format_value(v)}" for k, v in spec.values.items() if v is not IGNORED)
        try:
            config = run_config(sweep, spec)
        except ConfigError as exc:
            raise _err(sweep.path, f"run {spec.name} ({values})", str(exc)) from None
        key = json.dumps(config, sort_keys=True, default=str)
        if key in seen:
            raise _err(sweep.path, "axes", f"runs {seen[key]} and {spec.name} ({values}) would train the same "
                       "config: their values mean one setting; keep one of them")
        seen[key] = spec.name


# ----------------------------------------------------------------------------------------------
# expansion

def _matches(values, rule):
    return all(any(_same(values[k], v) for v in vals) for k, vals in rule.items())


def _axis_labels(axes):
    """Short label per axis for run names: the last key component unless two axes share it."""
    last = {k: k.rsplit(".", 1)[-1] for k in axes}
    counts = {}
    for lab in last.values():
        counts[lab] = counts.get(lab, 0) + 1
    return {k: (lab if counts[lab] == 1 else k.replace(".", "-")) for k, lab in last.items()}


def expand_runs(sweep):
    """Every combination of the axes (file order, last axis fastest), after ``exclude`` and
    ``ignore``; duplicates produced by ``ignore`` are kept once (first occurrence)."""
    keys = list(sweep.axes)
    labels = _axis_labels(keys)
    specs, seen_names, seen_values = [], {}, set()
    for combo in itertools.product(*(sweep.axes[k] for k in keys)):
        values = dict(zip(keys, combo))
        if any(_matches(values, rule) for rule in sweep.exclude):
            continue
        for when, dropped in sweep.ignore:
            if _matches(values, when):
                for k in dropped:
                    values[k] = IGNORED
        ident = tuple((k, format_value(values[k]), type(values[k]).__name__) for k in keys)
        if ident in seen_values:
            continue
        seen_values.add(ident)
        name = "__".join(f"{labels[k]}-{_safe_fragment(format_value(values[k]))}"
                         for k in keys if values[k] is not IGNORED)
        if name in seen_names:
            raise _err(sweep.path, "axes", f"runs {seen_names[name]} and {values} get the same folder name "
                       f"{name!r}; make the values differ in letters, digits or . + - _")
        seen_names[name] = values
        overrides = list(sweep.fixed.items())
        for k, v in values.items():
            if v is IGNORED:
                continue
            # A variant stands for its bundle of overrides (which win over set:, coming later).
            overrides += list(sweep.variants[k][v].items()) if k in sweep.variants else [(k, v)]
        for when, settings in sweep.adjust:  # last, so that they win
            if _matches(values, when):
                overrides += list(settings.items())
        setting = tuple(format_value(values[k]) for k in sweep.setting_axes)
        seed = values.get(sweep.seed_axis) if sweep.seed_axis else None
        specs.append(RunSpec(name=name, values=values, overrides=overrides, setting=setting, seed=seed))
    return specs


def _selected_value(axis_value, text):
    """Whether ``text`` (from ``--only``) names ``axis_value``: as results.csv or a run name writes
    it (``format_value`` 'r1', '0', '10.0', '[0.5,0.9]', '-' where an ``ignore`` rule dropped the
    axis; its folder-name form '_0.5_0.9_'), or as YAML reads it (10 for 10.0, [0.5, 0.9]; true is
    no 1), a number also in any form float() reads ('1e-4')."""
    written = format_value(axis_value)
    if text in (written, _safe_fragment(written)):
        return True
    if axis_value is IGNORED or isinstance(axis_value, str):
        return False
    try:
        parsed = parse_yaml(text, "a value", SweepError)
    except SweepError:
        return False
    if isinstance(parsed, str) and isinstance(axis_value, (int, float)) and not isinstance(axis_value, bool):
        try:
            parsed = float(parsed)
        except ValueError:
            return False
    return _same(axis_value, parsed)


def _split_values(text):
    """``--only``'s comma-separated values, a comma inside brackets not splitting ('[0.5,0.9],[0,0.99]')."""
    values, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            values.append(text[start:i])
            start = i + 1
    values.append(text[start:])
    return [v.strip() for v in values if v.strip()]


def select_runs(sweep, specs, selectors):
    """The runs of ``specs`` that every selector matches, in order. A selector is the text
    ``AXIS=VALUE[,VALUE...]`` (``gpgan-ablate --only``): the runs whose ``AXIS`` (its key, or its
    label in run names) has one of the values (see :func:`_selected_value`; '-' selects the runs
    where an ``ignore`` rule dropped the axis). Raises :class:`SweepError` for an unknown axis or
    value, or when no run is left."""
    chosen = []
    labels = {label: key for key, label in _axis_labels(list(sweep.axes)).items()}
    for text in selectors:
        axis, sep, values = text.partition("=")
        axis = axis.strip()
        wanted = _split_values(values) if sep else []
        if not wanted:
            raise SweepError(f"--only {text!r}: expected AXIS=VALUE[,VALUE...], e.g. "
                             f"{next(iter(sweep.axes))}={format_value(next(iter(sweep.axes.values()))[0])}")
        axis = labels.get(axis, axis) if axis not in sweep.axes else axis  # 'seed', as run names write it
        if axis not in sweep.axes:
            raise SweepError(f"--only {text!r}: {sweep.path} has no axis {axis!r}{did_you_mean(axis, sweep.axes)}; "
                             f"its axes: {', '.join(sweep.axes)}")
        known = list(sweep.axes[axis]) + ([IGNORED] if any(spec.values[axis] is IGNORED for spec in specs) else [])
        for value in wanted:
            if not any(_selected_value(v, value) for v in known):
                raise SweepError(f"--only {text!r}: the axis {axis} has no value {value!r}; its values: "
                                 f"{', '.join(format_value(v) for v in known)}")
        chosen.append((axis, wanted))
    picked = [spec for spec in specs
              if all(any(_selected_value(spec.values[axis], v) for v in wanted) for axis, wanted in chosen)]
    if not picked:
        raise SweepError(f"--only {' --only '.join(selectors)}: no run of {sweep.path} has all of these values "
                         "(excluded or ignored combinations have none); gpgan-ablate SWEEP --dry-run lists the runs")
    return picked
