"""The word-level tokenizer of the embedded tiny model, and char-span -> token-span bookkeeping.

One token per whitespace-separated word (``WordLevel`` + ``WhitespaceSplit``), so
every word of a skill name (``ledger credit amber``) and every table entry (``3>7``) is one token and a text's
tokens are the concatenation of its whitespace-separated pieces' tokens. No special
token is added on encode; ``<s>`` / ``</s>`` / ``<pad>`` / ``<unk>`` are registered for
the model to use. The vocabulary is built from the environment
(:meth:`skillgate_lib.env.SkillSlateEnv.vocabulary`) and committed under
``data/tokenizer/``; ``scripts/make_skills.py`` rebuilds it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Sequence

from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from skillgate_lib import paths

SPECIAL_TOKENS = {"pad_token": "<pad>", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}


def build_tokenizer(words: Iterable[str]) -> PreTrainedTokenizerFast:
    """A word-level tokenizer over the special tokens (ids 0..3) then ``sorted(set(words))``."""
    specials = list(SPECIAL_TOKENS.values())
    vocab_words = specials + sorted(set(words) - set(specials))
    bad = [w for w in vocab_words if not w or any(ch.isspace() for ch in w)]
    if bad:
        raise ValueError(f"vocabulary words must be non-empty and contain no whitespace, got {bad[:3]!r}")
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(vocab_words)}, unk_token=SPECIAL_TOKENS["unk_token"]))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=core, model_max_length=1024, **SPECIAL_TOKENS)


def extend_tokenizer(tokenizer: PreTrainedTokenizerFast, words: Iterable[str]) -> PreTrainedTokenizerFast:
    """``tokenizer`` with the ``words`` it lacks appended at the end of its vocabulary.

    Every existing word keeps its id, so a model trained with ``tokenizer`` keeps its embeddings
    after ``model.resize_token_embeddings(len(new))``; the new rows are fresh. For the embedded
    word-level tokenizer only (a sub-word tokenizer would split rather than lack a word).
    """
    vocab = tokenizer.get_vocab()
    new = sorted(set(words) - set(vocab))
    if not new:
        return tokenizer
    bad = [w for w in new if not w or any(ch.isspace() for ch in w)]
    if bad:
        raise ValueError(f"vocabulary words must be non-empty and contain no whitespace, got {bad[:3]!r}")
    ordered = sorted(vocab, key=vocab.get) + new
    if [vocab[w] for w in ordered[: len(vocab)]] != list(range(len(vocab))):
        raise ValueError("extend_tokenizer: the tokenizer's ids are not 0..n-1; it is not the embedded word-level one")
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(ordered)}, unk_token=SPECIAL_TOKENS["unk_token"]))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=core, model_max_length=1024, **SPECIAL_TOKENS)


def load_tokenizer(path: str | Path = paths.DATA_DIR / "tokenizer") -> PreTrainedTokenizerFast:
    """The committed tokenizer (offline: a local directory written by ``save_pretrained``)."""
    path = Path(path)
    if not (path / "tokenizer.json").is_file():
        raise FileNotFoundError(f"{path}: no tokenizer.json; run `python scripts/make_skills.py` to build it")
    return PreTrainedTokenizerFast.from_pretrained(str(path))


def token_spans(tokenizer, text: str, char_spans: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Map character spans of ``text`` to token index ranges ``[start, end)`` of ``tokenizer(text)``.

    A token belongs to a span when its characters overlap it. Indices count the tokens
    of ``text`` alone (no special tokens added), so for a response text they are
    positions in the response token sequence. Raises ``ValueError`` for a span that
    covers no token.
    """
    offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    out = []
    for s, e in char_spans:
        idx = [i for i, (a, b) in enumerate(offsets) if a < e and b > s]
        if not idx:
            raise ValueError(f"char span [{s}, {e}) covers no token of the text ({text[s:e]!r})")
        out.append((idx[0], idx[-1] + 1))
    return out
