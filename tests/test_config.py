"""Config schema: validation messages, base extension, typed overrides, shipped configs, the reference in docs/."""
import glob
import os

import pytest
import yaml

from gpgan.train.config import (
    CONFIG_SCHEMA,
    SCHEMA,
    ConfigError,
    Field,
    apply_overrides,
    config_reference_markdown,
    default_config,
    diff_configs,
    load_config,
    parse_override,
    validate_config,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def write(path, data):
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return path


def test_defaults_validate_and_fill_missing_keys():
    resolved = validate_config({"train": {"steps": 5}})
    assert resolved["train"]["steps"] == 5
    expected = default_config()
    expected["train"]["steps"] = 5
    assert resolved == expected


@pytest.mark.parametrize("raw, wrong, suggestion", [
    ({"train": {"stpes": 3}}, "train.stpes", "train.steps"),
    ({"trian": {"steps": 3}}, "trian", "train"),
    ({"optim": {"critic": {"learning_rate": 1e-3}}}, "optim.critic.learning_rate", None),
    ({"penalty": {"wieght": 1.0}}, "penalty.wieght", "penalty.weight"),
])
def test_unknown_key_names_closest_valid_key(raw, wrong, suggestion):
    with pytest.raises(ConfigError) as info:
        validate_config(raw, "x.yaml")
    msg = str(info.value)
    assert f"unknown key '{wrong}'" in msg and "x.yaml" in msg
    if suggestion:
        assert f"did you mean '{suggestion}'" in msg
    else:  # no close match: the valid keys of the section are listed
        assert "optim.critic.lr" in msg


@pytest.mark.parametrize("raw, key, value, accepted", [
    ({"train": {"steps": "many"}}, "train.steps", "'many'", "an integer >= 1"),
    ({"train": {"steps": 0}}, "train.steps", "0", "an integer >= 1"),
    ({"train": {"steps": 2.5}}, "train.steps", "2.5", "an integer"),
    ({"train": {"ema": {"enabled": "yes"}}}, "train.ema.enabled", "'yes'", "true or false"),
    ({"penalty": {"weight": -1}}, "penalty.weight", "-1", "a number >= 0"),
    ({"optim": {"generator": {"betas": [0.5]}}}, "optim.generator.betas", "[0.5]", "a list of 2 numbers"),
    ({"optim": {"generator": {"betas": [0.5, 1.0]}}}, "optim.generator.betas", "[0.5, 1.0]", "< 1"),
    ({"device": "tpu"}, "device", "'tpu'", "one of 'cpu', 'cuda'"),
    ({"loss": "wasserstein"}, "loss", "'wasserstein'", "'wgan'"),
    ({"train": {"batch_size": True}}, "train.batch_size", "true", "an integer"),
    # a seed is one 32-bit word (a larger one would share another seed's streams), its bound in full
    ({"train": {"seed": 2**32}}, "train.seed", "4294967296", "an integer >= 0 and <= 4294967295"),
])
def test_wrong_type_or_range_names_key_value_and_accepted(raw, key, value, accepted):
    with pytest.raises(ConfigError) as info:
        validate_config(raw)
    msg = str(info.value)
    assert msg.startswith(f"invalid config (config): {key}: got {value}") and accepted in msg and "\n" not in msg


def test_all_errors_are_reported_together():
    with pytest.raises(ConfigError) as info:
        validate_config({"train": {"steps": -1, "seedd": 1}, "loss": 3})
    msg = str(info.value)
    assert "train.steps" in msg and "train.seedd" in msg and "loss: got 3" in msg
    assert msg.startswith("invalid config (config): 3 problems: (1) ") and "(3) " in msg and "\n" not in msg


def test_yaml_float_without_dot_is_accepted():
    # PyYAML reads 1e-4 as a string; the schema reads it as the number it means.
    assert validate_config(yaml.safe_load("optim: {critic: {lr: 1e-4}}"))["optim"]["critic"]["lr"] == 1e-4


def test_base_extension_is_relative_and_deep(tmp_path):
    (tmp_path / "sub").mkdir()
    write(tmp_path / "base.yaml", {"train": {"steps": 10, "batch_size": 8}, "penalty": {"type": "r1", "weight": 1.0}})
    child = write(tmp_path / "sub" / "child.yaml", "base: ../base.yaml\ntrain: {steps: 20}\n")
    grandchild = write(tmp_path / "sub" / "grand.yaml", "base: child.yaml\npenalty: {weight: 5}\n")
    c = load_config(child)
    assert c["train"]["steps"] == 20 and c["train"]["batch_size"] == 8 and c["penalty"]["type"] == "r1"
    g = load_config(grandchild)
    assert g["train"]["steps"] == 20 and g["penalty"] == {**c["penalty"], "weight": 5.0}


def test_base_cycle_and_missing_base_fail_clearly(tmp_path):
    write(tmp_path / "a.yaml", "base: b.yaml\n")
    write(tmp_path / "b.yaml", "base: a.yaml\n")
    with pytest.raises(ConfigError, match="cycle"):
        load_config(tmp_path / "a.yaml")
    write(tmp_path / "c.yaml", "base: nope.yaml\n")
    with pytest.raises(ConfigError, match="nope.yaml does not exist"):
        load_config(tmp_path / "c.yaml")


@pytest.mark.parametrize("text, reason", [
    ("train: !!python/object/apply:os.system ['true']\n",
     "line 1, column 8: could not determine a constructor for the tag "
     "'tag:yaml.org,2002:python/object/apply:os.system' (plain YAML only: tags such as !!python/... are refused)"),
    ("train:\n\tsteps: 3\n", "line 2, column 1, while scanning for the next token: found character '\\t' that "
                             "cannot start any token (YAML indents with spaces, not tabs)"),
    ("train: {steps: 3\n", "line 2, column 1, while parsing a flow mapping: expected ',' or '}', but got "
                           "'<stream end>'"),
])
def test_bad_yaml_is_one_line_naming_the_file_line_and_column(tmp_path, text, reason):
    path = write(tmp_path / "c.yaml", text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"config file {path} is not valid YAML: {reason}"


def test_a_run_folder_whose_config_is_not_yaml_says_so(tmp_path):
    from gpgan.train.run import RunFolder

    run = RunFolder.create(tmp_path, "quickstart", "r")
    with open(run.config_path, "w") as f:
        f.write("train: [1,\n")
    with pytest.raises(ConfigError, match=r"^the run's config .*config.yaml is not valid YAML: line 2, column 1"):
        run.read_config()


@pytest.mark.parametrize("override", ["optim.generator.betas=[0.5, ", "model.generator_options.width=[",
                                      "model.critic_options={a: "])
def test_an_override_that_is_not_yaml_is_one_line(tmp_path, override):
    path = write(tmp_path / "c.yaml", {"train": {"steps": 10}})
    with pytest.raises(ConfigError) as info:
        load_config(path, [override])
    message = str(info.value)
    assert message.startswith(f"override {override!r}: the value is not valid YAML: line 1, column ")
    assert "\n" not in message


def test_overrides_are_typed_by_the_schema(tmp_path):
    path = write(tmp_path / "c.yaml", {"train": {"steps": 10}})
    c = load_config(path, ["train.steps=200", "penalty.weight=0.5", "train.ema.enabled=true",
                           "optim.critic.betas=0.0,0.99", "optim.generator.betas=[0.1, 0.2]",
                           "data.root=~/data/1e3", "train.generator_batch_size=null",
                           "model.generator_options.width=8", "penalty.center=1"])
    assert c["train"]["steps"] == 200 and isinstance(c["train"]["steps"], int)
    assert c["penalty"]["weight"] == 0.5 and c["train"]["ema"]["enabled"] is True
    assert c["optim"]["critic"]["betas"] == [0.0, 0.99] and c["optim"]["generator"]["betas"] == [0.1, 0.2]
    assert c["data"]["root"] == "~/data/1e3"  # strings stay strings
    assert c["train"]["generator_batch_size"] is None
    assert c["model"]["generator_options"] == {"width": 8} and c["penalty"]["center"] == 1.0


@pytest.mark.parametrize("text, match", [
    ("train.stepz=3", "did you mean 'train.steps'"),
    ("train=3", "is a section"),
    ("train.steps", "expected key.sub=value"),
    ("train.ema.enabled=maybe", "train.ema.enabled: got 'maybe'; accepted: true or false"),
    # The first unknown part is named, with its section's keys (it said "valid keys here: " and
    # nothing for a section that does not exist).
    ("foo.bar.baz=1", r"unknown key 'foo'; valid keys here: device, model, loss, penalty, optim, train,"),
    ("train.steps.x=1", r"'train.steps' is a value, not a section: set 'train.steps' itself"),
])
def test_bad_overrides(text, match):
    with pytest.raises(ConfigError, match=match):
        parse_override(text)


def test_an_override_does_not_hide_a_section_the_file_got_wrong(tmp_path):
    """``train: 3`` is an error of the file; --set train.steps=4 replaced the 3 with a mapping and
    the run trained. An empty section (``train:``) takes the override."""
    path = tmp_path / "c.yaml"
    path.write_text("train: 3\n")
    with pytest.raises(ConfigError, match=r"^cannot set train.steps: 'train' is 3 in the config, not a section"):
        load_config(path, ["train.steps=4"])
    path.write_text("train:\n")
    assert load_config(path, ["train.steps=4"])["train"]["steps"] == 4


def test_override_with_wrong_value_names_key(tmp_path):
    path = write(tmp_path / "c.yaml", {})
    with pytest.raises(ConfigError, match=r"train.steps: got 'ten' \(not an integer\); accepted: an integer >= 1"):
        load_config(path, ["train.steps=ten"])


def test_diff_configs_lists_changed_keys():
    a = default_config()
    b = apply_overrides(a, ["train.steps=5", "model.critic_options.width=3", "optim.critic.lr=0.5"])
    assert sorted(diff_configs(a, b)) == ["model.critic_options.width", "optim.critic.lr", "train.steps"]
    assert diff_configs(a, a) == []


def test_field_rejects_nan_and_inf():
    f = Field("float", 0.0, "x", minimum=0)
    for bad in (float("nan"), float("inf"), "nan"):
        with pytest.raises(ValueError):
            f.check(bad)


def test_every_leaf_has_doc_and_a_valid_default():
    def leaves(schema, prefix=""):
        for k, v in schema.items():
            if isinstance(v, Field):
                yield prefix + k, v
            else:
                yield from leaves(v, prefix + k + ".")
    for key, field in leaves(SCHEMA):
        assert field.doc, key
        assert field.check(field.default) == field.default, key


SHIPPED = sorted(glob.glob(os.path.join(ROOT, "configs", "*.yaml")))


def test_shipped_configs_exist():
    names = {os.path.basename(p) for p in SHIPPED}
    assert {"quickstart.yaml", "r1_cifar.yaml", "r2_cifar.yaml", "wgangp_cifar.yaml"} <= names


@pytest.mark.parametrize("path", SHIPPED, ids=os.path.basename)
def test_shipped_configs_validate(path):
    c = load_config(path)
    text = open(path).read()
    if "cifar" in os.path.basename(path):
        assert c["data"]["name"] == "cifar10" and c["data"]["download"] is True
        assert c["data"]["root"]
    # Each config cites where its hyperparameters come from.
    assert "#" in text and ("arXiv" in text or "github" in text.lower() or "et al" in text or "base:" in text)


SHIPPED_SWEEPS = sorted(glob.glob(os.path.join(ROOT, "configs", "ablations", "*.yaml")))


@pytest.mark.parametrize("path", SHIPPED_SWEEPS, ids=os.path.basename)
def test_shipped_sweeps_load(path):
    """Every shipped sweep file loads, and so every one of its runs is a config gpgan-train
    accepts (load_sweep validates each run's config: the schema's checks; the data and devices
    are gpgan-ablate --dry-run's), so a sweep cannot fail at its tenth run."""
    from gpgan.studies import expand_runs, load_sweep

    sweep = load_sweep(path)
    assert expand_runs(sweep)
    assert os.path.isfile(sweep.base)


def test_docs_config_reference_is_in_sync():
    reference = open(os.path.join(ROOT, "docs", "configuration.md"), encoding="utf-8").read()
    start, end = "<!-- config-reference:start -->", "<!-- config-reference:end -->"
    assert start in reference and end in reference, "docs/configuration.md lacks the config reference markers"
    embedded = reference.split(start, 1)[1].split(end, 1)[0].strip()
    assert embedded == config_reference_markdown().strip(), (
        "docs/configuration.md's config reference is stale; regenerate it with `python -m gpgan.train.config`")
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    assert "docs/configuration.md" in readme, "README.md does not link the config reference"


def test_unknown_model_option_names_closest_option():
    with pytest.raises(ConfigError) as info:
        validate_config({"model": {"generator_options": {"widht": 8}, "critic_options": {"zzz": 1}}})
    msg = str(info.value)
    assert msg.endswith("2 problems: (1) model.generator_options.widht: not an option of model 'mlp_generator' "
                        "(did you mean 'width'?); accepted: latent_dim, out_dim, width, depth, activation, norm (2) "
                        "model.critic_options.zzz: not an option of model 'mlp_critic'; accepted: in_dim, width, depth, "
                        "activation, norm")


# -- penalty.options and data.options: the options each penalty type and data set declares -------
QUICKSTART = os.path.join(ROOT, "configs", "quickstart.yaml")  # penalty r1 on grid25


@pytest.mark.parametrize("overrides, expected", [
    (["penalty.options.foo=1"], "penalty.options.foo: not an option of penalty 'r1'; accepted: norm_eps"),
    # penalty.center is the centre's key: as an option it would be passed twice
    (["penalty.options.center=abc"],
     "penalty.options.center: not an option of penalty 'r1' (set penalty.center instead); accepted: norm_eps"),
    (["penalty.type=wgan_gp", "penalty.options.center=0.5"],
     "penalty.options.center: not an option of penalty 'wgan_gp' (set penalty.center instead); accepted: norm_eps"),
    (["penalty.type=dragan", "penalty.options.noise_scale=abc"],
     "penalty.options.noise_scale: got 'abc' (not a number); accepted: a number >= 0"),
    (["penalty.options.norm_eps=abc"], "penalty.options.norm_eps: got 'abc' (not a number); accepted: a number > 0"),
    (["penalty.type=dragan", "penalty.options.interpolate=maybe"],
     "penalty.options.interpolate: got 'maybe' (a string, not a boolean); accepted: true or false"),
    (["penalty.type=dragan", "penalty.options.noise_scale=-1"],
     "penalty.options.noise_scale: got -1 (out of range); accepted: a number >= 0"),
    (["penalty.type=lp", "penalty.options.norm_eps=0"],
     "penalty.options.norm_eps: got 0 (out of range); accepted: a number > 0"),
    (["penalty.type=dragan", "penalty.options.noise_scal=1"],
     "penalty.options.noise_scal: not an option of penalty 'dragan' (did you mean 'noise_scale'?); accepted: "
     "norm_eps, noise_scale, interpolate"),
    (["penalty.type=none", "penalty.options.foo=1"], "penalty.options: penalty 'none' takes no options; got foo"),
    (["penalty.type=r1r2", "penalty.options.norm_eps=1e-8"],
     "penalty.options: penalty 'r1r2' takes no options; got norm_eps"),
    (["penalty.type=r1r2", "penalty.center=1"],
     "penalty.center: got 1, but penalty 'r1r2' is defined for one centre only; accepted: 0, or null"),
    (["data.options.foo=1"], "data.options.foo: not an option of data set 'grid25'; accepted: scale"),
    (["data.options.std=-1"], "data.options.std: not an option of data set 'grid25'; accepted: scale"),
    (["data.options.scale=big"],
     "data.options.scale: got 'big' (not one of the accepted values); accepted: one of 'pacgan', 'wgan_gp'"),
    (["data.name=cifar10", "data.root=/data/cifar", "data.options.scale=pacgan"],
     "data.options: data set 'cifar10' takes no options; got scale"),
    (["model.critic_options.depth=0"], "model.critic_options.depth: got 0 (out of range); accepted: an integer >= 1"),
    (["model.generator_options.activation=gelu"],
     "model.generator_options.activation: got 'gelu' (not one of the accepted values); accepted: one of 'relu', "
     "'leaky_relu', 'tanh', 'elu', 'softplus'"),
    (["model.generator=mlp_critic"],
     "model.generator: got 'mlp_critic' (not one of the accepted values); accepted: one of 'dcgan_generator', "
     "'mlp_generator', 'r3gan_generator', 'resnet_generator'"),
    (["model.critic_options.width=8.5"],
     "model.critic_options.width: got 8.5 (a number, not an integer); accepted: an integer >= 1"),
    (["penalty.options.foo=1", "data.options.foo=1"],
     "2 problems: (1) penalty.options.foo: not an option of penalty 'r1'; accepted: norm_eps (2) data.options.foo: "
     "not an option of data set 'grid25'; accepted: scale"),
])
def test_model_penalty_and_data_options_name_the_key_and_what_is_accepted(overrides, expected):
    with pytest.raises(ConfigError) as info:
        load_config(QUICKSTART, overrides)
    assert str(info.value) == f"invalid config ({QUICKSTART} with --set): {expected}"


#: every option each penalty type and toy data set takes, with a value other than its default
PENALTY_OPTIONS = {
    "none": {}, "r1r2": {},
    **{name: {"norm_eps": ("1e-10", 1e-10)} for name in ("wgan_gp", "r1", "r2", "zero_gp", "lp")},
    "dragan": {"norm_eps": ("1e-10", 1e-10), "noise_scale": ("1e-2", 0.01), "interpolate": ("false", False)},
}
DATA_OPTIONS = {"cifar10": {}, "image_folder": {}, **{name: {"scale": ("wgan_gp", "wgan_gp")}
                                                      for name in ("ring8", "grid25", "swiss_roll")}}


def test_each_penalty_and_data_set_takes_its_options_and_they_reach_it():
    from gpgan.data.toy import make_toy
    from gpgan.losses import make_penalty
    from gpgan.train.config import _data_options, _penalty_options

    assert {n: set(o) for n, o in _penalty_options().items()} == {n: set(o) for n, o in PENALTY_OPTIONS.items()}
    assert {n: set(o) for n, o in _data_options().items()} == {n: set(o) for n, o in DATA_OPTIONS.items()}
    for name, options in PENALTY_OPTIONS.items():
        c = load_config(QUICKSTART, [f"penalty.type={name}"] + [f"penalty.options.{k}={t}" for k, (t, _) in
                                                                options.items()])
        assert c["penalty"]["options"] == {k: v for k, (_, v) in options.items()}  # typed: "1e-2" is 0.01
        penalty = make_penalty(name, **c["penalty"]["options"])  # as gpgan.train.build makes it
        assert {k: getattr(penalty, k) for k in options} == c["penalty"]["options"]
    c = load_config(QUICKSTART, ["penalty.type=wgan_gp", "penalty.center=0.5", "penalty.options.norm_eps=1e-8"])
    assert c["penalty"]["center"] == 0.5 and c["penalty"]["options"] == {"norm_eps": 1e-8}
    assert load_config(QUICKSTART, ["penalty.type=r1r2", "penalty.center=0"])["penalty"]["center"] == 0
    for name, options in DATA_OPTIONS.items():
        extra = ["data.root=/data/cifar"] if name in ("cifar10", "image_folder") else []
        c = load_config(QUICKSTART, [f"data.name={name}", *extra] + [f"data.options.{k}={t}" for k, (t, _) in
                                                                    options.items()])
        assert c["data"]["options"] == {k: v for k, (_, v) in options.items()}
        if options:
            assert make_toy(name, **c["data"]["options"]).std == make_toy(name, scale="wgan_gp").std


def test_the_option_fields_have_docs_and_valid_defaults():
    for key in ("penalty.options", "data.options"):
        entries = CONFIG_SCHEMA.lookup(key).entries
        for name, field, values in entries.options():
            assert field.doc and values, f"{key}.{name}"
            assert field.check(field.default) == field.default, f"{key}.{name}"


# -- the eval section: image metrics --------------------------------------------------------------
IMAGES = {"data": {"name": "cifar10", "root": "/data/cifar"}}


def test_metric_lists_are_typed_by_the_schema():
    assert parse_override("eval.metrics=fid,kid") == ("eval.metrics", ["fid", "kid"])
    assert parse_override("eval.metrics=[is, pr]") == ("eval.metrics", ["is", "pr"])
    assert parse_override("eval.metrics=") == ("eval.metrics", [])
    config = validate_config(apply_overrides(IMAGES, ["eval.metrics=fid,kid"]))
    assert config["eval"]["metrics"] == ["fid", "kid"]
    assert validate_config(IMAGES)["eval"] == {"metrics": [], "samples": 10000, "reference": None,
                                               "inception_weights": None, "batch_size": 50}
    field = Field("strs", [], "x", choices=["a", "b"])
    assert field.type_name() == "list[str]" and field.accepted() == "a list of distinct values, each one of 'a', 'b'"


@pytest.mark.parametrize("metrics, shown, reason", [
    (["fid", "fdi"], "[fid, fdi]", "entry 'fdi': not one of the accepted values"),
    (["fid", "fid"], "[fid, fid]", "'fid' is listed twice"),
    ("fid", "'fid'", "a string, not a list"),
])
def test_bad_metric_lists_name_the_entry_and_what_is_accepted(metrics, shown, reason):
    with pytest.raises(ConfigError) as info:
        validate_config({**IMAGES, "eval": {"metrics": metrics}})
    message = str(info.value)  # the value as YAML writes it
    assert f"eval.metrics: got {shown} ({reason}); accepted: a list of distinct values, each one of " \
           "'fid', 'kid', 'is', 'pr'" in message


@pytest.mark.parametrize("raw, expected", [
    ({"eval": {"metrics": ["fid"]}},
     "eval.metrics ['fid'] are image metrics, but data.name 'grid25' is 2-D points"),
    ({"train": {"best_metric": "eval/fid"}},
     "train.best_metric 'eval/fid' is an image metric, but data.name 'grid25' is 2-D points; accepted: "
     "eval/high_quality, eval/modes, eval/reverse_kl, or null"),
    ({**IMAGES, "train": {"best_metric": "eval/kid"}, "eval": {"metrics": ["fid"]}},
     "train.best_metric 'eval/kid' is not computed by this run (eval.metrics: ['fid']); add 'kid' to eval.metrics"),
    ({**IMAGES, "train": {"best_metric": "eval/modes"}},
     "train.best_metric 'eval/modes' is not computed by this run (eval.metrics: []); on images the accepted"),
    ({**IMAGES, "eval": {"metrics": ["fid", "pr"], "reference": "stats.npz"}},
     "eval.reference 'stats.npz' is a statistics file (mu and sigma only), but pr compare features"),
    ({"data": {"name": "image_folder", "root": "/faces"}, "eval": {"metrics": ["fid"], "reference": "cifar10:test"}},
     "eval.reference 'cifar10:test' reads CIFAR-10 from data.root, but data.name is 'image_folder'"),
    ({**IMAGES, "eval": {"metrics": ["fid"], "reference": "cifar10:valid"}},
     "eval.reference: reference 'cifar10:valid': CIFAR-10's split is train or test"),
    ({**IMAGES, "eval": {"metrics": ["pr"], "samples": 3}},
     "eval.samples 3: precision and recall (pr) need more than 3 samples"),
])
def test_evaluation_settings_that_cannot_work_are_refused(raw, expected):
    with pytest.raises(ConfigError, match="invalid config") as info:
        validate_config(raw)
    assert expected in str(info.value)


def test_evaluation_settings_that_work_are_accepted():
    config = validate_config({**IMAGES, "train": {"best_metric": "eval/precision"},
                              "eval": {"metrics": ["fid", "is", "pr"], "reference": "cifar10:test", "samples": 4}})
    assert config["eval"]["metrics"] == ["fid", "is", "pr"]
    validate_config({**IMAGES, "eval": {"metrics": ["fid", "is"], "reference": "~/stats/cifar.npz"}})
    validate_config({"train": {"best_metric": "eval/modes"}})  # toy data: mode metrics


def test_r3gan_cifar_has_the_published_hyperparameters():
    """configs/r3gan_cifar.yaml against R3GAN's CIFAR10 preset (train.py, training_loop.py)."""
    c = load_config(os.path.join(ROOT, "configs", "r3gan_cifar.yaml"))
    assert (c["loss"], c["penalty"]["type"], c["penalty"]["weight"], c["penalty"]["weight_final"]) == (
        "rpgan", "r1r2", 0.05, 0.005)
    for who in ("generator", "critic"):
        o = c["optim"][who]
        assert (o["schedule"], o["lr"], o["lr_final"], o["betas"], o["beta2_final"], o["eps"]) == (
            "cosine", 2e-4, 5e-5, [0.0, 0.9], 0.99, 1e-8)
    assert c["schedule"]["total_images"] == 2e7 and c["train"]["batch_size"] == 512
    assert c["train"]["steps"] * 512 >= 2e7 > (c["train"]["steps"] - 1) * 512
    assert c["train"]["ema"]["half_life_images"] == 5e6 and c["train"]["ema"]["half_life_ramp"] is True
    g = c["model"]["generator_options"]
    assert g == {"latent_dim": 64, "widths": [768] * 4, "blocks": [2] * 4, "expansion": 2, "group_size": 16}
    assert c["data"]["hflip"] is True and c["model"]["conditional"] is True and c["model"]["embedding_dim"] is None
    # aug_scheduler: the same cosine, 0 -> 0.55, no warm-up; R1 and R2 through the augmentation
    a = c["augment"]
    assert (a["type"], a["p_mode"], a["p"], a["p_end"], a["penalty_points"]) == ("ada", "cosine", 0.0, 0.55,
                                                                                  "unaugmented")
    assert (a["color_multiplier"], a["cutout_multiplier"]) == (0.5, 1.0)  # train.py's AugmentPipe options
    assert c["schedule"]["warmup_images"] == 0
    small = load_config(os.path.join(ROOT, "configs", "r3gan_cifar_cpu.yaml"))
    assert small["device"] == "cpu" and small["loss"] == "rpgan" and small["schedule"]["total_images"] is None
    assert small["augment"] == a
