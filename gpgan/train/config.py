"""gpgan's training configuration: the schema of every key (type, default, bounds, meaning).

The machinery (validation with did-you-mean, ``base:`` chains, typed ``--set`` overrides, diffs,
the reference table) is :mod:`gpgan.schema`'s; this module only says what gpgan's keys are.
``python -m gpgan.train.config`` prints the reference table that docs/configuration.md embeds (a
test keeps the two in sync). Reading a config imports neither models nor tensorboardX: the
registries that give the accepted names are looked up when a config is validated.
"""
from gpgan.backend.precision import MATMUL_PRECISIONS
from gpgan.schema import ConfigError, Entries, Field, Schema, diff_configs, get_key

__all__ = [
    "SCHEMA", "CONFIG_SCHEMA", "Field", "ConfigError", "load_config", "validate_config", "apply_overrides",
    "parse_override", "default_config", "diff_configs", "get_key", "config_reference_markdown",
    "dump_config", "VOLATILE_KEYS", "RUN_END_KEYS", "RESUMABLE_CHANGES", "images_per_step", "schedule_images",
    "num_classes", "best_metric", "CONDITIONAL_PENALTIES", "OPTIMIZERS", "OPTIMIZER_OPTIONS",
]


# --- choices that live in other packages (looked up lazily, when a config is validated) -------
def _models(role):
    """The models model.<role> accepts, by name: gpgan.models' generators or critics."""
    from gpgan.models import CRITICS, GENERATORS, MODELS
    return {name: MODELS[name] for name in sorted(GENERATORS if role == "generator" else CRITICS)}


def _model_names(role):
    return lambda: list(_models(role))


def _model_options(role):
    """The options of each model of the role (each class's declared Fields)."""
    return lambda: {name: cls.options for name, cls in _models(role).items()}


def _loss_names():
    from gpgan.losses import LOSSES
    return sorted(LOSSES)


def _penalty_names():
    from gpgan.losses import PENALTIES
    return sorted(PENALTIES)


def _penalty_options():
    from gpgan.losses.penalties import penalty_options
    return penalty_options()


def _eval_metric_names():
    from gpgan.metrics.direction import KNOWN
    return sorted(KNOWN)


def _image_metric_names():
    from gpgan.metrics.images import IMAGE_METRICS
    return list(IMAGE_METRICS)


def _diffaugment_ops():
    from gpgan.augment import DIFFAUGMENT_OPS
    return list(DIFFAUGMENT_OPS)


def _data_names():
    from gpgan.data import IMAGE_DATASETS
    from gpgan.data.toy import TOY_DATASETS
    return list(IMAGE_DATASETS) + sorted(TOY_DATASETS)


def _data_options():
    """The options of each data set: the toy sets' (gpgan.data.toy), none for image data."""
    from gpgan.data import IMAGE_DATASETS
    from gpgan.data.toy import TOY_OPTIONS
    return {**{name: {} for name in IMAGE_DATASETS}, **{name: TOY_OPTIONS[name] for name in sorted(TOY_OPTIONS)}}


#: optim.<who>.type: the optimizer classes a config can choose (gpgan.optim)
OPTIMIZERS = ("adam", "sgd", "rmsprop")
#: the optim.<who> keys each type reads; the others must keep their defaults (_check_optimizers)
OPTIMIZER_OPTIONS = {
    "adam": ("betas", "eps", "beta2_final"),
    "sgd": ("momentum", "nesterov"),
    "rmsprop": ("alpha", "eps", "momentum", "centered"),
}


def _optimizer_section(who, lr, betas):
    return {
        "type": Field("str", "adam", f"optimizer of the {who} (torch semantics): adam, sgd or rmsprop; an option "
                      "that the type does not read must keep its default (an error otherwise)", choices=OPTIMIZERS),
        "lr": Field("float", lr, f"learning rate of the {who}", minimum=0, exclusive_min=True),
        "betas": Field("floats", betas, f"adam: (beta1, beta2) of the {who}", length=2,
                       minimum=0, maximum=1, exclusive_max=True),
        "eps": Field("float", 1e-8, f"adam, rmsprop: epsilon of the {who}'s denominator", minimum=0,
                     exclusive_min=True),
        "momentum": Field("float", 0.0, f"sgd, rmsprop: momentum factor of the {who} (0: none)", minimum=0,
                          maximum=1, exclusive_max=True),
        "nesterov": Field("bool", False, f"sgd: Nesterov momentum for the {who} (needs momentum > 0)"),
        "alpha": Field("float", 0.99, f"rmsprop: smoothing constant of the {who}'s squared-gradient average",
                       minimum=0, maximum=1, exclusive_max=True),
        "centered": Field("bool", False, f"rmsprop: normalize the {who}'s steps by the estimated variance"),
        "schedule": Field("str", "constant", f"learning-rate schedule of the {who}: 'linear' decays to 0 over "
                          "train.steps generator steps; 'cosine' is R3GAN's cosine in images seen, to lr_final "
                          "(schedule section)", choices=["constant", "linear", "cosine"]),
        "lr_final": Field("float", None, f"schedule 'cosine': the {who}'s final learning rate; null: 0",
                          nullable=True, minimum=0),
        "beta2_final": Field("float", None, f"adam, schedule 'cosine': Adam's beta2 of the {who} follows the cosine "
                             "from betas[1] to this (no warm-up); null: constant", nullable=True, minimum=0,
                             maximum=1, exclusive_max=True),
    }


SCHEMA = {
    "device": Field("str", "cpu", "where to train: 'cuda' runs on the GPU through CuPy",
                    choices=["cpu", "cuda"]),
    "model": {
        "generator": Field("str", "mlp_generator", "generator architecture (gpgan.models.make_model name)",
                           choices=_model_names("generator")),
        "generator_options": Field("dict", {}, "keyword options of the generator (model.generator_options.* below)",
                                   entries=Entries("model.generator", "model", _model_options("generator"))),
        "critic": Field("str", "mlp_critic", "critic architecture (gpgan.models.make_model name)",
                        choices=_model_names("critic")),
        "critic_options": Field("dict", {}, "keyword options of the critic (model.critic_options.* below)",
                                entries=Entries("model.critic", "model", _model_options("critic"))),
        "conditional": Field("bool", False, "class-conditional training: labels from the data set, the "
                             "generator conditioned by a label embedding joined to z, the critic by projection "
                             "(Miyato and Koyama 2018) on its features; cifar10 only"),
        "num_classes": Field("int", None, "conditional: the number of classes; null: the data set's (10 for "
                             "cifar10)", nullable=True, minimum=1),
        "embedding_dim": Field("int", None, "conditional: the width of the generator's label embedding; null: "
                               "the generator's latent_dim (R3GAN)", nullable=True, minimum=1),
    },
    "loss": Field("str", "non_saturating", "adversarial loss (gpgan.losses.make_loss name)", choices=_loss_names),
    "penalty": {
        "type": Field("str", "none", "gradient penalty (gpgan.losses.make_penalty name)", choices=_penalty_names),
        "weight": Field("float", None, "penalty weight: lambda (wgan_gp, dragan, lp) or gamma (r1, r2, "
                        "zero_gp: gamma / 2 * E||g||^2; r1r2: gamma / 2 * (E||g_real||^2 + "
                        "E||g_fake||^2)); null takes the penalty's default (10)",
                        nullable=True, minimum=0),
        "center": Field("float", None, "target gradient norm; null takes the penalty's own default "
                        "(1 for wgan_gp/lp, 0 for r1/r2/r1r2/zero_gp); r1r2 takes 0 only", nullable=True, minimum=0),
        "weight_final": Field("float", None, "the weight follows the cosine in images seen (schedule section) "
                              "from penalty.weight to this (R3GAN: 0.05 -> 0.005); null: constant",
                              nullable=True, minimum=0),
        "interval": Field("int", 1, "lazy regularization: apply the penalty every N critic steps "
                          "(scaled by N, as in StyleGAN2, but added to that step's loss: no update of its own)",
                          minimum=1),
        "options": Field("dict", {}, "the penalty type's own options (make_penalty's keywords; penalty.options.* "
                         "below); weight, center and interval are the keys above",
                         entries=Entries("penalty.type", "penalty", _penalty_options)),
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
        # One 32-bit word: the streams are seeded with (seed, stream, ...), and NumPy splits a larger
        # seed into two words, so seed 2**32 + x would draw seed x's numbers of another stream.
        "seed": Field("int", 0, "seed of weights, noise, data order and penalties", minimum=0,
                      maximum=2**32 - 1),
        "ema": {
            "enabled": Field("bool", False, "keep an exponential moving average of the generator's "
                             "weights (used for samples and evaluation)"),
            "decay": Field("float", 0.999, "EMA decay per generator step", minimum=0, maximum=1,
                           exclusive_max=True),
            "start_step": Field("int", 0, "generator step at which averaging starts (copies before)",
                                minimum=0),
            "rampup": Field("bool", True, "ramp the decay up as averaging starts: the n-th averaging "
                            "update (n from 0) uses min(decay, (1 + n) / (10 + n)), so that a short run's "
                            "average is not its initial weights; false: decay from the first update"),
            "half_life_images": Field("float", None, "R3GAN's EMA: the average's half-life in images seen, "
                                      "decay = 0.5 ** (images per step / half-life) in place of train.ema.decay; "
                                      "null: train.ema.decay", nullable=True, minimum=0, exclusive_min=True),
            "half_life_ramp": Field("bool", False, "with half_life_images: the half-life rises from 0 along the "
                                    "cosine of the schedule section (R3GAN: to 5M images over 20M); R3GAN's "
                                    "configs set rampup false, this being their ramp"),
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
        "patience": Field("int", 0, "stop early when train.best_metric has not improved in this many evaluations "
                          "in a row (0: never): the run ends finished at that step, with a checkpoint, and "
                          "final.json says why", minimum=0),
        "patience_min_delta": Field("float", 0.0, "the least gain of train.best_metric, in its units (e.g. 0.5 "
                                    "FID), that train.patience counts as an improvement: smaller gains still "
                                    "move checkpoints/best.npz but not the count", minimum=0.0),
        "n_samples": Field("int", 64, "images in each sample grid (points in each scatter plot: "
                           "eval_samples)", minimum=1),
        "stop_after": Field("int", None, "stop as if interrupted (checkpoint, exit 130) after this "
                            "step; for tests and scheduled jobs", nullable=True, minimum=1),
    },
    "schedule": {
        "total_images": Field("float", None, "length in images seen of the cosine schedules (optim.*.schedule "
                              "'cosine', penalty.weight_final, train.ema.half_life_ramp, augment.p_mode "
                              "'cosine'); images seen = generator steps x train.batch_size x train.critic_steps; "
                              "null: the whole run", nullable=True,
                              minimum=0, exclusive_min=True),
        "warmup_images": Field("float", 0, "the cosine's warm-up of the learning rates, the penalty weight and "
                               "ADA's cosine p: linear from 0 over these images", minimum=0),
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
        "options": Field("dict", {}, "the data set's own options (gpgan.data.toy.make_toy's keywords; "
                         "data.options.* below)", entries=Entries("data.name", "data set", _data_options)),
    },
    "augment": {
        "type": Field("str", "none", "augmentation of every image the critic sees, real and generated, in the "
                      "critic and generator steps: diffaugment (Zhao et al. 2020) or ada (Karras et al. 2020, "
                      "the 'bgc' pipeline); see docs/augment.md", choices=["none", "diffaugment", "ada"]),
        "policy": Field("strs", ["color", "translation", "cutout"], "diffaugment: its ops, applied in this order",
                        choices=_diffaugment_ops),
        "penalty_points": Field("str", "augmented", "where r1/r2 differentiate the critic: at the augmented "
                                "images (DiffAugment's CIFAR scripts) or at the un-augmented ones through the "
                                "augmentation (ADA's and R3GAN's); other penalties take augmented points",
                                choices=["augmented", "unaugmented"]),
        "p": Field("float", 0.0, "ada: the probability of each op, initial (adaptive), constant (fixed) or "
                   "starting (linear, cosine)", minimum=0, maximum=1),
        "p_mode": Field("str", "adaptive", "ada: adaptive (p follows r_t = E[sign(D(real))] towards target; losses "
                        "non_saturating and hinge), "
                        "fixed, linear (from p to p_end over ramp_steps generator steps) or cosine (R3GAN's: from p to "
                        "p_end along the cosine in images seen of the schedule section, with its warm-up)",
                        choices=["adaptive", "fixed", "linear", "cosine"]),
        "target": Field("float", 0.6, "ada, adaptive: the target of r_t", minimum=0, maximum=1),
        "interval": Field("int", 4, "ada, adaptive: critic minibatches between adjustments of p", minimum=1),
        "speed_kimg": Field("float", 500.0, "ada, adaptive: thousands of real images over which p can go "
                            "from 0 to 1", minimum=0, exclusive_min=True),
        "p_end": Field("float", None, "ada, linear and cosine: the final p (R3GAN's CIFAR-10: 0.55)", nullable=True,
                       minimum=0, maximum=1),
        "ramp_steps": Field("int", None, "ada, linear: generator steps of the ramp from p to p_end",
                            nullable=True, minimum=1),
        "color_multiplier": Field("float", 1.0, "ada: the colour ops (brightness, contrast, luma flip, hue, "
                                  "saturation) happen with probability color_multiplier x p ('bgc': 1; R3GAN: 0.5)",
                                  minimum=0, maximum=1),
        "cutout_multiplier": Field("float", 0.0, "ada: cutout (a square of half the image's side set to 0, "
                                   "stylegan2-ada's) happens with probability cutout_multiplier x p, after the "
                                   "other ops ('bgc': 0, none; R3GAN: 1)", minimum=0, maximum=1),
    },
    "eval": {
        "metrics": Field("strs", [], "image data: the metrics of each evaluation (train.eval_interval): fid, kid, "
                         "is (Inception Score), pr (precision and recall), dc (density and coverage); [] "
                         "computes none and needs no Inception weights", choices=_image_metric_names),
        "samples": Field("int", 10000, "image data: generated images per evaluation, from fixed noise (toy "
                         "data: train.eval_samples)", minimum=2),
        "reference": Field("str", None, "what the images are compared with: cifar10:train, cifar10:test (read "
                           "from data.root), a statistics file (.npz with mu and sigma, fid and is only) or a "
                           "folder of images; null: the run's own data. Computed once and cached in "
                           "~/.cache/gpgan/fid_stats", nullable=True),
        "inception_weights": Field("str", None, "the FID Inception weights file (pytorch-fid's .pth, or a "
                                   "TorchScript: inception-2015-12-05.pt, default_1.pt); null: "
                                   "$GPGAN_INCEPTION_WEIGHTS, else ~/.cache/gpgan/ (gpgan-eval fetch-weights, or "
                                   "downloaded once)",
                                   nullable=True),
        "batch_size": Field("int", 50, "images per Inception forward pass (memory: about 25 MB each in float32)",
                            minimum=1),
    },
}

#: Keys that say where a run trains and where it pauses, not what it computes: a run folder and a
#: config that differ only here describe the same run (a sweep skips or resumes it).
VOLATILE_KEYS = ("train.stop_after", "train.cuda_graph", "device")
#: Keys that say when a run ends: train.steps also sets the length of the schedules that follow it
#: (a linear decay, cosines without schedule.total_images), which a longer run then stretches.
RUN_END_KEYS = ("train.steps", "train.patience", "train.patience_min_delta")
#: Keys a resumed run may change: the volatile ones and those that say when it ends (train.steps
#: only up).
RESUMABLE_CHANGES = RUN_END_KEYS + VOLATILE_KEYS


def _check_penalty_center(config):
    """A centre the penalty is not defined for (r1r2's is 0)."""
    from gpgan.losses.penalties import fixed_center

    pc = config["penalty"]
    fixed = fixed_center(pc["type"])
    if fixed is None or pc["center"] in (None, fixed):
        return []
    return [f"penalty.center: got {pc['center']:g}, but penalty {pc['type']!r} is defined for one centre only; "
            f"accepted: {fixed:g}, or null"]


def _check_evaluation(config):
    """Image metrics only on images, a reference that can serve them, a best metric the run computes."""
    from gpgan.data import is_toy
    from gpgan.metrics.direction import KNOWN
    from gpgan.metrics.images import METRIC_KEYS, NEEDS_FEATURES, check_sample_count
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
    try:
        check_sample_count(metrics, ec["samples"], "samples")
    except ValueError as exc:
        errors.append(f"eval.samples {ec['samples']}: {exc}")
    return errors


def _check_augment(config):
    """Augmentation only of images, unaugmented penalty points only where the penalty's points are
    the loss's own, and a linear ramp with both of its ends."""
    from gpgan.data import is_toy

    ac = config["augment"]
    if ac["type"] == "none":
        return []
    errors = []
    if is_toy(config["data"]["name"]):
        errors.append(f"augment.type {ac['type']!r} augments images, but data.name {config['data']['name']!r} "
                      "is 2-D points; use augment.type: none")
    if ac["penalty_points"] == "unaugmented" and config["penalty"]["type"] not in ("none", "r1", "r2", "r1r2"):
        errors.append(f"augment.penalty_points 'unaugmented' needs a penalty on the real or generated images "
                      f"themselves (r1, r2, r1r2), but penalty.type is {config['penalty']['type']!r}; use "
                      "augment.penalty_points: augmented")
    if ac["type"] == "diffaugment" and not ac["policy"]:
        errors.append("augment.policy is empty; give one or more of color, translation, cutout, or use "
                      "augment.type: none")
    if ac["type"] == "ada":
        errors += _check_ada_p(ac)
        if ac["p_mode"] == "adaptive" and config["loss"] not in ADAPTIVE_P_LOSSES:
            errors.append(f"augment.p_mode 'adaptive' reads the critic's overfitting from the sign of D(real), "
                          f"which loss {config['loss']!r} does not centre at 0; use loss "
                          f"{' or '.join(ADAPTIVE_P_LOSSES)}, or a p_mode of fixed, linear or cosine")
    return errors


#: The losses whose critic separates reals from fakes at D = 0, so that ADA's r_t = E[sign(D(real))]
#: measures overfitting: least squares separates at 0.5, and wgan and rpgan are unchanged by a shift
#: of D, which makes its sign arbitrary.
ADAPTIVE_P_LOSSES = ("non_saturating", "hinge")


#: the augment.* keys of ADA's p that each p_mode reads (p, the start or the constant, is read by all)
P_MODE_KEYS = {"adaptive": ("target", "interval", "speed_kimg"), "fixed": (), "linear": ("p_end", "ramp_steps"),
               "cosine": ("p_end",)}


def _check_ada_p(ac):
    """Each p_mode's own keys given, the others' left at their defaults (a value that the mode does
    not read would otherwise be silently ignored)."""
    mode, errors = ac["p_mode"], []
    if mode == "linear" and (ac["p_end"] is None or ac["ramp_steps"] is None):
        errors.append("augment.p_mode 'linear' needs augment.p_end (the final p) and augment.ramp_steps "
                      "(generator steps of the ramp)")
    if mode == "cosine" and ac["p_end"] is None:
        errors.append("augment.p_mode 'cosine' needs augment.p_end (the final p; the length is the schedule "
                      "section's: schedule.total_images and schedule.warmup_images)")
    fields = SCHEMA["augment"]
    for key in sorted({k for keys in P_MODE_KEYS.values() for k in keys} - set(P_MODE_KEYS[mode])):
        if ac[key] != fields[key].default:
            readers = [m for m, keys in P_MODE_KEYS.items() if key in keys]
            errors.append(f"augment.{key} is set but augment.p_mode is {mode!r}; it applies to p_mode "
                          f"{' and '.join(readers)} only (leave it out, or at its default)")
    return errors


def _check_precision(config):
    """bf16 products are a CUDA feature."""
    if config["train"]["precision"] == "bf16" and config["device"] != "cuda":
        return [f"train.precision 'bf16' runs on CUDA only, but device is {config['device']!r}; "
                "use --device cuda, or train.precision: float32 (the CPU trains in float32)"]
    return []


def images_per_step(config):
    """Images the critic sees per generator step: the unit of the schedules in images."""
    return config["train"]["batch_size"] * config["train"]["critic_steps"]


def schedule_images(config):
    """The length in images of the cosine schedules: schedule.total_images, or the whole run."""
    total = config["schedule"]["total_images"]
    return float(total) if total is not None else float(config["train"]["steps"] * images_per_step(config))


def schedules_following_steps(config):
    """The keys of ``config`` whose schedules are read over ``train.steps``, so that extending a
    run stretches them: a linear learning-rate decay, and with ``schedule.total_images`` null
    (the cosines' length is then the whole run) a cosine learning rate, ``penalty.weight_final``,
    the EMA half-life's ramp and ADA's cosine p. :mod:`gpgan.train.build` builds these curves."""
    optim = config["optim"]
    keys = [f"optim.{who}.schedule" for who in ("generator", "critic") if optim[who]["schedule"] == "linear"]
    if config["schedule"]["total_images"] is None:
        keys += [f"optim.{who}.schedule" for who in ("generator", "critic") if optim[who]["schedule"] == "cosine"]
        if config["penalty"]["weight_final"] is not None and config["penalty"]["type"] != "none":
            keys.append("penalty.weight_final")
        ema = config["train"]["ema"]
        if ema["enabled"] and ema["half_life_images"] is not None and ema["half_life_ramp"]:
            keys.append("train.ema.half_life_ramp")
        if config["augment"]["type"] == "ada" and config["augment"]["p_mode"] == "cosine":
            keys.append("augment.p_mode")
    return keys


def _check_optimizers(config):
    """Each optim.<who> option that its type does not read keeps its default: a value set for
    another optimizer would otherwise be silently ignored."""
    errors = []
    for who in ("generator", "critic"):
        section, fields = config["optim"][who], SCHEMA["optim"][who]
        kind, own = section["type"], OPTIMIZER_OPTIONS[section["type"]]
        for key in sorted({k for keys in OPTIMIZER_OPTIONS.values() for k in keys}):
            if key in own or section[key] == fields[key].default:
                continue
            readers = [t for t, keys in OPTIMIZER_OPTIONS.items() if key in keys]
            errors.append(f"optim.{who}.{key} is set but optim.{who}.type is {kind!r}; it applies to "
                          f"{' and '.join(readers)} only (leave it out, or at its default)")
        if kind == "sgd" and section["nesterov"] and section["momentum"] <= 0:
            errors.append(f"optim.{who}.nesterov needs optim.{who}.momentum > 0")
    return errors


def _check_schedules(config):
    """Cosine-only keys only with the cosine; a warm-up shorter than the schedule."""
    errors = []
    for who in ("generator", "critic"):
        section = config["optim"][who]
        for key in ("lr_final", "beta2_final"):
            if section[key] is not None and section["schedule"] != "cosine":
                errors.append(f"optim.{who}.{key} is set but optim.{who}.schedule is {section['schedule']!r}; "
                              "it takes effect with schedule 'cosine'")
    if config["schedule"]["warmup_images"] >= schedule_images(config):
        errors.append(f"schedule.warmup_images {config['schedule']['warmup_images']:g} must be below the schedule's "
                      f"length ({schedule_images(config):g} images)")
    if config["penalty"]["weight_final"] is not None and config["penalty"]["type"] == "none":
        errors.append("penalty.weight_final is set but penalty.type is 'none'; it schedules a penalty's weight")
    if config["train"]["ema"]["half_life_images"] is not None and not config["train"]["ema"]["enabled"]:
        errors.append("train.ema.half_life_images is set but train.ema.enabled is false")
    if config["train"]["ema"]["half_life_ramp"] and config["train"]["ema"]["half_life_images"] is None:
        errors.append("train.ema.half_life_ramp needs train.ema.half_life_images (the half-life it rises to)")
    return errors


#: penalties whose points are the critic loss's own, so they see each sample with its label
CONDITIONAL_PENALTIES = ("none", "r1", "r2", "r1r2")


def _check_conditional(config):
    """Labels to condition on, and a penalty at labelled points. (Every critic model.critic accepts
    has features to project the labels on: tests/test_conditional.py.)"""
    if not config["model"]["conditional"]:
        return []
    from gpgan.data import LABELED_DATASETS
    errors = []
    if config["data"]["name"] not in LABELED_DATASETS:
        errors.append(f"model.conditional needs class labels, but data.name {config['data']['name']!r} has none; "
                      f"accepted: {', '.join(LABELED_DATASETS)}")
    if config["penalty"]["type"] not in CONDITIONAL_PENALTIES:
        errors.append(f"penalty.type {config['penalty']['type']!r} takes its gradient at points without a label; "
                      f"with model.conditional the accepted ones are {', '.join(CONDITIONAL_PENALTIES)}")
    return errors


def num_classes(config):
    """The classes of a conditional run (model.num_classes, else the data set's), or None."""
    if not config["model"]["conditional"]:
        return None
    from gpgan.data import LABELED_DATASETS
    return config["model"]["num_classes"] or LABELED_DATASETS.get(config["data"]["name"])


def best_metric(config):
    """The evaluation metric that picks checkpoints/best.npz and that train.patience watches:
    train.best_metric, else FID where the run computes it, else the reverse KL (2-D data)."""
    return config["train"]["best_metric"] or ("eval/fid" if "fid" in config["eval"]["metrics"] else "eval/reverse_kl")


def _check_pairing(config):
    """A pairing loss (rpgan) pairs the generator step's fakes with a critic batch of reals by index."""
    tc = config["train"]
    if config["loss"] == "rpgan" and tc["generator_batch_size"] not in (None, tc["batch_size"]):
        return [f"train.generator_batch_size {tc['generator_batch_size']}: loss 'rpgan' pairs each generated "
                f"sample with a real one, so it must equal train.batch_size ({tc['batch_size']}) or be null"]
    return []


CONFIG_SCHEMA = Schema(SCHEMA, checks=[_check_penalty_center, _check_evaluation, _check_pairing,
                                       _check_optimizers, _check_schedules, _check_conditional, _check_precision,
                                       _check_augment])

validate_config = CONFIG_SCHEMA.validate
load_config = CONFIG_SCHEMA.load
parse_override = CONFIG_SCHEMA.parse_override
apply_overrides = CONFIG_SCHEMA.apply_overrides
default_config = CONFIG_SCHEMA.default
dump_config = CONFIG_SCHEMA.dump
config_reference_markdown = CONFIG_SCHEMA.reference_markdown


if __name__ == "__main__":
    print(config_reference_markdown(), end="")
