"""Bring any model: batches of any structure, the model's own loss, metrics, schedulers, parameter groups,
callbacks, data plumbing, and validation that never changes the training. In-process, with the real
composed config; the model and data parts are set as a user's own config files would set them."""

import logging
import math
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import composed, read_scalars
from hydra.utils import instantiate

from runner.checkpoint.files import load_checkpoint
from runner.cli.hydra.hydra_app import CONFIG_DIR
from runner.config.errors import ConfigError, UserError
from runner.config.schema import RunConfig
from runner.config.trust import folder_targets, targets_in
from runner.experiment.train import train
from runner.tools.evaluation import evaluate_checkpoint
from runner.training.batches import BatchError

PLUGIN = "any_model"


def evaluate(path: Path, split: str = "val") -> dict[str, Any]:
    """``eval`` of a checkpoint this test wrote: the test trusts the targets in it, and runner's own."""
    stored = {target for _, target in targets_in(load_checkpoint(path)["config"])}
    trusted = stored | folder_targets(CONFIG_DIR)
    return evaluate_checkpoint(path, "cpu", instantiate, split, trusted)


SMALL = ("data=classification", "data.batch_size=16", "trainer.log_every_n_steps=1", "seed=3")


@pytest.fixture
def run(tmp_path, caplog, monkeypatch):
    """``run(*overrides, model=..., dataset=..., run_dir=..., edit=..., **data)``: compose the real
    config, put in the plug-in's model and data set and ``data.*`` values (as a user's YAML would),
    let ``edit`` change it further, train in this process."""
    caplog.set_level(logging.INFO, logger="runner")
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "plugins"))

    def start(*overrides: str, model=None, dataset=None, run_dir=None, edit=None, **data) -> Path:
        config = configure(*overrides, model=model, dataset=dataset, **data)
        if edit is not None:
            edit(config)
        run_dir = run_dir or tmp_path / "run"
        run_dir.mkdir(parents=True, exist_ok=True)
        train(config, run_dir, build=instantiate)
        return run_dir

    return start


def configure(*overrides: str, model=None, dataset=None, **data) -> RunConfig:
    config = composed(*SMALL, *overrides)
    if model is not None:
        config.model = model if isinstance(model, dict) else {"_target_": f"{PLUGIN}.{model}"}
    if dataset is not None:
        config.data.dataset = dataset if isinstance(dataset, dict) else {"_target_": f"{PLUGIN}.{dataset}"}
    for key, value in data.items():
        setattr(config.data, key, value)
    return config


def weights(run_dir: Path, name: str = "last.pt") -> dict[str, torch.Tensor]:
    return torch.load(run_dir / "checkpoints" / name)["model_state_dict"]


def same_weights(first: dict, second: dict) -> bool:
    return first.keys() == second.keys() and all(torch.equal(first[key], second[key]) for key in first)


# 1. Batches of any structure


def test_dict_batches_train_exactly_as_pairs_do(run, tmp_path):
    """70 samples, batches of 16, accumulate=2: the last window is one short micro-batch of 6, so the
    sample count of dict batches weights it exactly as for pairs."""
    common = ("accumulate=2", "trainer.max_epochs=2")
    pairs = run(*common, model="mlp", dataset="pairs", run_dir=tmp_path / "pairs")
    dicts = run(*common, model="FeatureModel", dataset="dicts", run_dir=tmp_path / "dicts")
    as_pairs = weights(pairs)
    as_dicts = {key.removeprefix("net."): value for key, value in weights(dicts).items()}
    assert same_weights(as_pairs, as_dicts)
    assert read_scalars(pairs)["train/loss"] == read_scalars(dicts)["train/loss"]
    assert read_scalars(pairs)["val/acc"] == read_scalars(dicts)["val/acc"]


def test_dict_targets_are_found_under_data_target_key(run):
    run_dir = run("trainer.max_steps=3", model="FeatureModel",
                  dataset={"_target_": f"{PLUGIN}.dicts", "target_key": "y"}, target_key="y")  # fmt: skip
    assert "val/acc" in read_scalars(run_dir)


def test_dataclass_batches_from_a_collate_fn(run):
    collate = {"_target_": f"{PLUGIN}.collate_dataclass", "_partial_": True}
    run_dir = run("trainer.max_steps=3", model="FeatureModel", dataset="dicts", collate_fn=collate)
    assert torch.load(run_dir / "checkpoints" / "last.pt")["global_step"] == 3


def test_a_batch_the_engine_cannot_use_is_one_line_naming_what_it_got(run):
    with pytest.raises(BatchError) as raised:
        run("trainer.max_steps=2", model="mlp", dataset="triples")
    message = str(raised.value)
    assert "\n" not in message
    assert "tuple of 3" in message or "list of 3" in message
    assert "(inputs, targets)" in message and "loss=from_model" in message


def test_the_first_batch_is_checked_without_reading_anything_twice(run):
    """The check that refuses an unusable data set before the run writes anything uses the training
    iterator itself: one epoch reads each sample once."""
    run("trainer.max_epochs=1", model="mlp", dataset="counting_pairs")
    from any_model import CountingPairs

    assert CountingPairs.reads == 70


def test_a_dict_batch_without_its_targets_names_data_target_key(run):
    with pytest.raises(BatchError, match=r"no 'target'.*data\.target_key"):
        run("trainer.max_steps=2", model="FeatureModel", dataset="dicts", target_key="target")


# Data order: data.sampler


def read_order() -> list[int]:
    from any_model import RecordingPairs

    return list(RecordingPairs.read)


def test_a_sampler_of_the_users_makes_an_existing_loop_reproducible(run):
    """A loop that shuffles with RandomSampler and a seeded generator: data.sampler names the sampler,
    and runner gives it the training set and a generator seeded with the run's seed, as the loop did."""
    run("data.sampler={_target_: torch.utils.data.RandomSampler}", "trainer.max_epochs=2", model="mlp",
        dataset="recording_pairs")  # fmt: skip
    trained = read_order()
    from any_model import recording_pairs

    train_set, _ = recording_pairs()
    sampler = torch.utils.data.RandomSampler(train_set, generator=torch.Generator().manual_seed(3))  # seed=3
    loop = [index for _ in range(2) for index in sampler]  # two epochs of the loop's order
    assert trained == loop
    assert loop[:70] != loop[70:] and sorted(loop[:70]) == list(range(70))


def test_doctor_and_lr_find_read_the_samplers_order_too(monkeypatch):
    """They read the training loader as it is built (no epoch set): its first batch is the order's."""
    from runner.experiment.setup import prepare

    monkeypatch.syspath_prepend(str(Path(__file__).parent / "plugins"))
    config = configure(
        "data.sampler={_target_: torch.utils.data.RandomSampler}", model="mlp", dataset="pairs"
    )
    prepared = prepare(config, instantiate, seed=3)
    inputs, _ = next(iter(prepared.train_loader))
    order = list(torch.utils.data.RandomSampler(range(70), generator=torch.Generator().manual_seed(3)))
    assert torch.equal(inputs, prepared.parts.train_set.tensors[0][order[:16]])


def test_a_sampler_that_cannot_be_built_is_one_line_before_the_run_writes(run, tmp_path, caplog):
    with pytest.raises(ConfigError) as refused:
        run("data.sampler={_target_: torch.utils.data.WeightedRandomSampler}", model="mlp", dataset="pairs")
    assert str(refused.value).startswith(
        "data.sampler._target_=torch.utils.data.WeightedRandomSampler could not be built (TypeError: Weighted"
        "RandomSampler.__init__() missing 2 required positional arguments: 'weights' and 'num_samples')"
    )
    assert not list((tmp_path / "run").iterdir())
    run("data.sampler={_target_: torch.utils.data.SequentialSampler}", "trainer.max_steps=1", model="mlp",
        dataset="pairs")  # fmt: skip
    assert "data order       data.sampler=torch.utils.data.SequentialSampler" in caplog.text


def test_a_batch_sampler_as_data_sampler_is_one_line_before_the_run_writes(run, tmp_path):
    with pytest.raises(UserError) as refused:
        run(f"data.sampler={{_target_: {PLUGIN}.Buckets}}", model="mlp", dataset="pairs")
    assert str(refused.value).startswith(
        "data.sampler (Buckets) gave list [0, 1, 2, 3, 4, 5, 6, 7] in epoch 0; a sampler gives one sample's "
        "index at a time"
    )
    assert not list((tmp_path / "run").iterdir())


@pytest.mark.parametrize(
    "sampler",
    [
        "data.sampler={_target_: torch.utils.data.RandomSampler}",  # its generator's state is saved
        f"data.sampler={{_target_: {PLUGIN}.CountedShuffle}}",  # its own state_dict is saved
    ],
    ids=["generator", "state_dict"],
)
def test_a_resumed_run_continues_the_samplers_order_exactly(run, tmp_path, sampler):
    """Stopped two steps into epoch 2 (5 steps an epoch), resumed to the end of epoch 3: the same
    samples in the same order, and the same weights, as a run never stopped."""
    straight = run(sampler, "trainer.max_epochs=3", model="mlp", dataset="recording_pairs",
                   run_dir=tmp_path / "a")  # fmt: skip
    never_stopped = read_order()
    run(sampler, "trainer.max_epochs=3", "trainer.max_steps=7", model="mlp", dataset="recording_pairs",
        run_dir=tmp_path / "b")  # fmt: skip
    first_part = read_order()
    stopped = torch.load(tmp_path / "b" / "checkpoints" / "last.pt", weights_only=True)["sampler_state_dict"]
    assert stopped["epoch"] == 1 and sorted(stopped["order"].tolist()) == list(range(70))  # epoch 2's order
    resumed = run(sampler, "trainer.max_epochs=3", f"resume={tmp_path / 'b'}", model="mlp",
                  dataset="recording_pairs", run_dir=tmp_path / "b")  # fmt: skip
    assert first_part + read_order() == never_stopped  # 70 + 32 samples, then the rest
    assert same_weights(weights(straight), weights(resumed))


# 2. The model's own loss


def test_a_model_that_returns_its_own_loss_trains_with_no_wrapper(run, tmp_path):
    own = run("loss=from_model", "trainer.max_epochs=2", model="OwnLossModel", dataset="dicts",
              run_dir=tmp_path / "own")  # fmt: skip
    external = run("trainer.max_epochs=2", model="FeatureModel", dataset="dicts", run_dir=tmp_path / "ext")
    # The same layers under the same seed, cross-entropy inside the model or outside: the same run.
    assert same_weights(weights(own), weights(external))
    assert read_scalars(own)["val/acc"] == read_scalars(external)["val/acc"]


# 3. Metrics


def test_a_metric_that_never_gets_a_value_is_a_warning_at_the_first_validation(train_here, caplog):
    """Accuracy on a regression counts nothing: the run plan lists val/acc, the run never logs it."""
    run_dir = train_here("data=regression", "metrics=accuracy", "trainer.max_steps=4",
                         "trainer.val_every_n_steps=2", "trainer.max_epochs=null")  # fmt: skip
    assert "val/acc" not in read_scalars(run_dir)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    said = [message for message in warnings if message.startswith("val/acc: listed in the run plan")]
    assert len(said) == 1, warnings  # at the first validation only, not at each
    assert "remove it from metrics" in said[0]


def test_perplexity_on_a_regression_is_refused_before_the_run_writes(train_here, tmp_path):
    with pytest.raises(ConfigError) as refused:
        train_here("data=regression", "metrics=perplexity", "trainer.max_steps=2")
    assert str(refused.value) == (
        "metrics.ppl: Perplexity is exp of the validation loss, a perplexity only for a cross-entropy loss, "
        "but loss is MSELoss (a regression loss); remove ppl from metrics (metrics=none)"
    )
    assert not list((tmp_path / "run").iterdir())


def test_a_batch_that_cannot_be_collated_names_data_collate_fn_before_the_run_writes(run, tmp_path):
    """Variable-length sequences and torch's default collate: one line, nothing written."""
    with pytest.raises(BatchError) as refused:
        run("trainer.max_steps=2", model="TokenTagger", dataset="sequences")
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(
        "the first batch cannot be collated: torch's default collate (data.collate_fn=null) raised "
        "RuntimeError: stack expects each tensor to be equal size"
    ), message
    assert message.endswith(
        "like dict(tokens=Tensor[7] int64, labels=Tensor[7] int64); set data.collate_fn to a _target_ "
        "collator that builds one batch from a list of them (variable-length sequences need padding)"
    ), message
    assert not list((tmp_path / "run").iterdir())


def test_perplexity_is_exp_of_the_token_weighted_validation_loss(run):
    """Variable-length sequences padded with -100: val/loss is the mean over real tokens."""
    run_dir = run(
        "metrics=[accuracy,perplexity]", "checkpoint.monitor=val/ppl", "trainer.max_steps=4",
        model="TokenTagger", dataset="sequences", collate_fn={"_target_": f"{PLUGIN}.PadCollator"},
        val_batch_size=5,
    )  # fmt: skip
    scalars = read_scalars(run_dir)
    val_loss, val_ppl = scalars["val/loss"][-1][1], scalars["val/ppl"][-1][1]
    assert val_ppl == pytest.approx(math.exp(val_loss), rel=1e-6)

    model = instantiate({"_target_": f"{PLUGIN}.TokenTagger"})
    model.load_state_dict(weights(run_dir))
    from any_model import sequences

    _, val = sequences()
    with torch.no_grad():
        token_losses = [torch.nn.functional.cross_entropy(model(item["tokens"][None]), item["labels"][None],
                                                           reduction="sum") for item in val]  # fmt: skip
    tokens = sum(len(item["labels"]) for item in val)
    assert val_loss == pytest.approx(sum(token_losses).item() / tokens, rel=1e-5)


def test_checkpoint_monitor_takes_any_logged_metric_and_refuses_others():
    with pytest.raises(ConfigError, match=r"checkpoint.monitor=val/f1 is not logged.*val/loss, val/acc"):
        composed("checkpoint.monitor=val/f1", "checkpoint.mode=max")
    assert composed("metrics=perplexity", "checkpoint.monitor=val/ppl").checkpoint.monitor == "val/ppl"


def test_a_metric_object_from_the_config_is_logged_and_monitored(run):
    def add_top1(config: RunConfig) -> None:
        config.metrics["top1"] = {"_target_": "runner.training.metrics.Accuracy"}

    run_dir = run("trainer.max_steps=3", model="mlp", dataset="pairs", edit=add_top1)
    scalars = read_scalars(run_dir)
    assert scalars["val/top1"] == scalars["val/acc"]


def test_the_test_split_is_evaluated_with_every_metric(run):
    run_dir = run(
        "metrics=[accuracy,perplexity]", "trainer.max_steps=3", model="mlp", dataset="with_test_split"
    )
    result = evaluate(run_dir / "checkpoints" / "last.pt", split="test")
    assert {"test/loss", "test/acc", "test/ppl"} <= result.keys()
    assert result["test/ppl"] == pytest.approx(math.exp(result["test/loss"]), rel=1e-6)
    val = evaluate(run_dir / "checkpoints" / "last.pt")
    assert val["val/loss"] == pytest.approx(read_scalars(run_dir)["val/loss"][-1][1], rel=1e-6)
    assert val["val/loss"] != result["test/loss"]


def test_split_test_without_a_test_set_says_what_the_data_set_must_return(run):
    run_dir = run("trainer.max_steps=2", model="mlp", dataset="pairs")
    with pytest.raises(ConfigError, match=r"returns no test set.*\(train, val, test\)"):
        evaluate(run_dir / "checkpoints" / "last.pt", split="test")


# 4. Any scheduler


def lrs(run_dir: Path, tag: str = "train/lr") -> list[float]:
    return [value for _, value in read_scalars(run_dir)[tag]]


def test_a_target_scheduler_steps_per_epoch(run):
    """70 samples in batches of 16: 5 optimizer steps per epoch; StepLR halves the rate per epoch."""

    def step_lr(config: RunConfig) -> None:
        config.scheduler = {"_target_": "torch.optim.lr_scheduler.StepLR", "step_size": 1, "gamma": 0.5,
                            "interval": "epoch"}  # fmt: skip

    run_dir = run("optimizer.lr=0.01", "trainer.max_epochs=3", model="mlp", dataset="pairs", edit=step_lr)
    assert lrs(run_dir) == pytest.approx([0.01] * 5 + [0.005] * 5 + [0.0025] * 5)


def test_planned_values_fill_a_schedulers_arguments(run):
    """scheduler=onecycle: OneCycleLR over ${total_steps}, peaking at ${optimizer.lr}."""
    run_dir = run(
        "scheduler=onecycle", "optimizer.lr=0.1", "trainer.max_epochs=2", model="mlp", dataset="pairs"
    )
    rates = lrs(run_dir)
    assert len(rates) == 10 and max(rates) == pytest.approx(0.1, rel=0.05)
    assert rates[0] < 0.01 and rates[-1] < 1e-4
    plan = (run_dir / "run.yaml").read_text()
    assert "total_steps: ${total_steps}" in plan  # the record keeps what the user wrote


def test_linear_warmup_decay_rises_then_falls_to_zero(run):
    run_dir = run("scheduler=linear_warmup_decay", "scheduler.warmup_steps=4", "optimizer.lr=0.01",
                  "trainer.max_steps=10", model="mlp", dataset="pairs")  # fmt: skip
    assert lrs(run_dir) == pytest.approx([0.0, 0.0025, 0.005, 0.0075, 0.01, 0.01 * 5 / 6, 0.01 * 4 / 6,
                                          0.01 * 3 / 6, 0.01 * 2 / 6, 0.01 * 1 / 6])  # fmt: skip


def test_reduce_on_plateau_steps_after_each_validation_on_its_monitor(run):
    """With a learning rate of 1e-6 the validation loss cannot improve by ReduceLROnPlateau's threshold:
    after the first validation every one multiplies the rate by factor (patience 0)."""
    run_dir = run("scheduler=plateau", "scheduler.patience=0", "scheduler.factor=0.5", "optimizer.lr=1e-6",
                  "trainer.max_epochs=3", model="mlp", dataset="pairs")  # fmt: skip
    assert lrs(run_dir) == pytest.approx([1e-6] * 10 + [5e-7] * 5)


def test_scheduler_mistakes_are_one_line():
    with pytest.raises(ConfigError, match=r"scheduler.monitor=val/f1 is not logged"):
        composed("scheduler=plateau", "scheduler.monitor=val/f1")
    with pytest.raises(ConfigError, match=r"scheduler.name=cosine steps once per optimizer step"):
        composed("scheduler=cosine", "+scheduler.interval=epoch")
    with pytest.raises(ConfigError, match=r"scheduler.interval=hourly is not allowed"):
        composed("scheduler=linear_warmup_decay", "scheduler.interval=hourly")


# 5. Parameter groups by name


def test_no_decay_groups_by_name_and_norm_layers_by_type(run, caplog):
    run_dir = run("optimizer=adamw", "optimizer.weight_decay=0.1", "+optimizer.no_decay=[bias,norm]",
                  "scheduler=cosine", "trainer.max_steps=4", model="NormModel", dataset="pairs")  # fmt: skip
    optimizer_state = torch.load(run_dir / "checkpoints" / "last.pt")["optimizer_state_dict"]
    groups = {group["name"]: group for group in optimizer_state["param_groups"]}
    assert groups["decay"]["weight_decay"] == 0.1 and groups["no_decay"]["weight_decay"] == 0.0
    # inner.weight, head.weight decay; inner.bias, ln.weight (a norm layer, by type), ln.bias, head.bias not.
    assert len(groups["decay"]["params"]) == 2 and len(groups["no_decay"]["params"]) == 4
    scalars = read_scalars(run_dir)
    assert scalars["train/lr/decay"] == scalars["train/lr/no_decay"] == scalars["train/lr"]
    assert "  parameter groups decay: 2 tensors, 144 parameters, weight_decay 0.1\n" in caplog.text
    assert "\n" + " " * 19 + "no_decay: 4 tensors, 51 parameters, weight_decay 0\n" in caplog.text


# 6. Callbacks


@pytest.fixture
def recorded(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "plugins"))
    import any_model

    any_model.RECORDED.clear()
    return any_model.RECORDED


def recorder(stop_at=None):
    def add(config: RunConfig) -> None:
        config.callbacks["recorder"] = {"_target_": f"{PLUGIN}.Recorder", "stop_at": stop_at}

    return add


def test_a_callback_sees_every_hook_logs_scalars_and_can_end_the_run(run, recorded, caplog):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # context.log of a tensor that requires grad: no warning
        run_dir = run("trainer.max_epochs=3", model="mlp", dataset="pairs", edit=recorder(stop_at=7))
    (callback,) = recorded
    # The validation that ends the run (step 7, off the per-epoch cadence) calls on_validation_end too.
    assert callback.calls == [("on_train_start", 0), ("on_validation_end", 5), ("on_epoch_end", 1),
                              ("on_validation_end", 7), ("on_train_end", 7)]  # fmt: skip
    assert [step for step, _ in read_scalars(run_dir)["val/loss"]] == [5, 7]
    assert [step for step, _ in read_scalars(run_dir)["custom/steps_seen"]] == list(range(1, 8))
    assert [step for step, _ in read_scalars(run_dir)["custom/weight_sum"]] == list(range(1, 8))
    # Each step's batch (70 samples: four of 16, then 6) and the model's outputs for it, detached.
    assert callback.step_data[:5] == [((16, 6), (16,), (16, 3), False)] * 4 + [((6, 6), (6,), (6, 3), False)]
    checkpoint = torch.load(run_dir / "checkpoints" / "last.pt")
    assert checkpoint["global_step"] == 7
    assert checkpoint["callbacks_state_dict"] == {"recorder": {"steps_seen": 7}}
    assert "stopped at step 7 (epoch 1): the recorder stops at step 7" in caplog.text


def test_on_validation_end_runs_for_the_final_validation_when_max_steps_ends_mid_epoch(run, recorded):
    """Five steps an epoch, validated per epoch: step 7 ends the run two steps into epoch 2."""
    run_dir = run("trainer.max_steps=7", model="mlp", dataset="pairs", edit=recorder())
    (callback,) = recorded
    assert [step for step, _ in read_scalars(run_dir)["val/loss"]] == [5, 7]
    assert [call for call in callback.calls if call[0] == "on_validation_end"] == [
        ("on_validation_end", 5), ("on_validation_end", 7)
    ]  # fmt: skip
    assert callback.extra_validations == [False, True]  # step 7's is off the per-epoch cadence


def test_a_callback_gets_a_models_output_class_detached(monkeypatch):
    """transformers-style outputs (a dataclass with .loss and .logits) reach on_step_end detached."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "plugins"))
    from any_model import Output

    from runner.training.callbacks import detached

    logits = torch.ones(2, 3, requires_grad=True) * 3
    given = detached({"out": Output(logits.sum(), logits), "pair": (logits, [logits])})
    assert isinstance(given["out"], Output) and torch.equal(given["out"].logits, logits.detach())
    tensors = [given["out"].loss, given["out"].logits, given["pair"][0], given["pair"][1][0]]
    assert not any(tensor.requires_grad for tensor in tensors)


def test_context_log_says_in_one_line_that_images_are_not_scalars(run):
    def add(config: RunConfig) -> None:
        config.callbacks["images"] = {"_target_": f"{PLUGIN}.ImageLogger"}

    with pytest.raises(UserError) as raised:
        run("trainer.max_steps=2", model="mlp", dataset="pairs", edit=add)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(
        "context.log('custom/images', ...) takes one number (a TensorBoard scalar), not a tensor of shape "
        "(4, 3, 8, 8); images and other tensors are not scalars"
    )


def test_early_stopping_ends_the_run_with_its_last_validation_and_says_why(run, caplog):
    """Nothing improves with lr 0: the first validation sets the best, the next two are bad."""
    run_dir = run("callbacks=early_stopping", "callbacks.early_stopping.patience=2", "optimizer.lr=0",
                  "trainer.max_epochs=10", model="mlp", dataset="pairs")  # fmt: skip
    assert [step for step, _ in read_scalars(run_dir)["val/loss"]] == [5, 10, 15]
    assert torch.load(run_dir / "checkpoints" / "last.pt")["global_step"] == 15
    assert "early stopping: val/loss has not improved by more than 0 for 2 validation(s)" in caplog.text


def test_ema_validates_and_evaluates_the_averaged_weights(run):
    run_dir = run("callbacks=ema", "callbacks.ema.decay=0.5", "trainer.max_epochs=2", model="mlp",
                  dataset="pairs")  # fmt: skip
    checkpoint = torch.load(run_dir / "checkpoints" / "last.pt")
    averaged, own = checkpoint["averaged_model_state_dict"], checkpoint["model_state_dict"]
    assert not same_weights(averaged, own)
    assert same_weights(averaged, checkpoint["callbacks_state_dict"]["ema"]["averages"])
    result = evaluate(run_dir / "checkpoints" / "last.pt")
    assert result["weights"] == "averaged"
    assert result["val/loss"] == pytest.approx(read_scalars(run_dir)["val/loss"][-1][1], rel=1e-6)


def test_resume_is_bit_exact_with_callbacks_on(run, tmp_path):
    common = ("callbacks=[early_stopping,ema]", "callbacks.ema.decay=0.9", "trainer.val_every_n_steps=3",
              "checkpoint.every_n_steps=4")  # fmt: skip
    parts = {"model": {"_target_": f"{PLUGIN}.mlp", "dropout": 0.2}, "dataset": "pairs"}
    straight = run(*common, "trainer.max_steps=10", **parts, run_dir=tmp_path / "a")
    run(*common, "trainer.max_steps=4", **parts, run_dir=tmp_path / "b")
    resumed = run(
        *common, "trainer.max_steps=10", f"resume={tmp_path / 'b'}", **parts, run_dir=tmp_path / "b"
    )
    first, second = (torch.load(d / "checkpoints" / "last.pt") for d in (straight, resumed))
    assert same_weights(first["model_state_dict"], second["model_state_dict"])
    assert same_weights(first["averaged_model_state_dict"], second["averaged_model_state_dict"])
    assert first["callbacks_state_dict"]["early_stopping"] == second["callbacks_state_dict"]["early_stopping"]


# 7. Data plumbing


def test_drop_last_and_val_batch_size(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "plugins"))
    from runner.experiment.setup import prepare

    config = configure(model="mlp", dataset="pairs", drop_last=True, val_batch_size=7)
    prepared = prepare(config, instantiate, seed=0)
    assert len(prepared.train_loader) == 4  # 70 samples in batches of 16, the short last one dropped
    assert [len(targets) for _, targets in prepared.val_loader] == [7, 7, 7, 7, 2]


def test_a_stream_trains_to_max_steps_and_counts_its_passes_as_epochs(run):
    run_dir = run("trainer.max_steps=7", "trainer.max_epochs=null", model="mlp", dataset="stream")
    checkpoint = torch.load(run_dir / "checkpoints" / "last.pt")
    # 40 items in batches of 16: 3 micro-batches per pass; 7 steps are 2 passes and 1 batch.
    assert (checkpoint["global_step"], checkpoint["epoch"], checkpoint["batches_done_in_epoch"]) == (7, 2, 1)
    assert [step for step, _ in read_scalars(run_dir)["val/loss"]] == [3, 6, 7]


def test_a_stream_needs_max_steps(run):
    with pytest.raises(ConfigError, match=r"stream.*set trainer\.max_steps"):
        run(model="mlp", dataset="stream")


@pytest.mark.parametrize("with_state", [False, True], ids=["skipping", "own-state"])
@pytest.mark.parametrize("stopped_at", [4, 3], ids=["mid-pass", "at-a-pass-end"])
@pytest.mark.parametrize("length", [40, 48], ids=["short-last-batch", "whole-batches"])
def test_resume_continues_the_stream(run, tmp_path, with_state, stopped_at, length):
    """Batches of 16: 3 per pass. Stopped at step 3, the pass has just ended (its end is known at its
    last step, whether the last batch is short or whole): the resumed run starts the next pass."""
    dataset = {"_target_": f"{PLUGIN}.stream", "with_state": with_state, "num_train": length}
    common = ("trainer.max_epochs=null", "checkpoint.every_n_steps=1", "trainer.val_every_n_steps=4")
    straight = run(*common, "trainer.max_steps=8", model="mlp", dataset=dataset, run_dir=tmp_path / "a")
    run(*common, f"trainer.max_steps={stopped_at}", model="mlp", dataset=dataset, run_dir=tmp_path / "b")
    resumed = run(*common, "trainer.max_steps=8", f"resume={tmp_path / 'b'}", model="mlp", dataset=dataset,
                  run_dir=tmp_path / "b")  # fmt: skip
    assert same_weights(weights(straight), weights(resumed))
    assert read_scalars(straight)["train/loss"] == read_scalars(resumed)["train/loss"]
    assert read_scalars(straight)["val/loss"] == read_scalars(resumed)["val/loss"]
    position = ("global_step", "epoch", "batches_done_in_epoch")
    first, second = (torch.load(d / "checkpoints" / "last.pt") for d in (straight, resumed))
    assert [first[key] for key in position] == [second[key] for key in position] == [8, 2, 2]
    saved = torch.load(tmp_path / "b" / "checkpoints" / "last.pt")
    assert ("dataset_state_dict" in saved) == with_state


def test_a_stream_read_by_workers_resumes_exactly(run, tmp_path):
    """Each pass starts the workers afresh, told the epoch, seeded by (seed, epoch): the resumed
    pass's worker draws the same noise as the interrupted one did."""
    common = ("trainer.max_epochs=null", "checkpoint.every_n_steps=1", "data.num_workers=1")
    straight = run(
        *common, "trainer.max_steps=7", model="mlp", dataset="noisy_stream", run_dir=tmp_path / "a"
    )
    run(*common, "trainer.max_steps=4", model="mlp", dataset="noisy_stream", run_dir=tmp_path / "b")
    resumed = run(*common, "trainer.max_steps=7", f"resume={tmp_path / 'b'}", model="mlp",
                  dataset="noisy_stream", run_dir=tmp_path / "b")  # fmt: skip
    assert same_weights(weights(straight), weights(resumed))
    assert read_scalars(straight)["train/loss"] == read_scalars(resumed)["train/loss"]


# 8. Validation, logging and checkpointing never change the training


@pytest.mark.parametrize(
    "cadence",
    [
        ("trainer.val_every_n_epochs=null", "trainer.val_every_n_steps=1"),
        ("trainer.val_every_n_epochs=2", "trainer.log_every_n_steps=7"),
        ("checkpoint.every_n_steps=1", "checkpoint.every_n_epochs=null", "trainer.log_every_n_steps=3"),
        ("checkpoint.enabled=false", "trainer.val_every_n_steps=2"),
    ],
    ids=["validate-every-step", "validate-every-2-epochs", "checkpoint-every-step", "no-checkpoints"],
)
def test_validation_logging_and_checkpoints_never_change_the_training(run, tmp_path, cadence):
    """A dropout model draws from the global random state every step: anything else that drew from it
    (a loader starting, a save) would change the masks. Compared by the train/loss of every step."""
    model = {"_target_": f"{PLUGIN}.mlp", "dropout": 0.3}
    reference = run("trainer.max_epochs=3", "trainer.log_every_n_steps=1", model=model, dataset="pairs",
                    run_dir=tmp_path / "reference")  # fmt: skip
    varied = run("trainer.max_epochs=3", *cadence, "trainer.log_every_n_steps=1", model=model,
                 dataset="pairs", run_dir=tmp_path / "varied")  # fmt: skip
    expected = read_scalars(reference)["train/loss"]
    assert read_scalars(varied)["train/loss"] == expected and len(expected) == 15
    if (varied / "checkpoints" / "last.pt").exists():
        assert same_weights(weights(reference), weights(varied))


def test_accuracy_reads_the_class_dimension_of_either_layout_and_shifts_for_causal_models():
    from runner.training.metrics import Accuracy

    labels = torch.tensor([[-100, 1, 2, 3]])
    next_token = torch.zeros(1, 4, 5)  # transformers' (N, T, V): position t scores label t+1
    for position, token in enumerate([1, 2, 3]):
        next_token[0, position, token] = 1.0
    shifted, plain, torch_layout = Accuracy(shift=True), Accuracy(), Accuracy()
    shifted.update(next_token, labels)
    plain.update(next_token, labels)
    class_first = torch.zeros(1, 5, 3)  # torch's (N, C, T), against targets (N, T) = [[1, 2, 3]]
    for position, token in enumerate([1, 2, 0]):  # the last one wrong
        class_first[0, token, position] = 1.0
    torch_layout.update(class_first, labels[:, 1:])
    assert shifted.compute().item() == 1.0 and plain.compute().item() == 0.0
    assert torch_layout.compute().item() == pytest.approx(2 / 3)


def step_lr_per_epoch(config: RunConfig) -> None:
    config.scheduler = {"_target_": "torch.optim.lr_scheduler.StepLR", "step_size": 1, "gamma": 0.5,
                        "interval": "epoch"}  # fmt: skip


@pytest.mark.parametrize(
    ("settings", "edit", "stop_at", "limit"),
    [
        # Checkpoints written at an epoch's end (best.pt and step_N.pt share one copy) hold the scheduler
        # as stepped for that epoch.
        (("optimizer.lr=0.01",), step_lr_per_epoch, "trainer.max_epochs=2", "trainer.max_epochs=3"),
        # A run that ends between validations validates once more; that one steps no plateau scheduler and
        # counts for no patience, so a longer run of the same settings continues as if never stopped.
        (("scheduler=plateau", "scheduler.mode=max", "scheduler.patience=0", "scheduler.factor=0.5",
          "callbacks=early_stopping", "callbacks.early_stopping.mode=max",
          "callbacks.early_stopping.patience=9",
          "trainer.val_every_n_steps=3", "trainer.val_every_n_epochs=null", "checkpoint.every_n_steps=4",
          "trainer.max_epochs=null"), None, "trainer.max_steps=4", "trainer.max_steps=10"),
    ],
    ids=["per-epoch-scheduler", "plateau-and-early-stopping"],
)  # fmt: skip
def test_a_run_continued_with_a_longer_limit_equals_one_never_stopped(run, tmp_path, settings, edit, stop_at,
                                                                      limit):  # fmt: skip
    straight = run(*settings, limit, model="mlp", dataset="pairs", edit=edit, run_dir=tmp_path / "a")
    run(*settings, stop_at, model="mlp", dataset="pairs", edit=edit, run_dir=tmp_path / "b")
    resumed = run(*settings, limit, f"resume={tmp_path / 'b'}", model="mlp", dataset="pairs", edit=edit,
                  run_dir=tmp_path / "b")  # fmt: skip
    first, second = (torch.load(d / "checkpoints" / "last.pt") for d in (straight, resumed))
    assert first["global_step"] == second["global_step"]
    assert same_weights(first["model_state_dict"], second["model_state_dict"])
    assert first["scheduler_state_dict"] == second["scheduler_state_dict"]
    assert first["callbacks_state_dict"] == second["callbacks_state_dict"]


def test_a_scheduler_built_for_the_planned_steps_refuses_a_longer_resume(run, tmp_path):
    from runner.checkpoint.files import CheckpointError

    run("scheduler=onecycle", "trainer.max_epochs=2", model="mlp", dataset="pairs", run_dir=tmp_path / "a")
    with pytest.raises(CheckpointError, match=r"planned total_steps 10 -> 15; resume with the original"):
        run("scheduler=onecycle", "trainer.max_epochs=3", f"resume={tmp_path / 'a'}", model="mlp",
            dataset="pairs", run_dir=tmp_path / "a")  # fmt: skip


def test_a_callback_state_a_checkpoint_cannot_hold_is_named_before_the_run_writes(run, tmp_path):
    from runner.checkpoint.files import CheckpointError

    def add(config: RunConfig) -> None:
        config.callbacks["recent"] = {"_target_": f"{PLUGIN}.RecentLosses"}

    with pytest.raises(
        CheckpointError, match=r"callbacks_state_dict\['recent'\]\['recent'\] is a collections\.deque"
    ):
        run("trainer.max_steps=2", model="mlp", dataset="pairs", edit=add)
    assert list((tmp_path / "run").iterdir()) == []


def test_a_model_that_does_not_take_the_dict_batch_is_one_line(run):
    with pytest.raises(
        BatchError, match=r"passed as model\(\*\*batch\), and the model refused it .*'features'"
    ):
        run("trainer.max_steps=2", model="NormModel", dataset="dicts")


@pytest.mark.parametrize(("sizes", "empty"), [({"num_train": 0}, "training"), ({"num_val": 0}, "validation")])
def test_an_empty_split_is_refused_before_the_run_writes(run, tmp_path, sizes, empty):
    """Before: an empty training set ended "done: step=0" with checkpoints of an untrained model, an
    empty validation set logged val/loss 0 and picked best.pt on it."""
    with pytest.raises(ConfigError, match=rf"any_model.pairs returned an empty {empty} set \(0 samples\)"):
        run("trainer.max_steps=2", model="mlp", dataset={"_target_": "any_model.pairs", **sizes})
    assert list((tmp_path / "run").iterdir()) == []
