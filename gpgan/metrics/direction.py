"""Which way each metric improves: the one rule that final.json's "best", the best checkpoint and
the sweep reports all follow."""
import re

__all__ = ["direction", "is_better", "KNOWN"]

#: metrics whose direction is known by name ("max": higher is better)
KNOWN = {"eval/modes": "max", "eval/high_quality": "max", "eval/reverse_kl": "min",
         "eval/fid": "min", "eval/kid": "min", "eval/is": "max", "eval/precision": "max", "eval/recall": "max",
         "eval/density": "max", "eval/coverage": "max"}

# Names that read as costs are minimized; every other metric is maximized.
_MINIMIZED = re.compile(r"(kl|loss|fid|kid|divergence|distance|error|time)", re.IGNORECASE)


def direction(name):
    """"max" or "min": how ``name`` (with or without its "eval/" prefix) improves."""
    for key in (name, "eval/" + name):
        if key in KNOWN:
            return KNOWN[key]
    return "min" if _MINIMIZED.search(name) else "max"


def is_better(name, value, than, by=0.0):
    """Whether ``value`` of metric ``name`` beats ``than`` by more than ``by`` (>= 0, in the
    metric's units; None: anything finite beats it)."""
    if value != value:  # NaN never wins
        return False
    if than is None:
        return True
    return value > than + by if direction(name) == "max" else value < than - by
