"""``data.sample_seeds``: a sample's random draws depend only on the run's seed, the epoch and the
sample's index, so an augmenting data set trains to the same weights whatever ``data.num_workers``,
and the main process's training draws (dropout) are those of a run whose data set draws nothing."""

import os
import subprocess
import sys

import pytest
import torch
from conftest import PLUGINS, composed, read_scalars, run_cli

SETUP = (
    "data=classification", "data.dataset.num_train=48", "data.dataset.num_val=16", "data.batch_size=16",
    "trainer.max_steps=7", "trainer.max_epochs=null", "trainer.log_every_n_steps=1", "model.dropout=0.3",
    "checkpoint.every_n_epochs=null", "checkpoint.every_n_steps=7",
)  # fmt: skip
AUGMENTED = (
    "data.dataset._target_=augmenting.augmented_classification",
    "+data.collate_fn={_target_: augmenting.mixing_collate, _partial_: true}",
)


def saved(run_dir):
    return torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)


def first_weight(checkpoint):
    return next(iter(checkpoint["model_state_dict"].values()))


@pytest.mark.filterwarnings("ignore:This DataLoader will create 4 worker processes")  # on 2 CPUs
def test_an_augmenting_data_set_trains_alike_with_any_number_of_workers(train_here, tmp_path):
    """7 steps, 3 batches an epoch (persistent workers over epochs): 0, 1, 2 and 4 workers give identical
    weights and losses; the draws come from the data set's samples (the runs differ from one without
    augmentation), and the run's own random states end as in a run whose data set draws nothing."""
    runs = {workers: train_here(*SETUP, *AUGMENTED, f"data.num_workers={workers}",
                                run_dir=tmp_path / f"{workers}")
            for workers in (0, 1, 2, 4)}  # fmt: skip
    first = saved(runs[0])
    for workers in (1, 2, 4):
        other = saved(runs[workers])
        assert all(torch.equal(first["model_state_dict"][k], v) for k, v in other["model_state_dict"].items())
        assert read_scalars(runs[workers])["train/loss"] == read_scalars(runs[0])["train/loss"]
    plain = saved(train_here(*SETUP, run_dir=tmp_path / "plain"))
    assert not torch.equal(first_weight(plain), first_weight(first))
    states, plain_states = first["rng_states"], plain["rng_states"]
    assert torch.equal(states["torch"], plain_states["torch"])  # the dropout masks drew alike
    assert states["python"] == plain_states["python"] and states["numpy"] == plain_states["numpy"]


def test_sample_seeds_false_keeps_the_draws_of_earlier_runs(train_here, tmp_path):
    """The old behaviour, one setting away: with workers, torch's own worker seeding (the draws then
    depend on the number of workers); in the main process, the data set draws from the run's own
    generators (and so moves the dropout masks)."""
    old = ("data.sample_seeds=false", *SETUP, *AUGMENTED)
    runs = {workers: saved(train_here(*old, f"data.num_workers={workers}", run_dir=tmp_path / str(workers)))
            for workers in (0, 1)}  # fmt: skip
    assert not torch.equal(first_weight(runs[0]), first_weight(runs[1]))
    plain = saved(train_here(*SETUP, "data.sample_seeds=false", run_dir=tmp_path / "plain"))
    assert not torch.equal(runs[0]["rng_states"]["torch"], plain["rng_states"]["torch"])


@pytest.mark.parametrize("seed", [0, 7])
def test_sample_seeds_are_apart_for_nearby_indices_epochs_and_seeds(seed):
    from runner.data.sample_seeds import COLLATE, sample_seed

    seeds = {sample_seed(seed, epoch, index) for epoch in range(4) for index in range(1000)}
    seeds |= {sample_seed(seed + 1, 0, index) for index in range(1000)}
    seeds |= {sample_seed(seed, 0, index, COLLATE) for index in range(1000)}
    assert len(seeds) == 6000 and all(0 <= s < 2**64 for s in seeds)


def test_a_checkpoint_from_before_sample_seeds_resumes_only_with_the_draws_it_had(tmp_path):
    """Its config has no data.sample_seeds: it ran with what is now data.sample_seeds=false, which the
    refusal names; with it, the resume goes on."""
    from runner.checkpoint.files import CheckpointError
    from runner.config.typed import as_dict
    from runner.experiment.resume import check_resume_compatible

    saved_config = as_dict(composed(*SETUP))
    del saved_config["data"]["sample_seeds"]
    with pytest.raises(CheckpointError, match=r"data\.sample_seeds \(false -> true\)"):
        check_resume_compatible(saved_config, as_dict(composed(*SETUP)), tmp_path)
    check_resume_compatible(saved_config, as_dict(composed(*SETUP, "data.sample_seeds=false")), tmp_path)


# Through the real command line: the processes, the workers and the kill are the point.
COMMAND_LINE = (
    "data=classification", "data.dataset.num_train=48", "data.dataset.num_val=16",
    "data.dataset._target_=augmenting.augmented_classification", "trainer.log_every_n_steps=1",
)  # fmt: skip


@pytest.mark.slow
def test_two_processes_by_16_augmented_give_the_weights_of_one_by_32(train_here, tmp_path):
    """As the unaugmented comparison (test_distributed.py): the same samples, drawn alike whichever
    process (and worker) reads them."""
    steps = ("trainer.max_steps=6", "trainer.max_epochs=null")
    one = saved(train_here(*COMMAND_LINE, *steps, "data.batch_size=32", run_dir=tmp_path / "one"))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m",
               "runner", "train", *COMMAND_LINE, *steps, "data.batch_size=16", "data.num_workers=1",
               f"hydra.run.dir={tmp_path / 'two'}"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(PLUGINS), "OMP_NUM_THREADS": "1"}
    double = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert double.returncode == 0, double.stderr[-3000:]
    two = saved(tmp_path / "two")
    for key, value in one["model_state_dict"].items():
        torch.testing.assert_close(two["model_state_dict"][key], value, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("kill_at", [5, 4], ids=["mid-epoch", "just-past-an-epochs-end"])
def test_verify_resume_with_two_workers_resumes_exactly(tmp_path, kill_at):
    """3 steps an epoch: killed at step 5, the run resumes from step 4, one batch into epoch 1; killed at
    step 4, from step 3, the end of epoch 0."""
    verified = run_cli("verify-resume", "--steps", "6", "--kill-at", str(kill_at), *COMMAND_LINE,
                       "data.batch_size=16", "data.num_workers=2", "model.dropout=0.3", cwd=tmp_path,
                       env={"PYTHONPATH": str(PLUGINS)}, timeout=400)  # fmt: skip
    assert verified.returncode == 0, verified.stderr[-3000:]
    assert verified.stdout.startswith(
        f"resumes exactly: 6 steps uninterrupted, and killed (SIGKILL) at step {kill_at} then resumed from "
        f"step {kill_at - 1}"
    )


OWN_GENERATOR = "data.dataset._target_=augmenting.own_generator_classification"


def test_the_docs_recipe_for_a_generator_of_its_own_trains_alike_with_any_workers(train_here, tmp_path):
    """docs/own-model.md: a generator made in __getitem__ from torch.initial_seed() (the sample's seed)."""
    recipe = (*SETUP, OWN_GENERATOR, "+data.dataset.recipe=true")
    runs = [saved(train_here(*recipe, f"data.num_workers={n}", run_dir=tmp_path / f"{n}")) for n in (0, 2)]
    assert all(torch.equal(runs[0]["model_state_dict"][k], v) for k, v in runs[1]["model_state_dict"].items())


def test_doctor_names_a_data_set_that_draws_from_a_generator_of_its_own(monkeypatch):
    """Check 1 reads sample 0 twice at one epoch: a generator made in __init__ gives two samples."""
    from hydra.utils import instantiate

    from runner.experiment.setup import prepare
    from runner.tools.doctor import PASS, Setup, run_checks
    from runner.tools.doctor.probe import WARN

    monkeypatch.syspath_prepend(str(PLUGINS))
    found = {}
    for recipe in (False, True):
        config = composed(*SETUP, OWN_GENERATOR, f"+data.dataset.recipe={recipe}")
        setup = Setup.of(
            config, prepare(config, instantiate, 0), lambda m: torch.optim.SGD(m.parameters(), 0.1)
        )
        found[recipe] = run_checks(setup)[0]
    assert (
        found[False].status == WARN and "sample 0 read twice at the same epoch differs" in found[False].found
    )
    assert "torch.initial_seed()" in found[False].advice
    assert found[True].status == PASS, found[True]


def test_verify_resume_names_the_workers_draws_when_sample_seeds_is_off():
    from runner.tools.verify_resume import worker_draws_cause

    (line,) = worker_draws_cause({"data": {"sample_seeds": False, "num_workers": 2}})
    assert "data.sample_seeds=false and data.num_workers=2" in line and "set data.sample_seeds=true" in line
    assert worker_draws_cause({"data": {"sample_seeds": True, "num_workers": 2}}) == []
    assert worker_draws_cause({"data": {"sample_seeds": False, "num_workers": 0}}) == []


@pytest.mark.slow
def test_verify_resume_asks_doctor_about_the_data_sets_own_generator(tmp_path, monkeypatch):
    from runner.tools.verify_resume import own_generator_cause

    monkeypatch.setenv("PYTHONPATH", str(PLUGINS))
    monkeypatch.chdir(tmp_path)
    (line,) = own_generator_cause([*COMMAND_LINE[:3], OWN_GENERATOR])
    assert line.startswith(
        "the data set's draws (runner doctor): sample 0 read twice at the same epoch differs"
    )


def test_a_run_resumed_with_another_number_of_workers_goes_on_as_it_would_have(train_here, tmp_path):
    """Stopped mid-epoch (step 4 of 3 an epoch) with 2 workers, resumed with none: the weights of a run
    that never stopped."""
    straight = saved(train_here(*SETUP, *AUGMENTED, run_dir=tmp_path / "straight"))
    stopped = tmp_path / "stopped"
    train_here(*SETUP, *AUGMENTED, "data.num_workers=2", "trainer.max_steps=4", run_dir=stopped)
    resumed = saved(train_here(*SETUP, *AUGMENTED, f"resume={stopped}", run_dir=stopped))
    assert resumed["global_step"] == 7
    assert all(
        torch.equal(straight["model_state_dict"][k], v) for k, v in resumed["model_state_dict"].items()
    )


def test_the_built_in_data_sets_are_read_without_per_sample_seeds():
    """They draw nothing when read (a TensorDataset, or the digits' Subsets of one): the default run
    pays nothing for per-sample seeds. A data set of the user's, or a collator, is seeded."""
    from torch.utils.data import Subset, TensorDataset

    from runner.data.digits import load_digits
    from runner.data.sample_seeds import draws_nothing

    train, val = load_digits()
    assert isinstance(train, Subset) and draws_nothing(train, None) and draws_nothing(val, None)
    plain = TensorDataset(torch.zeros(4, 2))
    assert draws_nothing(Subset(plain, [0, 1]), None)
    assert not draws_nothing(Subset(plain, [0, 1]), collate_fn=lambda batch: batch)

    class Noisy(TensorDataset):
        def __getitem__(self, index):
            return (torch.randn(2),)

    assert not draws_nothing(Subset(Noisy(torch.zeros(4, 2)), [0, 1]), None)
