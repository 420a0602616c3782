"""Bad-input pass: wrong and adversarial command lines through the real CLI, counted.

    python scripts/bad_inputs.py                     # every case, 2 at a time (a few minutes)
    python scripts/bad_inputs.py --only eval- --only resume- --json /tmp/bad_inputs.json

Each case runs ``python -m runner ...`` in a fresh temporary working directory (so ``outputs/`` lands
there) with its fixtures copied in: a finished tiny run, damaged or malicious checkpoints, a tampered run
directory, text and random files, an unwritable or dangling ``outputs``. A case is judged by its exit
status and output:

- ``one-line``: exit 2, the last non-empty stderr line starts with ``runner: error:``, at most a few
  stderr lines, no traceback (what a refused command should give);
- ``ok``: exit 0 where the command is valid (``ok-no-write`` cases must also write nothing);
- ``diagnosed``: ``doctor`` on a model and data that do not fit: a failing check, exit 1;
- ``traceback``, ``accepted`` (exit 0 where it should be refused), ``other`` (e.g. Hydra's multi-line
  message with exit 1), ``timeout``;
- ``CODE-EXEC``: a checkpoint or run directory that names ``pathlib.Path.touch`` (or pickles a call to
  it) made runner create the file it names.

Files written: anything new, changed or removed in the working directory afterwards (path, size,
mtime_ns; ``__pycache__`` ignored), fixture run directories included. A case is fine when its verdict is
the expected one and it wrote nothing it should not have. The totals are for the closing note of issue 14.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TRACEBACK = "Traceback (most recent call last)"
ONE_LINE_PREFIX = "runner: error:"
MAX_STDERR_LINES = 5  # a one-line error may follow a few warning lines
REFUSE, OK_NO_WRITE, OK = "refuse", "ok-no-write", "ok"
DIAGNOSE = "diagnose"  # doctor on a misfit: its failing check is the answer (exit 1, nothing written)
# A sweep value only a constructor refuses: that job fails (one line in the console, its traceback-free
# error in its result.json), the others run, the sweep exits 1 after its summary.
JOB_FAILS = "job-fails"
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Failure|Train)\b")
TOUCH = "pathlib.Path.touch"
# Drops root's power to ignore file permissions, so read-only places are read-only to the run.
UNPRIVILEGED = ("setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--")


@dataclass(frozen=True)
class Case:
    """One command line: ``python -m runner *args`` in a fresh directory holding ``needs``."""

    id: str
    args: tuple[str, ...]
    expect: str = REFUSE
    needs: tuple[str, ...] = ()
    writes_ok: bool = False  # a refusal that may leave files (a full disk keeps earlier checkpoints)
    env: tuple[tuple[str, str], ...] = ()  # environment variables set for it ({free_port}: a free port)
    torchrun: bool = False  # run under torchrun with 2 processes
    cwd: str = ""  # the folder inside the working directory the command runs in


@dataclass
class Result:
    id: str
    command: str
    expect: str
    verdict: str
    exit_code: int | None
    seconds: float
    last_line: str
    error: str = ""  # the exception's line, where there is a traceback
    wrote: list[str] = field(default_factory=list)
    marker_created: bool = False
    may_write: bool = False  # expected to write (a valid report) or allowed to (a full disk)
    fine: bool = False


def case(
    id: str, line: str | tuple[str, ...], expect: str = REFUSE, needs: tuple[str, ...] = (), **kw: Any
) -> Case:
    args = tuple(shlex.split(line)) if isinstance(line, str) else line
    return Case(id, args, expect, needs, **kw)


LAST = "run/checkpoints/last.pt"
QUICK = "trainer.max_steps=3 trainer.max_epochs=null"  # for sweeps, so an accepted one ends soon
UNSET = "${oc.env:RUNNER_BAD_INPUTS_UNSET}"  # an environment variable no one sets
CASES: list[Case] = [
    # Override syntax.
    case("syntax-umlaut-device", "train device=cpü"),
    case("syntax-unclosed-list", "train model.hidden=[64"),
    case("syntax-tilde-path", "train resume=~/x"),
    case("syntax-unbalanced-single-quote", ("train", "optimizer.lr='0.1")),
    case("syntax-unbalanced-double-quote", ("train", 'seed="3')),
    case("syntax-unclosed-brace", ("train", "optimizer={lr:1")),
    case("syntax-no-key", "train =5"),
    case("syntax-double-equals", "train seed==3"),
    case("syntax-bang-in-key", "train seed!x=1"),
    case("syntax-leading-dot-key", "train .seed=1"),
    case("syntax-space-in-key", ("train", "se ed=1")),
    case("syntax-missing-interpolation", ("train", "model.hidden=[64,${oops}]")),
    case("syntax-self-interpolation", ("train", "optimizer.lr=${optimizer.lr}")),
    case("syntax-unset-env-resolver", ("train", "optimizer.lr=${oc.env:RUNNER_BAD_INPUTS_UNSET}")),
    # Unknown and mistyped keys.
    case("key-unknown-top", "train foo=1"),
    case("key-typo-top", "train sed=1"),
    case("key-plus-foo", "train +foo=1"),
    case("key-plusplus-foo", "train ++foo=1"),
    case("key-trainer-max_step", "train trainer.max_step=5"),
    case("key-model-hiden", "train model.hiden=5"),
    case("key-plus-model-hiden", "train +model.hiden=5"),
    case("key-optimizer-lrr", "train optimizer.lrr=1"),
    case("key-data-batchsize", "train data.batchsize=32"),
    case("key-scheduler-warmup", "train scheduler.warmup=5"),
    case("key-checkpoint-every_n_step", "train checkpoint.every_n_step=5"),
    case("key-digits-num_train", "train data.dataset.num_train=0"),
    # Unknown config-group options.
    case("group-optimizer-lion", "train optimizer=lion"),
    case("group-scheduler-nope", "train scheduler=nope"),
    case("group-data-imagenet", "train data=imagenet"),
    case("group-model-resnet", "train model=resnet"),
    case("group-loss-hinge", "train loss=hinge"),
    case("group-callbacks-nope", "train callbacks=[ema,nope]"),
    case("group-metrics-f1", "train metrics=f1"),
    case("group-checkpoint-sometimes", "train checkpoint=sometimes"),
    case("group-hparams_search-random", "train hparams_search=random"),
    case("group-hydra-launcher-nope", "train hydra/launcher=nope"),
    case("cli-config-name-nope", "train -cn nope"),
    case("cli-cfg-nope", "train --cfg nope"),
    case("cli-unknown-flag", "train --nope"),
    # Values the constructors reject.
    case("ctor-hidden-negative", "train model.hidden=[-5]"),
    case("ctor-hidden-float", "train model.hidden=[1.5]"),
    case("ctor-hidden-string", "train model.hidden=abc"),
    case("ctor-dropout-1.5", "train model.dropout=1.5"),
    case("ctor-dropout-negative", "train model.dropout=-0.1"),
    case("ctor-dropout-string", "train model.dropout=abc"),
    case("ctor-betas-2-3", "train optimizer.betas=[2,3]"),
    case("ctor-betas-one", "train optimizer.betas=[0.9]"),
    case("ctor-weight-decay-negative", "train optimizer.weight_decay=-1"),
    case("ctor-sgd-momentum-negative", "train optimizer=sgd optimizer.momentum=-0.5"),
    case("ctor-sgd-nesterov-no-momentum", "train optimizer=sgd optimizer.nesterov=true"),
    case("ctor-cnn-no-channels", "train model=cnn model.channels=[]"),
    case("ctor-char_rnn-cell-rnn", "train model=char_rnn model.cell=rnn"),
    case("ctor-char_rnn-cell-rnn-text", "train data=text model=char_rnn model.cell=rnn"),
    case("ctor-no_decay-int", "train +optimizer.no_decay=5"),
    # Model, data and loss that do not fit together.
    case("fit-char_rnn-on-digits", "train model=char_rnn"),
    case("fit-mlp-on-text", "train data=text"),
    case("fit-char_rnn-on-regression", "train data=regression model=char_rnn"),
    case("fit-cnn-on-regression", "train data=regression model=cnn"),
    case("fit-cross_entropy-on-regression", "train data=regression loss=cross_entropy"),
    case("fit-mse-on-digits", "train loss=mse"),
    case("fit-from_model-mlp", "train loss=from_model"),
    case("fit-input_shape-wrong", "train data.input_shape=[3,32,32]"),
    case("fit-num_outputs-too-few", "train data.num_outputs=3"),
    # Deleted and null sections.
    case("delete-clip", "train ~clip"),
    case("delete-model", "train ~model"),
    case("delete-optimizer-lr", "train ~optimizer.lr", OK),  # an argument dropped: torch's default lr
    case("null-model", "train model=null"),
    case("null-data", "train data=null"),
    case("null-optimizer", "train optimizer=null"),
    # Devices this CPU machine does not have.
    case("device-huge-index", "train device=cuda:99999999999999999999999"),
    case("device-cuda0", "train device=cuda:0"),
    case("device-mps", "train device=mps"),
    case("device-tpu", "train device=tpu"),
    case("device-negative-index", "train device=cuda:-1"),
    case("device-empty", "train device="),
    # Numbers out of range or of the wrong type.
    case("value-lr-inf", "train optimizer.lr=inf"),
    case("value-lr-1e400", "train optimizer.lr=1e400"),
    case("value-lr-nan", "train optimizer.lr=nan"),
    case("value-lr-negative", "train optimizer.lr=-1"),
    case("value-lr-string", "train optimizer.lr=abc"),
    case("value-hidden-zero", "train model.hidden=[0]"),
    case("value-fused-maybe", "train optimizer.fused=maybe"),
    case("value-foreach-2", "train optimizer.foreach=2"),
    case("value-val_fraction-1.5", "train data.dataset.val_fraction=1.5"),
    case("value-val_fraction-negative", "train data.dataset.val_fraction=-0.2"),
    case("value-val_fraction-0-empty-val", "train data.dataset.val_fraction=0"),
    case("value-val_fraction-1-empty-train", "train data.dataset.val_fraction=1.0"),
    case("value-classification-num_train-0", "train data=classification data.dataset.num_train=0"),
    case("value-regression-num_val-0", "train data=regression data.dataset.num_val=0"),
    case("value-classification-num_classes-0", "train data=classification data.dataset.num_classes=0"),
    case("value-batch_size-0", "train data.batch_size=0"),
    case("value-batch_size-negative", "train data.batch_size=-1"),
    case("value-val_batch_size-0", "train data.val_batch_size=0"),
    case("value-num_workers-negative", "train data.num_workers=-1"),
    case("value-never-stops", "train trainer.max_steps=null trainer.max_epochs=null"),
    case("value-max_steps-0", "train trainer.max_steps=0"),
    case("value-max_epochs-negative", "train trainer.max_epochs=-1"),
    case("value-max_steps-1.5", "train trainer.max_steps=1.5"),
    case("value-log_every-0", "train trainer.log_every_n_steps=0"),
    case("value-val_every_epochs-0", "train trainer.val_every_n_epochs=0"),
    case("value-model-target-nope", "train model._target_=nope.nothing"),
    case("value-dataset-target-nope", "train data.dataset._target_=nope.nothing"),
    case("value-loss-target-nope", "train loss._target_=nope.nothing"),
    case("value-scheduler-target-nope", "train scheduler._target_=nope.nothing"),
    case("value-collate-target-nope", "train data.collate_fn._target_=nope.nothing"),
    case("value-seed-abc", "train seed=abc"),
    case("value-seed-negative", "train seed=-1"),
    case("value-seed-2pow32", "train seed=4294967296"),
    case("value-seed-float", "train seed=1.5"),
    case("value-seed-repeated-last-bad", "train seed=0 seed=abc"),
    case("value-accumulate-0", "train accumulate=0"),
    case("value-accumulate-float", "train accumulate=1.5"),
    case("value-clip-negative", "train clip=-1"),
    case("value-clip-0", "train clip=0"),
    case("value-clip-string", "train clip=abc"),
    case("value-precision-fp8", "train precision=fp8"),
    case("value-precision-16", "train precision=16"),
    case("value-on_nonfinite-ignore", "train on_nonfinite=ignore"),
    case("value-max_nonfinite-0", "train max_nonfinite_in_a_row=0"),
    case("value-deterministic-maybe", "train deterministic=maybe"),
    case("value-compile-2", "train compile=2"),
    case("value-tf32-maybe", "train tf32=maybe"),
    case("value-channels_last-maybe", "train channels_last=maybe"),
    case("value-keep_last-0", "train checkpoint.keep_last=0"),
    case("value-monitor-unlogged", "train checkpoint.monitor=val/nope"),
    case("value-mode-up", "train checkpoint.mode=up"),
    case("value-step-gamma-negative", "train scheduler=step scheduler.gamma=-1"),
    case("value-step-size-0", "train scheduler=step scheduler.step_size=0"),
    case("value-cosine-min_lr-negative", "train scheduler=cosine scheduler.min_lr=-1"),
    case("value-warmup-negative", "train scheduler.warmup_steps=-5"),
    case("value-plateau-monitor-unlogged", "train scheduler=plateau scheduler.monitor=val/nope"),
    case("value-patience-negative", "train callbacks=early_stopping callbacks.early_stopping.patience=-1"),
    case("value-ema-decay-1.5", "train callbacks=ema callbacks.ema.decay=1.5"),
    # Sweeps with one bad value among good ones: refused before any job runs.
    case("sweep-lr-negative", f"train -m optimizer.lr=1e-3,-1 {QUICK}"),
    case("sweep-seed-abc", f"train -m seed=0,abc {QUICK}"),
    case("sweep-hidden-negative", f"train -m model.hidden=[64],[-5] {QUICK}", JOB_FAILS, writes_ok=True),
    case("sweep-optimizer-lion", f"train -m optimizer=adam,lion {QUICK}"),
    case("sweep-dropout-1.5", f"train -m model.dropout=0.1,1.5 {QUICK}", JOB_FAILS, writes_ok=True),
    case("sweep-interval-basic-sweeper", f"train -m optimizer.lr=interval(0.001,0.1) {QUICK}"),
    case("sweep-launcher-nope", f"train -m hydra/launcher=nope seed=0,1 {QUICK}"),
    # Optuna searches refused before anything is written.
    case("search-direction-up", f"train -m hparams_search=digits_optuna hydra.sweeper.direction=up {QUICK}"),
    case("search-trials-0", f"train -m hparams_search=digits_optuna hydra.sweeper.n_trials=0 {QUICK}"),
    case(
        "search-storage-bogus",
        f"train -m hparams_search=digits_optuna hydra.sweeper.storage=bogus://x {QUICK}",
    ),
    case(
        "search-sampler-motpe", f"train -m hparams_search=digits_optuna hydra/sweeper/sampler=motpe {QUICK}"
    ),
    case(
        "search-pruner-group-null", f"train -m hparams_search=digits_optuna hydra/sweeper/pruner=null {QUICK}"
    ),
    case("search-multirun-and-cfg", f"train -m hparams_search=digits_optuna --cfg hydra {QUICK}"),
    case("search-pruner-nope", f"train -m hparams_search=digits_optuna hydra/sweeper/pruner=nope {QUICK}"),
    case(
        "search-percentile-150",
        "train -m hparams_search=digits_optuna hydra/sweeper/pruner=percentile "
        f"hydra.sweeper.pruner.percentile=150 {QUICK}",
    ),
    case(
        "search-grid-over-interval",
        f"train -m hparams_search=digits_optuna hydra/sweeper/sampler=grid {QUICK}",
    ),
    case(
        "search-maximize-loss",
        f"train -m hparams_search=digits_optuna hydra.sweeper.direction=maximize {QUICK}",
    ),
    case(
        "search-two-directions",
        f"train -m hparams_search=digits_optuna hydra.sweeper.direction=[minimize,maximize] {QUICK}",
    ),
    case(
        "search-objective-without-monitor",
        f"train -m hparams_search=digits_optuna hydra.sweeper.objectives=[val/acc] {QUICK}",
    ),
    case(
        "search-pruned-multi-objective",
        "train -m hparams_search=digits_optuna hydra/sweeper/pruner=median "
        f"hydra.sweeper.direction=[minimize,maximize] hydra.sweeper.objectives=[val/loss,val/acc] {QUICK}",
    ),
    # Where the run would be written.
    case("place-readonly-outputs", f"train {QUICK}", needs=("readonly_outputs",)),
    case("place-unwritable-cwd", f"train {QUICK}", needs=("unwritable_cwd",)),
    case("place-dangling-outputs-symlink", f"train {QUICK}", needs=("dangling_outputs",)),
    case("place-outputs-is-a-file", f"train {QUICK}", needs=("outputs_file",)),
    case("place-proc-run-dir", "train hydra.run.dir=/proc/runner_test"),
    case("place-run-dir-under-a-file", "train hydra.run.dir=/etc/passwd/run"),
    case(
        "place-full-disk",
        "train model.hidden=[512,512] trainer.max_epochs=2",
        needs=("full_disk",),
        writes_ok=True,
    ),
    # eval.
    case("eval-nothing", "eval"),
    case("eval-missing-file", "eval ckpt=missing.pt"),
    case("eval-empty-value", "eval ckpt="),
    case("eval-directory", "eval ckpt=empty_dir", needs=("empty_dir",)),
    case("eval-run-directory", "eval ckpt=run", OK_NO_WRITE, ("run",)),  # its best.pt, as resume takes it
    case("eval-etc-passwd", "eval ckpt=/etc/passwd"),
    case("eval-short-text", "eval ckpt=text.txt", needs=("text.txt",)),
    case("eval-random-bytes", "eval ckpt=random.bin", needs=("random.bin",)),
    case("eval-readme", "eval ckpt=README.md", needs=("README.md",)),
    case("eval-empty-file", "eval ckpt=empty.pt", needs=("empty.pt",)),
    case("eval-truncated", "eval ckpt=truncated.pt", needs=("truncated.pt",)),
    case("eval-not-runner-checkpoint", "eval ckpt=not_runner.pt", needs=("not_runner.pt",)),
    case("eval-config-is-a-string", "eval ckpt=config_string.pt", needs=("config_string.pt",)),
    case("eval-flipped-16-bytes", "eval ckpt=flipped.pt", needs=("flipped.pt",)),
    case("eval-no-checksum", "eval ckpt=no_checksum.pt", needs=("no_checksum.pt",)),
    case("eval-evil-model-target", "eval ckpt=evil_model.pt", needs=("evil_model.pt",)),
    case("eval-evil-model-args", "eval ckpt=evil_model_args.pt", needs=("evil_model_args.pt",)),
    case("eval-evil-dataset-target", "eval ckpt=evil_dataset.pt", needs=("evil_dataset.pt",)),
    case("eval-evil-loss-target", "eval ckpt=evil_loss.pt", needs=("evil_loss.pt",)),
    case("eval-evil-metric-target", "eval ckpt=evil_metric.pt", needs=("evil_metric.pt",)),
    case("eval-evil-callback-target", "eval ckpt=evil_callback.pt", needs=("evil_callback.pt",)),
    case("eval-pickled-code", "eval ckpt=pickle.pt", needs=("pickle.pt",)),
    case("eval-split-train", f"eval ckpt={LAST} split=train", needs=("run",)),
    case("eval-split-test-none", f"eval ckpt={LAST} split=test", needs=("run",)),
    case("eval-unknown-option", f"eval ckpt={LAST} foo=1", needs=("run",)),
    case("eval-unknown-flag", f"eval ckpt={LAST} --json", needs=("run",)),
    case("eval-device-cuda0", f"eval ckpt={LAST} device=cuda:0", needs=("run",)),
    case("eval-device-umlaut", f"eval ckpt={LAST} device=cpü", needs=("run",)),
    case("eval-device-huge-index", f"eval ckpt={LAST} device=cuda:99999999999999999999999", needs=("run",)),
    case("eval-valid-checkpoint", f"eval ckpt={LAST} device=cpu", OK_NO_WRITE, ("run",)),
    # resume.
    case("resume-missing-path", "train resume=/nonexistent/run"),
    case("resume-latest-no-outputs", "train resume=latest"),
    case("resume-latest-finished", "train resume=latest", OK_NO_WRITE, ("latest_run",)),
    case("resume-20kb-value", ("train", "resume=" + "a" * 20480)),
    case("resume-deep-path", ("train", "resume=" + "d/" * 5000)),
    case("resume-non-run-dir", "train resume=empty_dir", needs=("empty_dir",)),
    case("resume-text-file", "train resume=text.txt", needs=("text.txt",)),
    case("resume-etc-passwd", "train resume=/etc/passwd"),
    case("resume-finished-run", "train resume=run", OK_NO_WRITE, ("run",)),
    case("resume-finished-same-steps", "train resume=run trainer.max_steps=20", OK_NO_WRITE, ("run",)),
    case("resume-finished-file", f"train resume={LAST}", OK_NO_WRITE, ("run",)),
    case("resume-dropout-changed", "train resume=run model.dropout=0.5 trainer.max_steps=30", needs=("run",)),
    case("resume-hidden-changed", "train resume=run model.hidden=[128] trainer.max_steps=30", needs=("run",)),
    case("resume-model-target-changed", "train resume=run model=cnn trainer.max_steps=30", needs=("run",)),
    case("resume-lr-changed", "train resume=run optimizer.lr=0.5 trainer.max_steps=30", needs=("run",)),
    case("resume-batch-changed", "train resume=run data.batch_size=64 trainer.max_steps=30", needs=("run",)),
    case("resume-seed-changed", "train resume=run seed=1 trainer.max_steps=30", needs=("run",)),
    case("resume-bad-value-too", "train resume=run optimizer.lr=-1", needs=("run",)),
    case("resume-flipped-file", f"train resume={LAST} trainer.max_steps=30", needs=("run_flipped",)),
    case("resume-tampered-model", "train resume=run trainer.max_steps=30", needs=("tampered_model_run",)),
    case("resume-tampered-dataset", "train resume=run trainer.max_steps=30", needs=("tampered_dataset_run",)),
    case(
        "resume-tampered-callbacks",
        "train resume=run trainer.max_steps=30",
        needs=("tampered_callbacks_run",),
    ),
    case(
        "resume-evil-checkpoint-bare",
        "train resume=evil_full.pt trainer.max_steps=30",
        needs=("evil_full.pt",),
    ),
    case("resume-evil-checkpoint-in-run", f"train resume={LAST} trainer.max_steps=30", needs=("evil_run",)),
    case("resume-pickled-code", "train resume=pickle.pt", needs=("pickle.pt",)),
    # report.
    case("report-nothing", "report"),
    case("report-two-args", "report a b", needs=("empty_dir",)),
    case("report-a-file", "report text.txt", needs=("text.txt",)),
    case("report-missing-dir", "report /nonexistent/sweep"),
    case("report-etc-passwd", "report /etc/passwd"),
    case("report-empty-dir", "report empty_dir", needs=("empty_dir",)),
    case("report-zero-byte-result", "report zero_result", OK, ("zero_result",)),  # skipped with a warning
    case("report-run-zero-byte-result", "report run", OK, ("zero_result_run",)),
    case("report-valid-run", "report run", OK, ("run",)),
    # doctor (writes nothing, even when it runs).
    case("doctor-umlaut-device", "doctor device=cpü"),
    case("doctor-unclosed-list", "doctor model.hidden=[64"),
    case("doctor-hidden-negative", "doctor model.hidden=[-5]"),
    case("doctor-dropout-1.5", "doctor model.dropout=1.5"),
    case("doctor-char_rnn-on-digits", "doctor model=char_rnn", DIAGNOSE),
    case("doctor-mlp-on-text", "doctor data=text", DIAGNOSE),
    case("doctor-delete-clip", "doctor ~clip"),
    case("doctor-null-model", "doctor model=null"),
    case("doctor-optimizer-lion", "doctor optimizer=lion"),
    case("doctor-trainer-max_step", "doctor trainer.max_step=5"),
    case("doctor-lr-inf", "doctor optimizer.lr=inf"),
    case("doctor-device-cuda0", "doctor device=cuda:0"),
    case("doctor-device-huge-index", "doctor device=cuda:99999999999999999999999"),
    case("doctor-unknown-flag", "doctor --nope"),
    case("doctor-plus-foo", "doctor +foo=1"),
    case("doctor-default", "doctor", OK_NO_WRITE),
    # lr_find.
    case("lr_find-umlaut-device", "lr_find device=cpü"),
    case("lr_find-hidden-negative", "lr_find model.hidden=[-5]"),
    case("lr_find-char_rnn-on-digits", "lr_find model=char_rnn"),
    case("lr_find-optimizer-lion", "lr_find optimizer=lion"),
    case("lr_find-delete-clip", "lr_find ~clip"),
    case("lr_find-lr-nan", "lr_find optimizer.lr=nan"),
    case("lr_find-null-model", "lr_find model=null"),
    case("lr_find-device-mps", "lr_find device=mps"),
    case("lr_find-val_fraction-1.5", "lr_find data.dataset.val_fraction=1.5"),
    case("lr_find-plus-foo", "lr_find +foo=1"),
    case("lr_find-model-target-nope", "lr_find model._target_=nope.nothing"),
    # --- issue 25, part C: the last tracebacks of the second pass, and joblib/submitit settings ---
    case("sweep-glob-on-a-setting", f"train -m {QUICK} optimizer.lr=glob(*)"),
    case("sweep-glob-matches-nothing", f"train -m {QUICK} model=glob(zz*)"),
    case("sweep-joblib-n_jobs-0", f"train -m {QUICK} seed=1,2 hydra/launcher=joblib hydra.launcher.n_jobs=0"),
    case(
        "sweep-submitit-timeout-negative",
        f"train -m {QUICK} seed=1,2 hydra/launcher=submitit_local hydra.launcher.timeout_min=-1",
    ),
    case("sweep-dir-unset-env-var", f"train -m {QUICK} seed=1,2 hydra.sweep.dir=sweeps/{UNSET}"),
    case("run-dir-unset-env-var", f"train {QUICK} hydra.run.dir=runs/{UNSET}"),
    case("run-dir-300-character-name", f"train {QUICK} hydra.run.dir=runs/{'a' * 300}"),
    case("sweep-subdir-300-character-name", f"train -m {QUICK} seed=1,2 hydra.sweep.subdir={'b' * 300}"),
    case("doctor-multirun", "doctor -m"),
    case("lr_find-multirun", "lr_find --multirun seed=1,2"),
    case("report-deep-json", "report sweep", OK, ("deep_json_sweep",)),  # skipped with a warning
    case("report-deep-yaml", "report sweep", OK, ("deep_yaml_sweep",)),
    case("report-summary-csv-links-out", "report sweep", OK, ("linked_summary_sweep",)),
    case("report-summary-csv-is-a-folder", "report sweep", needs=("folder_summary_sweep",)),
    case("report-full-disk", "report sweep", needs=("full_sweep",)),
    case("lr_find-full-disk", "lr_find", needs=("full_outputs",)),
    case("resume-read-only-run-dir", "train resume=run trainer.max_steps=30", needs=("readonly_run",)),
    # --- end of issue 25, part C ---
    # The command itself.
    case("cli-unknown-command", "fit"),
    case("cli-command-uppercase", "TRAIN"),
    case("cli-unknown-dash-flag", "--nope"),
    case("cli-no-command", ""),
    case("cli-help", "--help", OK_NO_WRITE),
    case("cli-train-cfg-job", "train --cfg job", OK_NO_WRITE),
]


# Fixtures: built in a case's working directory before it runs (``needs``).


@dataclass(frozen=True)
class Context:
    base_run: Path  # a finished tiny run, built once
    marker: Path  # the file code execution would create (outside the working directory)


def copy_run(dest: Path, ctx: Context) -> None:
    shutil.copytree(ctx.base_run, dest, symlinks=True)


def load_base(ctx: Context) -> dict:
    """The fixture run's ``last.pt``, without the checksum runner writes with it (``save`` writes one
    for what it is given)."""
    import torch

    loaded = torch.load(ctx.base_run / "checkpoints" / "last.pt", map_location="cpu", weights_only=True)
    return {key: value for key, value in loaded.items() if "checksum" not in key}


def save(obj: object, dest: Path) -> None:
    """With a valid checksum: whoever crafts a file can compute one, so it is judged on what it holds."""
    from runner.checkpoint.files import atomic_save

    atomic_save(obj, dest)


def no_checksum(dest: Path, ctx: Context) -> None:
    import torch

    torch.save(load_base(ctx), dest)


def flip_tensor_bytes(path: Path, tensor_bytes: bytes, count: int = 16) -> None:
    """Invert ``count`` bytes in the middle of the zip record holding exactly ``tensor_bytes``."""
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as archive:
        infos = archive.infolist()
    for info in infos:
        if info.file_size != len(tensor_bytes) or info.compress_type != zipfile.ZIP_STORED:
            continue
        header = info.header_offset
        name_length = int.from_bytes(data[header + 26 : header + 28], "little")
        extra_length = int.from_bytes(data[header + 28 : header + 30], "little")
        start = header + 30 + name_length + extra_length
        if bytes(data[start : start + info.file_size]) == tensor_bytes:
            middle = start + info.file_size // 2
            for index in range(middle, middle + count):
                data[index] ^= 0xFF
            path.write_bytes(bytes(data))
            return
    raise RuntimeError(f"no record in {path} holds the tensor")


def flipped_checkpoint(dest: Path, ctx: Context) -> None:
    shutil.copy2(ctx.base_run / "checkpoints" / "last.pt", dest)
    weights = load_base(ctx)["model_state_dict"]
    largest = max(weights.values(), key=lambda tensor: tensor.numel())
    flip_tensor_bytes(dest, largest.numpy().tobytes())


def flipped_run(dest: Path, ctx: Context) -> None:
    copy_run(dest, ctx)
    last = dest / "checkpoints" / "last.pt"
    stat = last.stat()
    flipped_checkpoint(last, ctx)
    os.utime(last, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def evil_checkpoint(where: str, full: bool = False) -> Callable[[Path, Context], None]:
    """A checkpoint that passes ``weights_only=True`` and whose stored config names
    ``pathlib.Path.touch`` with the marker's path, at ``where``."""

    def build(dest: Path, ctx: Context) -> None:
        base = load_base(ctx)
        config = copy.deepcopy(base["config"])
        touch = {"_target_": TOUCH, "self": str(ctx.marker)}
        if where == "model":
            config["model"] = touch
        elif where == "model_args":
            config["model"] = {"_target_": TOUCH, "_args_": [str(ctx.marker)]}
        elif where == "dataset":
            config["data"]["dataset"] = touch
        elif where == "loss":
            config["loss"] = touch
        elif where == "metric":
            config["metrics"] = {"acc": touch}
        elif where == "callback":
            config["callbacks"] = {"evil": touch}
        from runner.checkpoint.files import REQUIRED_KEYS

        payload = dict(base) if full else {key: base[key] for key in REQUIRED_KEYS}
        save({**payload, "config": config}, dest)

    return build


class TouchOnUnpickle:
    """Pickles as a call to ``Path.touch(marker)``: what a malicious ``torch.save`` file carries."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple:
        return (Path.touch, (self.path,))


def evil_run(dest: Path, ctx: Context) -> None:
    """A copy of the run whose ``last.pt`` is the malicious one."""
    copy_run(dest, ctx)
    evil_checkpoint("model", full=True)(dest / "checkpoints" / "last.pt", ctx)


def pickled_code(dest: Path, ctx: Context) -> None:
    save({**load_base(ctx), "extra": TouchOnUnpickle(ctx.marker)}, dest)


# Overrides a tampered run directory's record adds ({marker}: the marker file's path).
TAMPERED_MODEL = (f"model._target_={TOUCH}", "~model.input_shape", "~model.num_outputs", "~model.hidden",
                  "~model.dropout", "+model.self={marker}")  # fmt: skip
TAMPERED_DATASET = (f"data.dataset._target_={TOUCH}", "~data.dataset.val_fraction",
                    "~data.dataset.split_seed", "+data.dataset.self={marker}")  # fmt: skip
TAMPERED_CALLBACKS = (f"+callbacks.evil._target_={TOUCH}", "+callbacks.evil.self={marker}")


def tampered_run(lines: tuple[str, ...]) -> Callable[[Path, Context], None]:
    """A copy of the run whose ``.hydra/overrides.yaml`` also names ``pathlib.Path.touch``."""

    def build(dest: Path, ctx: Context) -> None:
        copy_run(dest, ctx)
        record = dest / ".hydra" / "overrides.yaml"
        stat = record.stat()
        extra = "".join(f"- {line.format(marker=ctx.marker)}\n" for line in lines)
        record.write_text(record.read_text() + extra)
        os.utime(record, ns=(stat.st_atime_ns, stat.st_mtime_ns))

    return build


def zero_result_run(dest: Path, ctx: Context) -> None:
    copy_run(dest, ctx)
    (dest / "result.json").write_bytes(b"")


def zero_result(dest: Path, ctx: Context) -> None:
    dest.mkdir()
    (dest / "result.json").write_bytes(b"")


def truncated(dest: Path, ctx: Context) -> None:
    data = (ctx.base_run / "checkpoints" / "last.pt").read_bytes()
    dest.write_bytes(data[: len(data) // 2])


def readonly_outputs(dest: Path, ctx: Context) -> None:
    dest.mkdir()
    dest.chmod(0o555)


def unwritable_cwd(dest: Path, ctx: Context) -> None:
    dest.parent.chmod(0o555)


def full_disk(dest: Path, ctx: Context) -> None:
    dest.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(dest)]
    if os.geteuid() != 0 or subprocess.run(mount, capture_output=True).returncode != 0:
        raise Skip("cannot mount a 3 MiB tmpfs here")


class Skip(Exception):
    """A fixture this machine cannot build; the case is reported as skipped."""


# --- issue 25, part C: fixtures ---
def small_sweep(dest: Path, ctx: Context) -> None:
    """A sweep of two jobs, each the fixture run without its checkpoints (what report reads)."""
    for job in ("0", "1"):
        shutil.copytree(ctx.base_run, dest / job, ignore=shutil.ignore_patterns("checkpoints"))


def damaged_sweep(name: str, content: str) -> Callable[[Path, Context], None]:
    def build(dest: Path, ctx: Context) -> None:
        small_sweep(dest, ctx)
        (dest / "1" / name).write_text(content)

    return build


def linked_summary_sweep(dest: Path, ctx: Context) -> None:
    small_sweep(dest, ctx)
    (dest.parent / "elsewhere.csv").write_text("not the sweep's\n")
    (dest / "summary.csv").symlink_to(dest.parent / "elsewhere.csv")


def folder_summary_sweep(dest: Path, ctx: Context) -> None:
    small_sweep(dest, ctx)
    (dest / "summary.csv").mkdir()


def filled_tmpfs(dest: Path, build: Callable[[Path, Context], None] | None = None) -> Callable:
    """A 1 MiB tmpfs at ``dest`` (with what ``build`` puts there), then filled up to the last byte."""

    def fixture(dest: Path, ctx: Context) -> None:
        full_disk_of(dest, "1m")
        if build is not None:
            build(dest, ctx)
        with open(dest / "filler", "wb") as handle, contextlib.suppress(OSError):
            while True:
                handle.write(b"\0" * 65536)
                handle.flush()

    return fixture


def full_disk_of(dest: Path, size: str) -> None:
    dest.mkdir(exist_ok=True)
    mount = ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(dest)]
    if os.geteuid() != 0 or subprocess.run(mount, capture_output=True).returncode != 0:
        raise Skip(f"cannot mount a {size} tmpfs here")


def readonly_run(dest: Path, ctx: Context) -> None:
    copy_run(dest, ctx)
    for path in [dest, *dest.rglob("*")]:
        path.chmod(path.stat().st_mode & ~0o222)


ISSUE_25C_FIXTURES: dict[str, tuple[str, Callable[[Path, Context], None]]] = {
    "deep_json_sweep": ("sweep", damaged_sweep("result.json", "[" * 100_000 + "]" * 100_000)),
    "deep_yaml_sweep": ("sweep", damaged_sweep(".hydra/overrides.yaml", "[" * 100_000 + "]" * 100_000)),
    "linked_summary_sweep": ("sweep", linked_summary_sweep),
    "folder_summary_sweep": ("sweep", folder_summary_sweep),
    "full_sweep": ("sweep", filled_tmpfs(Path("sweep"), small_sweep)),
    "full_outputs": ("outputs", filled_tmpfs(Path("outputs"))),
    "readonly_run": ("run", readonly_run),
}
MOUNTED_FIXTURES = {"full_disk", "full_sweep", "full_outputs"}
# --- end of issue 25, part C: fixtures ---


# name -> (where it goes in the working directory, builder)
FIXTURES: dict[str, tuple[str, Callable[[Path, Context], None]]] = {
    "run": ("run", copy_run),
    "latest_run": ("outputs/2026-01-01/00-00-00-beef", copy_run),
    "run_flipped": ("run", flipped_run),
    "zero_result_run": ("run", zero_result_run),
    "tampered_model_run": ("run", tampered_run(TAMPERED_MODEL)),
    "tampered_dataset_run": ("run", tampered_run(TAMPERED_DATASET)),
    "tampered_callbacks_run": ("run", tampered_run(TAMPERED_CALLBACKS)),
    "flipped.pt": ("flipped.pt", flipped_checkpoint),
    "no_checksum.pt": ("no_checksum.pt", no_checksum),
    "truncated.pt": ("truncated.pt", truncated),
    "empty.pt": ("empty.pt", lambda dest, ctx: dest.write_bytes(b"")),
    "not_runner.pt": ("not_runner.pt", lambda dest, ctx: save({"weights": [1.0, 2.0]}, dest)),
    "config_string.pt": ("config_string.pt", lambda dest, ctx: save({**load_base(ctx), "config": "x"}, dest)),
    "evil_model.pt": ("evil_model.pt", evil_checkpoint("model")),
    "evil_model_args.pt": ("evil_model_args.pt", evil_checkpoint("model_args")),
    "evil_dataset.pt": ("evil_dataset.pt", evil_checkpoint("dataset")),
    "evil_loss.pt": ("evil_loss.pt", evil_checkpoint("loss")),
    "evil_metric.pt": ("evil_metric.pt", evil_checkpoint("metric")),
    "evil_callback.pt": ("evil_callback.pt", evil_checkpoint("callback")),
    "evil_full.pt": ("evil_full.pt", evil_checkpoint("model", full=True)),
    "evil_run": ("run", evil_run),
    "pickle.pt": ("pickle.pt", pickled_code),
    "text.txt": ("text.txt", lambda dest, ctx: dest.write_text("not a checkpoint\n")),
    "random.bin": ("random.bin", lambda dest, ctx: dest.write_bytes(random.Random(0).randbytes(4096))),
    "README.md": ("README.md", lambda dest, ctx: shutil.copy2(REPO / "README.md", dest)),
    "empty_dir": ("empty_dir", lambda dest, ctx: dest.mkdir()),
    "zero_result": ("zero_result", zero_result),
    "readonly_outputs": ("outputs", readonly_outputs),
    "unwritable_cwd": ("outputs", unwritable_cwd),
    "dangling_outputs": ("outputs", lambda dest, ctx: dest.symlink_to(dest.parent / "gone" / "outputs")),
    "outputs_file": ("outputs", lambda dest, ctx: dest.write_text("a file where outputs/ should be\n")),
    "full_disk": ("outputs", full_disk),
    **ISSUE_25C_FIXTURES,
}
UNPRIVILEGED_FIXTURES = {"readonly_outputs", "unwritable_cwd", "readonly_run"}


# ---- issue 25, part A: no config read from a file runs code (helper t25a) ----------------------------
# A value that is still an interpolation once resolved (an escaped \${oc.create:...}) in a checkpoint's
# stored config or a run directory's record, and pickled sampler state in an Optuna study's database.
SEARCH = f"train -m hparams_search=digits_optuna hydra.sweep.dir=sweep hydra.sweeper.n_trials=2 {QUICK}"


def escaped_payload(marker: Path) -> str:
    """As a file holds it: resolved once it is ``${oc.create:{_target_: ...}}``, a new ``_target_``."""
    return f"\\${{oc.create:{{_target_: {TOUCH}, self: {marker}}}}}"


def escaped_checkpoint(where: str) -> Callable[[Path, Context], None]:
    """The fixture run's checkpoint whose stored config holds the escaped payload at ``where``."""

    def build(dest: Path, ctx: Context) -> None:
        base = load_base(ctx)
        config = copy.deepcopy(base["config"])
        payload = escaped_payload(ctx.marker)
        metric = {"_target_": "runner.training.metrics.Accuracy", **config["metrics"].get("acc", {})}
        changes = {
            "model": lambda: config["model"].update(hidden=payload),
            "loss": lambda: config["loss"].update(weight=payload),
            "dataset": lambda: config["data"]["dataset"].update(extra=payload),
            "metric": lambda: config["metrics"].update(acc={**metric, "extra": payload}),
            "nested": lambda: config["model"].update(extra=[{"a": [payload]}]),
            "args": lambda: config["loss"].update(_args_=[payload]),
            "key": lambda: config["model"].update({payload: 1}),
            "twice": lambda: config["model"].update(extra="\\\\" + payload),
            "decode": lambda: config["model"].update(
                extra=[f"${{oc.decode:'{{_target_: {TOUCH}, self: \"{ctx.marker}\"}}'}}"]
            ),
        }
        changes[where]()
        save({**base, "config": config}, dest)

    return build


def escaped_run(dest: Path, ctx: Context) -> None:
    """A copy of the run whose record adds a callback runner ships, the payload inside a list value."""
    copy_run(dest, ctx)
    record = dest / ".hydra" / "overrides.yaml"
    stat = record.stat()
    payload = escaped_payload(ctx.marker).replace("\\", "\\\\")  # in a double-quoted YAML string
    callback = "- +callbacks.evil._target_=runner.training.callbacks.EMA\n"
    record.write_text(record.read_text() + callback + f"- \"+callbacks.evil.decay=['{payload}']\"\n")
    os.utime(record, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def forged_study(runner_like: bool) -> Callable[[Path, Context], None]:
    """A sweep directory whose ``optuna.db`` holds a finished trial with a pickle where CmaEsSampler
    keeps its state; ``runner_like``: the trial carries runner's job attributes too."""

    def build(dest: Path, ctx: Context) -> None:
        import pickle

        import optuna

        dest.mkdir(parents=True)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.create_study(storage=f"sqlite:///{dest / 'optuna.db'}", study_name="digits_optuna")
        attrs = {"runner_job": 0, "runner_sweep_dir": str(dest.resolve()), "runner_fixed": []}
        study.add_trial(
            optuna.trial.create_trial(
                params={"optimizer.lr": 1e-3},
                distributions={"optimizer.lr": optuna.distributions.FloatDistribution(1e-4, 3e-2, log=True)},
                value=0.5,
                user_attrs=attrs if runner_like else None,
                system_attrs={"cma:optimizer:0": pickle.dumps(TouchOnUnpickle(ctx.marker)).hex()},
            )
        )

    return build


ESCAPED_WHERE = ("model", "loss", "dataset", "metric", "nested", "args", "key", "twice", "decode")
FIXTURES.update(
    {
        **{f"escaped_{where}.pt": (f"escaped_{where}.pt", escaped_checkpoint(where))
           for where in ESCAPED_WHERE},
        "escaped_run": ("run", escaped_run),
        "escaped_latest_run": ("outputs/2026-01-01/00-00-00-beef", escaped_run),
        "forged_study": ("sweep", forged_study(runner_like=False)),
        "runner_like_study": ("sweep", forged_study(runner_like=True)),
    }
)  # fmt: skip
CASES += [
    *(case(f"eval-escaped-interpolation-{where}", f"eval ckpt=escaped_{where}.pt",
           needs=(f"escaped_{where}.pt",)) for where in ESCAPED_WHERE),
    case("resume-escaped-interpolation-in-record", "train resume=run trainer.max_steps=30",
         needs=("escaped_run",)),
    case("resume-latest-escaped-interpolation-in-record", "train resume=latest trainer.max_steps=30",
         needs=("escaped_latest_run",)),
    case("search-forged-trial-cmaes", f"{SEARCH} hydra/sweeper/sampler=cmaes", needs=("forged_study",)),
    case("search-forged-trial-tpe", SEARCH, needs=("forged_study",)),
    case("search-runner-like-trial-cmaes", f"{SEARCH} hydra/sweeper/sampler=cmaes",
         needs=("runner_like_study",)),
    case("search-runner-like-trial-tpe", SEARCH, needs=("runner_like_study",)),
    case("search-cmaes-new-study", f"{SEARCH} hydra/sweeper/sampler=cmaes"),
]  # fmt: skip
# ---- end of issue 25, part A ----------------------------------------------------------------------------


# ---- Issue 25, part B (t25b): run directories, bounds, environment, torchrun, sharded checkpoints ----

TORCHRUN = ("-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m")
# Under torchrun a refusal is one line from each rank (exit 2); torchrun itself then prints its own
# ChildFailedError traceback, which runner cannot change: judged by runner's lines and the ranks' exits.
TORCHRUN_REFUSE = "torchrun-refuse"
NO_PEER = (("WORLD_SIZE", "2"), ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "{free_port}"))
SHARDED = (
    "data=text", "model=char_transformer", "model.layers=2", "model.width=32",
    "trainer.val_every_n_steps=100", "checkpoint.every_n_steps=2", "checkpoint.every_n_epochs=null",
    "checkpoint.save_best=false", "strategy=fsdp",
)  # fmt: skip
_sharded_base: dict[str, Path] = {}
_sharded_lock = threading.Lock()


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def refused_per_rank(output: str) -> bool:
    """Every line of runner's is the same one-line error (torchrun may stop a rank before it says it),
    the ranks exited 2, and every traceback frame is torchrun's own."""
    ours = [line for line in output.splitlines() if line.startswith("runner:")]
    frames = [line.strip() for line in output.splitlines() if line.strip().startswith('File "')]
    return (
        1 <= len(ours) <= 2 and len(set(ours)) == 1 and ours[0].startswith(ONE_LINE_PREFIX)
        and "exitcode  : 2" in output
        and all("runpy" in frame or "torch/distributed" in frame for frame in frames)
    )  # fmt: skip


def killed_run(dest: Path, ctx: Context) -> None:
    """A run killed before it ended: checkpoints and records, no result.json."""
    copy_run(dest, ctx)
    (dest / "result.json").unlink()


def sharded_base(ctx: Context) -> Path:
    """A finished strategy=fsdp run with folders at steps 2 and 4 (last: step 4's), built once."""
    with _sharded_lock:
        if "run" not in _sharded_base:
            run_dir = ctx.base_run.parent / "sharded_run"
            command = [sys.executable, "-m", "runner", "train", *SHARDED, "trainer.max_steps=4",
                       f"hydra.run.dir={run_dir}"]  # fmt: skip
            done = subprocess.run(
                command, cwd=run_dir.parent, env=environment(), capture_output=True, text=True
            )
            if done.returncode != 0:
                raise Skip(f"could not build the sharded run: {last_line(done.stderr)}")
            _sharded_base["run"] = run_dir
        return _sharded_base["run"]


def damaged_sharded_run(damage: str) -> Callable[[Path, Context], None]:
    """A copy of the sharded run whose step-4 folders, saved as by a runner without the index's checksum,
    are damaged: the index a forged pickle (MemoryError), or naming a shard file outside the folder, or
    a shard file that is a link out of it. A resume must skip them for step 2's."""

    def build(dest: Path, ctx: Context) -> None:
        import pickle
        import struct

        from runner.checkpoint.files import atomic_save, load_checkpoint
        from runner.checkpoint.sharded_checks import FILE_CHECKSUMS, METADATA, MetadataUnpickler

        shutil.copytree(sharded_base(ctx), dest, symlinks=True)
        for name in ("last", "step_00000004"):
            folder = dest / "checkpoints" / name
            record = load_checkpoint(folder)
            checksums = {key: value for key, value in record[FILE_CHECKSUMS].items() if key != METADATA}
            atomic_save({**record, FILE_CHECKSUMS: checksums}, folder / "runner.pt")
            shard = folder / "__0_0.distcp"
            if damage == "memory-error":
                (folder / METADATA).write_bytes(b"\x80\x04\x8e" + struct.pack("<Q", 2**62) + b"x")
            elif damage == "outside":
                outside = dest.parent / f"outside_{name}.distcp"
                shutil.copy2(shard, outside)
                with open(folder / METADATA, "rb") as handle:
                    metadata = MetadataUnpickler(handle).load()
                for where in metadata.storage_data.values():
                    where.relative_path = os.path.relpath(outside, folder)
                (folder / METADATA).write_bytes(pickle.dumps(metadata))
            elif damage == "linked-shard":
                outside = dest.parent / f"linked_{name}.distcp"
                shutil.move(shard, outside)
                shard.symlink_to(outside)

    return build


def fixed_dir_conf(dest: Path, ctx: Context) -> None:
    """A config folder whose experiment names the run directory ``run``."""
    (dest / "experiment").mkdir(parents=True)
    (dest / "experiment" / "fixed_dir.yaml").write_text("# @package _global_\nhydra:\n  run:\n    dir: run\n")


FIXTURES.update({
    "killed_run": ("run", killed_run),
    "fixed_dir_conf": ("conf", fixed_dir_conf),
    "sharded_index_memory_error": ("run", damaged_sharded_run("memory-error")),
    "sharded_index_outside": ("run", damaged_sharded_run("outside")),
    "sharded_linked_shard": ("run", damaged_sharded_run("linked-shard")),
})  # fmt: skip
RESUME_SHARDED = "train resume=run trainer.max_steps=6"
CASES += [
    # A new run into a directory that holds a run (finished or not), without resume=; empty directories.
    case("rundir-finished-run-no-resume", "train hydra.run.dir=run", needs=("run",)),
    case("rundir-killed-run-no-resume", "train hydra.run.dir=run", needs=("killed_run",)),
    case("rundir-resume-null", "train hydra.run.dir=run resume=null", needs=("run",)),
    case(
        "rundir-named-by-a-config-file",
        "train hydra.searchpath=[file://conf] +experiment=fixed_dir",
        needs=("run", "fixed_dir_conf"),
    ),
    case(
        "rundir-stray-submitit-executor",
        "train hydra.run.dir=run",
        needs=("run",),
        env=(("SUBMITIT_EXECUTOR", "local"),),
    ),
    case("rundir-empty", "train hydra.run.dir="),
    case("rundir-blank", ("train", "hydra.run.dir=' '")),
    case("rundir-sweep-dir-empty", f"train -m hydra.sweep.dir= seed=1,2 {QUICK}"),
    # Bounds.
    case("bounds-num_workers-100000", "train data.num_workers=100000"),
    case("bounds-num_workers-1e20", "train data.num_workers=100000000000000000000"),
    case("bounds-max_steps-2pow64", "train trainer.max_steps=18446744073709551616"),
    case("bounds-batch_size-2pow63", "train data.batch_size=9223372036854775808"),
    case("bounds-hidden-2pow70-in-list", "train model.hidden=[64,1180591620717411303424]"),
    case("bounds-sweep-seed-2pow63", "train -m seed=1,9223372036854775808"),
    case("bounds-keep_last-2pow64", "train checkpoint.keep_last=18446744073709551616"),
    # The processes' environment.
    case("env-world_size-junk", "train", env=(("WORLD_SIZE", "two"),)),
    case("env-world_size-0", "train", env=(("WORLD_SIZE", "0"),)),
    case("env-world_size-huge", "train", env=(("WORLD_SIZE", "1" + "0" * 30),)),
    case("env-rank-junk", "train", env=(("RANK", "x"),)),
    case("env-rank-past-world_size", "train", env=(("WORLD_SIZE", "2"), ("RANK", "5"))),
    case("env-local_rank-negative", "train", env=(("LOCAL_RANK", "-1"),)),
    case("env-world_size-2-alone", "train", env=(("WORLD_SIZE", "2"),)),
    case("env-master_port-junk", "train", env=(*NO_PEER[:2], ("RANK", "0"), ("MASTER_PORT", "http"))),
    case("env-rank-0-without-peers", "train peer_timeout_s=3", env=(*NO_PEER, ("RANK", "0"))),
    case("env-rank-1-without-rank-0", "train peer_timeout_s=3", env=(*NO_PEER, ("RANK", "1"))),
    case("env-eval-rank-junk", f"eval ckpt={LAST}", needs=("run",), env=(("RANK", "x"),)),
    # Under torchrun.
    case("torchrun-existing-run", "train hydra.run.dir=run", TORCHRUN_REFUSE, ("run",), torchrun=True),
    case("torchrun-bad-value", "train data.batch_size=-1", TORCHRUN_REFUSE, torchrun=True),
    # Damaged sharded checkpoints: resume skips them for the previous one and continues (exit 0).
    case("sharded-index-memory-error", RESUME_SHARDED, OK, ("sharded_index_memory_error",)),
    case("sharded-index-names-a-path-outside", RESUME_SHARDED, OK, ("sharded_index_outside",)),
    case("sharded-shard-is-a-link-outside", RESUME_SHARDED, OK, ("sharded_linked_shard",)),
]

# ---- end of issue 25, part B ----


# ---- issue 25, hidden check (rev25) ----
# Payloads the three helpers of issue 25 did not try: an option a run directory's record places among
# Hydra's own settings (Hydra builds hydra.callbacks before runner checks the config), a live
# interpolation in a record or in a checkpoint's config (a resolver reads the environment; names that
# name each other grow without bound), files nested too deeply, and checkpoints whose keys hold what
# runner never saves there.
LIVE_CREATE = "${{oc.create:{{_target_: " + TOUCH + ", self: {marker}}}}}"  # {marker}: filled in
HYDRA_CALLBACK = (
    "+scheduler@hydra.callbacks.evil=onecycle",
    "+total_steps=1",
    f"optimizer.lr='{LIVE_CREATE}'",
)
# Eight names of eight values, eleven deep: 8**11 values once resolved.
BOMB = {"z0": [1] * 8, **{f"z{i}": [f"${{model.z{i - 1}}}"] * 8 for i in range(1, 12)}}


def record_with(lines: tuple[str, ...]) -> Callable[[Path, Context], None]:
    """A copy of the run whose ``.hydra/overrides.yaml`` also holds ``lines`` (``{marker}`` filled in),
    each a double-quoted YAML string."""

    def build(dest: Path, ctx: Context) -> None:
        copy_run(dest, ctx)
        record = dest / ".hydra" / "overrides.yaml"
        stat = record.stat()
        extra = "".join(f"- {json.dumps(line.format(marker=ctx.marker))}\n" for line in lines)
        record.write_text(record.read_text() + extra)
        os.utime(record, ns=(stat.st_atime_ns, stat.st_mtime_ns))

    return build


def deep_record(dest: Path, ctx: Context) -> None:
    copy_run(dest, ctx)
    (dest / ".hydra" / "overrides.yaml").write_text("[" * 5000 + "]" * 5000 + "\n")


def nested(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth):
        value = {"a": value}
    return value


def forged_config(
    change: Callable[[dict, Context], None], deep: bool = False
) -> Callable[[Path, Context], None]:
    """A checkpoint (valid checksum) whose contents ``change`` edits; ``deep``: too deep to checksum
    with Python's default recursion limit, which whoever makes it can raise."""

    def build(dest: Path, ctx: Context) -> None:
        checkpoint = copy.deepcopy(load_base(ctx))
        change(checkpoint, ctx)
        if deep:  # raised once for the whole process: cases build fixtures on two threads at a time
            sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))
        save(checkpoint, dest)

    return build


def run_with_checkpoints(build: Callable[[Path, Context], None], names: tuple[str, ...]) -> Callable:
    """A copy of the run whose checkpoints ``names`` are replaced by what ``build`` makes."""

    def make(dest: Path, ctx: Context) -> None:
        copy_run(dest, ctx)
        for name in names:
            build(dest / "checkpoints" / name, ctx)

    return make


def deep_config(checkpoint: dict, ctx: Context) -> None:
    checkpoint["config"]["model"]["extra"] = nested(3000)


def special_files_sweep(dest: Path, ctx: Context) -> None:
    """Job 1's result.json a FIFO (a read blocks), an event file of it a link to /dev/zero (never ends)."""
    small_sweep(dest, ctx)
    (dest / "1" / "result.json").unlink()
    os.mkfifo(dest / "1" / "result.json")
    (dest / "1" / "events.out.tfevents.9.zero").symlink_to("/dev/zero")


def deep_result_sweep(dest: Path, ctx: Context) -> None:
    """A finished sweep of seed=1,2 (as the case's command ran it) whose job 0 result is nested too deep."""
    done = subprocess.run(
        [sys.executable, "-m", "runner", *shlex.split(DEEP_RESULT_SWEEP), f"hydra.sweep.dir={dest}"],
        cwd=dest.parent, env=environment(), capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode != 0:
        raise Skip(f"could not build the sweep: {last_line(done.stderr)}")
    (job_0,) = [path for path in dest.iterdir() if re.fullmatch(r"0+(_.*)?", path.name)]  # 000_seed=1
    (job_0 / "result.json").write_text("[" * 100000 + "]" * 100000)


DEEP_RESULT_SWEEP = f"train -m seed=1,2 {QUICK}"
ALL_CHECKPOINTS = ("last.pt", "best.pt", "step_00000004.pt")
FORGED = {
    "env": lambda c, ctx: c["config"]["model"].update(hidden="${oc.env:HOME}"),
    "bomb": lambda c, ctx: c["config"]["model"].update(BOMB),
    "create": lambda c, ctx: c["config"]["model"].update(extra=[LIVE_CREATE.format(marker=ctx.marker)]),
    "config-empty": lambda c, ctx: c.update(config={}),
    "step-text": lambda c, ctx: c.update(global_step="9"),
    "rng-junk": lambda c, ctx: c.update(rng_states={"torch": "x"}),
}
FIXTURES.update({
    "hydra_callback_run": ("run", record_with(HYDRA_CALLBACK)),
    "hydra_callback_latest": ("outputs/2026-01-01/00-00-00-cafe", record_with(HYDRA_CALLBACK)),
    "global_hydra_callback_run": ("run", record_with(
        (HYDRA_CALLBACK[0].replace("@hydra", "@_global_.hydra"), *HYDRA_CALLBACK[1:]))),
    "job_logging_run": ("run", record_with(("+callbacks@hydra.job_logging=ema",))),
    "env_record_run": ("run", record_with(("optimizer.lr=${{oc.env:RUNNER_BAD_INPUTS_LR}}",))),
    "bomb_record_run": ("run", record_with(
        tuple(f"+model.{key}=[{','.join(map(str, value))}]".replace("{", "{{").replace("}", "}}")
              for key, value in BOMB.items()))),
    "deep_record_run": ("run", deep_record),
    **{f"live_{name}.pt": (f"live_{name}.pt", forged_config(FORGED[name]))
       for name in ("env", "bomb", "create")},
    "deep.pt": ("deep.pt", forged_config(deep_config, deep=True)),
    "deep_last_run": ("run", run_with_checkpoints(forged_config(deep_config, deep=True), ("last.pt",))),
    "special_files_sweep": ("sweep", special_files_sweep),
    "deep_result_sweep": ("sweep", deep_result_sweep),
    "deep_lock_run": ("run", lambda dest, ctx: (copy_run(dest, ctx),
                                                (dest / ".lock").write_text("[" * 100000 + "]" * 100000))),
    "fifo_lock_run": ("run", lambda dest, ctx: (copy_run(dest, ctx), os.mkfifo(dest / ".lock"))),
    **{f"forged_{name}_run": ("run", run_with_checkpoints(forged_config(FORGED[name]), ALL_CHECKPOINTS))
       for name in ("config-empty", "step-text", "rng-junk")},
})  # fmt: skip
RESUME_RUN = "train resume=run trainer.max_steps=30"  # the fixture run ended at step 20
CASES += [
    case("hidden-resume-record-option-in-hydra-callbacks", RESUME_RUN, needs=("hydra_callback_run",)),
    case("hidden-resume-latest-record-option-in-hydra-callbacks", "train resume=latest trainer.max_steps=8",
         needs=("hydra_callback_latest",)),
    case("hidden-resume-record-option-in-global-hydra", RESUME_RUN, needs=("global_hydra_callback_run",)),
    case("hidden-resume-record-option-as-job-logging", RESUME_RUN, needs=("job_logging_run",)),
    case("hidden-resume-record-env-interpolation", RESUME_RUN, needs=("env_record_run",),
         env=(("RUNNER_BAD_INPUTS_LR", "0.01"),)),
    case("hidden-resume-record-growing-interpolations", RESUME_RUN, needs=("bomb_record_run",)),
    case("hidden-resume-record-nested-too-deep", RESUME_RUN, needs=("deep_record_run",)),
    *(case(f"hidden-eval-live-{name}", f"eval ckpt=live_{name}.pt", needs=(f"live_{name}.pt",))
      for name in ("env", "bomb", "create")),
    case("hidden-eval-config-nested-too-deep", "eval ckpt=deep.pt", needs=("deep.pt",)),
    case("hidden-resume-last-nested-too-deep", RESUME_RUN, OK, ("deep_last_run",)),
    case("hidden-report-fifo-result-and-device-events", "report sweep", OK, ("special_files_sweep",)),
    case("hidden-sweep-continued-result-nested-too-deep", f"{DEEP_RESULT_SWEEP} hydra.sweep.dir=sweep", OK,
         ("deep_result_sweep",)),
    case("hidden-resume-lock-nested-too-deep", RESUME_RUN, needs=("deep_lock_run",)),
    case("hidden-resume-lock-is-a-fifo", RESUME_RUN, needs=("fifo_lock_run",)),
    *(case(f"hidden-resume-forged-{name}", RESUME_RUN, needs=(f"forged_{name}_run",))
      for name in ("config-empty", "step-text", "rng-junk")),
]  # fmt: skip
# ---- end of issue 25, hidden check (rev25) ----


# ---- issue 32, items 1, 5, 8 (i32a): bounded work for any file, unreadable records, tracebacks ----------
# Files whose sharing, aliasing or nesting multiplies the work of whoever walks them; a finished sweep job
# whose run.yaml is damaged (it needs a look; its result stays); files and values that were tracebacks.
sys.path.insert(0, str(REPO / "tests"))  # the hostile files the tests and the fuzzer make
I32_SWEEP = f"train -m seed=1,2 {QUICK}"


def i32_shared_checkpoint(dest: Path, ctx: Context) -> None:
    from hostile_files import shared_config_checkpoint

    shared_config_checkpoint(load_base(ctx), dest)


def i32_run_of(change: Callable[[Path, Context], None]) -> Callable[[Path, Context], None]:
    def build(dest: Path, ctx: Context) -> None:
        copy_run(dest, ctx)
        change(dest, ctx)

    return build


def i32_all_checkpoints(build: Callable[[Path, Context], None]) -> Callable[[Path, Context], None]:
    return i32_run_of(lambda dest, ctx: [build(path, ctx) for path in (dest / "checkpoints").glob("*.pt")])


def i32_sweep_of(change: Callable[[Path, Context], None]) -> Callable[[Path, Context], None]:
    """A two-job sweep of copies of the fixture run, ``change`` applied to the sweep's folder."""

    def build(dest: Path, ctx: Context) -> None:
        for number in (1, 2):
            copy_run(dest / f"00{number - 1}_seed={number}", ctx)
        change(dest, ctx)

    return build


def i32_finished_sweep(change: Callable[[Path], None]) -> Callable[[Path, Context], None]:
    """The sweep the case's command runs, finished, then its job 0 changed."""

    def build(dest: Path, ctx: Context) -> None:
        done = subprocess.run(
            [sys.executable, "-m", "runner", *shlex.split(I32_SWEEP), f"hydra.sweep.dir={dest}"],
            cwd=dest.parent, env=environment(), capture_output=True, text=True,
        )  # fmt: skip
        if done.returncode != 0:
            raise Skip(f"could not build the sweep: {last_line(done.stderr)}")
        (job_0,) = [path for path in dest.iterdir() if re.fullmatch(r"0+(_.*)?", path.name)]
        change(job_0)

    return build


def i32_forged_seed(seed: int) -> Callable[[Path, Context], None]:
    return lambda dest, ctx: save({**load_base(ctx), "seed": seed}, dest)


def i32_study(how: str) -> Callable[[Path, Context], None]:
    def build(dest: Path, ctx: Context) -> None:
        from hostile_files import runner_like_study, tamper_study

        tamper_study(runner_like_study(dest, "digits_optuna"), how)

    return build


def i32_alias_bomb(path: Path, mapping: bool = False) -> None:
    from hostile_files import alias_bomb, alias_bomb_mapping

    path.write_text(alias_bomb_mapping() if mapping else alias_bomb())


def i32_junk_events(dest: Path, ctx: Context) -> None:
    from runner.observe.events import tf_record

    (dest / "000_seed=1" / "events.out.tfevents.1.junk").write_bytes(tf_record(b"\xff\xff\xff\xffjunk"))


FIXTURES.update({
    "i32_shared.pt": ("shared.pt", i32_shared_checkpoint),
    "i32_shared_run": ("run", i32_all_checkpoints(i32_shared_checkpoint)),
    "i32_shared_latest": ("outputs/2026-01-01/00-00-00-beef", i32_all_checkpoints(i32_shared_checkpoint)),
    "i32_alias_overrides_run": ("run", i32_run_of(
        lambda d, c: i32_alias_bomb(d / ".hydra" / "overrides.yaml"))),
    "i32_alias_sweep": ("sweep", i32_sweep_of(lambda d, c: (
        i32_alias_bomb(d / "000_seed=1" / ".hydra" / "overrides.yaml"),
        i32_alias_bomb(d / "001_seed=2" / "run.yaml", mapping=True)))),
    "i32_alias_run_yaml_sweep": ("sweep", i32_finished_sweep(
        lambda job: i32_alias_bomb(job / "run.yaml", True))),
    "i32_binary_run_yaml_sweep": ("sweep", i32_finished_sweep(
        lambda job: (job / "run.yaml").write_bytes(b"\xff\xfe not text \x00"))),
    "i32_odd_names_sweep": ("grid", i32_sweep_of(lambda d, c: (
        copy_run(d / "\u00b2", c), copy_run(d / ("bad" + b"\xff".decode("utf-8", "surrogateescape")), c)))),
    "i32_junk_events_sweep": ("sweep", i32_sweep_of(lambda d, c: i32_junk_events(d, c))),
    "i32_last_is_folder_run": ("run", i32_run_of(lambda d, c: (
        (d / "checkpoints" / "last.pt").unlink(), (d / "checkpoints" / "last.pt").mkdir()))),
    "i32_seed_negative_run": ("run", i32_all_checkpoints(i32_forged_seed(-1))),
    "i32_seed_huge_run": ("run", i32_all_checkpoints(i32_forged_seed(2**64 + 1))),
    **{f"i32_study_{how}": ("sweep", i32_study(how))
       for how in ("low-above-high", "attr-not-json", "attr-deep")},
})  # fmt: skip
CASES += [
    case("i32-eval-shared-values", "eval ckpt=shared.pt", needs=("i32_shared.pt",)),
    case("i32-consolidate-shared-values", "consolidate shared.pt --output out.pt", needs=("i32_shared.pt",)),
    case("i32-resume-shared-values", RESUME_RUN, needs=("i32_shared_run",)),
    case("i32-resume-latest-shared-values", "train resume=latest trainer.max_steps=30",
         needs=("i32_shared_latest",)),
    case("i32-resume-alias-overrides", RESUME_RUN, needs=("i32_alias_overrides_run",)),
    case("i32-report-alias-records", "report sweep", OK, ("i32_alias_sweep",)),
    case("i32-sweep-continued-alias-run-yaml", f"{I32_SWEEP} hydra.sweep.dir=sweep", OK,
         ("i32_alias_run_yaml_sweep",)),
    case("i32-sweep-continued-binary-run-yaml", f"{I32_SWEEP} hydra.sweep.dir=sweep", OK,
         ("i32_binary_run_yaml_sweep",)),
    case("i32-report-odd-job-names", "report grid", OK, ("i32_odd_names_sweep",)),
    case("i32-report-unicode-digit-job", "report grid/\u00b3", needs=("i32_odd_names_sweep",)),
    case("i32-report-junk-events", "report sweep", OK, ("i32_junk_events_sweep",)),
    case("i32-resolver-sweep-job-dir-junk",
         ("train", "-m", "seed=1", "hydra.sweep.subdir=${sweep_job_dir:x}", *shlex.split(QUICK))),
    case("i32-resolver-sweep-overrides-junk",
         ("train", "-m", "seed=1", "hydra.sweep.subdir=${sweep_overrides:1}", *shlex.split(QUICK))),
    case("i32-resolver-unique-suffix-junk",
         ("train", "hydra.run.dir=out/${unique_suffix:x}", *shlex.split(QUICK))),
    case("i32-resume-last-is-a-folder", RESUME_RUN, needs=("i32_last_is_folder_run",)),
    case("i32-resume-seed-negative", RESUME_RUN, needs=("i32_seed_negative_run",)),
    case("i32-resume-seed-huge", RESUME_RUN, needs=("i32_seed_huge_run",)),
    *(case(f"i32-search-study-{how}", SEARCH, needs=(f"i32_study_{how}",))
      for how in ("low-above-high", "attr-not-json", "attr-deep")),
]  # fmt: skip
# ---- end of issue 32, items 1, 5, 8 (i32a) ----


# ---- issue 32, items 2, 3, 4, 6, 7 (i32b): links, the start folder, one lock, ranges, imports ----
# A link or a file planted where runner or Hydra writes; a folder another live process holds; values
# out of range (settings, a checkpoint's counters, a model's count, a sampler's index); a module
# planted in the folder runner is started in. Every one refused in one line, before anything is written.
def linked(name: str, target: str, make: tuple[str, ...] = ()) -> Callable[[Path, Context], None]:
    """A folder holding ``name``, a link to ``target`` (``make``: folders beside it made first)."""

    def build(dest: Path, ctx: Context) -> None:
        for folder in make:
            (dest.parent / folder).mkdir(parents=True, exist_ok=True)
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        (dest / name).symlink_to(target)

    return build


def held_by_init(dest: Path, ctx: Context) -> None:
    """A folder whose lock names a live process of this host (pid 1) that started before it."""
    dest.mkdir()
    holder = {"pid": 1, "host": os.uname().nodename, "since": time.time(), "job": None}
    (dest / ".lock").write_text(json.dumps(holder))


def out_of_range(**values: Any) -> Callable[[Path, Context], None]:
    return lambda dest, ctx: save({**load_base(ctx), **values}, dest)


def module(text: str) -> Callable[[Path, Context], None]:
    """A Python module in the working directory ({marker}: the marker file's path)."""
    return lambda dest, ctx: dest.write_text(text.format(marker=ctx.marker))


TOUCH_MARKER = "import pathlib\npathlib.Path({marker!r}).touch()\n"
BAD_PLUGINS = """
import math

import torch
from torch import nn
from torch.utils.data import Sampler


class MinusOne(Sampler):
    def __init__(self, data_source):
        self.size = len(data_source)

    def __len__(self):
        return self.size

    def __iter__(self):
        return iter([-1, *range(1, self.size)])


class SaysCount(nn.Module):
    def __init__(self, count, input_shape, num_outputs, **_):
        super().__init__()
        self.count, self.net = count, nn.Linear(math.prod(input_shape), num_outputs)

    def forward(self, inputs, targets):
        logits = self.net(inputs.flatten(1))
        loss = nn.functional.cross_entropy(logits, targets)
        return {{"loss": loss, "logits": logits, "num_items_in_batch": torch.tensor(self.count)}}
"""
FIXTURES.update({
    "linked_job_sweep": ("sweep", linked("000_seed=0", "../victim", make=("victim",))),
    "file_job_sweep": ("sweep", lambda dest, ctx: (dest.mkdir(), (dest / "001_seed=1").write_text("mine\n"))),
    "linked_multirun_sweep": ("sweep", linked("multirun.yaml", "../notes.txt")),
    "linked_record_run": ("linked", linked(".hydra/config.yaml", "../../notes.txt")),
    "linked_log_run": ("linked", linked("train.log", "../notes.txt")),
    "notes.txt": ("notes.txt", lambda dest, ctx: dest.write_text("the user's own\n")),
    "busy_folder": ("busy", held_by_init),
    "step_negative.pt": ("step_negative.pt", out_of_range(global_step=-5)),
    "best_nan.pt": ("best_nan.pt", out_of_range(best_val=float("nan"))),
    "best_nan_run": ("run", lambda dest, ctx: (copy_run(dest, ctx), out_of_range(best_val=float("nan"))(
        dest / "checkpoints" / "last.pt", ctx))),
    "seed_negative.pt": ("seed_negative.pt", out_of_range(seed=-1)),
    "world_size_0.pt": ("world_size_0.pt", out_of_range(world_size=0)),
    "planted_modules": ("matplotlib.py", lambda dest, ctx: [
        (dest.parent / f"{name}.py").write_text(TOUCH_MARKER.format(marker=str(ctx.marker)))
        for name in ("matplotlib", "yaml", "tomllib", "pandas")]),
    "bad_plugins.py": ("bad_plugins.py", module(BAD_PLUGINS)),
})  # fmt: skip
WITH_PLUGINS = (("PYTHONPATH", f"{REPO / 'src'}{os.pathsep}."),)  # the working directory, named
SWEEP_2 = f"train -m {QUICK} seed=0,1"
OWN_COUNT = f"train {QUICK} model._target_=bad_plugins.SaysCount loss=from_model"
CASES += [
    case("i32b-sweep-job-folder-a-link", f"{SWEEP_2} hydra.sweep.dir=sweep", needs=("linked_job_sweep",)),
    case("i32b-sweep-job-folder-a-file", f"{SWEEP_2} hydra.sweep.dir=sweep", needs=("file_job_sweep",)),
    case("i32b-sweep-multirun-yaml-a-link", f"{SWEEP_2} hydra.sweep.dir=sweep",
         needs=("notes.txt", "linked_multirun_sweep")),
    case("i32b-run-record-a-link", f"train {QUICK} hydra.run.dir=linked",
         needs=("notes.txt", "linked_record_run")),
    case("i32b-run-log-a-link", f"train {QUICK} hydra.run.dir=linked", needs=("notes.txt", "linked_log_run")),
    case("i32b-run-dir-the-start-folder", f"train {QUICK} hydra.run.dir=.", needs=("notes.txt",)),
    case("i32b-sweep-dir-the-start-folder", f"{SWEEP_2} hydra.sweep.dir=.", needs=("notes.txt",)),
    case("i32b-sweep-into-a-run", f"{SWEEP_2} hydra.sweep.dir=run", needs=("run",)),
    case("i32b-lr-find-into-a-run", "lr_find hydra.run.dir=run", needs=("run",)),
    case("i32b-train-into-a-held-folder", f"train {QUICK} hydra.run.dir=busy", needs=("busy_folder",)),
    case("i32b-sweep-into-a-held-folder", f"{SWEEP_2} hydra.sweep.dir=busy", needs=("busy_folder",)),
    case("i32b-nan-early-stopping-min-delta",
         f"train {QUICK} callbacks=early_stopping callbacks.early_stopping.min_delta=nan"),
    case("i32b-nan-plateau-factor", f"train {QUICK} scheduler=plateau scheduler.factor=nan"),
    case("i32b-nan-ema-decay", f"train {QUICK} callbacks=ema callbacks.ema.decay=nan"),
    case("i32b-monitor-accuracy-on-a-regression",
         f"train {QUICK} data=regression checkpoint.monitor=val/acc checkpoint.mode=max"),
    case("i32b-eval-global-step-negative", "eval ckpt=step_negative.pt", needs=("step_negative.pt",)),
    case("i32b-eval-best-val-nan", "eval ckpt=best_nan.pt", needs=("best_nan.pt",)),
    case("i32b-resume-best-val-nan", "train resume=run/checkpoints/last.pt trainer.max_steps=30",
         needs=("best_nan_run",)),
    case("i32b-eval-seed-negative", "eval ckpt=seed_negative.pt", needs=("seed_negative.pt",)),
    case("i32b-eval-world-size-0", "eval ckpt=world_size_0.pt", needs=("world_size_0.pt",)),
    case("i32b-sampler-index-minus-one", f"train {QUICK} 'data.sampler={{_target_: bad_plugins.MinusOne}}'",
         needs=("bad_plugins.py",), env=WITH_PLUGINS),
    *(case(f"i32b-num-items-in-batch-{count}", f"{OWN_COUNT} +model.count={count}", needs=("bad_plugins.py",),
           env=WITH_PLUGINS) for count in ("-3", "1e30")),
    # 0 on every batch: refused at the first validation (one batch of padding alone may say 0), once the
    # run has begun.
    case("i32b-num-items-in-batch-0", f"{OWN_COUNT} +model.count=0", needs=("bad_plugins.py",),
         env=WITH_PLUGINS, writes_ok=True),
    case("i32b-report-with-planted-modules", "report run", OK, needs=("run", "planted_modules")),
    case("i32b-eval-with-planted-modules", "eval ckpt=run", OK_NO_WRITE, needs=("run", "planted_modules")),
]  # fmt: skip
# ---- end of issue 32 (i32b) ----


# ---- issue 39: project discovery, init ----------------------------------------------------------
# A pyproject.toml with [tool.runner] in the folder a command starts in or above it: only the commands
# that build the user's model or data import its code, a code folder never hides a library, a run's
# folder is never a project, the file is read bounded, and messages name it. A module planted where the
# project's code would be touches the marker if it runs.
def project_here(table: str = "[tool.runner]\n", planted: tuple[str, ...] = (), code: str = "") -> Callable:
    """The working directory as a project: ``table`` in its pyproject.toml, a conf/ folder, modules
    ``planted`` (they touch the marker) in its code folder (``code``: ``src``, or the folder itself)."""

    def build(dest: Path, ctx: Context) -> None:
        root = dest.parent
        (root / "conf").mkdir(exist_ok=True)
        (root / "pyproject.toml").write_text(table)
        for name in planted:
            path = root / code / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(TOUCH_MARKER.format(marker=str(ctx.marker)))
        (root / "work").mkdir(exist_ok=True)

    return build


def special_pyproject(make: Callable[[Path], None]) -> Callable[[Path, Context], None]:
    def build(dest: Path, ctx: Context) -> None:
        make(dest)
        (dest.parent / "work").mkdir(exist_ok=True)

    return build


def copied_run_with_project(dest: Path, ctx: Context) -> None:
    """A copy of the run that carries its own project (pyproject.toml, conf/model/evil.yaml naming
    pathlib.Path.touch), its checkpoints naming the same target."""
    run_with_checkpoints(evil_checkpoint("model", full=True), ALL_CHECKPOINTS)(dest, ctx)
    (dest / "pyproject.toml").write_text('[tool.runner]\ncode = "."\n')
    (dest / "conf" / "model").mkdir(parents=True)
    (dest / "conf" / "model" / "evil.yaml").write_text(f"_target_: {TOUCH}\nself: {ctx.marker}\n")


PLANTED_39 = ("yaml.py", "matplotlib.py")
DEFAULTS_39 = "[tool.runner]\ndefaults = {{{}}}\n"
FIXTURES.update({
    "i39_project_planted_root": ("pyproject.toml", project_here(planted=PLANTED_39)),
    "i39_empty_table_planted": ("pyproject.toml", project_here(planted=PLANTED_39)),
    "i39_project_torch_package": ("pyproject.toml", project_here(planted=("torch/__init__.py",), code="src")),
    "i39_run_in_work": ("work/run", copy_run),
    "i39_copied_run_with_project": ("run", copied_run_with_project),
    "i39_fifo_pyproject": ("pyproject.toml", special_pyproject(os.mkfifo)),
    "i39_devzero_pyproject": ("pyproject.toml", special_pyproject(lambda path: path.symlink_to("/dev/zero"))),
    "i39_huge_pyproject": ("pyproject.toml", special_pyproject(
        lambda path: (path.touch(), os.truncate(path, 300 << 20)))),
    "i39_deep_pyproject": ("pyproject.toml", special_pyproject(
        lambda path: path.write_text("x = " + "[" * 100_000 + "]" * 100_000 + "\n"))),
    "i39_dotted_pyproject": ("pyproject.toml", special_pyproject(
        lambda path: path.write_text("a." * 30_000 + "b = 1\n"))),
    "i39_broken_pyproject": ("pyproject.toml", special_pyproject(lambda path: path.write_text("[project\n"))),
    "i39_broken_project_file": ("pyproject.toml", special_pyproject(
        lambda path: path.write_text("[tool.runner\nconf = 'conf'\n"))),
    "i39_launcher_joblib": ("pyproject.toml", project_here(
        DEFAULTS_39.format('"hydra/launcher" = "joblib"'))),
    "i39_launcher_nope": ("pyproject.toml", project_here(DEFAULTS_39.format('"hydra/launcher" = "nope"'))),
    "i39_sampler_default": ("pyproject.toml", project_here(
        DEFAULTS_39.format('"hydra/sweeper/sampler" = "tpe"'))),
    "i39_group_climbs": ("pyproject.toml", project_here(DEFAULTS_39.format('"../../etc" = "passwd"'))),
})  # fmt: skip
CASES += [
    case("i39-report-with-planted-code-above", "report run", OK,
         ("i39_project_planted_root", "i39_run_in_work"), cwd="work"),
    case("i39-init-with-planted-code-above", "init mylab", OK, ("i39_project_planted_root",), cwd="work"),
    case("i39-train-help-with-planted-code-above", "train --help", OK_NO_WRITE, ("i39_project_planted_root",),
         cwd="work"),
    case("i39-train-with-planted-code-above", f"train {QUICK}", needs=("i39_project_planted_root",),
         cwd="work"),
    case("i39-report-empty-runner-table-planted", "report work/run", OK,
         ("i39_empty_table_planted", "i39_run_in_work")),
    case("i39-train-code-folder-hides-torch", f"train {QUICK}", needs=("i39_project_torch_package",)),
    case("i39-eval-copied-run-carrying-a-project", "eval ckpt=.", needs=("i39_copied_run_with_project",),
         cwd="run"),
    *(case(f"i39-{what}-pyproject-above-{command.split()[0]}", command, expect, (f"i39_{what}_pyproject",),
           cwd="work")
      for what in ("fifo", "devzero", "huge", "deep", "dotted", "broken")
      for command, expect in (("train --help", OK_NO_WRITE), ("report .", REFUSE))),
    case("i39-broken-project-file-train", f"train {QUICK}", needs=("i39_broken_project_file",), cwd="work"),
    *(case(f"i39-init-{name}", f"init {name}") for name in ("torch", "hydra", "json", "logging", "omegaconf",
                                                             "yaml", "runner")),
    case("i39-init-dot", "init .", OK),
    case("i39-launcher-default-joblib", f"train -m seed=0,1 {QUICK} hydra.sweep.dir=sw", OK,
         ("i39_launcher_joblib",)),
    case("i39-launcher-default-nope", f"train {QUICK}", needs=("i39_launcher_nope",)),
    case("i39-defaults-group-hydra-cannot-set", f"train {QUICK}", needs=("i39_sampler_default",)),
    case("i39-defaults-group-climbs-out", f"train {QUICK}", needs=("i39_group_climbs",)),
]  # fmt: skip
# ---- end of issue 39 ----


# ---- issue 52: projects above, bounded resumes, export, forged keys, MLflow stores, a model's own step ----
OWN_STEPS = """import math

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, input_shape, num_outputs):
        super().__init__()
        self.out = nn.Linear(math.prod(input_shape), num_outputs)

    def forward(self, inputs):
        return self.out(inputs.flatten(1))


class FirstOnly(Net):
    calls = 0

    def training_step(self, batch, step):
        inputs, targets = batch
        loss = nn.functional.cross_entropy(self(inputs), targets)
        step.backward(loss)
        if FirstOnly.calls % 2 == 0:  # on a window's first micro-batch only
            step.update()
        FirstOnly.calls += 1
        return {"loss": loss}


class NanLoss(Net):
    def training_step(self, batch, step):
        inputs, targets = batch
        loss = nn.functional.cross_entropy(self(inputs), targets)
        step.backward(loss)
        step.update()
        return {"loss": loss * float("nan")}
"""


def project_above_others_may_write(dest: Path, ctx: Context) -> None:
    """A project in a folder every user may write (a shared /tmp), whose default model touches the marker."""
    project_here(DEFAULTS_39.format('model = "evil"'))(dest, ctx)
    (dest.parent / "conf" / "model").mkdir()
    (dest.parent / "conf" / "model" / "evil.yaml").write_text(f"_target_: {TOUCH}\nself: {ctx.marker}\n")
    dest.parent.chmod(0o777)


def own_steps_project(dest: Path, ctx: Context) -> None:
    project_here('[tool.runner]\ncode = "."\n')(dest, ctx)
    (dest.parent / "own_steps.py").write_text(OWN_STEPS)
    (dest.parent / "conf" / "model").mkdir()
    for name in ("FirstOnly", "NanLoss"):
        sizes = "input_shape: ${data.input_shape}\nnum_outputs: ${data.num_outputs}\n"
        (dest.parent / "conf" / "model" / f"{name.lower()}.yaml").write_text(
            f"_target_: own_steps.{name}\n{sizes}"
        )


def zeros(base: dict) -> dict:
    import torch

    return {**base, "averaged_model_state_dict": torch.zeros(3)}


def forged(change: Callable[[dict], dict]) -> Callable[[Path, Context], None]:
    """The fixture run's checkpoint with one key forged, its checksum computed again."""
    return lambda dest, ctx: save(change(load_base(ctx)), dest)


def string_weight(base: dict) -> dict:
    name = next(iter(base["model_state_dict"]))
    return {**base, "model_state_dict": {**base["model_state_dict"], name: "x"}}


def run_with_special_csv(make: Callable[[Path], None]) -> Callable[[Path, Context], None]:
    def build(dest: Path, ctx: Context) -> None:
        copy_run(dest, ctx)
        make(dest / "metrics.csv")

    return build


FORGED_52 = {
    "averaged_tensor": zeros,
    "averaged_ints": lambda base: {**base, "averaged_model_state_dict": {"a": 1, "b": 2}},
    "weight_string": string_weight,
    "frozen_digest_int": lambda base: {**base, "frozen_weights_sha256": 5},
}
FIXTURES.update({
    "i52_project_others_may_write": ("pyproject.toml", project_above_others_may_write),
    "i52_sitecustomize_in_code": ("pyproject.toml", project_here(
        '[tool.runner]\ncode = "src"\n', planted=("sitecustomize.py",), code="src")),
    "i52_own_steps": ("pyproject.toml", own_steps_project),
    "i52_fifo_csv_run": ("run", run_with_special_csv(os.mkfifo)),
    "i52_folder_csv_run": ("run", run_with_special_csv(Path.mkdir)),
    "i52_dangling_out": ("out", lambda dest, ctx: dest.symlink_to(dest.parent / "gone" / "out")),
    **{f"i52_{name}.pt": (f"{name}.pt", forged(change)) for name, change in FORGED_52.items()},
})  # fmt: skip
MLFLOW_52 = f"train {QUICK} logger=[tensorboard,mlflow] mlflow.tracking_uri="
CASES += [
    case("i52-train-project-above-others-may-write", f"train {QUICK}",
         needs=("i52_project_others_may_write",), cwd="work"),
    case("i52-train-sitecustomize-in-code-folder", f"train {QUICK}", needs=("i52_sitecustomize_in_code",),
         cwd="work"),
    case("i52-sweep-sitecustomize-in-code-folder",
         f"train -m model=mlp hydra/launcher=joblib seed=0,1 {QUICK}",
         needs=("i52_sitecustomize_in_code",), cwd="work"),
    case("i52-resume-metrics-csv-fifo", f"{RESUME_RUN} logger=[tensorboard,csv]",
         needs=("i52_fifo_csv_run",)),
    case("i52-resume-metrics-csv-folder", f"{RESUME_RUN} logger=[tensorboard,csv]",
         needs=("i52_folder_csv_run",)),
    case("i52-export-ok", "export run --format safetensors --output out", OK, ("run",)),
    case("i52-export-dangling-output", "export run --format safetensors --output out",
         needs=("run", "i52_dangling_out")),
    case("i52-export-into-proc", "export run --format safetensors --output /proc/exported", needs=("run",)),
    case("i52-export-output-dotdot", "export run --format safetensors --output ..", needs=("run",)),
    *(case(f"i52-{command}-forged-{name.replace('_', '-')}", line.format(pt=f"{name}.pt"),
           needs=(f"i52_{name}.pt",))
      for name in FORGED_52
      for command, line in (("eval", "eval ckpt={pt}"),
                            ("export", "export {pt} --format safetensors --output o"))),
    case("i52-tracking-uri-folder", f"{MLFLOW_52}empty_dir", needs=("empty_dir",)),
    case("i52-tracking-uri-file", f"{MLFLOW_52}text.txt", needs=("text.txt",)),
    case("i52-tracking-uri-sqlite-not-a-database", f"{MLFLOW_52}sqlite:///text.txt", needs=("text.txt",)),
    case("i52-tracking-uri-unknown-scheme", f"{MLFLOW_52}foo://host/x"),
    case("i52-own-step-updates-first-micro-batch-only", f"train model=firstonly accumulate=2 {QUICK}",
         needs=("i52_own_steps",), writes_ok=True),  # it stops at its first window: the run's folder stays
    case("i52-own-step-nan-loss", f"train model=nanloss {QUICK}", needs=("i52_own_steps",), writes_ok=True),
    case("i52-own-step-updates-first-only-doctor", "doctor model=firstonly accumulate=2", DIAGNOSE,
         ("i52_own_steps",)),
    case("i52-profile-steps-past-the-end", f"train profile.steps=[1000,1001] {QUICK}"),
    case("i52-ema-inv-gamma-inf",
         "train callbacks=[ema] callbacks.ema.warmup=true callbacks.ema.inv_gamma=inf"),
    case("i52-init-quote", ("init", "my'lab")),
    case("i52-init-newline", ("init", "a\nb")),
    case("i52-init-triple-quotes", ("init", 'a"""b')),
    case("i52-init-inside-a-run", "init lab", needs=("run",), cwd="run"),
    case("i52-no-project-small-gru", "train model=small_gru"),
    case("i52-max-epoch-typo", "train trainer.max_epoch=5"),
]  # fmt: skip
# ---- end of issue 52 ----


# Running and judging.


def snapshot(root: Path) -> dict[str, tuple[int, int] | None]:
    """Every file (path -> (size, mtime_ns)) and directory (path -> None) under ``root``."""
    seen: dict[str, tuple[int, int] | None] = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [name for name in dirs if name != "__pycache__"]
        base = Path(folder)
        for name in dirs:
            seen[str((base / name).relative_to(root)) + "/"] = None
        for name in files:
            path = base / name
            try:
                stat = path.lstat()
            except OSError:
                continue
            seen[str(path.relative_to(root))] = (stat.st_size, stat.st_mtime_ns)
    return seen


def changes(before: dict, after: dict) -> list[str]:
    new = [f"+{path}" for path in after if path not in before]
    gone = [f"-{path}" for path in before if path not in after]
    changed = [f"~{path}" for path in after if path in before and after[path] != before[path]]
    return sorted(new + gone + changed)


def last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def exception_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if EXCEPTION_LINE.match(line.strip())]
    return lines[-1] if lines else ""


def is_one_line(exit_code: int | None, stderr: str) -> bool:
    lines = [line for line in stderr.splitlines() if line.strip()]
    return (
        exit_code == 2
        and bool(lines)
        and lines[-1].startswith(ONE_LINE_PREFIX)
        and len(lines) <= MAX_STDERR_LINES
        and TRACEBACK not in stderr
    )


def judge(case: Case, exit_code: int | None, stdout: str, stderr: str, marker: bool, timed_out: bool) -> str:
    if marker:
        return "CODE-EXEC"
    if timed_out:
        return "timeout"
    if case.expect == TORCHRUN_REFUSE:
        return "one line per rank" if refused_per_rank(stdout + stderr) else "other"
    if TRACEBACK in stdout or TRACEBACK in stderr:
        return "traceback"
    if case.expect == DIAGNOSE:
        return "diagnosed" if exit_code == 1 and "check(s) failed" in last_line(stdout) else "other"
    if case.expect == JOB_FAILS:
        return "job failed" if exit_code == 1 and "jobs failed" in stdout + stderr else "other"
    if case.expect == REFUSE:
        if exit_code == 0:
            return "accepted"
        return "one-line" if is_one_line(exit_code, stderr) else "other"
    if exit_code == 0:
        return "ok"
    return "refused" if is_one_line(exit_code, stderr) else "other"


def command_text(case: Case) -> str:
    text = shlex.join(["python", "-m", "runner", *case.args])
    return text if len(text) <= 200 else f"{text[:180]}... ({len(text)} characters)"


def environment() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("HYDRA_")}
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))
    return env


def run_case(case: Case, root: Path, base_run: Path, timeout: float) -> Result:
    cwd = Path(tempfile.mkdtemp(prefix="case-", dir=root))
    marker = root / "markers" / case.id / "CREATED_BY_CODE_EXECUTION"
    marker.parent.mkdir(parents=True, exist_ok=True)
    ctx = Context(base_run, marker)
    prefix: tuple[str, ...] = ()
    mounted: Path | None = None
    try:
        try:
            for name in case.needs:
                where, build = FIXTURES[name]
                (cwd / where).parent.mkdir(parents=True, exist_ok=True)
                build(cwd / where, ctx)
                mounted = cwd / where if name in MOUNTED_FIXTURES else mounted
                if name in UNPRIVILEGED_FIXTURES and os.geteuid() == 0 and shutil.which("setpriv"):
                    prefix = UNPRIVILEGED
        except Skip as skip:
            return Result(case.id, command_text(case), case.expect, "skipped", None, 0.0, str(skip))
        before = snapshot(cwd)
        started = time.monotonic()
        launcher = TORCHRUN if case.torchrun else ("-m",)
        env = {**environment(), **{name: value.format(free_port=free_port()) for name, value in case.env}}
        process = subprocess.Popen(
            [*prefix, sys.executable, *launcher, "runner", *case.args], cwd=cwd / case.cwd, env=env,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            errors="replace", start_new_session=True,
        )  # fmt: skip
        timed_out = False
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
        seconds = time.monotonic() - started
        wrote = changes(before, snapshot(cwd))
        created = marker.exists()
        verdict = judge(case, process.returncode, stdout, stderr, created, timed_out)
        line = last_line(stderr) or last_line(stdout)
        may_write = case.expect == OK or case.writes_ok
        fine = verdict in ("one-line", "ok", "diagnosed", "job failed", "one line per rank") and (
            may_write or not wrote
        )
        error = exception_line(stdout + stderr) if verdict == "traceback" else ""
        return Result(case.id, command_text(case), case.expect, verdict, process.returncode, seconds, line,
                      error, wrote, created, may_write, fine)  # fmt: skip
    finally:
        if mounted is not None:
            subprocess.run(["umount", str(mounted)], capture_output=True)
        for folder in (cwd, cwd / "outputs"):
            if folder.is_dir() and not folder.is_symlink():
                folder.chmod(0o755)
        for path in (cwd / "run").rglob("*") if "readonly_run" in case.needs else ():  # so it can be removed
            path.chmod(path.stat().st_mode | 0o200)


def build_base_run(root: Path, timeout: float) -> Path:
    """The finished tiny run the fixtures copy (20 optimizer steps of the default experiment)."""
    run_dir = root / "base" / "run"
    command = [sys.executable, "-m", "runner", "train", "trainer.max_steps=20", "trainer.max_epochs=null",
               f"hydra.run.dir={run_dir}"]  # fmt: skip
    env = environment()
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0 or not (run_dir / "checkpoints" / "last.pt").is_file():
        sys.exit(f"could not build the fixture run ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return run_dir


def print_result(result: Result) -> None:
    flags = []
    if result.wrote and not result.may_write:
        flags.append(f"WROTE {len(result.wrote)}")
    if result.marker_created:
        flags.append("MARKER CREATED")
    mark = "  " if result.fine else "!!"
    print(f"{mark} {result.id:<38} {result.expect:<11} {result.verdict:<10} rc={result.exit_code!s:<4} "
          f"{result.seconds:5.1f}s {' '.join(flags)} | {result.last_line[:150]}", flush=True)  # fmt: skip


OTHER = ("other", "refused", "timeout")


def totals(results: list[Result]) -> dict[str, int]:
    def count(verdicts: tuple[str, ...]) -> int:
        return sum(result.verdict in verdicts for result in results)

    return {
        "tried": sum(result.verdict != "skipped" for result in results),
        "one-line errors": count(("one-line",)),
        "one line per rank under torchrun (exit 2)": count(("one line per rank",)),
        "ok as expected": count(("ok",)),
        "doctor diagnosed (failing check, exit 1)": count(("diagnosed",)),
        "sweep job failed, the others ran (exit 1)": count(("job failed",)),
        "tracebacks": count(("traceback",)),
        "accepted wrongly": count(("accepted",)),
        "other (multi-line, other exit, valid command refused, timeout)": count(OTHER),
        "skipped": count(("skipped",)),
        "wrote files (where they should not)": sum(
            bool(result.wrote) and not result.may_write for result in results
        ),
        "code-execution markers created": sum(result.marker_created for result in results),
        "fine": sum(result.fine for result in results),
        "not fine": sum(not result.fine and result.verdict != "skipped" for result in results),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", help="run only cases whose id contains this (repeatable)")
    parser.add_argument("--json", type=Path, help="write the results to this file")
    parser.add_argument("--jobs", type=int, default=2, help="cases at a time (default 2)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per case (default 120)")
    parser.add_argument("--keep", action="store_true", help="keep the working directories")
    options = parser.parse_args()

    ids = [case.id for case in CASES]
    duplicates = {name for name in ids if ids.count(name) > 1}
    assert not duplicates, f"duplicate case ids: {duplicates}"
    cases = [case for case in CASES if not options.only or any(part in case.id for part in options.only)]
    if not cases:
        sys.exit(f"no case id contains {options.only!r}")
    root = Path(tempfile.mkdtemp(prefix="runner-bad-inputs-"))
    print(f"{len(cases)} cases, {options.jobs} at a time; working directories under {root}", flush=True)
    results: list[Result] = []
    lock = threading.Lock()
    try:
        base_run = build_base_run(root, options.timeout)
        with ThreadPoolExecutor(options.jobs) as pool:
            futures = [pool.submit(run_case, case, root, base_run, options.timeout) for case in cases]
            for future in as_completed(futures):
                result = future.result()
                with lock:
                    results.append(result)
                    print_result(result)
    finally:
        if not options.keep:
            shutil.rmtree(root, ignore_errors=True)
    order = {case.id: index for index, case in enumerate(cases)}
    results.sort(key=lambda result: order[result.id])

    summary = totals(results)
    print("\ntotals")
    for name, value in summary.items():
        print(f"  {name:<64} {value}")
    bad = [result for result in results if not result.fine and result.verdict != "skipped"]
    if bad:
        print("\nnot fine")
        for result in bad:
            wrote = f" wrote {len(result.wrote)}: {' '.join(result.wrote[:4])}" if result.wrote else ""
            print(f"  {result.id} [{result.verdict}, rc={result.exit_code}]{wrote}\n    {result.command}\n"
                  f"    {result.last_line[:300]}")  # fmt: skip
            if result.error and result.error != result.last_line:
                print(f"    {result.error[:300]}")
    executed = [result.id for result in results if result.marker_created]
    if executed:
        print(
            f"\n!!! CODE EXECUTION: these cases created the file a stored target names: {', '.join(executed)}"
        )
    if options.json:
        report = {"totals": summary, "cases": [asdict(result) for result in results]}
        options.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
