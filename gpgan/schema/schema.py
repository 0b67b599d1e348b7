"""``Schema``: a nested table of :class:`~gpgan.schema.field.Field` leaves, and everything done
with it: defaults, validation, ``--set`` overrides, YAML files with ``base:`` chains, diffs and a
Markdown reference.

Validation reports every problem at once:

* an unknown key fails and names the closest valid keys (difflib, :func:`closest`);
* a missing required key names what is accepted;
* a wrong type or an out-of-range value names the key, the value and what is accepted;
* a "dict" field with :class:`~gpgan.schema.field.Entries` takes the options its selecting key's
  value declares (a penalty's on penalty.type): another option names those accepted, and each
  option is typed and bounded like a field (:func:`check_options`).

Files are read with ``yaml.safe_load`` only. A config may extend another with ``base: other.yaml``
(a path relative to the file that names it), recursively; the file's own keys win.
"""
import copy
import difflib
import os

import yaml

from gpgan.schema.field import Field, yaml_kind

__all__ = ["Schema", "ConfigError", "check_options", "closest", "did_you_mean", "get_key", "diff_configs",
           "parse_yaml", "problems_line", "read_yaml_file", "yaml_scalar", "yaml_kind"]

#: how alike two keys must be (difflib's ratio) for one to be suggested for the other
SIMILARITY = 0.5
_NULLS = ("null", "none", "~", "")


class ConfigError(ValueError):
    """A config that cannot be used; the message names every offending key."""


def closest(word, options, n=1):
    """Up to ``n`` of ``options`` most like ``word`` (as strings), best first; [] if none is close."""
    return difflib.get_close_matches(str(word), [str(o) for o in options], n=n, cutoff=SIMILARITY)


def did_you_mean(word, options, n=2):
    """`` (did you mean 'a' or 'b'?)`` for the options closest to ``word``, or ''."""
    match = closest(word, options, n)
    return " (did you mean " + " or ".join(repr(m) for m in match) + "?)" if match else ""


def check_options(fields, given, owner, where="", elsewhere=None):
    """``(checked, [one-line error])``: the keyword options ``given`` (a mapping) checked against
    the ``fields`` ({name: :class:`Field`}) their ``owner`` takes (``"penalty 'r1'"``).

    ``checked`` holds the given options that passed, converted by their Field (``"1e-4"`` to a
    float); none is added for an option left out. Each error names the option (``where`` and its
    name: ``penalty.options.foo``) and what is accepted: the owner's options for one it does not
    take, with the closest of them, or the Field's values for a wrong type or an out-of-range
    value. ``elsewhere``: ``{name: key}`` of names that another key sets (``center`` is
    ``penalty.center``), which an unknown option of that name points to.
    """
    def key(name):
        return f"{where}.{name}" if where else str(name)

    if given and not fields:
        return {}, [f"{where or 'options'}: {owner} takes no options; got {', '.join(str(k) for k in given)}"]
    checked, errors = {}, []
    for name, value in given.items():
        field = fields.get(name)
        if field is None:
            other = (elsewhere or {}).get(name)
            hint = f" (set {other} instead)" if other else did_you_mean(name, fields)
            errors.append(f"{key(name)}: not an option of {owner}{hint}; accepted: {', '.join(fields)}")
            continue
        try:
            checked[name] = field.check(value)
        except ValueError as exc:
            errors.append(f"{key(name)}: got {_short(value)} ({exc}); accepted: {field.accepted()}")
    return checked, errors


def get_key(config, dotted):
    """``config["a"]["b"]`` for ``"a.b"`` (KeyError / TypeError when absent)."""
    node = config
    for part in dotted.split("."):
        node = node[part]
    return node


def diff_configs(a, b, prefix=""):
    """Dotted keys whose values differ between two configs (mappings compared key by key)."""
    keys = []
    order = list(a) + [k for k in b if k not in a]
    for key in order:
        path = prefix + str(key)
        if key not in a or key not in b:
            keys.append(path)
        elif isinstance(a[key], dict) and isinstance(b[key], dict):
            keys.extend(diff_configs(a[key], b[key], path + "."))
        elif a[key] != b[key]:
            keys.append(path)
    return keys


def yaml_scalar(value, sort_keys=True):
    """``value`` as YAML flow text, so ``--set key=<text>`` parses back to the same value
    (a mapping's keys sorted, unless ``sort_keys`` is false)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000, sort_keys=sort_keys).strip()
    if text.endswith("\n..."):
        text = text[: -len("\n...")]
    if text.endswith("..."):
        text = text[: -len("...")].strip()
    return text


def _short(value):
    """A value in a message as a config file would hold it (strings quoted), cut at 80 characters."""
    try:
        text = repr(value) if isinstance(value, str) else yaml_scalar(value, sort_keys=False)
    except yaml.YAMLError:  # not a YAML value (an object from a caller's own mapping)
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _deep_merge(base, over):
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


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


class Schema:
    """A nested mapping of section names to sub-mappings and of leaf names to Fields.

    Args:
        tree: the nested mapping.
        checks: functions ``config -> [error message]`` run on a config whose fields all passed
            (cross-field rules the fields cannot express).
    """

    def __init__(self, tree, checks=()):
        self.tree = tree
        self.checks = tuple(checks)

    # -- the tree -----------------------------------------------------------------------------
    def fields(self):
        """``(dotted key, Field)`` for every leaf, in schema order."""
        def walk(node, prefix):
            for key, child in node.items():
                if isinstance(child, Field):
                    yield prefix + key, child
                else:
                    yield from walk(child, prefix + key + ".")
        return list(walk(self.tree, ""))

    def keys(self):
        """Every dotted key: the leaves, then the sections (so a misspelt section finds its match)."""
        keys = [path for path, _ in self.fields()]

        def sections(node, prefix):
            for k, v in node.items():
                if isinstance(v, dict):
                    keys.append(prefix + k)
                    sections(v, prefix + k + ".")
        sections(self.tree, "")
        return keys

    def lookup(self, dotted):
        """The Field or section (dict) at a dotted key, or None."""
        node = self.tree
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return node

    def hint(self, key, prefix, siblings, values_only=False):
        """A '; did you mean ...?' for an unknown ``key`` under ``prefix``: the (up to two) closest
        siblings, else the closest dotted key anywhere (``values_only``: a key that takes a value,
        not a section, as ``--set`` needs), else the list of valid keys there."""
        match = closest(key, siblings, n=2)  # two: 'axis' may mean 'axes' as well as 'x_axis'
        if match:
            return "; did you mean " + " or ".join(f"'{prefix}{m}'" for m in match) + "?"
        match = closest(prefix + key, [path for path, _ in self.fields()] if values_only else self.keys())
        if match:
            return f"; did you mean '{match[0]}'?"
        return f"; valid keys here: {', '.join(prefix + s for s in siblings)}"

    def default(self):
        """The config with every key at its default."""
        def build(node):
            return {k: (copy.deepcopy(v.default) if isinstance(v, Field) else build(v)) for k, v in node.items()}
        return build(self.tree)

    # -- validation ---------------------------------------------------------------------------
    def validate(self, raw, source="config"):
        """Check ``raw`` against the schema and return the complete config (defaults filled in).

        Raises:
            ConfigError: listing every unknown key (with the closest valid key), every missing
                required key, every wrong type and every out-of-range value (key, value, what is
                accepted).
        """
        resolved, errors = self.problems(raw)
        if errors:
            raise ConfigError(f"invalid config ({source}): {problems_line(errors)}")
        return resolved

    def problems(self, raw, root="config"):
        """``(resolved config, [one-line error])``: what :meth:`validate` returns and raises, for a
        caller that words its own error (``root`` names ``raw`` itself when it is not a mapping).
        ``checks`` run only when the fields all passed."""
        errors, failed = [], set()

        def visit(node, data, prefix):
            out = {}
            mapping = isinstance(data, dict)  # else one error says so, not one per required key
            if not mapping:
                errors.append(f"{prefix.rstrip('.') or root}: got {_short(data)}; accepted: a mapping "
                              f"with keys {', '.join(node)}")
                data = {}
            for key in data:
                if key not in node:
                    errors.append(f"unknown key '{prefix}{key}'{self.hint(str(key), prefix, node)}")
            for key, child in node.items():
                path = prefix + key
                if isinstance(child, Field):
                    if key not in data:
                        if child.required and mapping:
                            errors.append(f"missing required key '{path}'; accepted: {child.accepted()}")
                        out[key] = copy.deepcopy(child.default)
                        continue
                    try:
                        out[key] = child.check(data[key])
                    except ValueError as exc:
                        errors.append(f"{path}: got {_short(data[key])} ({exc}); accepted: {child.accepted()}")
                        out[key] = copy.deepcopy(child.default)
                        failed.add(path)
                else:
                    sub = data.get(key, {})
                    out[key] = visit(child, {} if sub is None else sub, path + ".")
            return out

        resolved = visit(self.tree, raw if raw is not None else {}, "")
        errors += self._check_entries(resolved, failed)
        if not errors:
            for check in self.checks:
                errors.extend(check(resolved))
        return resolved, errors

    def _check_entries(self, resolved, failed):
        """Check, in place, the options of every "dict" field with :class:`Entries` whose own value
        and selecting key passed (a type the schema refused has no options to check against)."""
        errors = []
        for path, field in self.fields():
            if field.entries is None or path in failed or field.entries.by in failed:
                continue
            section, _, leaf = path.rpartition(".")
            node = get_key(resolved, section) if section else resolved
            if not node[leaf]:
                continue
            value = get_key(resolved, field.entries.by)
            parent = self.lookup(section) if section else self.tree
            elsewhere = {k: (f"{section}.{k}" if section else k) for k in parent if k != leaf}
            node[leaf], found = check_options(field.entries.of(value), node[leaf], field.entries.owner(value),
                                              where=path, elsewhere=elsewhere)
            errors += found
        return errors

    # -- overrides ----------------------------------------------------------------------------
    def parse_override(self, text):
        """Split ``"key.sub=value"`` into (dotted key, typed value), typed by the schema.

        Numbers, booleans (true/false/yes/no/on/off) and lists (``[0.5, 0.9]`` or ``0.5,0.9``;
        ``fid,kid``; an empty value is an empty list) are converted for their fields; strings stay as typed; ``null`` clears a nullable field. Keys
        inside a free-form mapping (``model.generator_options.width=8``) are read as YAML scalars.
        """
        if "=" not in text:
            raise ConfigError(f"override {text!r}: expected key.sub=value, e.g. train.steps=200")
        key, value = text.split("=", 1)
        key = key.strip()
        node = self.lookup(key)
        if node is None:
            parts = key.split(".")
            for i in range(len(parts) - 1, 0, -1):  # inside a free-form mapping?
                parent = self.lookup(".".join(parts[:i]))
                if isinstance(parent, Field) and parent.kind == "dict":
                    return key, parse_yaml(value, f"override {text!r}: the value") if value.strip() else None
            # Name the first part that is not in the schema, with its section's keys (foo.bar: 'foo').
            section, depth = self.tree, 0
            while isinstance(section, dict) and parts[depth] in section:
                section, depth = section[parts[depth]], depth + 1
            known = ".".join(parts[:depth])
            if not isinstance(section, dict):
                raise ConfigError(f"override {text!r}: '{known}' is a value, not a section: set '{known}' itself")
            prefix = known + "." if known else ""
            hint = self.hint(parts[depth], prefix, section, values_only=True)
            raise ConfigError(f"override {text!r}: unknown key '{prefix}{parts[depth]}'{hint}")
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
        if node.kind in ("floats", "strs"):
            if stripped.startswith("["):
                return key, parse_yaml(stripped, f"override {text!r}: the value")
            return key, [p.strip() for p in stripped.split(",") if p.strip()]
        if node.kind in ("dict", "list"):
            parsed = parse_yaml(value, f"override {text!r}: the value")
            return key, ({} if node.kind == "dict" else []) if parsed is None else parsed
        return key, stripped  # int / float: converted (and checked) by Field.check

    def apply_overrides(self, config, overrides):
        """A copy of ``config`` (a raw or resolved mapping) with ``overrides`` applied.

        ``overrides``: strings ``"key.sub=value"`` or (dotted key, value) pairs.
        """
        config = copy.deepcopy(config) if config is not None else {}
        for item in overrides:
            key, value = self.parse_override(item) if isinstance(item, str) else item
            node = config
            parts = key.split(".")
            for i, part in enumerate(parts[:-1]):
                if node.get(part) is None:  # absent, or an empty section (``train:`` in YAML)
                    node[part] = {}
                elif not isinstance(node[part], dict):  # the file's own error, not to be overwritten
                    raise ConfigError(f"cannot set {key}: '{'.'.join(parts[:i + 1])}' is {_short(node[part])} in the "
                                      "config, not a section; fix the config file")
                node = node[part]
            node[parts[-1]] = value
        return config

    # -- files --------------------------------------------------------------------------------
    def read_file(self, path):
        """The raw mapping of a YAML config file with its ``base:`` chain resolved (not validated)."""
        return _read_yaml(path, [])

    def load(self, path, overrides=()):
        """Read a YAML config (resolving ``base:``), apply overrides, validate, fill defaults.

        Raises:
            ConfigError: with a message naming the file and every offending key.
        """
        raw = self.apply_overrides(self.read_file(path), overrides)
        return self.validate(raw, source=f"{path} with --set" if overrides else str(path))

    @staticmethod
    def dump(config):
        """The config as YAML text (key order of the schema)."""
        return yaml.safe_dump(config, sort_keys=False, default_flow_style=None)

    # -- reference table ----------------------------------------------------------------------
    def reference_markdown(self):
        """A Markdown table of every key: type, default, what is accepted, meaning. A "dict" field
        with :class:`Entries` is followed by a row for each of its options, whose meaning starts
        with the values that take it (``penalty.type dragan: ...``)."""
        lines = ["| key | type | default | accepted | meaning |", "|---|---|---|---|---|"]

        def row(path, field, prefix=""):
            try:
                accepted = field.accepted()
            except ImportError:  # a registry not written yet
                accepted = "see " + field.doc
            default = "required" if field.required else f"`{_fmt_default(field.default)}`"
            lines.append(f"| `{path}` | {field.type_name()} | {default} | "
                         f"{accepted.replace('|', '/')} | {(prefix + field.doc).replace('|', '/')} |")

        for path, field in self.fields():
            row(path, field)
            if field.entries is not None:
                try:
                    options = field.entries.options()
                except ImportError:
                    options = []
                for name, option, values in options:
                    row(f"{path}.{name}", option, f"{field.entries.by} {', '.join(values)}: ")
        return "\n".join(lines) + "\n"


def problems_line(errors):
    """Several problems (strings) on one line: the problem alone, or ``"N problems: (1) ... (2) ..."``."""
    if len(errors) == 1:
        return errors[0]
    return f"{len(errors)} problems: " + " ".join(f"({i}) {e}" for i, e in enumerate(errors, 1))


def parse_yaml(text, where, error=None):
    """``yaml.safe_load(text)``. A syntax error, or a tag that safe_load refuses (``!!python/...``),
    is raised as ``error`` (a class; :class:`ConfigError` by default) with one line: ``where`` (e.g.
    ``"config file c.yaml"``), the line and column, and what is wrong there."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise (error or ConfigError)(f"{where} is not valid YAML: {_yaml_reason(exc)}") from None


def read_yaml_file(path, where, what, missing_hint=None, error=None):
    """``yaml.safe_load`` of the file ``path``; every way it can fail is raised as ``error`` (a
    class; :class:`ConfigError` by default) with one line that starts with ``where`` (``"config
    file c.yaml"``): a folder, a missing file (with ``missing_hint`` in brackets), text that is not
    UTF-8, a file that cannot be read, YAML that does not parse. ``what``: what the file should be
    (``"a config"``), for the messages."""
    error = error or ConfigError
    if os.path.isdir(path):
        raise error(f"{where} is a folder, not a YAML file")
    if not os.path.isfile(path):
        raise error(f"{where} does not exist" + (f" ({missing_hint})" if missing_hint else ""))
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError as exc:
        raise error(f"{where} is not UTF-8 text ({exc.reason} at byte {exc.start}); {what} is a YAML "
                    "file") from None
    except OSError as exc:
        raise error(f"{where} cannot be read: {exc.strerror or exc}") from None
    return parse_yaml(text, where, error)


def _yaml_reason(exc):
    problem = getattr(exc, "problem", None)
    if not problem:
        return str(exc).splitlines()[0]
    if isinstance(exc, yaml.constructor.ConstructorError):
        problem += " (plain YAML only: tags such as !!python/... are refused)"
    elif "'\\t'" in problem:
        problem += " (YAML indents with spaces, not tabs)"
    mark = getattr(exc, "problem_mark", None)
    where = [f"line {mark.line + 1}, column {mark.column + 1}"] if mark else []
    where += [exc.context] if getattr(exc, "context", None) else []  # e.g. "while parsing a flow sequence"
    return f"{', '.join(where)}: {problem}" if where else problem


def _read_yaml(path, chain):
    """The mapping in the YAML file ``path``, its ``base:`` merged under it. ``chain``: the files
    that named this one (to name the culprit of a missing base and to catch cycles)."""
    path = os.path.abspath(os.path.expanduser(os.fspath(path)))
    if path in chain:
        raise ConfigError(f"config files extend each other in a cycle: {' -> '.join(chain + [path])}")
    where = f"{chain[-1]}: base config {path}" if chain else f"config file {path}"
    data = read_yaml_file(path, where, "a config", "base paths are relative to the file that names them"
                          if chain else None)
    if data is None:  # an empty file, or only comments: surely not meant to train on defaults
        raise ConfigError(f"{where} is empty: it sets no key. A config names at least a base "
                          "(`base: other.yaml`) or one key (`{}` alone takes every default)")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config must be a mapping of keys, got {yaml_kind(data)}")
    base = data.pop("base", None)
    if base is None:
        return data
    if not isinstance(base, str):
        raise ConfigError(f"{path}: base: got {_short(base)}; accepted: a path to another YAML config")
    parent = _read_yaml(os.path.join(os.path.dirname(path), os.path.expanduser(base)), chain + [path])
    return _deep_merge(parent, data)
