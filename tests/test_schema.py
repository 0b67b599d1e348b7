"""gpgan.schema's general pieces, on schemas of their own: the free-form "list" kind, required keys,
an ``accepts`` wording, Schema.problems, the two-way did-you-mean, and Entries (a mapping's options
that depend on another key's value)."""
import pytest

from gpgan.schema import ConfigError, Entries, Field, Schema, check_options


def test_list_field_passes_any_list_on_as_a_copy_and_refuses_other_types():
    field = Field("list", [], "rules")
    rules = [{"when": {"a": 1}}, "x", 3]
    checked = field.check(rules)
    assert checked == rules and checked is not rules and checked[0] is not rules[0]
    assert field.check(("a", "b")) == ["a", "b"]
    for value, reason in [({}, "a mapping, not a list"), ("a", "a string, not a list"), (0, "a number, not a list")]:
        with pytest.raises(ValueError, match=reason):
            field.check(value)
    with pytest.raises(ValueError, match="null is not accepted"):
        field.check(None)
    assert Field("list", [], "", nullable=True).check(None) is None
    assert field.accepted() == "a list" and field.type_name() == "list"
    assert Field("list", [], "", nullable=True).accepted() == "a list, or null"


def test_accepts_replaces_the_kinds_wording_and_keeps_or_null():
    field = Field("list", [], "", nullable=True, accepts="a list of {when: ..., set: ...} rules")
    assert field.accepted() == "a list of {when: ..., set: ...} rules, or null"
    assert Field("dict", None, "", accepts="a mapping of axes").accepted() == "a mapping of axes"
    assert Field("dict", None, "").accepted() == "a mapping of keyword options"


SCHEMA = Schema({
    "base": Field("str", None, "the base", required=True, accepts="a path"),
    "axes": Field("dict", None, "the axes", required=True),
    "x_axis": Field("str", None, "x", nullable=True),
    "rules": Field("list", [], "the rules", nullable=True),
})


def test_required_keys_are_reported_missing_with_what_is_accepted():
    _, errors = SCHEMA.problems({"axes": {"a": [1]}})
    assert errors == ["missing required key 'base'; accepted: a path"]
    _, errors = SCHEMA.problems(None)  # an empty file: every required key is missing
    assert errors == ["missing required key 'base'; accepted: a path",
                      "missing required key 'axes'; accepted: a mapping of keyword options"]
    with pytest.raises(ConfigError, match="invalid config \\(s.yaml\\): missing required key 'base'"):
        SCHEMA.validate({"axes": {}}, "s.yaml")
    with pytest.raises(ConfigError) as info:  # several problems: still one line
        SCHEMA.validate({}, "s.yaml")
    assert str(info.value) == ("invalid config (s.yaml): 2 problems: (1) missing required key 'base'; accepted: a "
                               "path (2) missing required key 'axes'; accepted: a mapping of keyword options")
    resolved, errors = SCHEMA.problems({"base": "b.yaml", "axes": {"a": [1]}})
    assert errors == [] and resolved == {"base": "b.yaml", "axes": {"a": [1]}, "x_axis": None, "rules": []}


def test_problems_lists_every_error_and_names_a_non_mapping_by_root():
    _, errors = SCHEMA.problems({"base": 3, "axes": {}, "rules": {}, "axis": 1})
    assert errors == [
        "unknown key 'axis'; did you mean 'x_axis' or 'axes'?",  # best first (difflib)
        "base: got 3 (a number, not a string); accepted: a path",
        "rules: got {} (a mapping, not a list); accepted: a list, or null",
    ]
    _, errors = SCHEMA.problems(["a"], root="top level")
    assert errors == ["top level: got [a]; accepted: a mapping with keys base, axes, x_axis, rules"]


def test_the_reference_table_says_required():
    table = SCHEMA.reference_markdown()
    assert "| `base` | str | required | a path | the base |" in table
    assert "| `rules` | list or null | `[]` | a list, or null | the rules |" in table


def test_a_list_override_is_read_as_yaml():
    assert SCHEMA.parse_override("rules=[{a: 1}, b]") == ("rules", [{"a": 1}, "b"])
    assert SCHEMA.parse_override("rules=") == ("rules", None)  # nullable: an empty value clears it
    assert Schema({"rules": Field("list", [], "")}).parse_override("rules=") == ("rules", [])


# -- Entries: a mapping's options that depend on another key's value ----------------------------
NOISE = Field("float", 0.5, "the noise", minimum=0)
KINDS = {"plain": {}, "noisy": {"noise": NOISE, "flip": Field("bool", True, "flip it")}, "loud": {"noise": NOISE}}
ENTRIES = Schema({"thing": {
    "kind": Field("str", "plain", "the kind", choices=list(KINDS)),
    "size": Field("int", 1, "the size", minimum=1),
    "options": Field("dict", {}, "the kind's options", entries=Entries("thing.kind", "kind", lambda: KINDS)),
}})


def problems(**options):
    return ENTRIES.problems({"thing": options})


def test_entries_refuse_an_option_the_value_does_not_take_naming_those_it_takes():
    _, errors = problems(kind="noisy", options={"nosie": 1, "colour": 2})
    assert errors == [
        "thing.options.nosie: not an option of kind 'noisy' (did you mean 'noise'?); accepted: noise, flip",
        "thing.options.colour: not an option of kind 'noisy'; accepted: noise, flip",
    ]
    # a sibling key of the mapping is named, not passed on a second time
    _, errors = problems(kind="loud", options={"size": 2})
    assert errors == ["thing.options.size: not an option of kind 'loud' (set thing.size instead); accepted: noise"]
    _, errors = problems(kind="plain", options={"noise": 1, "x": 2})
    assert errors == ["thing.options: kind 'plain' takes no options; got noise, x"]


def test_entries_type_bound_and_convert_each_option():
    _, errors = problems(kind="noisy", options={"noise": "abc", "flip": "maybe"})
    assert errors == ["thing.options.noise: got 'abc' (not a number); accepted: a number >= 0",
                      "thing.options.flip: got 'maybe' (a string, not a boolean); accepted: true or false"]
    _, errors = problems(kind="noisy", options={"noise": -1})
    assert errors == ["thing.options.noise: got -1 (out of range); accepted: a number >= 0"]
    resolved, errors = problems(kind="noisy", options={"noise": "1e-2", "flip": False})
    assert errors == [] and resolved["thing"]["options"] == {"noise": 0.01, "flip": False}  # no default added
    assert problems(kind="loud")[0]["thing"]["options"] == {}
    with pytest.raises(ConfigError, match=r"^invalid config \(c.yaml\): thing.options.flip: not an option of kind "
                                          r"'loud'; accepted: noise$"):
        ENTRIES.validate({"thing": {"kind": "loud", "options": {"flip": True}}}, "c.yaml")


def test_entries_are_not_checked_against_a_refused_value():
    _, errors = problems(kind="noisyy", options={"noise": 1})
    assert len(errors) == 1 and errors[0].startswith("thing.kind: got 'noisyy'")
    _, errors = problems(kind="loud", options=[1])
    assert errors == ["thing.options: got [1] (a list, not a mapping); accepted: a mapping of the options of the "
                      "thing.kind (plain: no options; noisy: noise, flip; loud: noise)"]


def test_check_options_words_a_callers_own_error():
    assert check_options(KINDS["noisy"], {"noise": "2"}, "kind 'noisy'") == ({"noise": 2.0}, [])
    assert check_options({}, {"a": 1}, "kind 'plain'") == ({}, ["options: kind 'plain' takes no options; got a"])
    assert check_options(KINDS["loud"], {"a": 1}, "kind 'loud'")[1] == [
        "a: not an option of kind 'loud'; accepted: noise"]


def test_the_reference_table_has_a_row_for_each_option():
    table = ENTRIES.reference_markdown()
    assert ("| `thing.options` | dict | `{}` | a mapping of the options of the thing.kind (plain: no options; noisy: "
            "noise, flip; loud: noise) | the kind's options |") in table
    assert "| `thing.options.noise` | float | `0.5` | a number >= 0 | thing.kind noisy, loud: the noise |" in table
    assert "| `thing.options.flip` | bool | `true` | true or false | thing.kind noisy: flip it |" in table
    with pytest.raises(ValueError, match="entries are the options of a dict field"):
        Field("str", None, "", entries=ENTRIES.lookup("thing.options").entries)
