"""The skill-slate environment (see docs/design.md, "The environment").

* :mod:`.domains`  the five domains: symbols, families, lookup tables, the chained procedure
* :mod:`.library`  writing the SKILL.md library; the train / eval split
* :mod:`.episode`  tasks, prompts, the read protocol, the verifier, demonstrations
* :mod:`.names`    how a read call's words name a skill (the one matching rule)
* :mod:`.policies` scripted reference policies and selectors
"""

from skillgate_lib.env.domains import (
    DOMAINS,
    VARIANTS,
    Domain,
    family_tables,
    lookalike_tables,
    parse_table,
    render_table,
    run_chain,
)
from skillgate_lib.env.episode import (
    ANSWER_CLOSE,
    ANSWER_OPEN,
    BODY_CLOSE,
    BODY_OPEN,
    ERROR_CLOSE,
    ERROR_OPEN,
    MAX_HORIZON,
    NOTE_OPEN,
    NOTE_WORDS,
    PROMPT_END,
    READ_CLOSE,
    READ_OPEN,
    EpisodeError,
    Outcome,
    Read,
    SkillSlateEnv,
    Task,
)
from skillgate_lib.env.library import (
    EVAL_PERCENT,
    SPLITS,
    VAL_PERCENT,
    description,
    heldout_part,
    in_split,
    skill_md,
    split_of,
    write_library,
)
from skillgate_lib.env.names import display_name, skill_name
from skillgate_lib.env.policies import (
    POLICIES,
    cue_selector,
    misleading_read_policy,
    mixed_reads,
    name_match_selector,
    no_read_policy,
    oracle_policy,
    random_read_policy,
    selector_policy,
)
from skillgate_lib.env.tokenizer import load_tokenizer, token_spans

__all__ = [
    "DOMAINS", "VARIANTS", "Domain", "family_tables", "lookalike_tables", "parse_table", "render_table", "run_chain",
    "ANSWER_CLOSE", "ANSWER_OPEN", "BODY_CLOSE", "BODY_OPEN", "ERROR_CLOSE", "ERROR_OPEN", "MAX_HORIZON", "NOTE_OPEN",
    "NOTE_WORDS", "PROMPT_END",
    "READ_CLOSE", "READ_OPEN", "EpisodeError", "Outcome", "Read", "SkillSlateEnv", "Task", "display_name", "skill_name",
    "EVAL_PERCENT", "SPLITS", "VAL_PERCENT", "description", "heldout_part", "in_split", "skill_md", "split_of",
    "write_library",
    "POLICIES", "cue_selector", "misleading_read_policy", "mixed_reads", "name_match_selector", "no_read_policy",
    "oracle_policy", "random_read_policy", "selector_policy", "load_tokenizer", "token_spans",
]
