"""From a config to the objects a run trains: data, generator and critic, optimizers with their
learning-rate schedules, the generator's EMA, the adversarial loss and the gradient penalty."""
from dataclasses import dataclass

import gpgan
from gpgan.augment import make_augment
from gpgan.data import is_toy, make_loader
from gpgan.losses import make_loss, make_penalty
from gpgan.models import make_model
from gpgan.optim import EMA, Adam, make_schedule

__all__ = ["Components", "build_components"]


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
    augment: object = None

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


def _adam(params, section):
    return Adam(params, lr=section["lr"], betas=tuple(section["betas"]), eps=section["eps"])


def build_components(config, progress=True):
    """Build the components of ``config`` (a resolved config).

    The data come first, so that a missing data set fails before any model is built. The
    weights are then drawn from gpgan's global generator, reseeded with ``train.seed``: a seed
    fixes the initial weights.

    Args:
        progress: show a progress bar while data are downloaded or read.
    """
    tc, data, mc, oc, pc = config["train"], config["data"], config["model"], config["optim"], config["penalty"]
    seed, device = tc["seed"], config["device"]
    loader, sampler = make_loader(
        data["name"], tc["batch_size"], seed=seed, root=data["root"], download=data["download"],
        split=data["split"], hflip=data["hflip"], options=data["options"], progress=progress)

    gpgan.manual_seed(seed)
    generator = make_model(mc["generator"], **mc["generator_options"]).to(device)
    critic = make_model(mc["critic"], **mc["critic_options"]).to(device)
    g_opt = _adam(list(generator.parameters()), oc["generator"])
    d_opt = _adam(list(critic.parameters()), oc["critic"])
    ec = tc["ema"]
    return Components(
        config=config, loader=loader, sampler=sampler, generator=generator, critic=critic,
        g_opt=g_opt, d_opt=d_opt,
        g_sched=make_schedule(oc["generator"]["schedule"], g_opt, tc["steps"]),
        d_sched=make_schedule(oc["critic"]["schedule"], d_opt, tc["steps"]),
        ema=EMA(generator, decay=ec["decay"], start_step=ec["start_step"]) if ec["enabled"] else None,
        loss=make_loss(config["loss"]),
        penalty=make_penalty(pc["type"], weight=pc["weight"], center=pc["center"], interval=pc["interval"],
                             **pc["options"]),
        augment=make_augment(config["augment"], device),
    )
