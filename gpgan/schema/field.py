"""``Field``: one typed leaf of a config schema (type, default, bounds, choices, one line of doc);
``Entries``: the options a "dict" field takes, per value of another key."""
import copy
import math

__all__ = ["Entries", "Field", "KINDS", "yaml_kind"]

#: the kinds of value a field can hold
KINDS = ("int", "float", "bool", "str", "floats", "strs", "dict", "list")


def yaml_kind(value):
    """What ``value`` is, in YAML's words: "a mapping", "a list", "a number", "a boolean", "a string", "null"."""
    for kind, name in ((bool, "a boolean"), ((int, float), "a number"), (str, "a string"), (dict, "a mapping"),
                       ((list, tuple), "a list")):
        if isinstance(value, kind):
            return name
    return "null" if value is None else "not a YAML value"


class Field:
    """One leaf of a schema.

    Args:
        kind: one of :data:`KINDS`: "int", "float", "bool", "str", "floats" (a list of floats),
            "strs" (a list of distinct strings, each one of ``choices`` when given), "dict" (a
            free-form mapping passed on as keyword options) or "list" (a free-form list, passed on
            as is: its entries are the caller's to check).
        default: the value when the key is absent.
        doc: one line saying what the key does.
        choices: accepted values (a list, or a callable returning one, evaluated on validation).
        minimum, maximum: inclusive bounds for numbers; ``exclusive_min``/``exclusive_max`` make
            them strict.
        nullable: whether ``null`` is accepted.
        length: required length of a "floats" list.
        required: whether the key must be given (``default`` then only fills the reference table).
        accepts: what is accepted, in words, where the kind's own wording says too little (the
            shape of a free-form list's entries, say); ", or null" is added for a nullable field.
        entries: for a "dict": the :class:`Entries` it takes (named and typed options that depend
            on another key's value); without it the mapping is passed on unchecked.
    """

    def __init__(self, kind, default, doc, choices=None, minimum=None, maximum=None,
                 exclusive_min=False, exclusive_max=False, nullable=False, length=None,
                 required=False, accepts=None, entries=None):
        if kind not in KINDS:
            raise ValueError(f"Field: kind {kind!r} is not one of {', '.join(KINDS)}")
        if entries is not None and kind != "dict":
            raise ValueError(f"Field: entries are the options of a dict field, not of a {kind!r}")
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
        self.required = required
        self.accepts = accepts
        self.entries = entries

    @property
    def choices(self):
        return self._choices() if callable(self._choices) else self._choices

    def accepted(self):
        """What the field accepts, in words (used in error messages and the reference table)."""
        if self.accepts is not None:
            text = self.accepts
        elif self.entries is not None:
            text = self.entries.accepted()
        elif self.kind == "str" and self._choices is not None:
            text = "one of " + ", ".join(repr(c) for c in self.choices)
        elif self.kind == "strs":
            text = "a list of distinct strings"
            if self._choices is not None:
                text = "a list of distinct values, each one of " + ", ".join(repr(c) for c in self.choices)
        else:
            text = {
                "int": "an integer", "float": "a number", "bool": "true or false",
                "str": "a string", "dict": "a mapping of keyword options", "list": "a list",
                "floats": f"a list of {self.length} numbers" if self.length else "a list of numbers",
            }[self.kind]
            bounds = []
            if self.minimum is not None:
                bounds.append(f"{'>' if self.exclusive_min else '>='} {_number(self.minimum)}")
            if self.maximum is not None:
                bounds.append(f"{'<' if self.exclusive_max else '<='} {_number(self.maximum)}")
            if bounds:
                joined = " and ".join(bounds)
                text += f", each {joined}" if self.kind == "floats" else f" {joined}"
        if self.nullable:
            text += ", or null"
        return text

    def type_name(self):
        name = {"floats": "list[float]", "strs": "list[str]"}.get(self.kind, self.kind)
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
        return getattr(self, "_check_" + self.kind)(value)

    def _check_int(self, value):
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
            raise ValueError(f"{yaml_kind(value)}, not an integer")
        if not self._in_range(value):
            raise ValueError("out of range")
        return value

    def _check_float(self, value):
        if isinstance(value, bool):
            raise ValueError("a boolean is not a number")
        if isinstance(value, str):
            # PyYAML reads "1e-4" (no dot) as a string: accept anything float() reads.
            try:
                value = float(value.strip())
            except ValueError:
                raise ValueError("not a number") from None
        if not isinstance(value, (int, float)):
            raise ValueError(f"{yaml_kind(value)}, not a number")
        value = float(value)
        if not math.isfinite(value):
            raise ValueError("not a finite number")
        if not self._in_range(value):
            raise ValueError("out of range")
        return value

    def _check_bool(self, value):
        if not isinstance(value, bool):
            raise ValueError(f"{yaml_kind(value)}, not a boolean")
        return value

    def _check_str(self, value):
        if not isinstance(value, str):
            raise ValueError(f"{yaml_kind(value)}, not a string")
        choices = self.choices
        if choices is not None and value not in choices:
            raise ValueError("not one of the accepted values")
        return value

    def _check_floats(self, value):
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"{yaml_kind(value)}, not a list")
        if self.length is not None and len(value) != self.length:
            raise ValueError(f"has {len(value)} entries, not {self.length}")
        item = Field("float", None, "", minimum=self.minimum, maximum=self.maximum,
                     exclusive_min=self.exclusive_min, exclusive_max=self.exclusive_max)
        return [item.check(v) for v in value]

    def _check_strs(self, value):
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"{yaml_kind(value)}, not a list")
        item = Field("str", None, "", choices=self._choices)
        checked = []
        for v in value:
            try:
                checked.append(item.check(v))
            except ValueError as exc:
                raise ValueError(f"entry {v!r}: {exc}") from None
            if checked.count(checked[-1]) > 1:
                raise ValueError(f"{v!r} is listed twice")
        return checked

    def _check_dict(self, value):
        if not isinstance(value, dict):
            raise ValueError(f"{yaml_kind(value)}, not a mapping")
        for k in value:
            if not isinstance(k, str):
                raise ValueError(f"key {k!r} is not a string")
        return copy.deepcopy(value)

    def _check_list(self, value):
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"{yaml_kind(value)}, not a list")
        return copy.deepcopy(list(value))


class Entries:
    """The options a "dict" field takes when they depend on another key's value: a penalty's options
    on its type, a data set's on its name. Each option is a :class:`Field` (type, default, bounds),
    declared by whatever owns that value (the penalty, the data set); the schema rejects an option
    the value does not take (naming those it takes), a wrong type or a value out of range (naming
    the option's key), and converts the given ones. Defaults are not filled in: an option left out
    is the owner's to default.

    Args:
        by: the dotted key whose value picks the options, e.g. ``"penalty.type"``.
        noun: what the messages call that value's owner: ``"penalty"`` gives ``penalty 'r1'``.
        table: a callable returning ``{value of by: {option name: Field}}`` for every value ``by``
            accepts (``{}`` for a value that takes no options); called on validation.
    """

    def __init__(self, by, noun, table):
        self.by = by
        self.noun = noun
        self._table = table

    def table(self):
        return self._table()

    def of(self, value):
        """``{option name: Field}`` that ``value`` (of the key ``by``) takes."""
        return self.table().get(value, {})

    def owner(self, value):
        """How messages name the owner of the options: ``penalty 'r1'``."""
        return f"{self.noun} {value!r}"

    def accepted(self):
        """In words, per value of ``by`` (values with the same option names together)."""
        groups = {}
        for value, fields in self.table().items():
            groups.setdefault(tuple(fields), []).append(str(value))
        parts = [f"{', '.join(values)}: {', '.join(names) if names else 'no options'}"
                 for names, values in groups.items()]
        return f"a mapping of the options of the {self.by} ({'; '.join(parts)})"

    def options(self):
        """``[(option name, Field, [values of by that take it])]``, each distinct Field once, in
        the table's order (for the reference table)."""
        rows = {}
        for value, fields in self.table().items():
            for name, field in fields.items():
                rows.setdefault((name, id(field)), (name, field, []))[2].append(str(value))
        return list(rows.values())


def _number(bound):
    """A bound as the error message writes it: whole numbers in full (a seed's 4294967295), others short."""
    return str(bound) if isinstance(bound, int) else f"{bound:g}"
