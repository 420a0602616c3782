"""The worked example in ``examples/word_lm/``: pytorch/examples' word-level language model, plugged into
runner through its own package and config folder, trains exactly as the same recipe written by hand."""

import importlib
import os
import random
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from types import ModuleType

import numpy as np
import pytest
import torch
from conftest import REPO, composed, read_scalars, run_example
from torch import nn

from runner.data.loading import make_loaders
from runner.data.text import TEXT_FILE
from runner.tools.doctor import PASS, Setup, run_checks
from runner.training.precision import resolve_precision

EXAMPLE = REPO / "examples" / "word_lm"
SEARCHPATH = f"hydra.searchpath=[file://{EXAMPLE / 'conf'}]"
SEED = 3
# A short run of the recipe: small chunks and model, so it takes seconds; dropout stays on (0.2).
BPTT, EMBEDDING, HIDDEN, BATCH_SIZE, EPOCHS = 10, 16, 16, 8, 4
SHORT_RUN = (
    SEARCHPATH, "+experiment=word_lm", f"seed={SEED}", "device=cpu", f"data.dataset.bptt={BPTT}",
    f"model.embedding={EMBEDDING}", f"model.hidden={HIDDEN}", f"data.batch_size={BATCH_SIZE}",
    f"trainer.max_epochs={EPOCHS}", "trainer.log_every_n_steps=1",
)  # fmt: skip
# The recipe read as pytorch/examples reads the text, carrying the LSTM state (word_lm_tbptt), as short.
CARRIED_RUN = tuple(
    "+experiment=word_lm_tbptt" if item == "+experiment=word_lm" else item for item in SHORT_RUN
)


@pytest.fixture
def word_lm(monkeypatch) -> ModuleType:
    """The example's package, importable as a user's ``PYTHONPATH=examples/word_lm`` makes it."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    return importlib.import_module("word_lm")


@dataclass
class Reference:
    losses: list[float] = field(default_factory=list)  # every step's training loss
    lrs: list[float] = field(default_factory=list)  # the rate every step used
    val_losses: list[float] = field(default_factory=list)  # after every epoch


def float32(value: float) -> float:
    """As TensorBoard stores a scalar."""
    return torch.tensor(value, dtype=torch.float32).item()


def forward_with_state(model: nn.Module, tokens: torch.Tensor, hidden):
    """pytorch/examples' ``RNNModel.forward(input, hidden)``, on the example's layers."""
    states, hidden = model.rnn(model.drop(model.encoder(tokens)), hidden)
    return model.decoder(model.drop(states)).transpose(1, 2), hidden


def hand_written_recipe(
    word_lm: ModuleType, seed: int, epochs: int, carry: bool = False
) -> tuple[Reference, nn.Module]:
    """The recipe as pytorch/examples' ``main.py`` writes it (batches sliced from the data in order,
    as its ``get_batch`` does; no DataLoader), seeded as runner's ``seed_everything``, model first.
    With ``carry``, its truncated backpropagation through time: each epoch (and each evaluation)
    starts from a zero state (``init_hidden``), each batch from the last one's, detached
    (``repackage_hidden``), on the text laid out in columns as its ``batchify`` lays it out."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    vocabulary_size = len(word_lm.vocabulary(word_lm.tokenize(TEXT_FILE.read_text())))
    model = word_lm.rnn_model(vocabulary_size, embedding=EMBEDDING, hidden=HIDDEN, layers=2, dropout=0.2)
    val_batch_size = 1 if carry else BATCH_SIZE
    columns = {"columns": BATCH_SIZE, "val_columns": val_batch_size} if carry else {}
    train, val = word_lm.load_words(bptt=BPTT, val_fraction=0.15, **columns)
    (train_inputs, train_targets), (val_inputs, val_targets) = train.tensors, val.tensors
    optimizer = torch.optim.SGD(model.parameters(), lr=20)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
        optimizer, mode="min", factor=0.25, patience=0, threshold=0
    )
    loss_fn = nn.CrossEntropyLoss()
    reference = Reference()

    def init_hidden(batch_size: int):
        return (torch.zeros(2, batch_size, HIDDEN), torch.zeros(2, batch_size, HIDDEN)) if carry else None

    for _ in range(epochs):
        model.train()
        hidden = init_hidden(BATCH_SIZE)
        for start in range(0, len(train_inputs), BATCH_SIZE):
            batch = slice(start, start + BATCH_SIZE)
            if carry:
                hidden = tuple(h.detach() for h in hidden)
            output, hidden = forward_with_state(model, train_inputs[batch], hidden)
            loss = loss_fn(output, train_targets[batch])
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
            reference.lrs.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            reference.losses.append(loss.item())
            hidden = hidden if carry else None
        model.eval()
        hidden = init_hidden(val_batch_size)
        loss_sum, tokens = torch.zeros(()), torch.zeros((), dtype=torch.long)
        with torch.no_grad():
            for start in range(0, len(val_inputs), val_batch_size):
                batch = slice(start, start + val_batch_size)
                targets = val_targets[batch]
                output, hidden = forward_with_state(model, val_inputs[batch], hidden)
                hidden = hidden if carry else None
                loss = loss_fn(output, targets)
                loss_sum += loss.float() * targets.numel()
                tokens += targets.numel()
        val_loss = (loss_sum / tokens).item()
        reference.val_losses.append(val_loss)
        scheduler.step(val_loss)
    return reference, model


def reduced_at(lrs: list[float], steps_per_epoch: int) -> list[int]:
    """The epochs (1-based) after which the learning rate was lower than before."""
    per_epoch = lrs[::steps_per_epoch]
    return [epoch for epoch in range(1, len(per_epoch)) if per_epoch[epoch] < per_epoch[epoch - 1]]


def test_config_declares_the_true_vocabulary_size(word_lm):
    config = composed(SEARCHPATH, "+experiment=word_lm")
    train, _ = word_lm.load_words(**{k: v for k, v in config.data.dataset.items() if k != "_target_"})
    assert config.data.num_outputs == len(train.classes) == len(set(train.classes))
    assert config.data.input_shape == [config.data.dataset["bptt"]] == list(train[0][0].shape)


def test_chunks_are_the_token_stream_in_order(word_lm):
    """Inputs are contiguous non-overlapping chunks; each target is its input shifted by one token;
    validation is the end of the stream."""
    train, val = word_lm.load_words(bptt=7, val_fraction=0.15)
    words = train.classes
    stream = word_lm.tokenize(TEXT_FILE.read_text())
    train_inputs, train_targets = train.tensors
    assert [words[i] for i in train_inputs.flatten()] == stream[: train_inputs.numel()]
    assert torch.equal(train_inputs.flatten()[1:], train_targets.flatten()[:-1])
    split = int(len(stream) * 0.85)
    val_inputs, _ = val.tensors
    assert [words[i] for i in val_inputs.flatten()] == stream[split : split + val_inputs.numel()]


@pytest.mark.parametrize("carry", [False, True], ids=["independent-batches", "carried-state"])
def test_runner_trains_the_recipe_exactly_as_the_hand_written_loop(word_lm, train_here, carry):
    run_dir = train_here(*(CARRIED_RUN if carry else SHORT_RUN))
    reference, model = hand_written_recipe(word_lm, SEED, EPOCHS, carry)

    scalars = read_scalars(run_dir)
    steps_per_epoch = len(reference.losses) // EPOCHS
    logged = [value for _, value in scalars["train/loss"]]
    expected = [float32(loss) for loss in reference.losses]
    matched = sum(a == b for a, b in zip(logged, expected, strict=False))
    assert len(logged) == len(expected) and matched == len(expected), f"{matched} of {len(expected)} steps"
    assert [value for _, value in scalars["val/loss"]] == [float32(loss) for loss in reference.val_losses]
    assert [step for step, _ in scalars["val/loss"]] == [
        epoch * steps_per_epoch for epoch in range(1, EPOCHS + 1)
    ]
    logged_lrs = [value for _, value in scalars["train/lr"]]
    assert logged_lrs == [float32(lr) for lr in reference.lrs]
    assert reduced_at(reference.lrs, steps_per_epoch)  # the plateau rule acted in this run
    assert reduced_at(logged_lrs, steps_per_epoch) == reduced_at(reference.lrs, steps_per_epoch)
    saved = torch.load(run_dir / "checkpoints" / "last.pt")["model_state_dict"]
    assert saved.keys() == model.state_dict().keys()
    for name, value in model.state_dict().items():
        assert torch.equal(saved[name], value), name


def test_a_run_stopped_mid_epoch_resumes_with_its_carried_state_exactly(word_lm, train_here, tmp_path):
    """Stopped at step 5 of 13 per epoch, the checkpoint holds the LSTM state of step 5 (safe-loadable);
    the resumed run goes on from it and ends as the run that did not stop, loss for loss."""
    straight = train_here(*CARRIED_RUN, run_dir=tmp_path / "straight")
    stopped = tmp_path / "stopped"
    train_here(*CARRIED_RUN, "trainer.max_steps=5", run_dir=stopped)
    carried = torch.load(stopped / "checkpoints" / "last.pt", weights_only=True)["carried_state_dict"]
    assert carried["h"].shape == carried["c"].shape == (2, BATCH_SIZE, HIDDEN) and carried["h"].any()
    train_here(*CARRIED_RUN, f"resume={stopped}", run_dir=stopped)
    assert read_scalars(stopped)["train/loss"] == read_scalars(straight)["train/loss"]
    ends = [torch.load(run / "checkpoints" / "last.pt", weights_only=True) for run in (straight, stopped)]
    for key in ("model_state_dict", "carried_state_dict"):
        for name, value in ends[0][key].items():
            assert torch.equal(ends[1][key][name], value), name


@pytest.mark.slow
def test_the_users_command_line(tmp_path):
    """From the repository root, as the example's README runs it (its run directory aside)."""
    run_dir = tmp_path / "run"
    result = run_example("word_lm", "trainer.max_steps=3", run_dir=run_dir)
    assert result.returncode == 0, result.stderr
    scalars = read_scalars(run_dir)
    assert [step for step, _ in scalars["val/ppl"]] == [2, 3]  # the first epoch's end, and the run's end
    assert scalars["val/ppl"][-1][1] > 1


def test_doctor_passes_the_model_that_carries_its_state(word_lm):
    """Each of doctor's evaluations starts the evaluation state afresh at eval(), and its one-batch
    overfit starts every step from the reset carried state: a carried state looks neither like
    randomness in eval() nor like a batch the model cannot fit."""
    torch.manual_seed(SEED)
    model = word_lm.rnn_model(428, embedding=EMBEDDING, hidden=HIDDEN, carry_state=True)
    train, val = word_lm.load_words(bptt=BPTT, columns=BATCH_SIZE, val_columns=1)
    train_loader, val_loader, _ = make_loaders(
        train, val, BATCH_SIZE, False, 0, 0, pin_memory=False, val_batch_size=1
    )
    results = run_checks(Setup(
        model=model, optimizer_factory=lambda m: torch.optim.SGD(m.parameters(), lr=20),
        loss_fn=nn.CrossEntropyLoss(), train_loader=train_loader, val_loader=val_loader,
        device=torch.device("cpu"), precision=resolve_precision("fp32", torch.device("cpu")), clip=0.25,
        target_key="labels",
    ))  # fmt: skip
    assert [result.status for result in results] == [PASS] * len(results), results


def test_a_model_with_one_carried_state_resumes_from_a_mid_epoch_checkpoint_exactly(
    word_lm, train_here, tmp_path
):
    """A model that reads and keeps one state in training and evaluation alike: the first-batch check
    of the resumed run (a forward in eval mode) hands the state loaded from the checkpoint back as it
    was, so step 6 goes on from step 5's state, as in the run that did not stop."""
    one_state = (*CARRIED_RUN, "model._target_=one_state_lm.one_state_rnn_model", "trainer.max_epochs=1",
                 "trainer.val_every_n_epochs=null")  # fmt: skip
    straight = train_here(*one_state, "checkpoint.every_n_steps=1", "checkpoint.keep_last=100",
                          run_dir=tmp_path / "straight")  # fmt: skip
    step_5 = straight / "checkpoints" / "step_00000005.pt"
    resumed = train_here(*one_state, f"resume={step_5}", run_dir=tmp_path / "resumed")
    assert read_scalars(resumed)["train/loss"] == read_scalars(straight)["train/loss"][5:]


@pytest.mark.slow
def test_the_printed_resume_command_resumes_a_stopped_example_run(tmp_path):
    """SIGTERM mid-epoch, then the command the run printed, as printed, from where it was started:
    it resumes (the example's config folder is on it) and finishes the run."""
    run_dir = tmp_path / "run"
    command = [sys.executable, "-m", "runner", "train", "hydra.searchpath=[file://examples/word_lm/conf]",
               "+experiment=word_lm_tbptt", "checkpoint.every_n_steps=1", "trainer.max_epochs=1",
               f"hydra.run.dir={run_dir}"]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": "examples/word_lm"}
    process = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    while not (run_dir / "checkpoints" / "step_00000002.pt").exists():
        assert process.poll() is None, process.communicate()
        time.sleep(0.01)
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 143, err
    printed = out.split("resume with: ", 1)[1].splitlines()[0]
    assert printed.startswith("PYTHONPATH=examples/word_lm python -m runner train resume=")
    # Pasted into a shell that has no PYTHONPATH of its own: the printed one is enough.
    shell_env = {name: value for name, value in env.items() if name != "PYTHONPATH"}
    pasted = printed.replace(" python ", f" {shlex.quote(sys.executable)} ", 1)
    resumed = subprocess.run(pasted, shell=True, cwd=REPO, env=shell_env, capture_output=True, text=True,
                             timeout=240)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed from" in resumed.stdout
