"""From a config to the objects a run trains: data, generator and critic, optimizers with their
learning-rate schedules, the generator's EMA, the adversarial loss and the gradient penalty."""
from dataclasses import dataclass

import gpgan
from gpgan.augment import make_augment
from gpgan.data import is_toy, make_loader
from gpgan.losses import make_loss, make_penalty
from gpgan.models import make_conditional, make_model
from gpgan.optim import EMA, SGD, Adam, CosineValue, RMSprop, make_schedule
from gpgan.train.config import ConfigError, images_per_step, num_classes, schedule_images

__all__ = ["Components", "build_components", "make_generator"]


@dataclass
class Components:
    """Everything a config describes, built and on its device.

    ``loader`` yields CPU batches (``next()``, resumable ``state_dict()``); ``sampler`` is the toy
    distribution (None for images); ``ema`` is None when disabled; ``augment`` is the augmentation
    of the images the critic sees (:mod:`gpgan.augment`), None without one.
    """

    config: dict
    loader: object
    sampler: object
    generator: object
    critic: object
    g_opt: object
    d_opt: object
    g_sched: object
    d_sched: object
    ema: object
    loss: object
    penalty: object
    penalty_weight: object = None  # None, or the CosineValue the penalty's weight follows
    num_classes: int = None        # a class-conditional run's classes (None: unconditional)
    augment: object = None         # None, or the run's augmentation (gpgan.augment)

    @property
    def device(self):
        return self.config["device"]

    @property
    def is_toy(self):
        """Whether the data are 2-D points (toy data) rather than images."""
        return is_toy(self.config["data"]["name"])

    @property
    def latent_dim(self):
        return int(self.generator.latent_dim)

    def state_objects(self):
        """``(modules, optimizers, emas)`` by the names a checkpoint stores them under."""
        modules = {"generator": self.generator, "critic": self.critic}
        optimizers = {"generator": self.g_opt, "critic": self.d_opt,
                      "schedule_generator": self.g_sched, "schedule_critic": self.d_sched}
        emas = {"generator": self.ema} if self.ema is not None else {}
        return modules, optimizers, emas


def _optimizer(params, section):
    """The optimizer optim.<who> describes (its type's options only; the schema refused the others)."""
    kind = section["type"]
    if kind == "sgd":
        return SGD(params, lr=section["lr"], momentum=section["momentum"], nesterov=section["nesterov"])
    if kind == "rmsprop":
        return RMSprop(params, lr=section["lr"], alpha=section["alpha"], eps=section["eps"],
                       momentum=section["momentum"], centered=section["centered"])
    return Adam(params, lr=section["lr"], betas=tuple(section["betas"]), eps=section["eps"])


def make_generator(config):
    """The generator ``config`` describes (class-conditional when model.conditional), on the CPU,
    its weights drawn from gpgan's global generator."""
    return _network(config, "generator")


def _network(config, role):
    """The generator or critic (``role``) of model.<role> with model.<role>_options; an option the
    model refuses (a width of 0) is a ConfigError naming the config key."""
    mc, classes = config["model"], num_classes(config)
    options = mc[f"{role}_options"]
    try:
        if classes is None:
            return make_model(mc[role], **options)
        extra = (mc["embedding_dim"],) if role == "generator" else ()
        return make_conditional(role, mc[role], classes, *extra, **options)
    except ValueError as exc:
        raise ConfigError(f"model.{role}_options: {exc}") from None


def _lr_schedule(section, optimizer, config):
    if section["schedule"] != "cosine":
        return make_schedule(section["schedule"], optimizer, config["train"]["steps"])
    return make_schedule("cosine", optimizer, final_lr=section["lr_final"] or 0.0,
                         total_images=schedule_images(config), warmup_images=config["schedule"]["warmup_images"],
                         images_per_step=images_per_step(config), final_beta2=section["beta2_final"])


def _images_curve(config, base, final, warmup=True):
    """The :class:`CosineValue` from ``base`` to ``final`` over the schedule section's images, with
    its warm-up (from 0) or without, at the run's images per generator step."""
    return CosineValue(base, final, schedule_images(config), config["schedule"]["warmup_images"] if warmup else 0,
                       images_per_step=images_per_step(config))


def _ema(generator, config):
    ec = config["train"]["ema"]
    if not ec["enabled"]:
        return None
    half_life = None
    if ec["half_life_images"] is not None:
        h = ec["half_life_images"]
        # ramp: R3GAN's ema_scheduler, the cosine from 0 to the half-life (no warm-up)
        half_life = _images_curve(config, 0.0 if ec["half_life_ramp"] else h, h, warmup=False)
    return EMA(generator, decay=ec["decay"], start_step=ec["start_step"], rampup=ec["rampup"], half_life=half_life,
               images_per_step=images_per_step(config))


def _penalty_weight(penalty, config):
    final = config["penalty"]["weight_final"]
    if final is None or config["penalty"]["type"] == "none":
        return None
    return _images_curve(config, penalty.weight, final)


def _augment(config):
    """The run's augmentation; ADA's cosine p is R3GAN's aug_scheduler: the cosine from augment.p to
    augment.p_end over the schedule section's images, warm-up included (as the penalty weight's)."""
    ac = config["augment"]
    p_curve = None
    if ac["type"] == "ada" and ac["p_mode"] == "cosine":
        p_curve = _images_curve(config, ac["p"], ac["p_end"])
    return make_augment(ac, config["device"], p_curve=p_curve)


def build_components(config, progress=True):
    """Build the components of ``config`` (a resolved config).

    The data come first, so that a missing data set fails before any model is built. The
    weights are then drawn from gpgan's global generator, reseeded with ``train.seed``: a seed
    fixes the initial weights.

    Args:
        progress: show a progress bar while data are downloaded or read.
    """
    tc, data, oc, pc = config["train"], config["data"], config["optim"], config["penalty"]
    seed, device = tc["seed"], config["device"]
    classes = num_classes(config)
    loader, sampler = make_loader(
        data["name"], tc["batch_size"], seed=seed, root=data["root"], download=data["download"],
        split=data["split"], hflip=data["hflip"], options=data["options"], progress=progress,
        labels=classes is not None)

    gpgan.manual_seed(seed)
    generator = _network(config, "generator").to(device)
    critic = _network(config, "critic").to(device)
    g_opt = _optimizer(list(generator.parameters()), oc["generator"])
    d_opt = _optimizer(list(critic.parameters()), oc["critic"])
    penalty = make_penalty(pc["type"], weight=pc["weight"], center=pc["center"], interval=pc["interval"],
                           **pc["options"])
    return Components(
        config=config, loader=loader, sampler=sampler, generator=generator, critic=critic,
        g_opt=g_opt, d_opt=d_opt,
        g_sched=_lr_schedule(oc["generator"], g_opt, config),
        d_sched=_lr_schedule(oc["critic"], d_opt, config),
        ema=_ema(generator, config),
        loss=make_loss(config["loss"]),
        penalty=penalty,
        penalty_weight=_penalty_weight(penalty, config),
        num_classes=classes,
        augment=_augment(config),
    )
