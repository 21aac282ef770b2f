"""A pretrained model and tokenizer with ``<read>`` and ``</read>`` as one token each, saved for verl's launch.

verl's tool agent loop stops a turn after a read only when ``</read>`` is one token
(``skillgate_lib.integrations.verl_tool.close_tag_stop_ids``); most pretrained tokenizers split it.
This adds both tags (``skillgate_lib.integrations.kit_chat.add_read_tokens``), resizes the
embeddings and saves the result, to pass as MODEL to ``skillgate_grpo.sh``::

    python examples/verl/add_read_tokens.py Qwen/Qwen2.5-0.5B-Instruct runs/qwen-read-tokens
    bash examples/verl/skillgate_grpo.sh runs/qwen-read-tokens
"""

from __future__ import annotations

import argparse
from pathlib import Path


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="Hugging Face id or local path of a causal LM")
    parser.add_argument("out", type=Path, help="folder the model and tokenizer are saved to")
    args = parser.parse_args(argv)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from skillgate_lib.integrations.kit_chat import add_read_tokens

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model)
    ids = add_read_tokens(tokenizer, model)
    model.save_pretrained(args.out)
    tokenizer.save_pretrained(args.out)
    print(f"{args.out}: <read> and </read> are tokens {ids[0]} and {ids[1]} of {len(tokenizer)}")
    return args.out


if __name__ == "__main__":
    main()
