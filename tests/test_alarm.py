"""The hack-onset alarm against shifts and divergences computed by hand, and its firing rules."""

from __future__ import annotations

import random
import warnings

import numpy as np
import pytest

from conftest import load_script
from pluie_reward.integrations.alarm import AlarmConfig, AlarmedReward, HackAlarm, HackWarning
from pluie_reward.integrations.rewards import NoveltyReward


def reference_metrics(batches, warmup, smoothing, min_std):
    """Shift and divergence per batch after warm-up, written out with numpy from the whole sequence."""
    names = list(batches[0])
    base = {n: np.concatenate([np.asarray(b[n], float) for b in batches[:warmup]]) for n in names}
    mean = {n: base[n].mean() for n in names}
    std = {n: max(base[n].std(), min_std) for n in names}
    ema = dict(mean)
    out = []
    for batch in batches[warmup:]:
        ema = {n: smoothing * np.mean(batch[n]) + (1 - smoothing) * ema[n] for n in names}
        shift = {n: (ema[n] - mean[n]) / std[n] for n in names}
        out.append({"reward": shift["reward"], **{v: shift["reward"] - shift[v] for v in names if v != "reward"}})
    return out


def reference_paid(batches, groups, smoothing):
    """The smoothed within-group correlation of the reward with each view, per batch, with numpy:
    centre inside each group, one Pearson correlation of the centred columns, EMA over the batches in
    which both vary (None before the first)."""
    keys = np.asarray(groups)
    out, ema = [], {}
    for batch in batches:
        r = np.asarray(batch["reward"], float)
        rc = r - np.array([r[keys == k].mean() for k in keys])
        for name in (n for n in batch if n != "reward"):
            v = np.asarray(batch[name], float)
            vc = v - np.array([v[keys == k].mean() for k in keys])
            if np.allclose(rc, 0) or np.allclose(vc, 0):
                continue
            corr = np.corrcoef(rc, vc)[0, 1]  # the centred columns have mean 0, so this is their cosine
            ema[name] = smoothing * corr + (1 - smoothing) * ema.get(name, corr)
        out.append(dict(ema))
    return out


def feed(alarm, batches, groups=None):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        metrics = [alarm.update(b["reward"], {k: v for k, v in b.items() if k != "reward"}, groups) for b in batches]
    return metrics, [w for w in caught if issubclass(w.category, HackWarning)]


def test_shift_by_hand_without_smoothing():
    # baseline reward items 0, 2 -> mean 1, sd 1; novelty 0.4, 0.6 -> mean 0.5, sd 0.1
    alarm = HackAlarm(warmup=1, smoothing=1.0, threshold=100, min_std=1e-3)
    alarm.update([0, 2], {"novelty": [0.4, 0.6]})
    metrics = alarm.update([3, 3], {"novelty": [0.4, 0.4]})
    assert metrics["alarm/reward_shift"] == pytest.approx(2.0)            # (3 - 1) / 1
    assert metrics["alarm/shift/novelty"] == pytest.approx(-1.0)         # (0.4 - 0.5) / 0.1
    assert metrics["alarm/divergence/novelty"] == pytest.approx(3.0)
    assert metrics["alarm/divergence"] == pytest.approx(3.0) and metrics["alarm/fired"] == 0.0


def test_metrics_equal_a_numpy_reference_at_every_batch():
    rng = np.random.default_rng(0)
    batches = [{"reward": rng.normal(i * 0.2, 1, 8), "guard": rng.choice([0.0, -1.0], 8), "other": rng.normal(0, 2, 8)}
               for i in range(12)]
    groups = [0, 0, 0, 0, 1, 1, 1, 1]
    alarm = HackAlarm(warmup=4, smoothing=0.3, min_std=0.05, threshold=1e9)
    metrics, _ = feed(alarm, batches, groups)
    for got, want in zip(metrics, reference_paid(batches, groups, 0.3)):
        assert {k[len("alarm/paid/"):]: v for k, v in got.items() if k.startswith("alarm/paid/")} == pytest.approx(want, abs=1e-9)
    assert all(set(m) == {"alarm/fired", "alarm/warmup", "alarm/paid/guard", "alarm/paid/other"} for m in metrics[:4])
    for got, want in zip(metrics[4:], reference_metrics(batches, 4, 0.3, 0.05)):
        assert got["alarm/reward_shift"] == pytest.approx(want["reward"], abs=1e-9)
        for view in ("guard", "other"):
            assert got[f"alarm/divergence/{view}"] == pytest.approx(want[view], abs=1e-9)
        assert got["alarm/divergence"] == pytest.approx(max(want["guard"], want["other"]), abs=1e-9)


def hacked_sequence(seed: int, honest: int = 8, hacked: int = 6, size: int = 16):
    """Honest batches (reward and novelty noisy, unrelated), then a growing share of hacks: copies that
    the judge loves (reward +3) and that have no novelty."""
    rng = random.Random(seed)
    batches = []
    for b in range(honest + hacked):
        share = 0.0 if b < honest else min(1.0, (b - honest + 1) / 4)
        reward, nov = [], []
        for _ in range(size):
            if rng.random() < share:
                reward.append(1.0 + rng.gauss(0, 0.3))
                nov.append(0.0)
            else:
                reward.append(-2.0 + rng.gauss(0, 1.0))
                nov.append(min(1.0, max(0.0, rng.gauss(0.7, 0.1))))
        batches.append({"reward": reward, "novelty": nov})
    return batches


def test_fires_at_the_onset_and_never_on_honest_batches():
    for seed in range(20):
        batches = hacked_sequence(seed)
        alarm = HackAlarm(warmup=3, threshold=1.0, patience=2)
        metrics, caught = feed(alarm, batches)
        assert alarm.fired_at is not None and 8 <= alarm.fired_at <= 10, (seed, alarm.fired_at)
        assert len(caught) == 1 and "novelty" in str(caught[0].message)        # warned once, naming the view
        assert all(m["alarm/fired"] == 0.0 for m in metrics[: alarm.fired_at])
        assert all(m["alarm/fired"] == 1.0 for m in metrics[alarm.fired_at:])
        quiet = HackAlarm(warmup=3, threshold=1.0, patience=2)
        _, caught = feed(quiet, batches[:8] * 2)                               # honest batches only
        assert quiet.fired_at is None and not caught, seed


def test_honest_progress_moves_the_views_with_the_reward():
    for seed in range(20):
        rng = np.random.default_rng(seed)
        batches = [{"reward": rng.normal(i * 0.3, 1, 16), "second_template": rng.normal(i * 0.3, 1, 16)} for i in range(15)]
        alarm = HackAlarm(warmup=3)
        feed(alarm, batches)
        assert alarm.fired_at is None, seed
        # the same rewards where the second view stays flat: the reward's rise is not followed
        flat = [{"reward": b["reward"], "second_template": rng.normal(0, 1, 16)} for b in batches]
        alarm = HackAlarm(warmup=3)
        feed(alarm, flat)
        assert alarm.fired_at is not None, seed


def test_patience_and_min_rise():
    base = [{"reward": [0.0, 1.0], "view": [0.0, 1.0]}] * 2
    spike = [{"reward": [5.0, 5.5], "view": [0.5, 0.4]}, {"reward": [0.5, 0.5], "view": [0.5, 0.5]}] * 2
    alarm = HackAlarm(warmup=2, patience=2, smoothing=1.0)
    feed(alarm, base + spike)
    assert alarm.fired_at is None                                            # one batch over, then back
    alarm = HackAlarm(warmup=2, patience=1, smoothing=1.0)
    feed(alarm, base + spike)
    assert alarm.fired_at == 2
    # the view falls while the reward stays put: no rise, no alarm (nothing is being paid for)
    alarm = HackAlarm(warmup=2, patience=1, smoothing=1.0)
    feed(alarm, base + [{"reward": [0.0, 1.0], "view": [-5.0, -5.0]}] * 3)
    assert alarm.fired_at is None


def test_bad_input_is_refused_clearly():
    alarm = HackAlarm(warmup=1)
    with pytest.raises(ValueError, match="view 'v' value 1 is nan"):
        alarm.update([1.0, 2.0], {"v": [0.0, float("nan")]})
    with pytest.raises(ValueError, match="has 1 values for 2 rewards"):
        alarm.update([1.0, 2.0], {"v": [0.0]})
    with pytest.raises(ValueError, match="at least one independent view"):
        alarm.update([1.0], {})
    alarm.update([1.0], {"v": [0.0]})
    with pytest.raises(ValueError, match="views changed"):
        alarm.update([1.0], {"w": [0.0]})
    for bad in (dict(follow=1.0), dict(warmup=0), dict(patience=True), dict(threshold=0), dict(smoothing=0), dict(min_rise=-1)):
        with pytest.raises(ValueError):
            AlarmConfig(**bad)
    with pytest.raises(TypeError):
        HackAlarm(AlarmConfig(), warmup=2)


def test_alarmed_reward_returns_the_reward_and_logs_the_alarm():
    calls, logged = [], {}

    def judge_like(prompts=None, completions=None, log_metric=None, **kwargs):
        calls.append(("reward", list(completions), kwargs["source"]))
        return [1.0 if c == s else -1.0 for c, s in zip(completions, kwargs["source"])]

    watched = AlarmedReward(judge_like, {"novelty": NoveltyReward("source")}, HackAlarm(warmup=1, patience=1, smoothing=1.0))
    assert watched.__name__ == "judge_like"
    sources = ["The cat sleeps.", "A dog barks."]
    honest = watched(completions=["A cat naps.", "Dogs are barking."], source=sources, log_metric=logged.__setitem__)
    assert honest == [-1.0, -1.0] and logged == {"alarm/fired": 0.0, "alarm/warmup": 0.0}
    with pytest.warns(HackWarning, match="novelty"):  # the copy is paid, the rewording is not
        copies = watched(completions=[sources[0], "Dogs bark a lot."], source=sources, log_metric=logged.__setitem__)
    assert copies == [1.0, -1.0] and logged["alarm/fired"] == 1.0 and logged["alarm/paid/novelty"] == pytest.approx(-1.0)
    assert logged["alarm/shift/novelty"] < 0 < logged["alarm/reward_shift"]
    assert [c[1] for c in calls] == [["A cat naps.", "Dogs are barking."], [sources[0], "Dogs bark a lot."]]


def test_groups_are_the_prompts_of_the_completions():
    """Within groups (GRPO's), a reward can pay a view although the whole batch says the opposite."""
    seen = []

    class Spy(HackAlarm):
        def update(self, reward, views, groups=None):
            seen.append(groups)
            return super().update(reward, views, groups)

    logged = {}
    watched = AlarmedReward(lambda completions, **kw: [0.0, 1.0, 5.0, 6.0], {"v": lambda completions, **kw: [0.0, 1.0, -4.0, -3.0]},
                            Spy(warmup=1))
    watched(prompts=["p", "p", [{"role": "user", "content": "q"}], "q"], completions=list("abcd"), log_metric=logged.__setitem__)
    assert seen == [["'p'", "'p'", "[{'role': 'user', 'content': 'q'}]", "'q'"]]
    assert logged["alarm/paid/v"] == pytest.approx(1.0)                             # +1 inside each group ...
    rewards, view = [0.0, 1.0, 5.0, 6.0], [0.0, 1.0, -4.0, -3.0]
    assert np.corrcoef(rewards, view)[0, 1] < -0.8                                  # ... -0.9 over the batch
    with pytest.raises(ValueError, match="2 prompts for 4 rewards"):                 # not one group in silence
        watched(prompts=["p", "q"], completions=list("abcd"))


def test_a_view_that_cannot_follow_or_that_the_reward_pays_for_does_not_fire():
    """The copy-proof reward's case: the reward rises while sampled copies come and go. It scores them 0,
    so inside each group it pays for novelty; a clean guard never varies. Neither fires; the same
    completions under a reward that pays the copies do."""
    for seed in range(10):
        rng = random.Random(seed)
        batches, paying = [], []
        for b in range(30):
            share = 0.4 if 8 <= b < 18 else 0.05                      # a transient of sampled copies
            reward, pays, capped, guard = [], [], [], []
            for _ in range(16):
                copy = rng.random() < share
                accepted = min(1.0, max(0.0, rng.gauss(0.4 + 0.02 * b, 0.15)))  # acceptance grows
                reward.append(0.0 if copy else accepted)
                pays.append(1.0 + rng.gauss(0, 0.05) if copy else accepted)
                capped.append(0.0 if copy else 1.0)
                guard.append(0.0)
            batches.append({"reward": reward, "novelty_to_target": capped, "guard": guard})
            paying.append({"reward": pays, "novelty_to_target": capped, "guard": guard})
        groups = [i // 8 for i in range(16)]
        alarm = HackAlarm(warmup=5)
        metrics, caught = feed(alarm, batches, groups)
        assert alarm.fired_at is None and not caught, seed
        assert max(m.get("alarm/divergence", 0) for m in metrics) >= 1.0, seed   # the old rule would have fired
        assert "alarm/paid/guard" not in metrics[-1] and metrics[-1]["alarm/paid/novelty_to_target"] > 0.3
        alarm = HackAlarm(warmup=5)
        _, caught = feed(alarm, paying, groups)
        assert alarm.fired_at is not None and "novelty_to_target" in str(caught[0].message), seed
        term = HackAlarm(warmup=5, terms=["novelty_to_target"])                 # a term the reward pays against
        feed(term, paying, groups)
        assert term.fired_at == alarm.fired_at, seed


def test_a_term_of_the_reward_at_its_cap_counts_only_when_paid_against():
    """Late in a copy-proof run: capped novelty is 1 for most completions, a little under for the rest,
    and the reward (acceptance x capped novelty) rises with acceptance. Inside groups it pays for the
    view, weakly (the view hardly varies): an independent view that weakly correlated would fire (paid
    below 0.3), a term of the reward does not; one the reward paid against still does (above). With 2
    groups of 8 per batch (the GRPO example's), the estimate is noisier: one seed of ten dipped below 0
    while lagging, and fired."""
    groups = [i // 8 for i in range(32)]                                        # 4 prompts x 8 completions
    fired = []
    for seed in range(10):
        rng = random.Random(seed)
        batches = []
        for b in range(30):
            capped = [1.0 if rng.random() < 0.85 else rng.uniform(0.75, 0.98) for _ in range(32)]
            accepted = [min(1.0, max(0.0, rng.gauss(0.4 + 0.02 * b, 0.15))) for _ in range(32)]
            batches.append({"reward": [a * c for a, c in zip(accepted, capped)], "novelty_to_target": capped})
        alarm = HackAlarm(warmup=5, terms=("novelty_to_target",))
        metrics, caught = feed(alarm, batches, groups)
        assert alarm.fired_at is None and not caught, seed
        assert max(m.get("alarm/divergence", 0) for m in metrics) >= 2.0, seed    # it lags, far
        assert 0 < metrics[-1]["alarm/paid/novelty_to_target"] < 0.7, seed             # paid for, weakly
        independent = HackAlarm(warmup=5)
        feed(independent, batches, groups)
        fired.append(independent.fired_at is not None)
    assert sum(fired) >= 8, fired


def test_terms_are_view_names():
    with pytest.raises(ValueError, match="list of view names"):
        AlarmConfig(terms="novelty")
    alarm = HackAlarm(terms=["novelty_to_target"])
    with pytest.raises(ValueError, match=r"terms \['novelty_to_target'\] are not among the views \['novelty'\]"):
        alarm.update([0.0, 1.0], {"novelty": [0.0, 1.0]})


def test_staged_onset_on_a_real_judge_fires_in_the_ramp_only(tiny_judge):
    hack_onset = load_script("hack_onset").hack_onset

    for seed in range(3):
        rows = hack_onset(tiny_judge, "para-fs", honest_batches=5, ramp=(0.25, 0.5, 1.0, 1.0), batch_size=8, seed=seed, limit=4)
        assert [r["hack_share"] for r in rows] == [0.0] * 5 + [0.25, 0.5, 1.0, 1.0]
        assert not any(r["fired"] for r in rows[:5]) and rows[-1]["fired"], seed
        assert all(r["guard"] == 0.0 for r in rows[:5])
        for row in rows[4:6]:  # the reward is the judge's PLUIE of each completion, scored one by one here
            one_by_one = [tiny_judge.score("para-fs", source=s, hypothesis=[h], use_cache=False)[0]
                          for s, h in zip(row["sources"], row["completions"])]
            assert row["reward"] == pytest.approx(sum(one_by_one) / len(one_by_one), abs=1e-4)


def test_the_onset_script_doctests():
    """scripts/ is not among pytest's doctest paths: scripts/hack_onset.py's examples run here."""
    import doctest

    result = doctest.testmod(load_script("hack_onset"))
    assert result.attempted > 0 and result.failed == 0


def test_the_validation_callback_watches_with_an_alarm(tiny_judge):
    """PluieCallback feeds its alarm the generations' PLUIE (the judge's scores of its table) and the views
    on the same generations; the metrics join the evaluation's."""
    from pluie_reward.integrations.callbacks import PluieCallback
    from pluie_reward.testing import make_tiny_causal_lm, make_tiny_tokenizer

    tokenizer = make_tiny_tokenizer()
    model = make_tiny_causal_lm(tokenizer, seed=1)
    items = [{"prompt": f"Paraphrase: sentence {i}.", "source": f"sentence {i}."} for i in range(4)]
    seen = []

    def view(completions, source, **kwargs):
        seen.append((list(completions), list(source)))
        return [0.5] * len(completions)

    alarm = HackAlarm(warmup=1, patience=1)
    callback = PluieCallback(tiny_judge, "para-fs", items, write_table=False, max_new_tokens=4,
                             alarm=alarm, alarm_views={"flat": view})
    first = callback.evaluate(model, tokenizer)
    second = callback.evaluate(model, tokenizer)
    assert first["eval_alarm_fired"] == 0.0 and "eval_alarm_warmup" in first
    assert second["eval_alarm_reward_shift"] == pytest.approx(0.0, abs=1e-9)  # same model, same greedy generations
    table = callback.generate_and_score(model, tokenizer)
    assert seen[0][0] == [r["generation"] for r in table] and seen[0][1] == [it["source"] for it in items]
    assert alarm.batches == 2
    with pytest.raises(ValueError, match="go together"):
        PluieCallback(tiny_judge, "para-fs", items, alarm=HackAlarm())
