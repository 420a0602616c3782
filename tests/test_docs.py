"""What a newcomer follows: every relative link of the README and of docs/ leads somewhere, the
README's five-minute plug-in runs as written and learns, the code it shows is the example's code, and
CI runs the README's test command as written."""

import dataclasses
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from conftest import REPO, TINY, composed, read_scalars

DOCS = REPO / "docs"
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
FIVE_MINUTES = "## Your own model in five minutes"


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted(DOCS.glob("*.md"))]


def prose(text: str) -> str:
    """The text outside code blocks and inline code, where a link is a link."""
    return re.sub(r"`[^`\n]*`", "", FENCE.sub("", text))


def github_slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, each space a hyphen."""
    text = heading.replace("`", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def mkdocs_slug(heading: str) -> str:
    """MkDocs' anchor for a heading (Python-Markdown's toc): runs of spaces and hyphens become one."""
    text = re.sub(r"[^\w\s-]", "", heading.replace("`", "")).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def headings(path: Path) -> list[str]:
    text = FENCE.sub("", path.read_text())
    return [match[1] for match in re.finditer(r"^#{1,6} (.+)$", text, flags=re.MULTILINE)]


def relative_links(path: Path) -> list[str]:
    return [
        target
        for target in LINK.findall(prose(path.read_text()))
        if not re.match(r"[a-z]+:", target)  # http:, https:, mailto: lead elsewhere
    ]


def broken(path: Path, target: str) -> str | None:
    """Why a link from ``path`` leads nowhere, or None when its file (and heading) exists."""
    file_part, _, anchor = target.partition("#")
    destination = (path.parent / file_part).resolve() if file_part else path
    if not destination.exists():
        return f"{path.name}: {target}: no such file"
    if anchor and anchor not in {github_slug(heading) for heading in headings(destination)}:
        return f"{path.name}: {target}: no heading with that anchor"
    return None


def test_every_relative_link_in_the_readme_and_docs_resolves():
    links = {path: relative_links(path) for path in pages()}
    assert links[REPO / "README.md"] and sum(map(len, links.values())) >= 20  # the links are read
    assert [
        why for path, targets in links.items() for target in targets if (why := broken(path, target))
    ] == []


def test_every_docs_page_is_linked_from_the_readme_and_listed_in_the_site():
    readme_targets = {target.partition("#")[0] for target in relative_links(REPO / "README.md")}
    nav = yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"]
    listed = re.findall(r"[\w-]+\.md", str(nav))
    for page in DOCS.glob("*.md"):
        assert f"docs/{page.name}" in readme_targets, page.name
        assert page.name in listed, page.name


def test_headings_have_the_same_anchor_on_github_and_in_the_built_site():
    """A link written for GitHub (``sweeps.md#sweeps-that-continue``) works in the site too."""
    for path in pages():
        for heading in headings(path):
            assert github_slug(heading) == mkdocs_slug(heading), (path.name, heading)


def five_minutes() -> str:
    readme = (REPO / "README.md").read_text()
    assert readme.count(FIVE_MINUTES) == 1
    return readme.split(FIVE_MINUTES)[1].split("\n## ")[0]


def blocks(section: str, language: str) -> list[tuple[str, str]]:
    """The (info string, text) of each code block in a section whose language is ``language``."""
    return [(info, text) for info, text in FENCE.findall(section) if info.split(" ")[0] == language]


def five_minute_commands() -> list[str]:
    """The commands that train the plug-in from the repository root (the section starts with
    ``runner init``: tests/test_project.py runs that one)."""
    lines = [line for _, text in blocks(five_minutes(), "bash") for line in text.splitlines() if line.strip()]
    assert lines[0].startswith("python -m runner init ")
    return lines[1:]


def test_the_code_the_five_minute_section_shows_is_the_examples_code():
    shown = blocks(five_minutes(), "python") + blocks(five_minutes(), "yaml")
    assert len(shown) >= 4
    for info, text in shown:
        (path,) = re.findall(r'title="([^"]+)"', info)
        assert text in (REPO / path).read_text(), path


def parsed(command: str) -> tuple[str, list[str]]:
    """A five-minute command's PYTHONPATH and the overrides it gives ``python -m runner train``."""
    words = shlex.split(command)
    assert words[0].startswith("PYTHONPATH=") and words[1:5] == ["python", "-m", "runner", "train"]
    return words[0].removeprefix("PYTHONPATH="), words[5:]


def final_accuracy(run_dir: Path) -> float:
    return read_scalars(run_dir)["val/acc"][-1][1]


@pytest.mark.parametrize("command", five_minute_commands())
def test_each_five_minute_command_trains_the_users_model_in_process(command, train_here, monkeypatch):
    """The README's plug-in, in this process, from the repository root as the README says: the
    model with a hidden layer learns XOR, the linear model it is compared with stays at chance."""
    python_path, overrides = parsed(command)
    monkeypatch.chdir(REPO)
    monkeypatch.syspath_prepend(str(REPO / python_path))
    run_dir = train_here(*overrides)
    config = yaml.safe_load((run_dir / "run.yaml").read_text())
    assert config["data"]["dataset"]["_target_"] == "my_project.xor_blobs"
    assert config["model"]["_target_"].startswith("my_project.")
    if "model=two_layer" in overrides:
        assert config["model"]["_target_"] == "my_project.TwoLayerNet"
        assert final_accuracy(run_dir) >= 0.9  # chance is 0.5
    else:
        assert "model=linear" in overrides
        assert final_accuracy(run_dir) <= 0.7


def test_the_five_minute_section_runs_the_learning_model_first():
    commands = [parsed(command)[1] for command in five_minute_commands()]
    assert "model=two_layer" in commands[0] and "data=xor" in commands[0]


@pytest.mark.slow
def test_the_first_five_minute_command_runs_verbatim_from_the_repository_root(tmp_path):
    """The line a newcomer pastes, run by a shell in the repository root (its run directory aside)."""
    command = five_minute_commands()[0]
    environment = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
    }
    result = subprocess.run(
        ["bash", "-c", f"{command} hydra.run.dir={shlex.quote(str(tmp_path / 'run'))}"],
        cwd=REPO, env=environment, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert final_accuracy(tmp_path / "run") >= 0.9
    assert "| val/acc" in result.stdout + result.stderr


def readme_test_command() -> str:
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Two commands")[1].split("\n## ")[0]
    (command,) = [
        line for _, text in FENCE.findall(section) for line in text.splitlines() if "pytest" in line
    ]
    return command


def test_ci_runs_the_readme_test_command_verbatim_and_it_builds_the_docs():
    command = readme_test_command()
    ci_lines = (REPO / ".ci" / "run").read_text().splitlines()
    setup, _, rest = command.partition(" && pip install ")
    assert setup == "python3 -m venv .venv && . .venv/bin/activate"
    assert f"pip install {rest}" in ci_lines
    assert "mkdocs build --strict" in rest and rest.endswith("python -m pytest -n 2")
    pyproject = (REPO / "pyproject.toml").read_text()  # the test extra brings the docs extra
    assert re.search(r'^docs = \[.*"mkdocs-material', pyproject, flags=re.MULTILINE)
    assert re.search(r'^test = \["runner\[[^\]]*\bdocs\b', pyproject, flags=re.MULTILINE)


def section(page: Path, heading: str) -> str:
    """The text of a page's section, from its heading to the next heading of any level."""
    text = page.read_text()
    assert text.count(f"\n{heading}\n") == 1, heading
    return re.split(r"\n#{1,6} ", text.split(f"\n{heading}\n")[1])[0]


def first_column_names(table: str) -> set[str]:
    """The names in backquotes in the first column of each row of a Markdown table."""
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    return {name for row in rows for name in re.findall(r"`([^`]+)`", row.split(" | ")[0])}


# Keys a checkpoint has only with a feature the tiny run does not use: ema, a stream that keeps its
# position, a model that carries state, data.sampler.
KEYS_OF_FEATURES = {
    "averaged_model_state_dict", "dataset_state_dict", "carried_state_dict", "sampler_state_dict",
    "frozen_weights_sha256", "stream_loader_state_dict",
}  # fmt: skip


def test_the_checkpoint_key_table_lists_every_key_a_checkpoint_holds(train_here):
    """docs/checkpoints.md's table is what a user's own restore code reads: no key is missing from it,
    and none it lists is made up."""
    documented = first_column_names(section(DOCS / "checkpoints.md", "## What a checkpoint holds"))
    run_dir = train_here(*TINY)
    saved = set(torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True))
    assert saved - documented == set()
    assert documented - saved == KEYS_OF_FEATURES


def documented_refusals() -> list[tuple[str, str]]:
    """``(command line, error line)`` for each ``$ python -m runner ...`` example of the configuration
    page that shows a ``runner: error:`` line."""
    text = (DOCS / "configuration.md").read_text()
    example = re.compile(r"^\$ python -m runner (.+?)(?:\s+#.*)?\n(runner: error: .+)$", flags=re.MULTILINE)
    pairs = example.findall(text)
    return [(command.strip(), error) for command, error in pairs]


@pytest.mark.parametrize(("command", "error"), documented_refusals())
def test_each_refusal_the_configuration_page_shows_is_what_runner_prints(
    command, error, tmp_path, monkeypatch, capsys
):
    """In this process, through the CLI's entry point: exit 2, the line as shown ("..." stands for
    the text left out), nothing written."""
    from runner.cli.main import main

    if "device=cuda" in command and torch.cuda.is_available():
        pytest.skip("the example is for a machine without CUDA")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        main(shlex.split(command))
    assert exited.value.code == 2
    printed = capsys.readouterr().err.strip().splitlines()[-1]
    shown = ".*".join(re.escape(part) for part in error.split("..."))
    assert re.fullmatch(shown, printed), printed
    assert list(tmp_path.iterdir()) == []


def test_the_configuration_page_shows_refusals():
    assert len(documented_refusals()) >= 6


def option_row(page: Path, key: str) -> str:
    (row,) = [line for line in page.read_text().splitlines() if line.startswith(f"| `{key}` |")]
    return row


def test_the_sweeps_page_offers_every_sampler_and_pruner_option_but_cmaes():
    """``cmaes`` is an option only to be refused with its reason (its state is a pickle in the
    study): the page must not offer it, and must say why it is refused."""
    from runner.cli.hydra.hydra_app import options_of

    def registered(group: str) -> set[str]:
        return set(options_of(group))

    samplers = option_row(DOCS / "sweeps.md", "sampler")
    choices = re.sub(r"\([^)]*\)", "", samplers.split(" | ")[1].split(";")[0])  # the list before the ;
    offered = set(re.findall(r"`(?:hydra/sweeper/sampler=)?(\w+)`", choices))
    assert offered == registered("hydra/sweeper/sampler") - {"cmaes"}
    assert re.search(r"`cmaes` is refused: .*pickle", samplers)
    pruners = set(re.findall(r"`(?:hydra/sweeper/pruner=)?(\w+)`", option_row(DOCS / "sweeps.md", "pruner")))
    assert registered("hydra/sweeper/pruner") <= pruners


def test_the_run_plan_the_runs_page_shows_is_the_plan_that_command_prints(train_here, caplog):
    """docs/runs.md shows the plan of ``train precision=amp accumulate=4 trainer.max_steps=240`` on a
    CPU: every row as runner prints it, but the run directory (the page's is an example path)."""
    page = (DOCS / "runs.md").read_text()
    (shown,) = [text for _, text in FENCE.findall(page) if text.startswith("run plan\n")]
    assert "`python -m runner train precision=amp\naccumulate=4 trainer.max_steps=240` on a CPU" in page
    if torch.cuda.is_available():
        pytest.skip("the page shows a CPU run")
    train_here("precision=amp", "accumulate=4", "trainer.max_steps=240")
    (printed,) = [message for message in caplog.messages if message.startswith("run plan")]

    def rows(plan: str) -> list[str]:
        return [line for line in plan.strip().splitlines() if not re.match(r"  (run dir|watch) ", line)]

    assert rows(printed) == rows(shown)
    # The page's validation lines are that run's: with train/loss where the step was logged, without.
    before_tensorboard = page.split("\n## TensorBoard\n")[0]
    shown_lines = re.findall(r"`(epoch \d+ step \d+ \|[^`]+)`", before_tensorboard)
    assert len(shown_lines) == 2 and set(shown_lines) <= set(caplog.messages)


def layout_by_folder() -> tuple[str, dict[str, str]]:
    """docs/development.md's layout block, and the text under each folder of src/runner (``  name/``)."""
    text = (DOCS / "development.md").read_text()
    (layout,) = [block for _, block in FENCE.findall(text) if "src/runner/" in block]
    under = re.compile(r"^  (\w+)/(.*?)(?=^  \w+/|^  \w+\.py|^\S)", flags=re.MULTILINE | re.DOTALL)
    return layout, dict(under.findall(layout))


def test_the_development_layout_names_every_module_in_its_folder():
    """docs/development.md's layout is where a contributor looks for a module: each one of
    src/runner is named under its own folder, and each file the layout names under a folder exists."""
    layout, folders = layout_by_folder()
    package = REPO / "src" / "runner"
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package)
        package_marker = path.name == "__init__.py" and relative.parent.name != "doctor"
        if package_marker:
            continue
        where = layout if len(relative.parts) == 1 else folders.get(relative.parts[0], "")
        assert re.search(rf"\b{re.escape(path.name)}\b", where), f"{relative} is not in the layout"
    for folder, text in folders.items():
        for name in re.findall(r"\b(\w+\.py)\b", text):
            named = f"{folder}/{name}"
            assert list((package / folder).rglob(name)), f"{named} does not exist"


def test_the_readmes_validation_line_is_what_the_default_run_prints(train_here, caplog):
    """The front page shows one line of ``python -m runner train``; the default run's first two
    epochs print it (the later epochs do not change them)."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("## What a run gives you")[1].split("\n## ")[0]
    (shown,) = re.findall(r"^epoch \d+ step \d+ \|.*$", section, flags=re.MULTILINE)
    if torch.cuda.is_available():
        pytest.skip("the README shows a CPU run")
    train_here("trainer.max_epochs=2")
    assert shown in caplog.messages


def test_the_configuration_page_has_a_row_for_every_setting_and_names_every_section_key():
    """Every top-level setting of the schema is a row of the settings table (its key first), and
    every key of trainer, data, checkpoint and fsdp is named (``data.sampler``) in the reference."""
    from runner.config import schema

    rows = [line for line in (DOCS / "configuration.md").read_text().splitlines() if line.startswith("| `")]
    row_keys = {name.split(".")[0] for name in first_column_names("\n".join(rows))}
    settings = {item.name for item in dataclasses.fields(schema.RunConfig)}
    assert settings - row_keys == set()
    reference = "".join(page.read_text() for page in DOCS.glob("*.md"))
    sections = {"trainer": schema.TrainerConfig, "data": schema.DataConfig,
                "checkpoint": schema.CheckpointConfig, "fsdp": schema.FsdpConfig}  # fmt: skip
    unnamed = [
        f"{section}.{item.name}"
        for section, config in sections.items()
        for item in dataclasses.fields(config)
        if f"`{section}.{item.name}" not in reference
    ]
    assert unnamed == []


COMING_FROM = DOCS / "coming-from.md"
OUTSIDE = ("timm", "peft", "diffusers")  # libraries a command's option needs that runner does not


def coming_from_commands() -> list[str]:
    """Every ``python -m runner train`` line of the "Coming from another library" page."""
    text = COMING_FROM.read_text()
    lines = [line for _, code in blocks(text, "bash") for line in code.splitlines()]
    assert all(line.startswith("python -m runner train ") for line in lines), lines
    return lines


def coming_from_configs(folder: Path) -> Path:
    """The page's config files (``title="conf/..."``), written into ``folder`` as a project's are."""
    for info, text in blocks(COMING_FROM.read_text(), "yaml"):
        (relative,) = re.findall(r'title="conf/([^"]+)"', info)
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).write_text(text)
    return folder


@pytest.mark.parametrize("command", coming_from_commands())
def test_each_coming_from_command_is_runners_and_trains_with_runners_parts(command, train_here, tmp_path):
    """Each line composes with runner's settings (a key or value runner lacks is refused); one that
    needs no other library trains a few steps in this process, as the line says."""
    overrides = shlex.split(command)[4:]
    search = f"hydra.searchpath=[file://{coming_from_configs(tmp_path / 'conf')}]"
    config = composed(search, *overrides)
    outside = [name for name in OUTSIDE if name in str(dataclasses.asdict(config))]
    if not outside:
        run_dir = train_here(search, *overrides, "trainer.max_steps=3", "trainer.max_epochs=null")
        assert yaml.safe_load((run_dir / "run.yaml").read_text()) is not None
        assert len(read_scalars(run_dir)["train/loss"]) >= 1
    else:
        assert outside == ["timm"] and config.scheduler["_target_"] == "timm.scheduler.CosineLRScheduler"


def test_a_loader_without_a_generator_draws_from_the_global_one_each_epoch_and_runners_do_not():
    """The page's DataLoader note: an epoch of a loader without ``generator=`` moves torch's global
    generator (even unshuffled), one with its own (the page's line, and runner's loaders) does not."""
    from torch.utils.data import DataLoader, TensorDataset

    from runner.data.loading import make_loaders

    train_set = TensorDataset(torch.arange(64.0))
    runners, _, _ = make_loaders(
        train_set, train_set, 32, shuffle=True, num_workers=0, seed=0, pin_memory=False
    )
    shown = re.search(r"^loader = (DataLoader\(.+\))$", COMING_FROM.read_text(), flags=re.MULTILINE)[1]
    loaders = {
        "unshuffled": DataLoader(train_set, batch_size=32),
        "shuffled": DataLoader(train_set, batch_size=32, shuffle=True),
        "the page's": eval(shown, {"DataLoader": DataLoader, "train_set": train_set, "torch": torch}),
        "runner's": runners,
    }
    moved = {}
    for name, loader in loaders.items():
        torch.manual_seed(0)
        before = torch.get_rng_state()
        for _ in range(2):  # two epochs
            list(loader)
        moved[name] = not torch.equal(before, torch.get_rng_state())
    assert moved == {"unshuffled": True, "shuffled": True, "the page's": False, "runner's": False}


def test_the_coming_from_loader_and_runners_torch_shuffle_read_the_same_batches():
    """The page's DataLoader (shuffle=True with a generator of its own) against runner's loader built from
    the page's data.sampler line, three epochs batch by batch; runner's default order is another."""
    from hydra.utils import instantiate
    from torch.utils.data import DataLoader

    from runner.data.loading import epoch_batches
    from runner.experiment.setup import prepare

    page = COMING_FROM.read_text()
    shown = re.search(r"^loader = (DataLoader\(.+\))$", page, flags=re.MULTILINE)[1]
    (command,) = [line for line in coming_from_commands() if "TorchShuffle" in line]

    def runners_epochs(*overrides: str) -> list:
        config = composed(*overrides)
        prepared = prepare(config, instantiate, config.seed)
        loader, sampler = prepared.train_loader, prepared.train_sampler
        return [
            list(epoch_batches(loader, sampler, epoch, 0)) for epoch in range(3)
        ], prepared.parts.train_set

    matching, train_set = runners_epochs(*shlex.split(command)[4:])
    default, _ = runners_epochs()
    loader = eval(shown, {"DataLoader": DataLoader, "train_set": train_set, "torch": torch})
    loops = [list(loader) for _ in range(3)]

    def same(first: list, second: list) -> bool:
        """Two batches, (inputs, targets), equal tensor by tensor."""
        return len(first) == len(second) and all(map(torch.equal, first, second))

    assert [len(epoch) for epoch in matching] == [len(epoch) for epoch in loops] == [45] * 3
    for epoch in range(3):
        assert all(same(a, b) for a, b in zip(matching[epoch], loops[epoch], strict=True)), epoch
    assert not torch.equal(default[0][0][1], loops[0][0][1])


@pytest.mark.parametrize("persistent", [False, True])
def test_torch_shuffle_draws_as_a_shuffling_loader_with_or_without_persistent_workers(persistent):
    from torch.utils.data import DataLoader, TensorDataset

    from runner.data.torch_order import TorchShuffle

    indices = TensorDataset(torch.arange(40))
    loader = DataLoader(indices, batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(3),
                        num_workers=1 if persistent else 0, persistent_workers=persistent)  # fmt: skip
    read = [[i for (batch,) in loader for i in batch.tolist()] for _ in range(3)]
    order = TorchShuffle(indices, torch.Generator().manual_seed(3), persistent_workers=persistent)
    assert [list(order) for _ in range(3)] == read
