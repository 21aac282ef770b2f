"""Token counts and character offsets for logs that hold text (TRL, verl) or token ids (NeMo-RL)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Protocol, Sequence

import numpy as np

from skillgate_lib.logs import ArtifactError
from skillgate_lib.readers.fields import BadValue


class Tokenizer(Protocol):
    def offsets(self, text: str) -> np.ndarray:
        """``(n_tokens, 2)`` character ``[start, end)`` of each token of ``text``."""

    def decode_offsets(self, ids: Sequence[int]) -> tuple[str, np.ndarray]:
        """Text of token ``ids`` and each token's character span in it (NeMo-RL logs hold ids only)."""


class WhitespaceTokenizer:
    """The fallback: a token is a maximal run of non-whitespace characters."""

    _TOKEN = re.compile(r"\S+")

    def offsets(self, text: str) -> np.ndarray:
        return np.array([m.span() for m in self._TOKEN.finditer(text)], dtype=np.int64).reshape(-1, 2)

    def decode_offsets(self, ids: Sequence[int]) -> tuple[str, np.ndarray]:
        raise ArtifactError("NeMo-RL logs hold token ids only; pass a tokenizer (--tokenizer NAME_OR_PATH) to decode them")


class HFTokenizer:
    """A Hugging Face tokenizer (fast, for offsets); ``source`` is a name, a path or a tokenizer object."""

    def __init__(self, source: Any):
        if isinstance(source, (str, Path)):
            from transformers import AutoTokenizer

            try:
                source = AutoTokenizer.from_pretrained(str(source))
            except (OSError, ValueError) as err:
                raise ArtifactError(f"--tokenizer {source}: cannot be loaded ({str(err).strip().splitlines()[0]}); "
                                    "expected a Hugging Face tokenizer name or directory") from None
        self.tok = source

    def offsets(self, text: str) -> np.ndarray:
        enc = self.tok(text, add_special_tokens=False, return_offsets_mapping=True)
        return np.asarray(enc["offset_mapping"], dtype=np.int64).reshape(-1, 2)

    def decode_offsets(self, ids: Sequence[int]) -> tuple[str, np.ndarray]:
        ids = list(ids)
        vocab = len(self.tok)
        bad = [i for i in ids if not 0 <= i < vocab]
        if bad:
            raise BadValue(f"field 'token_ids': id {bad[0]} outside the tokenizer's vocabulary [0, {vocab}); "
                           "is --tokenizer the one the run used?")
        text = self.tok.decode(ids)
        enc = self.tok(text, add_special_tokens=False, return_offsets_mapping=True)
        if list(enc["input_ids"]) == ids:
            return text, np.asarray(enc["offset_mapping"], dtype=np.int64).reshape(-1, 2)
        # Re-encoding is not the identity (merges differ): fall back to prefix decoding, exact but quadratic.
        ends = [len(self.tok.decode(ids[: i + 1])) for i in range(len(ids))]
        starts = [0, *ends[:-1]]
        return text, np.array([starts, ends], dtype=np.int64).T.reshape(-1, 2)


def make_tokenizer(spec: Any = None) -> Tokenizer:
    """``None`` or ``"whitespace"``: the fallback; anything else: :class:`HFTokenizer`."""
    if spec is None or spec == "whitespace":
        return WhitespaceTokenizer()
    if hasattr(spec, "offsets"):
        return spec
    return HFTokenizer(spec)
