"""gpgan.schema's general pieces that gpgan's training config does not use: the free-form "list"
kind, required keys, an ``accepts`` wording, Schema.problems, and the two-way did-you-mean."""
import pytest

from gpgan.schema import ConfigError, Field, Schema


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
