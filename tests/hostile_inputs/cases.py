"""The hostile command lines, each with what it needs and the answer it must get."""

from __future__ import annotations

import os
import shlex
from dataclasses import replace

from hostile_inputs.fixtures import DEEP_RESULT_SWEEP, ESCAPED_WHERE, FORGED_52, I32_SWEEP, QUICK, RESUME_RUN
from hostile_inputs.judging import (
    DIAGNOSE,
    JOB_FAILS,
    OK,
    OK_NO_WRITE,
    REFUSE,
    REPO,
    TORCHRUN_REFUSE,
    Case,
    case,
)

LAST = "run/checkpoints/last.pt"
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
    # Sweep patterns, launcher settings, run and sweep folder names, damaged sweeps and full disks.
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
    # The command itself.
    case("cli-unknown-command", "fit"),
    case("cli-command-uppercase", "TRAIN"),
    case("cli-unknown-dash-flag", "--nope"),
    case("cli-no-command", ""),
    case("cli-help", "--help", OK_NO_WRITE),
    case("cli-train-cfg-job", "train --cfg job", OK_NO_WRITE),
]


# No config read from a file runs code: escaped interpolations, forged studies.
# A value that is still an interpolation once resolved (an escaped \${oc.create:...}) in a checkpoint's
# stored config or a run directory's record, and pickled sampler state in an Optuna study's database.
SEARCH = f"train -m hparams_search=digits_optuna hydra.sweep.dir=sweep hydra.sweeper.n_trials=2 {QUICK}"
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
NO_PEER = (("WORLD_SIZE", "2"), ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "{free_port}"))
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


# What some refusals' error lines must say, word for word where it matters: the named tests that checked
# these through subprocesses of their own now check them here.
SAYS: dict[str, str | tuple[str, ...]] = {
    "value-clip-0": "clip=0 is not allowed; clip must be a finite number > 0, or null",
    "value-clip-negative": "clip=-1 is not allowed; clip must be a finite number > 0",
    "value-clip-string": "clip=abc is not allowed; clip must be a finite number > 0",
    "value-accumulate-0": "accumulate=0 is not allowed; accumulate must be an integer >= 1",
    "value-accumulate-float": "accumulate=1.5 is not allowed; accumulate must be an integer >= 1",
    "value-precision-fp8": "precision=fp8 is not allowed; precision must be one of fp32, amp, bf16",
    "device-tpu": "device=tpu is not allowed; device must be auto, cpu, cuda, cuda:N or mps",
    "device-cuda0": "is not available: this machine has no CUDA device",
    "device-cuda": "device=cuda is not available: this machine has no CUDA device",
    "device-huge-index": "is not a device; device must be auto, cpu, cuda, cuda:N or mps",
    "value-lr-negative": "optimizer.lr=-1 is not allowed; optimizer.lr must be a finite number >= 0",
    "value-lr-inf": "optimizer.lr=inf is not allowed; optimizer.lr must be a finite number >= 0",
    "value-lr-1e400": "optimizer.lr=inf is not allowed",
    "value-lr-list-in-a-single-run": "optimizer.lr=-1 is not allowed",
    "value-batch_size-0": "data.batch_size=0 is not allowed; data.batch_size must be an integer >= 1",
    "value-max_steps-negative": "trainer.max_steps=-5 is not allowed; trainer.max_steps must be an integer",
    "value-fused-maybe": "optimizer.fused=maybe is not allowed; optimizer.fused must be true, false or null",
    "value-val_fraction-1.5": "val_fraction=1.5 is not allowed; it must be a number in (0, 1)",
    "key-unknown-top": "foo=1: 'foo' is not a config key; known top-level keys: accumulate, ",
    "key-plus-foo": "foo=1: 'foo' is not a config key; known top-level keys: accumulate, ",
    "key-trainer-max_step": (
        "trainer.max_step=5: trainer has no key max_step; did you mean trainer.max_steps? its keys: "
        "max_steps,"
    ),
    "key-model-hiden": "model.hiden: model has no key hiden; did you mean model.hidden (an argument of ",
    "value-model-target-nope": (
        "model._target_=nope.nothing could not be built (ModuleNotFoundError: No module named 'nope')"
    ),
    "value-dataset-target-not-in-module": (
        "data.dataset._target_=runner.data.no_such_loader could not be built"
    ),
    "syntax-umlaut-device": "device=cpü: not a valid override (",
    "syntax-unclosed-list": "model.hidden=[64: not a valid override (",
    "group-optimizer-lion": "optimizer=lion: no such option; optimizer is one of adam, adamw, sgd",
    "group-model-climbs-out": (
        "model=../../elsewhere: no such option; model is one of char_rnn, char_transformer, cnn,"
    ),
    "group-hydra-launcher-null": "hydra/launcher=null: a config group takes one of its options, not null; ",
    "null-model": "model=null: model must name one of its options: char_rnn, char_transformer, cnn,",
    "delete-clip": "~clip: clip is one of runner's settings and cannot be deleted; set it instead",
    "cli-multirun-and-cfg-job": "--cfg and --multirun: give one of them",
    "value-hidden-zero": (
        "model: runner.models.mlp refused input_shape=[1, 8, 8], num_outputs=10, hidden=[0], "
    ),
    "ctor-dropout-negative": "dropout=-0.1 is not allowed; dropout must be a number in [0, 1)",
    "ctor-betas-2-3": "optimizer.betas=[2, 3] is not allowed; optimizer.betas must be two numbers in [0, 1)",
    "ctor-sgd-nesterov-no-momentum": "optimizer: torch.optim.SGD refused lr=0.01, momentum=0.0, ",
    "place-dangling-outputs-symlink": ("cannot write outputs: it is a link to ", "hydra.run.dir=DIR"),
    "place-proc-run-dir": ("cannot write /proc/runner_test: No such file or directory", "hydra.run.dir=DIR"),
    "place-run-dir-under-a-file": ("cannot write /etc/passwd/run: Not a directory", "hydra.run.dir=DIR"),
    "fit-char_rnn-on-digits": (
        "the model (CharRNN) and the data do not fit: on the first batch, list of 2 (Tensor[32, 1, 8, 8] "
        "float32, Tensor[32] int64), the model and loss=CrossEntropyLoss failed"
    ),
    "fit-num_outputs-too-few": "the first batch has class labels 0..9, but the model has 3 outputs",
    "cli-unknown-flag": "--nope: not a flag; the flags are Hydra's",
    "value-ema-decay-1.5": (
        "callbacks.ema: runner.training.callbacks.EMA refused decay=1.5, warmup=false, inv_gamma=1.0, "
        "power=null (ValueError: ema takes a decay in (0, 1)"
    ),
    "sweep-glob-on-a-setting": "optimizer.lr=glob(*): glob() picks options of a config group (callbacks, ",
    "sweep-glob-matches-nothing": (
        "model=glob(zz*): matches none of the options of model: char_rnn, char_transformer, cnn, mlp"
    ),
    "sweep-joblib-n_jobs-0": (
        "hydra.launcher.n_jobs=0: the joblib launcher runs n_jobs jobs at once; give a positive number, or "
        "-1 for one job per CPU core"
    ),
    "sweep-submitit-timeout-negative": (
        "hydra.launcher.timeout_min=-1: the submitit launcher's timeout_min is at least 1"
    ),
    "sweep-dir-unset-env-var": (
        f"hydra.sweep.dir=sweeps/{UNSET}: it cannot be resolved (KeyError raised while resolving "
        "interpolation: \"Environment variable 'RUNNER_BAD_INPUTS_UNSET' not found\")"
    ),
    "run-dir-unset-env-var": f"hydra.run.dir=runs/{UNSET}: it cannot be resolved",
    "run-dir-300-character-name": "is 300 bytes long; file systems take names of at most 255 bytes",
    "sweep-subdir-300-character-name": "is 300 bytes long; file systems take names of at most 255 bytes",
    "doctor-multirun": (
        "doctor looks at one configuration, so it takes no -m/--multirun (sweeps are for train); run doctor "
        "once per setting"
    ),
    "lr_find-multirun": "lr_find looks at one configuration, so it takes no -m/",
    "report-summary-csv-is-a-folder": (
        "runner: error: cannot write sweep/summary.csv: Is a directory; move that folder away: the summary "
        "is written under its name"
    ),
    "resume-read-only-run-dir": (
        "runner: error: resume=run: ",
        "/run is read-only, and a resume writes its checkpoints and logs into the run directory; make it "
        "writable (chmod -R u+w ",
        "/run) or resume a copy of the run",
    ),
    "cli-unknown-command": "unknown command 'fit'",
    "rundir-finished-run-no-resume": "run: run already holds a run (checkpoints/, ",
    "rundir-killed-run-no-resume": "to continue it, give resume=run (or resume=auto)",
    "rundir-stray-submitit-executor": "run already holds a run",
    "rundir-resume-null": "run already holds a run",
    "rundir-named-by-a-config-file": "hydra.run.dir=run: run already holds",
    "rundir-empty": "hydra.run.dir=: an empty hydra.run.dir writes into the current",
    "rundir-blank": "an empty hydra.run.dir writes into the current folder",
    "rundir-sweep-dir-empty": "an empty hydra.sweep.dir writes",
    "bounds-num_workers-100000": (
        "data.num_workers=100000 is not allowed; data.num_workers must be an integer in [0, "
    ),
    "bounds-max_steps-2pow64": (
        "trainer.max_steps=18446744073709551616 is not allowed; 18446744073709551616 does not fit in 64 bits"
    ),
    "bounds-hidden-2pow70-in-list": "model.hidden=[64, 1180591620717411303424] is not allowed",
    "bounds-sweep-seed-2pow63": "seed=9223372036854775808 is not ",
    "env-world_size-junk": "WORLD_SIZE='two' (an environment variable) is not allowed",
    "env-world_size-0": "WORLD_SIZE must be an integer >= 1",
    "env-rank-junk": "RANK='x' (an environment variable) is not allowed; RANK must be 0",
    "env-rank-past-world_size": "RANK must be an integer in [0, 2)",
    "env-local_rank-negative": "LOCAL_RANK='-1' (an environment variable) is not",
    "env-world_size-2-alone": (
        "WORLD_SIZE=2 asks for 2 processes, but RANK, MASTER_ADDR, MASTER_PORT are not set; start several "
        "processes with torchrun"
    ),
    "env-master_port-junk": "MASTER_PORT='http'",
    "env-rank-0-without-peers": (
        "WORLD_SIZE=2: the 2 processes did not all meet at 127.0.0.1:",
        "within peer_timeout_s=3",
    ),
    "env-rank-1-without-rank-0": "within peer_timeout_s=3 (rank 0 is not listening there)",
    "torchrun-existing-run": ("runner: error: hydra.run.dir=run: ", "already holds a run"),
    "i32-eval-shared-values": (
        "more work to check than a file of its size holds (values shared many times over)"
    ),
    "i32-resume-shared-values": "no valid checkpoint in",
    "i32-resume-alias-overrides": "holds a YAML alias (*a0), which no record runner or Hydra writes",
    "i32-report-unicode-digit-job": "report grid/\u00b3: there is no such directory",
    "i32-resolver-sweep-job-dir-junk": "hydra.sweep.subdir",
    "i32-resolver-sweep-overrides-junk": "hydra.sweep.subdir",
    "i32-resume-last-is-a-folder": "checkpoints/last.pt is not a file",
    "i32-resume-seed-negative": "no valid checkpoint in",
    "i32-resume-seed-huge": "no valid checkpoint in",
    "i32-search-study-low-above-high": "cannot be read",
    "i32-search-study-attr-not-json": "cannot be read",
    "i32-search-study-attr-deep": "cannot be read",
    "hidden-resume-record-option-in-hydra-callbacks": (
        "holds +scheduler@hydra.callbacks.evil=onecycle, which runner does not re-apply"
    ),
    "hidden-resume-latest-record-option-in-hydra-callbacks": (
        "holds +scheduler@hydra.callbacks.evil=onecycle, which runner does not re-apply"
    ),
    "hidden-resume-record-option-in-global-hydra": (
        "holds +scheduler@_global_.hydra.callbacks.evil=onecycle, which runner does not re-apply"
    ),
    "hidden-resume-record-option-as-job-logging": (
        "holds +callbacks@hydra.job_logging=ema, which runner does not re-apply"
    ),
    "hidden-resume-record-env-interpolation": (
        "holds optimizer.lr=${oc.env:RUNNER_BAD_INPUTS_LR}, an interpolation, which runner does not resolve "
        "from a run directory"
    ),
    **{
        f"hidden-eval-live-{name}": (
            f"checkpoint live_{name}.pt holds model.",
            "an interpolation; runner saves a run's config resolved",
        )
        for name in ("bomb", "create")
    },
    "hidden-eval-config-nested-too-deep": "its contents are nested too deeply for a runner checkpoint",
    "hidden-resume-record-nested-too-deep": (
        "cannot be read (it is nested too deeply, more than 100 levels); the run directory is damaged"
    ),
    "hidden-resume-forged-step-text": "no valid checkpoint in",
    "hidden-resume-forged-rng-junk": "its random states are not ones runner saves",
    "hidden-resume-forged-config-empty": "these settings differ from the run being resumed",
    "hidden-resume-lock-nested-too-deep": (" is locked by ", ".lock, which cannot be read"),
    "hidden-resume-lock-is-a-fifo": (" is locked by ", ".lock, which cannot be read"),
}
# What a command prints besides (its warnings), each part.
PRINTS: dict[str, tuple[str, ...]] = {
    "i32-report-alias-records": (
        "skipping sweep/000_seed=1/.hydra/overrides.yaml: it holds a YAML alias (*a0)",
        "skipping sweep/001_seed=2/run.yaml: it holds a YAML alias (*a0)",
    ),
    "i32-report-junk-events": ("events.out.tfevents.1.junk", "not events"),
    "i32-report-odd-job-names": ("its name is not UTF-8",),
    "i32-resume-seed-negative": ("seed (", "not hold what runner saves there"),
    "i32-resume-seed-huge": ("seed (", "not hold what runner saves there"),
    "hidden-resume-last-nested-too-deep": ("skipping checkpoint", "nested too deeply"),
    "hidden-report-fifo-result-and-device-events": (
        "skipping sweep/1/result.json: it is not a plain file",
        "skipping sweep/1/events.out.tfevents.9.zero: it is not a plain file",
        "wrote sweep/summary.csv",
    ),
}
CASES += [
    case("device-cuda", "train device=cuda"),
    case("value-lr-list-in-a-single-run", "train optimizer.lr=1e-3,-1"),
    case("value-max_steps-negative", "train trainer.max_steps=-5"),
    case("value-dataset-target-not-in-module", "train data.dataset._target_=runner.data.no_such_loader"),
    case("group-model-climbs-out", "train model=../../elsewhere"),
    case("group-hydra-launcher-null", "train hydra/launcher=null"),
    case("cli-multirun-and-cfg-job", "train -m seed=1,2 --cfg job"),
]
CASES = [replace(case, says=SAYS.get(case.id, ()), prints=PRINTS.get(case.id, ())) for case in CASES]
