"""``data.val_collate_fn``: the validation batches' collator. The Mixup recipe (``docs/recipes.md``): Mixup
collates the training batches only, validation (and ``eval``) collates plainly; a collator left to
collate validation too that fails on a validation batch (timm's Mixup on an odd last batch) is one line
before anything is written, not a traceback an epoch later. Collator: ``tests/plugins/mixup_collate.py``."""

import pytest
from conftest import TINY, read_scalars, train_refused
from hydra.utils import instantiate

from runner.tools.evaluation import evaluate_checkpoint

MIXUP = "+data.collate_fn={_target_: mixup_collate.MixupCollate, num_classes: 4}"
ODD = ("data.dataset.num_val=33",)  # validation batches of 16, 16 and 1


def test_the_mixup_recipe_mixes_training_batches_and_validates_on_plain_ones(train_here):
    mixed = train_here(*TINY, *ODD, MIXUP, "data.val_collate_fn=default", "checkpoint.save_best=true")
    plain = train_here(*TINY, *ODD, run_dir=mixed.parent / "plain")
    scalars, plain_scalars = read_scalars(mixed), read_scalars(plain)
    assert scalars["train/loss"] != plain_scalars["train/loss"]  # the training batches were mixed
    assert [step for step, _ in scalars["val/acc"]] == [4]  # hard targets: accuracy has a value
    targets = {"mixup_collate.MixupCollate", "runner.data.make_classification", "runner.models.mlp",
               "torch.optim.Adam", "torch.nn.CrossEntropyLoss",
               "runner.training.metrics.Accuracy"}  # fmt: skip
    evaluated = evaluate_checkpoint(mixed / "checkpoints" / "last.pt", "cpu", instantiate, trusted=targets)
    assert evaluated["val/acc"] == pytest.approx(scalars["val/acc"][-1][1])  # eval collates as validation


def refused(tmp_path, monkeypatch, capsys, *overrides: str) -> str:
    err = train_refused(tmp_path, monkeypatch, capsys, *overrides)
    assert not (tmp_path / "run").exists()
    return err


@pytest.mark.parametrize(
    ("overrides", "key"),
    [((MIXUP,), "data.collate_fn"),
     ((MIXUP.replace("+data.collate_fn", "data.val_collate_fn"),), "data.val_collate_fn")],
)  # fmt: skip
def test_a_collator_that_fails_on_a_validation_batch_is_one_line_before_anything_is_written(
    tmp_path, monkeypatch, capsys, overrides, key
):
    err = refused(tmp_path, monkeypatch, capsys, *ODD, *overrides)
    assert err.startswith(
        f"the last validation batch cannot be collated: {key} (MixupCollate) raised AssertionError: Batch "
        "size should be even when using this on 1 samples like "
    ), err
    assert err.endswith(
        "for a collator that only training batches need (Mixup, CutMix), set data.val_collate_fn=default\n"
    )


@pytest.mark.parametrize("value", ["3", "mixup", "{lr: 1}"])
def test_a_val_collate_fn_that_is_none_of_its_forms_is_refused_naming_them(
    tmp_path, monkeypatch, capsys, value
):
    err = refused(tmp_path, monkeypatch, capsys, f"data.val_collate_fn={value}")
    assert (
        err.startswith("data.val_collate_fn=") and " is not allowed; data.val_collate_fn must be null " in err
    )
    assert "default (torch's default collate) or a collator's _target_ config" in err


def test_checking_the_validation_collator_leaves_the_random_draws_of_the_run_as_they_were(train_here):
    """Mixup draws from numpy's generator: the check's collations of the first and last validation
    batch (a Mixup there) draw nothing the training sees (validation comes after step 4)."""
    unchecked = train_here(*TINY, MIXUP, "data.val_collate_fn=default")
    val_mixup = MIXUP.replace("+data.collate_fn", "data.val_collate_fn")
    checked = train_here(*TINY, MIXUP, val_mixup, run_dir=unchecked.parent / "checked")
    assert read_scalars(checked)["train/loss"] == read_scalars(unchecked)["train/loss"]
