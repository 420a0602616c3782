"""The worked example in examples/causal_lm/: a transformers-style causal LM (and a tiny GPT-2) trained
through runner's plug-in contract, with loss=from_model, a padding collator, no_decay groups, linear
warmup and decay, val/ppl and an EMA."""

import math
from itertools import pairwise
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml
from conftest import REPO, read_scalars, run_example
from hydra.utils import instantiate

EXAMPLE = REPO / "examples" / "causal_lm"
SEARCHPATH = f"hydra.searchpath=[file://{EXAMPLE / 'conf'}]"


@pytest.fixture
def example(monkeypatch):
    """The user's package on the path, as PYTHONPATH=examples/causal_lm puts it."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    import causal_lm

    return causal_lm


def per_token_validation_loss(run_dir: Path, weights: str, example) -> float:
    """By hand, one unpadded line at a time: the sum of every predicted token's cross-entropy over
    the validation set, divided by the number of predicted tokens."""
    config = yaml.safe_load((run_dir / "run.yaml").read_text())
    model = instantiate(config["model"])
    model.load_state_dict(torch.load(run_dir / "checkpoints" / "last.pt")[weights])
    model.eval()
    _, val = instantiate(config["data"]["dataset"])
    total, tokens = 0.0, 0
    with torch.no_grad():
        for item in val:
            ids = item["input_ids"][None]
            logits = model(input_ids=ids).logits
            total += F.cross_entropy(logits[0, :-1].double(), ids[0, 1:], reduction="sum").item()
            tokens += ids.shape[1] - 1
    return total / tokens


def test_short_run_logs_perplexity_lr_groups_and_ema_state(train_here, example):
    run_dir = train_here(SEARCHPATH, "+experiment=causal_lm", "trainer.max_steps=12",
                         "scheduler.warmup_steps=4", "trainer.log_every_n_steps=1")  # fmt: skip
    scalars = read_scalars(run_dir)
    assert {"val/ppl", "train/lr/decay", "train/lr/no_decay"} <= set(scalars)
    assert scalars["val/ppl"][-1][1] == pytest.approx(math.exp(scalars["val/loss"][-1][1]), rel=1e-5)
    rates = [value for _, value in scalars["train/lr"]]
    peak = rates.index(max(rates))
    assert 0 < peak < len(rates) - 1
    assert all(a < b for a, b in pairwise(rates[: peak + 1]))
    assert all(a > b for a, b in pairwise(rates[peak:]))
    config = yaml.safe_load((run_dir / "run.yaml").read_text())
    assert max(rates) == pytest.approx(config["optimizer"]["lr"])

    checkpoint = torch.load(run_dir / "checkpoints" / "last.pt")
    ema = checkpoint["callbacks_state_dict"]["ema"]
    assert ema["decay"] == config["callbacks"]["ema"]["decay"]
    averaged, weights = checkpoint["averaged_model_state_dict"], checkpoint["model_state_dict"]
    assert averaged.keys() == weights.keys()
    assert all(torch.equal(averaged[name], tensor) for name, tensor in ema["averages"].items())
    assert not torch.allclose(averaged["head.weight"], weights["head.weight"])
    # Validation ran on the averaged weights, not the model's own.
    assert scalars["val/loss"][-1][1] == pytest.approx(
        per_token_validation_loss(run_dir, "averaged_model_state_dict", example), rel=1e-5
    )


def test_validation_loss_is_the_exact_per_token_mean(train_here, example):
    """Validation batches of 3 lines hold different numbers of tokens: a mean of batch means would
    differ from the per-token mean; runner's val/loss must be the latter."""
    run_dir = train_here(SEARCHPATH, "+experiment=causal_lm", "callbacks=none", "trainer.max_steps=5",
                         "data.val_batch_size=3")  # fmt: skip
    by_hand = per_token_validation_loss(run_dir, "model_state_dict", example)
    assert read_scalars(run_dir)["val/loss"][-1][1] == pytest.approx(by_hand, rel=1e-5)

    config = yaml.safe_load((run_dir / "run.yaml").read_text())
    model = instantiate(config["model"])
    model.load_state_dict(torch.load(run_dir / "checkpoints" / "last.pt")["model_state_dict"])
    _, val = example.character_lines()
    collate = example.PaddingCollator()
    with torch.no_grad():
        batch_means = [model(**collate([val[i] for i in range(s, min(s + 3, len(val)))])).loss.item()
                       for s in range(0, len(val), 3)]  # fmt: skip
    assert sum(batch_means) / len(batch_means) != pytest.approx(by_hand, rel=1e-5)


def test_collator_pads_masks_and_ignores_padding_and_the_first_token(example):
    items = [{"input_ids": torch.tensor([5, 6, 7])}, {"input_ids": torch.tensor([8])},
             {"input_ids": torch.tensor([1, 2, 3, 4, 9])}]  # fmt: skip
    batch = example.PaddingCollator(pad_id=50)(items)
    assert set(batch) == {"input_ids", "attention_mask", "labels"}
    assert all(tensor.shape == (3, 5) and tensor.dtype == torch.long for tensor in batch.values())
    assert batch["input_ids"].tolist() == [[5, 6, 7, 50, 50], [8, 50, 50, 50, 50], [1, 2, 3, 4, 9]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1]]
    assert batch["labels"].tolist() == [
        [-100, 6, 7, -100, -100],
        [-100, -100, -100, -100, -100],
        [-100, 2, 3, 4, 9],
    ]
    # The labels that count are the tokens the shifted loss predicts: every real token but the first.
    assert (batch["labels"] != -100).sum() == sum(len(item["input_ids"]) - 1 for item in items)


def test_model_gives_a_line_the_same_logits_alone_and_padded(example):
    """Right padding (the collator's) and left padding (generation's): the mask keeps real tokens
    from attending to padding and positions count real tokens only."""
    torch.manual_seed(0)
    model = example.TinyCausalLM(vocab_size=53, max_positions=64).eval()
    train, _ = example.character_lines()
    short, long = train[0]["input_ids"], train[1]["input_ids"]
    assert len(short) < len(long)
    padding = len(long) - len(short)
    right = example.PaddingCollator()([{"input_ids": short}, {"input_ids": long}])
    left_ids = torch.cat([torch.zeros(padding, dtype=torch.long), short])[None]
    left_mask = (torch.arange(len(long)) >= padding).long()[None]
    with torch.no_grad():
        alone = model(input_ids=short[None]).logits[0]
        right_logits = model(**right).logits[0, : len(short)]
        left_logits = model(input_ids=left_ids, attention_mask=left_mask).logits[0, padding:]
    assert torch.allclose(right_logits, alone, atol=1e-5)
    assert torch.allclose(left_logits, alone, atol=1e-5)


def test_model_loss_is_transformers_shifted_mean(example):
    torch.manual_seed(0)
    model = example.TinyCausalLM(vocab_size=53, max_positions=64)
    train, _ = example.character_lines()
    batch = example.PaddingCollator()([train[index] for index in range(4)])
    outputs = model(**batch)
    logits, labels = outputs.logits, batch["labels"]
    assert logits.shape == (*batch["input_ids"].shape, 53)
    by_hand = F.cross_entropy(logits[:, :-1].reshape(-1, 53), labels[:, 1:].reshape(-1), ignore_index=-100)
    assert outputs.loss.item() == pytest.approx(by_hand.item())
    assert model(input_ids=batch["input_ids"]).loss is None


def test_gpt2_variant_trains_on_the_same_batches(train_here, example):
    pytest.importorskip("transformers")
    run_dir = train_here(SEARCHPATH, "+experiment=causal_lm_gpt2", "trainer.max_steps=3")
    config = yaml.safe_load((run_dir / "run.yaml").read_text())
    assert config["model"]["_target_"] == "causal_lm.tiny_gpt2"
    assert config["optimizer"]["no_decay"] == ["bias", "norm"]
    ppl = read_scalars(run_dir)["val/ppl"]
    assert [step for step, _ in ppl] == [3] and math.isfinite(ppl[0][1])


@pytest.mark.slow
def test_the_users_command_line(tmp_path):
    result = run_example("causal_lm", "trainer.max_steps=3", run_dir=tmp_path / "run")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "run" / "checkpoints" / "last.pt").exists()
    assert "val/ppl" in read_scalars(tmp_path / "run")


def test_an_unshifted_accuracy_on_a_causal_lm_is_a_warning_naming_shift(
    train_here, example, caplog, tmp_path
):
    """The labels are the input ids, the model's loss shifts them: val/acc without shift would score
    each position against its own token. One warning names the setting; with it, none."""
    tiny = (SEARCHPATH, "+experiment=causal_lm", "callbacks=none", "model.width=16", "model.layers=1",
            "trainer.max_steps=1")  # fmt: skip
    train_here(*tiny, "metrics=accuracy")
    assert (
        "metrics.acc: the batches' labels are their input_ids (a causal language model's, whose loss scores "
        "position t against label t + 1), but val/acc scores position t against label t; set "
        "metrics.acc.shift=true for next-token accuracy"
    ) in caplog.text
    caplog.clear()
    shifted = train_here(*tiny, "metrics=accuracy", "+metrics.acc.shift=true", run_dir=tmp_path / "shifted")
    assert "metrics.acc" not in caplog.text
    assert "val/acc" in read_scalars(shifted)
