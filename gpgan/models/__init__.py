"""Generator and critic architectures, selectable by name from a config.

Owns the architectures and their options (built from :mod:`gpgan.nn`); losses, penalties and the
training loop that use them are elsewhere (:mod:`gpgan.losses`, :mod:`gpgan.train`).

``make_model(name, **options)`` builds one of :data:`MODELS`: dcgan_generator, dcgan_critic,
resnet_generator, resnet_critic, mlp_generator, mlp_critic, r3gan_generator, r3gan_critic.
Generators have ``latent_dim`` and map z (N, latent_dim) to images (N, 3, 32, 32) in [-1, 1]
(points (N, 2) for mlp; r3gan's are not squashed, and are clipped where quantized); critics map
their input to logits (N, 1).
"""
import inspect

from gpgan.models.conditional import ConditionalGenerator, ProjectionCritic, supports_projection
from gpgan.models.dcgan import DCGANCritic, DCGANGenerator
from gpgan.models.mlp import MLPCritic, MLPGenerator
from gpgan.models.r3gan import R3GANCritic, R3GANGenerator
from gpgan.models.resnet import ResNetCritic, ResNetGenerator

#: name -> model class; ``list(MODELS)`` gives the names.
MODELS = {
    "dcgan_generator": DCGANGenerator,
    "dcgan_critic": DCGANCritic,
    "resnet_generator": ResNetGenerator,
    "resnet_critic": ResNetCritic,
    "mlp_generator": MLPGenerator,
    "mlp_critic": MLPCritic,
    "r3gan_generator": R3GANGenerator,
    "r3gan_critic": R3GANCritic,
}


def model_options(name):
    """The options ``make_model(name, ...)`` accepts, with their defaults (a dict)."""
    cls = _lookup(name)
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    return {p.name: p.default for p in params}


def _lookup(name):
    try:
        return MODELS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown model {name!r}; accepted: {', '.join(MODELS)}") from None


def make_conditional(role, name, num_classes, embedding_dim=None, **options):
    """Model ``name`` made class-conditional (:mod:`gpgan.models.conditional`).

    ``role`` "generator": the base is built with ``latent_dim + embedding_dim`` inputs (z and the
    label's embedding; ``embedding_dim`` defaults to ``latent_dim``), so the wrapper's
    ``latent_dim`` is the option's. ``role`` "critic": a projection critic on the base's features.
    Raises ValueError for a critic without features to project on.
    """
    rng = options.get("rng")
    if role == "generator":
        latent = options.get("latent_dim", model_options(name).get("latent_dim"))
        embedding_dim = int(latent if embedding_dim is None else embedding_dim)
        base = make_model(name, **{**options, "latent_dim": latent + embedding_dim})
        return ConditionalGenerator(base, num_classes, embedding_dim, rng=rng)
    base = make_model(name, **options)
    if not supports_projection(base):
        accepted = [n for n, cls in MODELS.items() if hasattr(cls, "features") and hasattr(cls, "logits")]
        raise ValueError(f"model.conditional: critic {name!r} has no feature map to project the labels on; "
                         f"accepted: {', '.join(accepted)}")
    return ProjectionCritic(base, num_classes, base.feature_dim, rng=rng)


def make_model(name, **options):
    """Build model ``name`` (one of :data:`MODELS`) with keyword ``options`` (see each class).

    Raises:
        ValueError: for an unknown name (listing MODELS) or an unknown option (naming it and the
            options that model accepts).
    """
    cls = _lookup(name)
    accepted = model_options(name)
    unknown = [k for k in options if k not in accepted]
    if unknown:
        raise ValueError(f"model {name!r} got unknown option(s) {', '.join(repr(k) for k in unknown)}; "
                         f"accepted: {', '.join(accepted)}")
    return cls(**options)


__all__ = ["MODELS", "make_model", "make_conditional", "model_options", "ConditionalGenerator", "ProjectionCritic",
           "DCGANGenerator", "DCGANCritic", "ResNetGenerator", "ResNetCritic", "MLPGenerator", "MLPCritic",
           "R3GANGenerator", "R3GANCritic"]
