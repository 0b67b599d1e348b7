"""Metrics: mode coverage of 2-D toy mixtures (VEEGAN / PacGAN definitions), and which way
each metric improves."""
from gpgan.metrics.direction import direction, is_better
from gpgan.metrics.toy import DEFAULT_NUM_SAMPLES, mode_metrics, nearest_modes

__all__ = ["DEFAULT_NUM_SAMPLES", "mode_metrics", "nearest_modes", "direction", "is_better"]
