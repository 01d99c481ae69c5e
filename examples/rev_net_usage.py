"""Rev-PLUIE (text revision) and Net-PLUIE (network-policy translation): scores and TRL rewards.

    python examples/rev_net_usage.py                  # embedded SmolLM2 judge, offline, seconds
    python examples/rev_net_usage.py --model Qwen/Qwen2.5-7B-Instruct --device cuda --dtype bfloat16

The same ``PluieReward`` drives GRPO/RLOO for these tasks: the completion is the ``hypothesis`` and
the other template fields are dataset columns (``fields`` maps field -> column).
"""

from __future__ import annotations

import argparse

from pluie_reward.common.threads import fit_threads

fit_threads()  # before torch loads (with Judge): on a busy CPU, sleeping threads, one per free core
from pluie_reward import Judge, PluieReward  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="judge: HF id, folder or .gguf (default: embedded SmolLM2)")
    parser.add_argument("--device", default=None)
    parser.add_argument("--dtype", default=None)
    args = parser.parse_args()
    judge = Judge.load(args.model, device=args.device, dtype=args.dtype)

    # Rev-PLUIE: did the revised paragraph P2 follow the instruction I on P1? (optional gold: one-shot example)
    original = "We propose a metod that parse sentences fastly and we test it on two dataset."
    instruction = "Fix the grammar and spelling mistakes."
    revisions = [
        "We propose a method that parses sentences quickly, and we test it on two datasets.",
        "We propose a metod that parse sentences fastly and we test it on two dataset.",  # unchanged
    ]
    print("Rev-PLUIE", judge.score("rev", original=original, instruction=instruction, hypothesis=revisions, details=True))

    # Net-PLUIE: does the translation express the same network policy as the source intent?
    intent = "for endpoint('guests') add middlebox('firewall') block traffic('peer-to-peer')"
    translations = ["The firewall blocks peer-to-peer traffic for guests.", "Guests may use peer-to-peer traffic freely."]
    print("Net-PLUIE", judge.score("net", source=intent, hypothesis=translations))

    # The same as TRL rewards, called the way GRPOTrainer calls them (dataset columns as keyword arguments)
    rev_reward = PluieReward(judge, template="rev", fields={"original": "paragraph", "instruction": "instruction"}, name="rev_pluie")
    print(rev_reward.__name__, rev_reward(
        prompts=["Revise: ..."] * 2, completions=revisions, paragraph=[original] * 2, instruction=[instruction] * 2
    ))
    net_reward = PluieReward(judge, template="net", fields={"source": "intent"}, output="prob", name="net_pluie")
    conversational = [[{"role": "assistant", "content": t}] for t in translations]
    print(net_reward.__name__, net_reward(prompts=["Translate: ..."] * 2, completions=conversational, intent=[intent] * 2))


if __name__ == "__main__":
    main()
