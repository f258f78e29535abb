"""Models fitted on transformed client vectors, mapped back to the job's raw columns.

A job's public transforms (``ltm.transforms``: e.g. Cao & Zhang's second-moment whitening) rewrite
the feature entries before the parties clip.  A model fitted on the release has coefficients on
the client vector's regressor entries; for LINEAR transforms
:meth:`ltm.transforms.FeaturePipeline.pull_back` maps them to the raw columns' (center/scale)
entries, and :func:`raw_linear_predictor` then gives raw-unit ``coef_`` / ``intercept_`` through
the usual :func:`ltm.analyst.estimators.map_to_raw`.  OLS is affine-equivariant, so this round trip is
exact: the mapped-back OLS of whitened rows IS the OLS of the raw rows.
"""
from __future__ import annotations

import numpy as np

from ltm.analyst.estimators import ColumnTransform, LinearPredictor, linear_predictor
from ltm.jobspec import JobSpec
from ltm.transforms import FeaturePipeline

__all__ = ["RawColumns", "raw_linear_predictor"]


class RawColumns(ColumnTransform):
    """The job's raw columns as a :class:`ltm.analyst.estimators.ColumnTransform` (before transforms)."""

    @classmethod
    def from_spec(cls, spec: JobSpec) -> "RawColumns":
        """The public scaling of a job's columns: names, centres and scales (float64 (D,)), and the
        indices of the label and the intercept (None when absent).
        """
        roles = [c.role for c in spec.columns]
        return cls(columns=tuple(c.name for c in spec.columns),
                   centers=np.array([c.center for c in spec.columns], dtype=np.float64),
                   scales=np.array([c.scale for c in spec.columns], dtype=np.float64),
                   label=roles.index("label") if "label" in roles else None,
                   intercept=roles.index("intercept") if "intercept" in roles else None)


def raw_linear_predictor(coef_vector: np.ndarray, spec: JobSpec) -> LinearPredictor:
    """A model with coefficients on the client vector's regressors (ordered as
    ``release.feature_indices``) as a raw-unit :class:`LinearPredictor` on the job's raw features.

    Raises ``ltm.transforms.TransformError`` if a transform of the job is not linear.
    """
    coef_raw_entries = FeaturePipeline.for_spec(spec).pull_back(coef_vector)
    return linear_predictor(coef_raw_entries, RawColumns.from_spec(spec))
