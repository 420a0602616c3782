"""The fixtures a case needs, built in its working directory: damaged and malicious files, run folders."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import random
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hostile_inputs.judging import REPO, TOUCH, Context, Skip, environment, last_line

QUICK = "trainer.max_steps=3 trainer.max_epochs=null"  # for sweeps, so an accepted one ends soon


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


def record_with(lines: tuple[str, ...], quoted: bool = True) -> Callable[[Path, Context], None]:
    """A copy of the run whose ``.hydra/overrides.yaml`` also holds ``lines`` (``{marker}`` filled in),
    each a double-quoted YAML string, or as they are (``quoted=False``)."""

    def build(dest: Path, ctx: Context) -> None:
        copy_run(dest, ctx)
        record = dest / ".hydra" / "overrides.yaml"
        stat = record.stat()
        filled = (line.format(marker=ctx.marker) for line in lines)
        extra = "".join(f"- {json.dumps(line) if quoted else line}\n" for line in filled)
        record.write_text(record.read_text() + extra)
        os.utime(record, ns=(stat.st_atime_ns, stat.st_mtime_ns))

    return build


def tampered_run(lines: tuple[str, ...]) -> Callable[[Path, Context], None]:
    """A copy of the run whose ``.hydra/overrides.yaml`` also names ``pathlib.Path.touch``."""
    return record_with(lines, quoted=False)


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


# Sweeps to report on, damaged; full disks.
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
SHARDED = (
    "data=text", "model=char_transformer", "model.layers=2", "model.width=32",
    "trainer.val_every_n_steps=100", "checkpoint.every_n_steps=2", "checkpoint.every_n_epochs=null",
    "checkpoint.save_best=false", "strategy=fsdp",
)  # fmt: skip
_sharded_base: dict[str, Path] = {}
_sharded_lock = threading.Lock()


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


# An option a run directory's record places among Hydra's own settings (Hydra builds hydra.callbacks
# before runner checks the config), a live interpolation in a record or in a checkpoint's config (a
# resolver reads the environment; names that name each other grow without bound), files nested too
# deeply, and checkpoints whose keys hold what runner never saves there.
LIVE_CREATE = "${{oc.create:{{_target_: " + TOUCH + ", self: {marker}}}}}"  # {marker}: filled in
HYDRA_CALLBACK = (
    "+scheduler@hydra.callbacks.evil=onecycle",
    "+total_steps=1",
    f"optimizer.lr='{LIVE_CREATE}'",
)
# Eight names of eight values, eleven deep: 8**11 values once resolved.
BOMB = {"z0": [1] * 8, **{f"z{i}": [f"${{model.z{i - 1}}}"] * 8 for i in range(1, 12)}}


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
    status, stderr = ctx.runner([*shlex.split(DEEP_RESULT_SWEEP), f"hydra.sweep.dir={dest}"], dest.parent)
    if status != 0:
        raise Skip(f"could not build the sweep: {last_line(stderr)}")
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
        status, stderr = ctx.runner([*shlex.split(I32_SWEEP), f"hydra.sweep.dir={dest}"], dest.parent)
        if status != 0:
            raise Skip(f"could not build the sweep: {last_line(stderr)}")
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


# Links, the start folder, one lock, ranges, imports.
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


# Project discovery and init.
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


# Projects above, bounded resumes, export, forged keys, MLflow stores, a model's own step.
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
