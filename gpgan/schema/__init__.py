"""Typed config schemas: fields with types, defaults and bounds; options of a mapping that depend on
another key's value (``Entries``); validation that names every bad key (with the closest valid key)
and value (with what is accepted); YAML files that extend each other with ``base:``; typed
``--set key.sub=value`` overrides; diffs; a Markdown reference.

This package knows nothing of GANs: gpgan's own schema is :data:`gpgan.train.config.SCHEMA`.
"""
from gpgan.schema.field import Entries, Field
from gpgan.schema.schema import (ConfigError, Schema, check_options, closest, did_you_mean, diff_configs, get_key,
                                 parse_yaml, problems_line, read_yaml_file, yaml_kind, yaml_scalar)

__all__ = ["Entries", "Field", "Schema", "ConfigError", "check_options", "closest", "did_you_mean", "diff_configs",
           "get_key", "parse_yaml", "problems_line", "read_yaml_file", "yaml_kind", "yaml_scalar"]
