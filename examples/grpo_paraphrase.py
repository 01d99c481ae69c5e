"""LoRA GRPO of a small paraphrase generator rewarded by PLUIE + novelty, with a shared judge.

The policy is the embedded SmolLM2-135M-Instruct (as a plain trainable model) with a LoRA adapter;
the judge is the same weights with the adapter disabled (``Judge.from_peft``), so no second copy
of the model is held. PLUIE alone would reward copying the source, so a novelty reward (1 - word
edit similarity to the source) is added with ``reward_weights``.

    python examples/grpo_paraphrase.py --max-steps 2          # a few minutes on a laptop CPU
    python examples/grpo_paraphrase.py --max-steps 200 --num-generations 8 --novelty-weight 0.5

The embedded 135M judge is for demos, not quality: use a 7B+ instruct model as judge for real runs
(e.g. a policy and judge on the same 7B base via ``Judge.from_peft``, or ``OffloadedJudge.load``).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch
from datasets import Dataset
from peft import LoraConfig, get_peft_model
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from pluie_reward import Judge, PluieReward, load_trainable_embedded, novelty

MRPC = Path(__file__).resolve().parents[2] / "shared" / "data" / "paraphrasus" / "ms-mrpc.json"
SAMPLE = [  # used when the PARAPHRASUS data is not beside the checkout
    "The company said its profit rose sharply in the third quarter.",
    "Officials closed the bridge after the storm damaged its supports.",
    "The new library will open to the public next spring.",
    "Researchers found that the drug reduced symptoms in most patients.",
    "The mayor announced a plan to build more affordable housing.",
    "Heavy rain delayed several flights at the city airport on Monday.",
    "The team won the championship for the second year in a row.",
    "Prices for fresh vegetables went up during the dry summer.",
]
INSTRUCTION = "Paraphrase the following sentence. Reply with the paraphrase only.\n\n{}"


def load_sentences(path: Path, n: int) -> list[str]:
    """The first ``n`` distinct MRPC source sentences, or the bundled sample."""
    if not path.is_file():
        print(f"{path} not found; using the bundled sample of {len(SAMPLE)} sentences")
        return SAMPLE[:n]
    rows = json.loads(path.read_text()).values()
    sentences = list(dict.fromkeys(r["sentence1"] for r in rows if len(r["sentence1"]) < 160))
    return sentences[:n]


class PrintRewards(TrainerCallback):
    """Print the mean rewards TRL logs at each step."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "rewards/pluie/mean" in logs:
            print(
                f"step {state.global_step:>3}  reward {logs['reward']:+.3f}  "
                f"pluie {logs['rewards/pluie/mean']:+.3f}  novelty {logs['rewards/novelty/mean']:.3f}  "
                f"accept {logs.get('pluie/accept_rate', float('nan')):.2f}",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-steps", type=int, default=20)
    parser.add_argument("--data", type=Path, default=MRPC, help="PARAPHRASUS-style JSON; sentence1 is the source")
    parser.add_argument("--sentences", type=int, default=64, help="number of source sentences")
    parser.add_argument("--num-generations", type=int, default=4, help="completions per source (the GRPO group)")
    parser.add_argument("--batch-size", type=int, default=4, help="completions per step")
    parser.add_argument("--max-completion-length", type=int, default=32)
    parser.add_argument("--novelty-weight", type=float, default=0.5, help="reward = pluie + w * novelty")
    parser.add_argument("--learning-rate", type=float, default=5e-5)
    parser.add_argument("--output-dir", default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    sources = load_sentences(args.data, args.sentences)
    dataset = Dataset.from_dict(
        {"prompt": [[{"role": "user", "content": INSTRUCTION.format(s)}] for s in sources], "source": sources}
    )

    policy, tokenizer = load_trainable_embedded()
    policy = get_peft_model(policy, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
    judge = Judge.from_peft(policy, tokenizer)  # the base weights, adapter disabled while scoring
    pluie = PluieReward(judge, template="para-fs", fields={"source": "source"})

    on_gpu = torch.cuda.is_available()
    config = GRPOConfig(
        output_dir=args.output_dir or tempfile.mkdtemp(prefix="grpo-paraphrase-"),
        max_steps=args.max_steps,
        per_device_train_batch_size=args.batch_size,
        num_generations=args.num_generations,
        max_completion_length=args.max_completion_length,
        learning_rate=args.learning_rate,
        reward_weights=[1.0, args.novelty_weight],
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        seed=args.seed,
        use_cpu=not on_gpu,
        bf16=on_gpu and torch.cuda.is_bf16_supported(),
        disable_tqdm=True,
    )
    trainer = GRPOTrainer(
        model=policy,
        reward_funcs=[pluie, novelty],
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[PrintRewards()],
    )
    trainer.train()

    # what the trained policy says now, and how the judge rates it
    policy.eval()
    prompt = tokenizer.apply_chat_template(dataset[0]["prompt"], tokenize=False, add_generation_prompt=True)
    ids = tokenizer(prompt, return_tensors="pt").to(policy.device)
    with torch.no_grad():
        out = policy.generate(**ids, max_new_tokens=args.max_completion_length, do_sample=False)
    paraphrase = tokenizer.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True).strip()
    score = judge.score("para-fs", source=[sources[0]], hypothesis=[paraphrase])[0]
    print(f"\nsource:     {sources[0]}\nparaphrase: {paraphrase}\nPLUIE {score:+.3f}")


if __name__ == "__main__":
    main()
