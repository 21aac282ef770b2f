"""Bad input never stops silently: :class:`Problems` raises on the first one or counts it by reason."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from skillgate_lib.logs import ArtifactError

#: Reasons a file or a row can be bad; ``--skip-bad`` reports counts under these keys.
REASONS = ("corrupt file", "empty file", "wrong column type", "corrupt line", "line too long", "missing column",
           "unknown skill", "group of size 1", "span outside response", "bad value")


class BadInput(ArtifactError):
    """A file or row that ``--skip-bad`` could skip (raised when it is not set)."""


@dataclass
class Problems:
    """Collects bad input. ``skip_bad=False`` raises on the first problem (file, line/row, field);
    ``skip_bad=True`` counts skipped files and rows by reason and keeps the first message of each."""

    skip_bad: bool = False
    skipped: Counter = field(default_factory=Counter)
    """rows skipped, by reason."""
    skipped_files: Counter = field(default_factory=Counter)
    """whole files skipped, by reason (their rows are not counted in ``skipped``: a corrupt file's count is unknown)."""
    examples: dict[str, str] = field(default_factory=dict)
    file_examples: dict[str, str] = field(default_factory=dict)
    adv_checked: int = 0
    adv_mismatch: int = 0
    adv_max_diff: float = 0.0

    def bad(self, reason: str, message: str, n_rows: int = 1) -> None:
        """``n_rows`` rows are bad: raise, or skip and count them."""
        assert reason in REASONS, reason
        if not self.skip_bad:
            raise BadInput(message)
        self.skipped[reason] += n_rows
        self.examples.setdefault(reason, message)

    def bad_file(self, reason: str, message: str) -> None:
        """A whole file is unusable: raise, or skip and count it."""
        assert reason in REASONS, reason
        if not self.skip_bad:
            raise BadInput(message)
        self.skipped_files[reason] += 1
        self.file_examples.setdefault(reason, message)

    @property
    def any_skipped(self) -> bool:
        return bool(self.skipped or self.skipped_files)

    def check_advantages(self, logged: np.ndarray, recomputed: np.ndarray, tol: float = 1e-3) -> None:
        diff = np.abs(np.asarray(logged, float) - np.asarray(recomputed, float))
        self.adv_checked += len(diff)
        self.adv_mismatch += int((diff > tol * (1 + np.abs(recomputed))).sum())
        if len(diff):
            self.adv_max_diff = max(self.adv_max_diff, float(diff.max()))

    def summary(self) -> str:
        lines = [f"skipped {n} file(s): {r} (e.g. {self.file_examples[r]})" for r, n in sorted(self.skipped_files.items())]
        lines += [f"skipped {n} row(s): {r} (e.g. {self.examples[r]})" for r, n in sorted(self.skipped.items())]
        if self.adv_checked:
            lines.append(f"advantage check: {self.adv_mismatch} of {self.adv_checked} logged advantages differ from the "
                         f"recomputed group broadcast (max |diff| {self.adv_max_diff:.3g})")
        return "\n".join(lines)
