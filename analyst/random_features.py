"""Models fitted on a release of transformed client vectors that predict on RAW inputs.

A job with public transforms (``ltm.transforms``: random features, whitening) releases a sketch
of the mapped vectors; the analyst fits a linear model in that space (the release's columns) and
predicts a new raw row by mapping it with the same public pipeline:

    ŷ = c_y + s_y · ( F(x) · w ),   F = FeaturePipeline.for_spec(spec).features

where ``w`` (``coef_scaled_``) are the coefficients over the release's regressors and ``c_y``,
``s_y`` the label's public center and scale.

* :class:`RFRidge` — ridge in random-feature space on an LTM release (kernel ridge regression with
  the kernel the public map approximates), de-biased like ``ltm.analyst.estimators.Ridge``;
  sklearn-style ``fit(release)`` / ``predict(X_raw)`` / ``coef_``.
* :class:`FeatureSpaceModel` — wraps any transformed-space coefficients (baselines fitted on the
  clear mapped rows) with the same raw-input ``predict``.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ltm.analyst.estimators import Ridge, default_ridge_lambda
from ltm.analyst.release import ReleasedSketch
from ltm.transforms import FeaturePipeline

__all__ = ["FeatureSpaceModel", "RFRidge"]


class FeatureSpaceModel:
    """Coefficients over a release's regressors, with predict on raw inputs (see module docstring).

    Attributes:
        coef_scaled_: (len(release.feature_indices),) coefficients in the transformed space.
        coef_: (len(coef_scaled_),) the same in raw label units (``s_y · w``): one per regressor
            entry of the client vector (random features have no per-raw-input coefficient).
        intercept_: ``c_y`` (the transformed regressors carry any intercept column themselves).
        feature_names_in_: the raw feature columns ``predict`` takes, in order.
        entry_names_: the regressor entries ``coef_`` refers to.
    """

    def __init__(self, coef_scaled: np.ndarray, spec: Any, pipeline: FeaturePipeline | None = None) -> None:
        self.spec = spec
        self.pipeline = pipeline or FeaturePipeline.for_spec(spec)
        label = spec.label_index
        if label is None:
            raise ValueError("the job has no label column; there is no regression")
        self.coef_scaled_ = np.asarray(coef_scaled, dtype=np.float64).reshape(-1)
        entries = [e for e in spec.layout if e.role != "label"]
        if self.coef_scaled_.shape[0] != len(entries):
            raise ValueError(f"{self.coef_scaled_.shape[0]} coefficients for {len(entries)} regressor entries")
        lab = spec.layout[label]
        self._cy, self._sy = float(lab.center), float(lab.scale)
        self.coef_ = self._sy * self.coef_scaled_
        self.intercept_ = self._cy
        self.feature_names_in_ = self.pipeline.raw_feature_names
        self.entry_names_ = tuple(e.name for e in entries)

    def predict_scaled(self, F: np.ndarray) -> np.ndarray:
        """Predictions in the transformed label units from mapped regressors F (rows, entries)."""
        return np.asarray(F, dtype=np.float64) @ self.coef_scaled_

    def predict(self, X_raw: np.ndarray) -> np.ndarray:
        """Predictions in raw label units for raw feature rows (rows, len(feature_names_in_))."""
        return self._cy + self._sy * self.predict_scaled(self.pipeline.features(X_raw))


class RFRidge(FeatureSpaceModel):
    """Ridge on a release of random-feature vectors; ``predict`` takes raw inputs.

    Args:
        spec: the (public) job spec the release came from: its transforms map raw inputs.
        lam: ridge λ; None: ``default_ridge_lambda`` (v·√m, v the noise variance of one scaled
            release entry), the rule of ``ltm simulate``.
        debias: subtract the release's known noise Gram (post-processing; default True).
    """

    def __init__(self, spec: Any, lam: float | None = None, debias: bool = True) -> None:
        self.spec = spec
        self.lam = lam
        self.debias = debias
        self.pipeline = FeaturePipeline.for_spec(spec)

    def fit(self, release: ReleasedSketch) -> "RFRidge":
        """Fit ridge on the release of this job's random-feature vectors (λ: ``lam``, or the default rule
        from the release's noise variance and m); returns self.
        """
        if tuple(release.columns) != tuple(self.spec.vector_names):
            raise ValueError("the release's columns are not this job's client-vector entries "
                             "(fit the release of the job whose spec you passed)")
        m = release.matrix.shape[0]
        lam = self.lam if self.lam is not None else default_ridge_lambda(release.noise_variance_per_column / m, m)
        ridge = Ridge(lam, debias=self.debias).fit(release)
        self.lam_ = float(lam)
        self.ridge_ = ridge
        FeatureSpaceModel.__init__(self, ridge.coef_scaled_, self.spec, self.pipeline)
        return self

    def __repr__(self) -> str:
        return f"RFRidge(lam={self.lam!r}, debias={self.debias}, width={self.spec.width})"
