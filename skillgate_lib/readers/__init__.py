"""Readers: TRL, verl, NeMo-RL and plain-table logs as the kit's trajectory table.

Every external reader yields Arrow tables in :data:`skillgate_lib.logs.TRAJECTORY_SCHEMA`,
one per input file (a file holds one training step in all three engines, so memory is
bounded by the largest step, never by the run). The kit's own Parquet runs and plain
Parquet tables need no reader: the audit scans them in place after
:func:`check_parquet_tables` has opened each file.

What an external log does not hold is recovered:

* **read actions and selector spans** by parsing the completion text with
  :data:`DEFAULT_READ_PATTERNS` (any regex with a ``name`` group can be passed):
  ``<read>name</read>`` (spaces inside the tags tolerated) and reads of
  ``~/.claude/skills/<name>/SKILL.md``. A read's selector span is the tokens that
  overlap the characters of its ``name`` group;
* **token counts** with a Hugging Face tokenizer (``tokenizer=`` a name or path), or
  the whitespace fallback :class:`WhitespaceTokenizer`: a token is a maximal run of
  non-whitespace characters, so ``<read>x</read>`` is one token and its selector
  span has length 1;
* **group ids** from identical prompts within one step file;
* **categories** (and domain, horizon) by a join with a :class:`TaskTable` (``--tasks``;
  format in :mod:`skillgate_lib.readers.tasks`). Without one, reads are found but left
  uncategorised (``read_categories`` null): the audit then reports Share and read counts,
  not Sign or Value;
* **broadcast advantages** recomputed from group rewards when absent; when logged,
  they are used as logged and checked against the recomputation (mismatches are
  counted in :class:`Problems`, not fatal: engines differ in std conventions).

TRL and verl log one scalar advantage per completion, so ``read_adv`` is that scalar
for every read, ``adv_exec`` the scalar and ``sel_weight = k / L`` (token-mean, k the
selector tokens, L the completion tokens). NeMo-RL logs per-token advantages: there
``read_adv`` is the mean advantage over a read's loss-bearing span tokens,
``adv_exec`` the mean over the other loss-bearing tokens, and ``sel_weight`` the
selector tokens' share of ``sum |A_t|`` over loss-bearing tokens (token-mean
``k / L`` when every advantage is zero, since then no token carries weight).

Bad input never stops silently and never as a traceback: a file that cannot be read
(truncated, corrupt, empty, a column missing or of the wrong type) or a row that cannot
be used (corrupt JSON, a value of the wrong type, an unknown skill, a group of size 1)
is an :class:`~skillgate_lib.logs.ArtifactError` naming the file, the line or row and the
field, with what was expected; with ``skip_bad`` it is skipped and counted by reason in
:class:`Problems`. A read naming a skill outside its task's slate is an *unknown skill*.
"""

from skillgate_lib.readers.detect import detect_format
from skillgate_lib.readers.fields import BadValue
from skillgate_lib.readers.files import jsonl_records, read_parquet
from skillgate_lib.readers.nemo import nemo_files, read_nemo
from skillgate_lib.readers.problems import REASONS, BadInput, Problems
from skillgate_lib.readers.rows import DEFAULT_READ_PATTERNS, ReaderOptions, find_reads, group_advantages
from skillgate_lib.readers.tables import CATEGORY_COLUMNS, REQUIRED, check_parquet_tables, stage_jsonl_tables
from skillgate_lib.readers.tasks import TaskTable
from skillgate_lib.readers.tokenizers import HFTokenizer, Tokenizer, WhitespaceTokenizer, make_tokenizer
from skillgate_lib.readers.trl import read_trl, trl_files
from skillgate_lib.readers.verl import read_verl, verl_files

__all__ = [
    "BadInput", "BadValue", "CATEGORY_COLUMNS", "DEFAULT_READ_PATTERNS", "HFTokenizer", "REASONS",
    "REQUIRED", "Problems", "ReaderOptions", "TaskTable", "Tokenizer", "WhitespaceTokenizer", "check_parquet_tables",
    "detect_format", "find_reads", "group_advantages", "jsonl_records", "make_tokenizer", "nemo_files", "read_nemo",
    "read_parquet", "read_trl", "read_verl", "stage_jsonl_tables", "trl_files", "verl_files",
]
