"""gpgan's training configuration: the schema of every key (type, default, bounds, meaning).

The machinery (validation with did-you-mean, ``base:`` chains, typed ``--set`` overrides, diffs,
the reference table) is :mod:`gpgan.schema`'s; this module only says what gpgan's keys are.
``python -m gpgan.train.config`` prints the reference table that README.md embeds (a test keeps
the two in sync). Reading a config imports neither models nor tensorboardX: the registries that
give the accepted names are looked up when a config is validated.
"""
from gpgan.backend.precision import MATMUL_PRECISIONS
from gpgan.schema import ConfigError, Field, Schema, closest, diff_configs, get_key

__all__ = [
    "SCHEMA", "CONFIG_SCHEMA", "Field", "ConfigError", "load_config", "validate_config", "apply_overrides",
    "parse_override", "default_config", "diff_configs", "get_key", "config_reference_markdown",
    "dump_config", "VOLATILE_KEYS", "RESUMABLE_CHANGES",
]


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


def _eval_metric_names():
    from gpgan.metrics.direction import KNOWN
    return sorted(KNOWN)


def _image_metric_names():
    from gpgan.metrics.images import IMAGE_METRICS
    return list(IMAGE_METRICS)


def _data_names():
    from gpgan.data import IMAGE_DATASETS
    from gpgan.data.toy import TOY_DATASETS
    return list(IMAGE_DATASETS) + sorted(TOY_DATASETS)


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
        "cuda_graph": Field("bool", True, "on CUDA, capture each kind of training step once as a CUDA graph and "
                            "replay it (same numbers as false, the eager path, kept for debugging); "
                            "one process only"),
        "precision": Field("str", "float32", "precision of the training step's products on CUDA: bf16 rounds "
                           "the operands of every float32 product (convolutions, linear layers) to bfloat16 and "
                           "accumulates in float32; weights, optimizer and everything else stay float32 "
                           "(the CPU trains in float32)", choices=list(MATMUL_PRECISIONS)),
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
        "eval_interval": Field("int", 0, "evaluate every N steps (0: only at the end): the mode metrics "
                               "on toy 2-D data, eval.metrics on images", minimum=0),
        "eval_samples": Field("int", 2500, "toy 2-D data: generated samples per evaluation", minimum=1),
        "best_metric": Field("str", None, "evaluation metric that picks checkpoints/best.npz (kept at the best "
                             "evaluation so far, by the metric's direction); null: eval/fid on images when "
                             "eval.metrics has fid, eval/reverse_kl on toy data",
                             nullable=True, choices=_eval_metric_names),
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
    "eval": {
        "metrics": Field("strs", [], "image data: the metrics of each evaluation (train.eval_interval): fid, kid, "
                         "is (Inception Score), pr (precision and recall); [] computes none and needs no "
                         "Inception weights", choices=_image_metric_names),
        "samples": Field("int", 10000, "image data: generated images per evaluation, from fixed noise (toy "
                         "data: train.eval_samples)", minimum=2),
        "reference": Field("str", None, "what the images are compared with: cifar10:train, cifar10:test (read "
                           "from data.root), a statistics file (.npz with mu and sigma, fid and is only) or a "
                           "folder of images; null: the run's own data. Computed once and cached in "
                           "~/.cache/gpgan/fid_stats", nullable=True),
        "inception_weights": Field("str", None, "pytorch-fid's FID Inception weights file; null: "
                                   "$GPGAN_INCEPTION_WEIGHTS, else ~/.cache/gpgan/ (downloaded once)",
                                   nullable=True),
        "batch_size": Field("int", 50, "images per Inception forward pass (memory: about 25 MB each in float32)",
                            minimum=1),
    },
}

#: Keys that say where a run trains and where it pauses, not what it computes: a run folder and a
#: config that differ only here describe the same run (a sweep skips or resumes it).
VOLATILE_KEYS = ("train.stop_after", "train.cuda_graph", "device")
#: Keys a resumed run may change: the volatile ones and train.steps (only up).
RESUMABLE_CHANGES = ("train.steps",) + VOLATILE_KEYS


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
                match = closest(key, accepted)
                hint = f"did you mean '{prefix}{match[0]}'?" if match else "accepted options: " + ", ".join(accepted)
                errors.append(f"unknown key '{prefix}{key}' for model {config['model'][role]!r}; {hint}")
    return errors


def _check_evaluation(config):
    """Image metrics only on images, a reference that can serve them, a best metric the run computes."""
    from gpgan.data import is_toy
    from gpgan.metrics.direction import KNOWN
    from gpgan.metrics.images import METRIC_KEYS, NEEDS_FEATURES, PR_K
    from gpgan.metrics.reference import parse_reference

    ec, data, best = config["eval"], config["data"], config["train"]["best_metric"]
    metrics = ec["metrics"]
    image_keys = {key for keys in METRIC_KEYS.values() for key in keys}
    errors = []
    if is_toy(data["name"]):
        if metrics:
            errors.append(f"eval.metrics {metrics} are image metrics, but data.name {data['name']!r} is 2-D points "
                          "(their mode metrics are computed at every evaluation); use eval.metrics: []")
        if best in image_keys:
            errors.append(f"train.best_metric {best!r} is an image metric, but data.name {data['name']!r} is 2-D "
                          f"points; accepted: {', '.join(sorted(set(KNOWN) - image_keys))}, or null")
        return errors
    computed = [key for name in metrics for key in METRIC_KEYS[name]]
    if best is not None and best not in computed:
        hint = (f"add {next(n for n, keys in METRIC_KEYS.items() if best in keys)!r} to eval.metrics"
                if best in image_keys else "on images the accepted ones are the keys of eval.metrics")
        errors.append(f"train.best_metric {best!r} is not computed by this run (eval.metrics: {metrics}); {hint}")
    if ec["reference"] is not None:
        try:
            kind, what = parse_reference(ec["reference"])
        except ValueError as exc:
            return errors + [f"eval.reference: {exc}"]
        needing = [n for n in metrics if n in NEEDS_FEATURES]
        if kind == "statistics" and needing:
            errors.append(f"eval.reference {ec['reference']!r} is a statistics file (mu and sigma only), but "
                          f"{', '.join(needing)} compare features: use a data set (cifar10:train) or a folder of "
                          "images, or leave them out of eval.metrics")
        if kind == "cifar10" and data["name"] != "cifar10":
            errors.append(f"eval.reference {ec['reference']!r} reads CIFAR-10 from data.root, but data.name is "
                          f"{data['name']!r}; give a statistics file or a folder of images")
    if "pr" in metrics and ec["samples"] <= PR_K:
        errors.append(f"eval.samples {ec['samples']}: precision and recall (pr) need more than {PR_K} samples")
    return errors


def _check_precision(config):
    """bf16 products are a CUDA feature."""
    if config["train"]["precision"] == "bf16" and config["device"] != "cuda":
        return [f"train.precision 'bf16' runs on CUDA only, but device is {config['device']!r}; "
                "use --device cuda, or train.precision: float32 (the CPU trains in float32)"]
    return []


CONFIG_SCHEMA = Schema(SCHEMA, checks=[_check_model_options, _check_evaluation, _check_precision])

validate_config = CONFIG_SCHEMA.validate
load_config = CONFIG_SCHEMA.load
parse_override = CONFIG_SCHEMA.parse_override
apply_overrides = CONFIG_SCHEMA.apply_overrides
default_config = CONFIG_SCHEMA.default
dump_config = CONFIG_SCHEMA.dump
config_reference_markdown = CONFIG_SCHEMA.reference_markdown


if __name__ == "__main__":
    print(config_reference_markdown(), end="")
