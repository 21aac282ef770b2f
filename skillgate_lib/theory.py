"""Selector credit starvation: closed forms and their Monte Carlo twin (numpy only).

The model is one prompt group of ``G`` rollouts. Each rollout reads exactly one
skill, the oracle with probability ``p``; execution then succeeds with probability
``a(H) = q**H`` after an oracle read (``H`` = horizon in steps) and ``b = s_wrong``
after any other read. Rewards are 0/1. Symbols used throughout:

======  ===================  ==========================================================
symbol  field                meaning
======  ===================  ==========================================================
G       ``group_size``       rollouts per prompt group
p       ``p_oracle``         probability that a rollout's read is the oracle
q       ``q_step``           per-step execution success after an oracle read
b       ``s_wrong``          success probability after a non-oracle read
k       ``selector_tokens``  tokens naming the skill (the selector span)
base    ``base_tokens``      response tokens that do not grow with H
tps     ``tokens_per_step``  response tokens per execution step
lambda  ``selector_coef``    SkillGate's selector-channel loss coefficient
======  ===================  ==========================================================

Derived: ``a = q**H``, ``m = p*a + (1-p)*b`` (a rollout's marginal success rate),
``L(H) = k + base + tps*H`` (response tokens). Broadcast GRPO gives rollout ``i`` the
advantage ``A_i = R_i - mean_j R_j`` on every token (dividing by the group std changes
no sign and no zero); SkillGate's selector channel gives its skill-naming tokens
``V_i = u_i - mean_j u_j`` with ``u_i = 1`` iff read ``i`` is the oracle.

Every method of :class:`StarvationModel` takes an int or a numpy array of ``H``
(any shape) and returns a float or an array of that shape. A quantity that
conditions on an event of probability zero (e.g. "given an oracle read" when
``p = 0``) is ``nan``, in the closed form and in :func:`simulate` alike.
The derivations are in ``notebooks/01_credit_starvation_theory.ipynb``.

One module on purpose: each closed form sits next to the Monte Carlo
estimator it is checked against, with the same symbols; splitting them would part each
formula from its check.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np
import pandas as pd

#: The closed-form quantities, as method names of :class:`StarvationModel` and
#: column names of :func:`closed_forms` and :func:`simulate`.
QUANTITIES = (
    "share",
    "share_skillgate",
    "zero_credit",
    "zero_credit_skillgate",
    "sign_error",
    "sign_error_skillgate",
    "value",
    "selector_signal",
    "selector_signal_skillgate",
)
#: Simulation adds the std-normalised GRPO selector signal, which has no closed form here.
SIMULATED = QUANTITIES + ("selector_signal_std",)

# Trajectories per simulation chunk: about 1 MB per (G, n) float32 array, so a chunk's
# working set stays in cache and memory is bounded whatever n_groups is.
_CHUNK_TRAJECTORIES = 1 << 17


def _horizon(H: int | np.ndarray) -> np.ndarray:
    h = np.asarray(H, dtype=float)
    if not np.all(h >= 0):  # also rejects nan
        raise ValueError(f"H (horizon) must be >= 0, got {H!r}")
    return h


def _out(x: np.ndarray | float) -> np.ndarray | np.float64:
    """A 0-d result as a numpy scalar, anything else unchanged."""
    return np.asarray(x, dtype=float)[()]


@dataclass(frozen=True)
class StarvationModel:
    """Closed forms for Share / Sign / Value of one prompt group (symbols: module docstring)."""

    group_size: int = 8
    """G: rollouts per prompt group (int >= 2)."""
    p_oracle: float = 0.38
    """p: probability that a rollout reads the oracle skill (the reference SFT init reads it ~38 %)."""
    q_step: float = 0.9
    """q: per-step success after an oracle read, so success is q**H."""
    s_wrong: float = 0.3
    """b: success probability after a non-oracle read, independent of H."""
    selector_tokens: int = 3
    """k: tokens of the selector span (the skill name inside the read call), >= 1."""
    base_tokens: int = 40
    """Response tokens that do not depend on H (format, read call, answer), >= 0."""
    tokens_per_step: int = 12
    """Response tokens per execution step, >= 0."""
    selector_coef: float = 0.2
    """lambda: SkillGate's loss is L_exec + lambda * L_sel, > 0."""

    def __post_init__(self) -> None:
        G = self.group_size
        if isinstance(G, bool) or not isinstance(G, numbers.Integral) or G < 2:
            raise ValueError(f"group_size must be an int >= 2, got {G!r}")
        for name in ("p_oracle", "q_step", "s_wrong"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not 0 <= v <= 1:
                raise ValueError(f"{name} must be a probability in [0, 1], got {v!r}")
        for name, low in (("selector_tokens", 1), ("base_tokens", 0), ("tokens_per_step", 0)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < low:
                raise ValueError(f"{name} must be an int >= {low}, got {v!r}")
        lam = self.selector_coef
        if isinstance(lam, bool) or not isinstance(lam, numbers.Real) or not 0 < lam < np.inf:
            raise ValueError(f"selector_coef must be a finite number > 0, got {lam!r}")

    @property
    def _both_reads(self) -> bool:
        """Both conditioning events (an oracle read, another read) have positive probability."""
        return 0 < self.p_oracle < 1

    def length(self, H: int | np.ndarray) -> np.ndarray | np.float64:
        """L(H) = k + base + tps*H: response tokens of a trajectory."""
        return _out(self.selector_tokens + self.base_tokens + self.tokens_per_step * _horizon(H))

    def oracle_success(self, H: int | np.ndarray) -> np.ndarray | np.float64:
        """a(H) = q**H: success probability after an oracle read (1 at H = 0)."""
        return _out(self.q_step ** _horizon(H))

    def success(self, H: int | np.ndarray) -> np.ndarray | np.float64:
        """m(H) = p*a + (1-p)*b: a rollout's marginal success probability."""
        p = self.p_oracle
        return _out(p * self.oracle_success(H) + (1 - p) * self.s_wrong)

    def share(self, H: int | np.ndarray) -> np.ndarray | np.float64:
        """k / L(H): the selector tokens' fraction of a trajectory's loss weight under token-mean."""
        return _out(self.selector_tokens / self.length(H))

    def share_skillgate(self, H: int | np.ndarray) -> np.ndarray | np.float64:
        """lambda / (1 + lambda), for every H: each channel is averaged over its own tokens.

        Exception: with no execution tokens (base = tps*H = 0) the selector channel is
        the whole loss, so the share is 1.
        """
        exec_tokens = self.base_tokens + self.tokens_per_step * _horizon(H)
        lam = self.selector_coef
        return _out(np.where(exec_tokens > 0, lam / (1 + lam), 1.0))

    def zero_credit(self, H: int | np.ndarray) -> np.ndarray | np.float64:
        """P(A_i = 0 | read i is the oracle) = a m**(G-1) + (1-a)(1-m)**(G-1); nan when p = 0."""
        a, m, G = self.oracle_success(H), self.success(H), self.group_size
        z = a * m ** (G - 1) + (1 - a) * (1 - m) ** (G - 1)
        return _out(z if self.p_oracle > 0 else np.full_like(z, np.nan))

    def zero_credit_skillgate(self, H: int | np.ndarray) -> np.ndarray | np.float64:
        """P(V_i = 0 | read i is the oracle) = p**(G-1) (every read in the group is the oracle); nan when p = 0."""
        value = self.p_oracle ** (self.group_size - 1) if self.p_oracle > 0 else np.nan
        return _out(np.full(_horizon(H).shape, value))

    def sign_error(self, H: int | np.ndarray) -> np.ndarray | np.float64:
        """P(A_i has the wrong sign | A_i != 0) for broadcast GRPO.

        Wrong: an oracle read with A_i < 0 (it failed while some groupmate succeeded) or
        another read with A_i > 0 (it succeeded while some groupmate failed)::

            [p (1-a) (1 - (1-m)**(G-1)) + (1-p) b (1 - m**(G-1))] / [1 - m**G - (1-m)**G]

        nan where the denominator is 0 (m in {0, 1}: every advantage is 0).
        """
        a, m, G, p, b = self.oracle_success(H), self.success(H), self.group_size, self.p_oracle, self.s_wrong
        wrong = p * (1 - a) * (1 - (1 - m) ** (G - 1)) + (1 - p) * b * (1 - m ** (G - 1))
        nonzero = 1 - m**G - (1 - m) ** G
        with np.errstate(divide="ignore", invalid="ignore"):
            return _out(np.where(nonzero > 0, wrong / nonzero, np.nan))

    def sign_error_skillgate(self, H: int | np.ndarray) -> np.ndarray | np.float64:
        """0: V_i = u_i - mean(u) is >= 0 for an oracle read and <= 0 otherwise; nan unless 0 < p < 1
        (with p in {0, 1} every V_i is 0)."""
        return _out(np.full(_horizon(H).shape, 0.0 if self._both_reads else np.nan))

    def value(self, H: int | np.ndarray) -> np.ndarray | np.float64:
        """a - b: success after an oracle read minus success after another read; nan unless 0 < p < 1."""
        v = self.oracle_success(H) - self.s_wrong
        return _out(v if self._both_reads else np.full_like(v, np.nan))

    def selector_signal(self, H: int | np.ndarray) -> np.ndarray | np.float64:
        """(E[A_i | oracle] - E[A_i | other]) * share = (G-1)/G (a-b) k/L(H); nan unless 0 < p < 1.

        Broadcast GRPO without std normalisation (the std-normalised case: :func:`simulate`).
        """
        G = self.group_size
        return _out((G - 1) / G * self.value(H) * self.share(H))

    def selector_signal_skillgate(self, H: int | np.ndarray) -> np.ndarray | np.float64:
        """(E[V_i | oracle] - E[V_i | other]) * share_skillgate = (G-1)/G lambda/(1+lambda); nan unless 0 < p < 1."""
        G = self.group_size
        gap = (G - 1) / G if self._both_reads else np.nan
        return _out(gap * self.share_skillgate(H))


def predicted_signal_ratio(value, share, selector_coef: float = 0.2) -> np.ndarray | np.float64:
    """SkillGate's selector signal over outcome-only GRPO's: ``(lambda / (1 + lambda)) / (Value x Share)``.

    The ratio of :meth:`StarvationModel.selector_signal_skillgate` to
    :meth:`StarvationModel.selector_signal` (the ``(G-1)/G`` gap cancels), with the measured
    Value (a - b) and a measured Share in place of the model's: the loss-weight Share ``k / L``,
    or the Gradient Share (the name tokens' share of the logit-gradient norms), which counts a
    token by how hard its loss pulls rather than by its loss weight. The theory predicts how
    much faster SkillGate learns the choice; nan where ``Value x Share <= 0`` (no signal to beat).
    """
    lam = float(selector_coef)
    signal = np.asarray(value, dtype=float) * np.asarray(share, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return _out(np.where(signal > 0, lam / (1 + lam) / signal, np.nan))


def closed_forms(model: StarvationModel, horizons: int | np.ndarray | list[int]) -> pd.DataFrame:
    """Every closed form on a grid: one row per H, columns ``horizon`` and :data:`QUANTITIES`."""
    h = np.atleast_1d(_horizon(horizons))
    return pd.DataFrame({"horizon": h.astype(int) if np.all(h == h.astype(int)) else h,
                         **{name: getattr(model, name)(h) for name in QUANTITIES}})


# Per-group totals the simulation accumulates, one column each (A: GRPO advantage,
# V: SkillGate selector advantage; "o" = over the group's oracle reads, "x" = over the others).
_TOTALS = (
    "reads_o", "reads_x",          # number of oracle / other reads
    "zero_o", "zero_sel_o",        # oracle reads with A = 0 / with V = 0
    "wrong", "nonzero",            # reads with wrong-signed A / with A != 0
    "wrong_sel", "nonzero_sel",    # the same for V
    "succ_o", "succ_x",            # successes
    "adv_o", "adv_x",              # sum of A
    "adv_std_o", "adv_std_x",      # sum of A / std_group(R)
    "sel_o", "sel_x",              # sum of V
)  # fmt: skip
_COL = {name: i for i, name in enumerate(_TOTALS)}


def _sample_groups(rng: np.random.Generator, model: StarvationModel, H: int, n: int) -> np.ndarray:
    """Draw ``n`` groups trajectory by trajectory; return their totals, shape (n, len(_TOTALS)).

    Arrays are laid out (G, n) so that reductions over a group are G - 1 contiguous
    vector adds; float32 uniforms halve the random bits and memory traffic (their
    2**-24 resolution biases a probability by < 6e-8, far below any MC error).
    """
    G = model.group_size
    u = rng.random((2, G, n), dtype=np.float32)
    oracle = u[0] < np.float32(model.p_oracle)
    other = ~oracle
    reward = u[1] < np.where(oracle, np.float32(model.oracle_success(H)), np.float32(model.s_wrong))
    n_success = reward.sum(0)
    n_oracle = oracle.sum(0)
    # Division (not a reciprocal product) keeps S/G exactly 1 when S = G, so A is exactly 0
    # in a group whose rewards are all equal.
    A = reward - (n_success / G).astype(np.float32)
    V = oracle - (n_oracle / G).astype(np.float32)
    # torch.std's unbiased estimate, as TRL and verl use; a group of equal rewards has A = 0
    # there and keeps 0 here.
    std = np.sqrt(n_success * (G - n_success) / (G * (G - 1)))
    inv_std = np.divide(1.0, std, out=np.zeros_like(std), where=std > 0)
    adv_o, adv_x = (A * oracle).sum(0), (A * other).sum(0)
    totals = {
        "reads_o": n_oracle,
        "reads_x": G - n_oracle,
        "zero_o": (oracle & (A == 0)).sum(0),
        "zero_sel_o": (oracle & (V == 0)).sum(0),
        "wrong": np.where(oracle, A < 0, A > 0).sum(0),
        "nonzero": (A != 0).sum(0),
        "wrong_sel": np.where(oracle, V < 0, V > 0).sum(0),
        "nonzero_sel": (V != 0).sum(0),
        "succ_o": (oracle & reward).sum(0),
        "succ_x": (other & reward).sum(0),
        "adv_o": adv_o,
        "adv_x": adv_x,
        "adv_std_o": adv_o * inv_std,
        "adv_std_x": adv_x * inv_std,
        "sel_o": (V * oracle).sum(0),
        "sel_x": (V * other).sum(0),
    }
    return np.stack([totals[name] for name in _TOTALS], axis=1, dtype=np.float64)


def _selector_mass(model: StarvationModel, H: int) -> tuple[float, float]:
    """Share by construction: build a group's per-token loss weights under each aggregation and
    read off the fraction of trajectory 0's weight on its selector tokens -> (GRPO, SkillGate).

    Token-mean: all G*L tokens of the group weigh 1/(G L). SkillGate: the execution channel
    spreads weight 1 over its own tokens, the selector channel lambda over its own.
    """
    G, k, lam = model.group_size, model.selector_tokens, model.selector_coef
    L = int(model.length(H))
    selector = np.zeros((G, L), dtype=bool)
    selector[:, :k] = True
    n_exec = int((~selector).sum())
    token_mean = np.full((G, L), 1.0 / (G * L))
    two_channel = np.where(selector, lam / selector.sum(), 1.0 / n_exec if n_exec else 0.0)
    return tuple(float(w[0, selector[0]].sum() / w[0].sum()) for w in (token_mean, two_channel))


def _estimates(model: StarvationModel, H: int, n: int, total: np.ndarray, cross: np.ndarray) -> dict[str, float]:
    """Each quantity and its MC standard error from the group totals' sums.

    ``total`` (d,) and ``cross`` (d, d) are sum_g x_g and sum_g x_g x_g^T over the ``n``
    iid groups. Every quantity is a ratio (or a difference of ratios) of mean totals, so
    its SE follows from the delta method with the groups' covariance; this accounts for
    the correlation between rollouts of one group.

    A total that (almost) never varied, e.g. a rare event seen in no group, would get a
    sample variance of 0 and so an SE of 0 however far the estimate is off. Each total's
    variance is therefore floored at G**2 / n, the variance it would have if a single group
    out of n differed by G (a group's largest count): the simulation's resolution. Where
    events are common this floor is negligible.
    """
    mean = total / n
    cov = (cross - n * np.outer(mean, mean)) / (n - 1)
    resolution = model.group_size**2 / n
    cov += np.diag(np.maximum(resolution - np.diag(cov), 0.0))  # adding a PSD diagonal keeps cov PSD

    def ratio(num: str, den: str) -> tuple[float, np.ndarray]:
        i, j = _COL[num], _COL[den]
        grad = np.zeros(len(_TOTALS))
        with np.errstate(divide="ignore", invalid="ignore"):
            r = mean[i] / mean[j]
            grad[i], grad[j] = 1 / mean[j], -r / mean[j]
        return r, grad

    def gap(num_o: str, num_x: str) -> tuple[float, np.ndarray]:
        (ro, go), (rx, gx) = ratio(num_o, "reads_o"), ratio(num_x, "reads_x")
        return ro - rx, go - gx

    share, share_sg = _selector_mass(model, H)
    parts = {
        "zero_credit": (*ratio("zero_o", "reads_o"), 1.0),
        "zero_credit_skillgate": (*ratio("zero_sel_o", "reads_o"), 1.0),
        "sign_error": (*ratio("wrong", "nonzero"), 1.0),
        "sign_error_skillgate": (*ratio("wrong_sel", "nonzero_sel"), 1.0),
        "value": (*gap("succ_o", "succ_x"), 1.0),
        "selector_signal": (*gap("adv_o", "adv_x"), share),
        "selector_signal_skillgate": (*gap("sel_o", "sel_x"), share_sg),
        "selector_signal_std": (*gap("adv_std_o", "adv_std_x"), share),
    }
    row = {"horizon": H, "share": share, "share_se": 0.0, "share_skillgate": share_sg, "share_skillgate_se": 0.0}
    for name, (est, grad, scale) in parts.items():
        with np.errstate(invalid="ignore"):
            var = grad @ cov @ grad
        row[name] = float(scale * est)
        row[f"{name}_se"] = float(scale * np.sqrt(var / n))
    return row


def simulate(model: StarvationModel, horizons: int | list[int] | np.ndarray, n_groups: int, seed: int) -> pd.DataFrame:
    """Monte Carlo twin of :class:`StarvationModel`: sample ``n_groups`` groups per horizon.

    Every trajectory's read and reward is drawn, then advantages, signs and sums are
    computed per rollout exactly as defined (no sufficient-statistic shortcut), in chunks
    of about 131k trajectories so memory stays bounded.

    Args:
        model: the parameters.
        horizons: int or sequence of ints H >= 0.
        n_groups: groups sampled per horizon (>= 2, for the standard errors).
        seed: non-negative int. Each H draws from its own stream seeded by ``(seed, H)``,
            so a row depends only on (model, H, n_groups, seed), not on the rest of the grid.

    Returns:
        One row per H: ``horizon``, then for each name in :data:`SIMULATED` the estimate
        and its Monte Carlo standard error ``<name>_se`` (delta method over groups, floored
        at one group's resolution; see ``_estimates``). Share is exact given the lengths,
        so its SE is 0; quantities conditioning on an empty event are nan.
    """
    hs = np.atleast_1d(np.asarray(horizons))
    if hs.ndim != 1 or not np.issubdtype(hs.dtype, np.integer) or (hs < 0).any():
        raise ValueError(f"horizons must be ints >= 0, got {horizons!r}")
    if isinstance(n_groups, bool) or not isinstance(n_groups, numbers.Integral) or n_groups < 2:
        raise ValueError(f"n_groups must be an int >= 2, got {n_groups!r}")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    chunk = max(1, _CHUNK_TRAJECTORIES // model.group_size)
    rows = []
    for H in hs.tolist():
        rng = np.random.default_rng([seed, H])
        total, cross = np.zeros(len(_TOTALS)), np.zeros((len(_TOTALS), len(_TOTALS)))
        for start in range(0, n_groups, chunk):
            x = _sample_groups(rng, model, H, min(chunk, n_groups - start))
            total += x.sum(0)
            cross += x.T @ x
        rows.append(_estimates(model, H, n_groups, total, cross))
    columns = ["horizon"] + [c for name in SIMULATED for c in (name, f"{name}_se")]
    return pd.DataFrame(rows)[columns]


def z_scores(theory: pd.DataFrame, sim: pd.DataFrame) -> pd.DataFrame:
    """(simulated - closed form) / MC standard error, per H and quantity in :data:`QUANTITIES`.

    Where the SE is 0 (a deterministic or never-wrong quantity) the z-score is 0 if the two
    agree to 1e-9 and inf otherwise; where both are nan it is 0 (the same empty event).
    """
    merged = theory.merge(sim, on="horizon", suffixes=("", "_mc"), validate="one_to_one")
    out = {"horizon": merged["horizon"]}
    for name in QUANTITIES:
        diff = (merged[f"{name}_mc"] - merged[name]).to_numpy()
        se = merged[f"{name}_se"].to_numpy()
        both_nan = merged[name].isna().to_numpy() & merged[f"{name}_mc"].isna().to_numpy()
        with np.errstate(divide="ignore", invalid="ignore"):
            z = np.where(se > 0, diff / se, np.where(np.abs(diff) <= 1e-9, 0.0, np.inf))
        out[name] = np.where(both_nan, 0.0, np.where(np.isnan(diff), np.inf, z))
    return pd.DataFrame(out)


def fit_model(oracle_read: np.ndarray, horizon: np.ndarray, success: np.ndarray, **fields) -> StarvationModel:
    """Maximum-likelihood ``p_oracle``, ``q_step``, ``s_wrong`` from audited rollouts.

    Args:
        oracle_read: (N,) bool (or 0/1), whether rollout n's read was the oracle.
        horizon: (N,) int >= 0, its horizon H_n.
        success: (N,) bool (or 0/1), its verifier verdict.
        **fields: the other :class:`StarvationModel` fields (``group_size``, the lengths,
            ``selector_coef``); omitted ones take their defaults.

    The likelihood factorises over the three parameters. Reads are Bernoulli(p), so
    p = the oracle-read rate; successes after another read are Bernoulli(b), so b = their
    rate; successes after an oracle read are Bernoulli(q**H_n), with log-likelihood
    l(q) = sum_succ H_n log q + sum_fail log(1 - q**H_n). In theta = log q this is concave
    (log(1 - e^x) is concave), so dl/dtheta = sum_succ H_n - sum_fail H_n q**H_n / (1 - q**H_n)
    decreases in q and its root is found by bisection; q = 1 when no oracle read failed
    and q = 0 when none at H > 0 succeeded.
    """
    arrays = {"oracle_read": oracle_read, "horizon": horizon, "success": success}
    arrays = {name: np.asarray(v) for name, v in arrays.items()}
    n = len(arrays["oracle_read"]) if arrays["oracle_read"].ndim == 1 else -1
    for name, v in arrays.items():
        if v.ndim != 1 or len(v) != n:
            raise ValueError(f"{name} must be a 1-d array as long as oracle_read, got shape {v.shape}")
    for name in ("oracle_read", "success"):
        if not np.isin(arrays[name], (0, 1)).all():
            raise ValueError(f"{name} must hold booleans (or 0/1)")
    h = arrays["horizon"]
    if not np.issubdtype(h.dtype, np.integer) or (h < 0).any():
        raise ValueError("horizon must hold ints >= 0")
    read, ok = arrays["oracle_read"].astype(bool), arrays["success"].astype(bool)
    if read.all() or not read.any():
        raise ValueError("oracle_read must contain both oracle and other reads, to estimate q_step and s_wrong")
    h_o, ok_o = h[read], ok[read]
    if (~ok_o & (h_o == 0)).any():
        raise ValueError("success: an oracle read failed at horizon 0, which the model (q**0 = 1) rules out")
    if not (h_o > 0).any():
        raise ValueError("horizon: no oracle read has H > 0, so q_step is not identified")
    hs, h_fail = h_o[ok_o].astype(float), h_o[~ok_o].astype(float)

    def score(q: float) -> float:  # dl/dtheta at q; decreasing in q
        return hs.sum() - (h_fail * q**h_fail / -np.expm1(h_fail * np.log(q))).sum()

    if len(h_fail) == 0:
        q = 1.0
    elif not (hs > 0).any():
        q = 0.0
    else:
        lo, hi = 0.0, 1.0
        for _ in range(60):  # 2**-60: below float precision of q
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if score(mid) > 0 else (lo, mid)
        q = (lo + hi) / 2
    return StarvationModel(p_oracle=float(read.mean()), q_step=q, s_wrong=float(ok[~read].mean()), **fields)
