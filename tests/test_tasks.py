"""The task package (tasks/) on its own: the families split into training and eval-only ones and
the public API resolves, every flaw fix_bug can replay shows in its rejected rollout, and no
training word lies inside or around a held-out one. What `train synth` makes of the tasks
(oracles that pass their checks, real tool results, held-out text kept out of training) is
tests/test_synth.py's."""
import tasks
from tasks import EVAL_ONLY_FAMILIES, FAMILIES, HELDOUT_WORDS, TRAIN_FAMILIES, make_task, shows_flaw
from tasks.names import NOUNS, PROJECT_WORDS


def test_families_split():
    assert set(TRAIN_FAMILIES) | set(EVAL_ONLY_FAMILIES) == set(FAMILIES)
    assert not set(TRAIN_FAMILIES) & set(EVAL_ONLY_FAMILIES) and len(EVAL_ONLY_FAMILIES) >= 2
    assert all(hasattr(tasks, name) for name in tasks.__all__)  # the public API resolves


def test_each_flaw_kind(tmp_path):
    base = str(tmp_path)
    task = make_task("fix_bug", 11, base=base)
    chosen = task.rollout()
    for flaw in task.flaws:
        rejected = make_task("fix_bug", 11, base=base).rollout(flaw)
        assert shows_flaw(flaw, chosen, rejected), flaw
    assert not shows_flaw("repeat", chosen, chosen)


def test_training_word_pools_keep_clear_of_heldout_words():
    """Every listed word, not only those a small synth run happens to draw: a training noun inside
    or around a held-out word (`bat` / wombat) would leak it into training names."""
    assert len(set(NOUNS)) == len(NOUNS)
    for word in NOUNS + PROJECT_WORDS:
        assert not any(word in h or h in word for h in HELDOUT_WORDS), word
