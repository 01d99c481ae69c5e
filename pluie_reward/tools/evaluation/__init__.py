"""Evaluate judges the way the seeds do: classification and preference metrics, PARAPHRASUS,
baselines and plots. Heavy or optional dependencies are imported inside the functions that need them.

Example:
    >>> from pluie_reward.tools.evaluation import classification_report
    >>> classification_report([-1.0, 2.0], [False, True])["natural"]["f1"]
    1.0
"""

from .calibration import brier_score, expected_calibration_error, fit_calibration, log_loss
from .metrics import (best_threshold, classification_metrics, classification_report, cohens_kappa, cramers_v, metrics_at,
                      preference_metrics, tie_calibrated_accuracy)

__all__ = ["best_threshold", "brier_score", "classification_metrics", "classification_report", "cohens_kappa", "cramers_v",
           "expected_calibration_error", "fit_calibration", "log_loss", "metrics_at", "preference_metrics",
           "tie_calibrated_accuracy"]
