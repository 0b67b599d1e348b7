"""Metrics: mode coverage of 2-D toy mixtures (VEEGAN / PacGAN definitions)."""
from gpgan.metrics.toy import DEFAULT_NUM_SAMPLES, mode_metrics, nearest_modes

__all__ = ["DEFAULT_NUM_SAMPLES", "mode_metrics", "nearest_modes"]
