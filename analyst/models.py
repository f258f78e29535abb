"""scikit-learn–compatible models fitted from a DP release, never from raw data.

:class:`ReleaseRidge` (ridge), :class:`ReleaseOLS` (λ = 0) and :class:`ReleaseLowRank` follow scikit-learn's
estimator conventions — hyper-parameters in ``__init__`` (``get_params``/``set_params``,
``sklearn.base.clone``, ``check_is_fitted``), fitted attributes ending in ``_``, ``predict``/``score``/``transform`` on raw
rows — but ``fit`` takes a *release* (a :class:`ltm.analyst.release.ReleasedSketch` or a
:class:`ltm.analyst.result.JobResult` from :func:`ltm.analyst.result.open_result`), not ``(X, y)``.  A raw-data
``fit`` is what the privacy guarantee exists to avoid, so it is refused (``TypeError``); scikit-learn's
estimator checks that fit on raw arrays therefore do not apply (tests/unit/analyst/test_models.py runs
the ones that do).

Everything a fitted model does — :meth:`ReleaseRidge.refit` with another λ, :meth:`ReleaseLowRank.refit`
with another rank, :meth:`ReleaseRidge.coef_errors` — is post-processing of the one release: it reads
it, never changes it, and costs no privacy.  scikit-learn itself is optional: this module imports it
only inside ``__sklearn_tags__``, which only scikit-learn calls.

The solvers are :mod:`ltm.analyst.estimators`' (the same numbers ``ltm job`` fits).
"""
from __future__ import annotations

import functools
import inspect
import sys
from dataclasses import replace
from typing import Any

import numpy as np

from ltm.analyst.estimators import OLS, LowRank, Ridge, release_lambda
from ltm.analyst.release import ReleasedSketch
from ltm.errors import LtmError

__all__ = ["NotFittedError", "ReleaseLowRank", "ReleaseOLS", "ReleaseRidge", "as_release"]


class NotFittedError(LtmError, ValueError, AttributeError):
    """A model used before :meth:`fit` (a ValueError and an AttributeError, as scikit-learn's is; an
    :class:`ltm.errors.LtmError` like every error of the project)."""


@functools.cache
def _not_fitted(sklearn_class: type | None) -> type:
    """:class:`NotFittedError`, and also scikit-learn's when a caller has loaded scikit-learn (its checks
    and ``except`` clauses expect its own class; this module never imports it)."""
    return NotFittedError if sklearn_class is None else type("NotFittedError", (NotFittedError, sklearn_class), {})


def as_release(source: Any) -> ReleasedSketch:
    """The release of ``source``: a :class:`ReleasedSketch`, or anything with a ``release`` attribute
    that is one (a :class:`ltm.analyst.result.JobResult`).  Raw arrays are refused with the reason."""
    if isinstance(source, ReleasedSketch):
        return source
    inner = getattr(source, "release", None)
    if isinstance(inner, ReleasedSketch):
        return inner
    raise TypeError(f"fit takes a DP release (ltm.analyst.result.open_result(DIR) or a ReleasedSketch), got "
                    f"{type(source).__name__}: these models are fitted from a release, never from raw data")


class _ReleaseEstimator:
    """get_params/set_params/repr from ``__init__``'s signature (scikit-learn's BaseEstimator contract,
    without importing it), refit on the stored release, and scikit-learn's tags on request."""

    _fitted_attr = "release_"
    _estimator_type = "regressor"

    @classmethod
    def _param_names(cls) -> list[str]:
        return [p for p in inspect.signature(cls.__init__).parameters if p != "self"]

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The hyper-parameters, name → value (``deep`` is accepted for scikit-learn; none nest)."""
        return {name: getattr(self, name) for name in self._param_names()}

    def set_params(self, **params: Any) -> _ReleaseEstimator:
        """Set hyper-parameters by name; an unknown name is a ValueError.  Returns self (not refitted)."""
        valid = self._param_names()
        for name, value in params.items():
            if name not in valid:
                raise ValueError(f"{type(self).__name__} has no parameter {name!r}; valid: {', '.join(valid)}")
            setattr(self, name, value)
        return self

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.get_params().items())})"

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, self._fitted_attr)

    def __sklearn_tags__(self) -> Any:
        from sklearn.utils import (
            InputTags,
            RegressorTags,
            Tags,
            TargetTags,
            TransformerTags,
        )

        regressor = self._estimator_type == "regressor"
        return Tags(estimator_type=self._estimator_type if regressor else None,
                    target_tags=TargetTags(required=regressor), input_tags=InputTags(),
                    regressor_tags=RegressorTags() if regressor else None,
                    transformer_tags=None if regressor else TransformerTags())

    def _check_fitted(self) -> None:
        if not hasattr(self, self._fitted_attr):
            sklearn_class = getattr(sys.modules.get("sklearn.exceptions"), "NotFittedError", None)
            raise _not_fitted(sklearn_class)(f"this {type(self).__name__} is not fitted yet; call fit(release) first")

    def _check_y_none(self, y: Any) -> None:
        if y is not None:
            raise TypeError(f"{type(self).__name__}.fit takes a release only: the label is a column of the release, "
                            f"and raw data are never fitted on")

    def refit(self, **params: Any) -> _ReleaseEstimator:
        """A new model with ``params`` changed (e.g. ``alpha=10.0``, ``n_components=3``), fitted on the SAME
        release as this one: post-processing, no privacy cost, the release unchanged.  ``self`` is left as is."""
        self._check_fitted()
        return type(self)(**{**self.get_params(), **params}).fit(getattr(self, self._fitted_attr))

    def _rows(self, X: Any, width: int) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != width:
            raise ValueError(f"X must have shape (n, {width}) (raw values, columns as feature_names_in_), "
                             f"got {X.shape}")
        if not np.all(np.isfinite(X)):
            raise ValueError("X holds NaN or infinite values")
        return X


class ReleaseRidge(_ReleaseEstimator):
    """Ridge regression (``alpha=0``: OLS) fitted from a labelled release, in raw units.

    On a ``gram`` release it solves ``(X̃ᵀX̃ + λI)⁻¹ X̃ᵀỹ`` from the noisy Gram; on a sketch, the same
    normal equations of the sketched rows (:class:`ltm.analyst.estimators.Ridge`), with ``debias``
    subtracting the release's known noise Gram diagonal.  ``alpha`` is λ of the transformed problem
    (columns ``(x − centre) / scale`` as the job declared them).

    Not scikit-learn's raw-data estimator: ``fit`` takes a release (see the module docstring), so
    the estimator checks that fit on arrays do not apply; the others pass.

    Args:
        alpha: λ ≥ 0, or None (default) for the release's own rule
            (:func:`ltm.analyst.estimators.release_lambda`, the rule ``ltm job`` uses).
        debias: a sketch release only: subtract the expected noise Gram diagonal (default True, as a
            job's ``[fit]``; False: the paper's faithful analyst).  A ``gram`` release has nothing to
            subtract (its noise has mean zero).

    Attributes (after fit):
        coef_: (n_features,) raw-unit coefficients, in ``feature_names_in_`` order.
        intercept_: the raw-unit intercept.
        coef_scaled_: (len(release.feature_indices),) coefficients in the transformed space.
        alpha_: the λ used; alpha_rule_: where it came from.
        feature_names_in_: (n_features,) object array of the feature column names; n_features_in_.
        release_: the release it was fitted from (read, never changed).
    """

    def __init__(self, alpha: float | None = None, debias: bool = True) -> None:
        self.alpha = alpha
        self.debias = debias

    def fit(self, release: Any, y: None = None) -> ReleaseRidge:
        """Fit from ``release`` (a :class:`ReleasedSketch` or a :class:`JobResult`); ``y`` must be None
        (the label is the release's label column).  Returns self."""
        self._check_y_none(y)
        rel = as_release(release)
        if rel.label is None:
            raise ValueError("this release has no label column (a low-rank job): use ReleaseLowRank")
        if self.alpha is None:
            lam, rule = release_lambda(rel)
        else:
            lam, rule = float(self.alpha), "given"
            if not np.isfinite(lam) or lam < 0:
                raise ValueError(f"alpha must be None or a finite number >= 0, got {self.alpha!r}")
        est = (OLS() if lam == 0.0 and not self.debias else Ridge(lam, debias=bool(self.debias))).fit(rel)
        self.coef_, self.intercept_ = est.coef_, float(est.intercept_)
        self.coef_scaled_, self.solver_ = est.coef_scaled_, est.solver_
        self.alpha_, self.alpha_rule_ = lam, rule
        self.feature_names_in_ = np.array(est.feature_names_in_, dtype=object)
        self.n_features_in_ = len(est.feature_names_in_)
        self.release_ = rel
        return self

    def predict(self, X: Any) -> np.ndarray:
        """(n,) predictions in the label's raw units for (n, n_features_in_) raw rows: ``X @ coef_ + intercept_``."""
        self._check_fitted()
        return self._rows(X, self.n_features_in_) @ self.coef_ + self.intercept_

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        """R² of :meth:`predict` on raw rows ``X`` (n, n_features_in_) against ``y`` (n,) (scikit-learn's
        definition: 1 − Σw(y − ŷ)² / Σw(y − ȳ_w)²)."""
        y = np.asarray(y, dtype=np.float64).reshape(-1)
        y_hat = self.predict(X)
        if y.shape != y_hat.shape:
            raise ValueError(f"y has {y.shape[0]} values, X has {y_hat.shape[0]} rows")
        w = np.ones_like(y) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64).reshape(-1)
        total = float(np.sum(w * (y - np.average(y, weights=w)) ** 2))
        resid = float(np.sum(w * (y - y_hat) ** 2))
        return 1.0 - resid / total if total > 0 else (1.0 if resid == 0 else 0.0)

    def coef_errors(self, draws: int = 200, seed: int = 0) -> tuple[np.ndarray, float]:
        """Standard deviations of ``coef_`` (n_features,) and of ``intercept_`` due to the DP noise: the
        fit repeated (with the same ``alpha_``) on ``draws`` copies of the release with fresh Gaussian
        noise of the variances the release states (:func:`ltm.analyst.result.noise_statement`).  A
        parametric bootstrap of the noise only (not of the sampling of the rows; Laplace noise is
        approximated by a Gaussian of its variance); post-processing, no privacy cost.  The draws
        are analysis randomness, not privacy noise: a fixed ``seed`` keeps a figure reproducible."""
        self._check_fitted()
        rel, rng = self.release_, np.random.default_rng(seed)
        sd = (np.sqrt(rel.entry_noise_variance) if rel.lifted
              else np.sqrt(rel.noise_variance_per_column / rel.matrix.shape[0]))
        fixed = ReleaseRidge(alpha=self.alpha_, debias=self.debias)
        coefs, intercepts = [], []
        for _ in range(int(draws)):
            noisy = replace(rel, matrix=rel.matrix + rng.normal(size=rel.matrix.shape) * sd, privacy={})
            fixed.fit(noisy)
            coefs.append(fixed.coef_)
            intercepts.append(fixed.intercept_)
        return np.std(coefs, axis=0, ddof=1), float(np.std(intercepts, ddof=1))


class ReleaseOLS(ReleaseRidge):
    """Ordinary least squares fitted from a labelled release: :class:`ReleaseRidge` with λ = 0, no
    de-biasing and no hyper-parameters (scikit-learn's LinearRegression to ReleaseRidge's Ridge).  ``refit(alpha=…)`` is
    refused: use ``ReleaseRidge(alpha=…).fit(model.release_)``."""

    alpha = 0.0
    debias = False

    def __init__(self) -> None:
        pass


class ReleaseLowRank(_ReleaseEstimator):
    """The top ``n_components`` directions of the released data (all its columns, transformed by the job's
    public ``(x − centre) / scale``), scikit-learn's PCA-like surface, fitted from a release.

    Not scikit-learn's raw-data estimator: ``fit`` takes a release (see the module docstring), so
    the estimator checks that fit on arrays do not apply; the others pass.

    Args:
        n_components: k ≥ 1 (at most the release's column count, and a sketch's row count).

    Attributes (after fit):
        components_: (n_components, n_features) orthonormal rows, in the transformed space.
        singular_values_: (n_components,) descending; spectrum_: every singular value of the release.
        feature_names_in_, n_features_in_, release_ as :class:`ReleaseRidge`.
    """

    _estimator_type = "transformer"

    def __init__(self, n_components: int = 2) -> None:
        self.n_components = n_components

    def fit(self, release: Any, y: None = None) -> ReleaseLowRank:
        """Fit from ``release`` (a :class:`ReleasedSketch` or a :class:`JobResult`); ``y`` must be None.
        Returns self."""
        self._check_y_none(y)
        rel = as_release(release)
        est = LowRank(self.n_components).fit(rel)
        self.components_ = est.components_.T.copy()
        self.singular_values_ = np.asarray(est.singular_values_, dtype=np.float64)
        self.spectrum_ = (np.sqrt(np.maximum(np.linalg.eigvalsh(rel.gram)[::-1], 0.0)) if rel.kind == "gram"
                          else np.linalg.svd(rel.matrix, compute_uv=False))
        self.feature_names_in_ = np.array(rel.columns, dtype=object)
        self.n_features_in_ = len(rel.columns)
        self._centers, self._scales = np.asarray(rel.centers), np.asarray(rel.scales)
        self.release_ = rel
        return self

    def transform(self, X: Any) -> np.ndarray:
        """(n, n_components) coordinates of (n, n_features_in_) raw rows (transformed, then projected)."""
        self._check_fitted()
        return ((self._rows(X, self.n_features_in_) - self._centers) / self._scales) @ self.components_.T

    def inverse_transform(self, T: Any) -> np.ndarray:
        """(n, n_features_in_) raw rows from (n, n_components) coordinates."""
        self._check_fitted()
        return (np.asarray(T, dtype=np.float64) @ self.components_) * self._scales + self._centers

    def score(self, X: Any, y: None = None) -> float:
        """Minus the mean squared reconstruction error of raw rows ``X`` in the transformed units
        (higher is better, as scikit-learn's scores)."""
        self._check_fitted()
        Z = (self._rows(X, self.n_features_in_) - self._centers) / self._scales
        R = Z - (Z @ self.components_.T) @ self.components_
        return -float(np.mean(np.sum(R * R, axis=1)))
