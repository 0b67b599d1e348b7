"""Generator and critic architectures, selectable by name from a config.

Owns the architectures and their options (built from :mod:`gpgan.nn`); losses, penalties and the
training loop that use them are elsewhere (:mod:`gpgan.losses`, :mod:`gpgan.train`).

``make_model(name, **options)`` builds one of :data:`MODELS`: dcgan_generator, dcgan_critic,
resnet_generator, resnet_critic, mlp_generator, mlp_critic, r3gan_generator, r3gan_critic.
Generators have ``latent_dim`` and map z (N, latent_dim) to images (N, 3, 32, 32) in [-1, 1]
(points (N, 2) for mlp; r3gan's are not squashed, and are clipped where quantized); critics map
their input to logits (N, 1). Each class declares its keyword options in ``options`` ({name:
:class:`~gpgan.schema.Field`}; :func:`model_options`), which its constructor, :func:`make_model`
and the config's ``model.generator_options`` / ``model.critic_options`` are checked against.
"""
from gpgan.models.conditional import ConditionalGenerator, ProjectionCritic, supports_projection
from gpgan.models.dcgan import DCGANCritic, DCGANGenerator
from gpgan.models.mlp import MLPCritic, MLPGenerator
from gpgan.models.r3gan import R3GANCritic, R3GANGenerator
from gpgan.models.resnet import ResNetCritic, ResNetGenerator
from gpgan.schema import check_options, problems_line

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
#: the names of MODELS that are generators and critics, what model.generator and model.critic accept
GENERATORS = tuple(name for name in MODELS if name.endswith("_generator"))
CRITICS = tuple(name for name in MODELS if name.endswith("_critic"))


def model_options(name):
    """``{option name: Field}``: the keyword options ``make_model(name, ...)`` accepts besides
    ``rng``, with their types, defaults and bounds."""
    return _lookup(name).options


def _checked(name, options):
    """``options`` for model ``name`` checked and converted by its Fields (``rng`` passed as it is)."""
    given = {k: v for k, v in options.items() if k != "rng"}
    checked, errors = check_options(model_options(name), given, f"model {name!r}")
    if errors:
        raise ValueError(f"make_model({name!r}): {problems_line(errors)}")
    return {**options, **checked}


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
    options = _checked(name, options)
    rng = options.get("rng")
    if role == "generator":
        latent = options.get("latent_dim", model_options(name)["latent_dim"].default)
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
        ValueError: for an unknown name (listing MODELS), an unknown option (naming it and the
            options that model accepts) or a value its Field refuses (:func:`model_options`).
    """
    return _lookup(name)(**_checked(name, options))


__all__ = ["MODELS", "GENERATORS", "CRITICS", "make_model", "make_conditional", "model_options",
           "ConditionalGenerator", "ProjectionCritic",
           "DCGANGenerator", "DCGANCritic", "ResNetGenerator", "ResNetCritic", "MLPGenerator", "MLPCritic",
           "R3GANGenerator", "R3GANCritic"]
