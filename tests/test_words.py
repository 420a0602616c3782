"""What a person reads: things are named by what they are ("seed" is only ever the random seed, never
the course chapter runner grew out of), the debugging checklist's stated size is the number of checks
``doctor`` runs, and output that is not a terminal carries no colour codes."""

import ast
import re
from pathlib import Path

import pytest
from conftest import REPO, run_cli

from runner.cli import main as cli_main
from runner.tools.doctor import CHECKS

# Wording that names the source document instead of the thing: "the seed's clipping lab", "the seed
# chapter", "the template's order", "the seven checks". "seed" stays free for the random seed.
COURSE_WORDING = re.compile(
    r"\bseed's\b|\bseed (chapter|document|course|lab|template|text)\b"
    r"|\b(the|its) (template|lab|course|chapter)\b|\btemplate's\b|\bseven checks\b",
    re.IGNORECASE,
)
TEXT_SUFFIXES = {".md", ".txt", ".rst", ".yaml", ".yml", ".py"}
NUMBER_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
                "nine": 9, "ten": 10, "eleven": 11, "twelve": 12}  # fmt: skip
CHECK_COUNT = re.compile(r"\b(\d+|" + "|".join(NUMBER_WORDS) + r") checks\b", re.IGNORECASE)
ANSI = re.compile(r"\x1b\[")


def user_texts() -> dict[str, str]:
    """What a user reads in the repository: the README, docs/, the config comments, the scripts."""
    paths = [REPO / "README.md", *(REPO / "docs").rglob("*"), *(REPO / "conf").rglob("*.yaml"),
             *(REPO / "scripts").glob("*.py")]  # fmt: skip
    return {
        str(path.relative_to(REPO)): path.read_text()
        for path in paths
        if path.is_file() and path.suffix in TEXT_SUFFIXES
    }


def course_wording(texts: dict[str, str]) -> list[str]:
    return [
        f"{name}:{number}: {line.strip()}"
        for name, text in texts.items()
        for number, line in enumerate(text.splitlines(), start=1)
        if COURSE_WORDING.search(line)
    ]


def messages_in_source() -> dict[str, str]:
    """Every string runner's code may print or log (its string constants, docstrings left out), by
    where it is."""
    messages = {}
    for path in (REPO / "src" / "runner").rglob("*.py"):
        tree = ast.parse(path.read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                messages[f"{path.relative_to(REPO)}:{node.lineno}"] = node.value
    return messages


def help_of(capsys: pytest.CaptureFixture, *arguments: str) -> str:
    """A help text as ``python -m runner ARGUMENTS`` prints it; a help exits 0."""
    with pytest.raises(SystemExit) as exited:
        cli_main.main(list(arguments))
    assert exited.value.code == 0
    return capsys.readouterr().out


def test_readme_docs_configs_and_scripts_name_things_by_what_they_are():
    texts = user_texts()
    assert "README.md" in texts and any(name.startswith("conf/") for name in texts)
    assert course_wording(texts) == []


def test_messages_runner_prints_name_things_by_what_they_are():
    messages = messages_in_source()
    assert any("debugging checklist" in text for text in messages.values())  # the strings are read
    assert course_wording(messages) == []


def test_help_of_runner_eval_and_report_names_things_by_what_they_are(capsys):
    helps = {
        "runner --help": help_of(capsys, "--help"),
        "eval --help": help_of(capsys, "eval", "--help"),
        "report -h": help_of(capsys, "report", "-h"),
    }
    assert course_wording(helps) == []
    for command in cli_main.COMMANDS:  # the overview names every command, and how to get its help
        assert f"\n  {command} " in helps["runner --help"]
    assert "COMMAND --help" in helps["runner --help"]
    assert "ckpt=FILE" in helps["eval --help"] and "split=val|test" in helps["eval --help"]
    assert "report DIR" in helps["report -h"]


@pytest.mark.slow
@pytest.mark.parametrize("command", ["train", "doctor", "lr_find"])
def test_hydra_help_of_each_command_names_it_and_names_things_by_what_they_are(command, tmp_path):
    result = run_cli(command, "--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"{command} is powered by Hydra")
    assert course_wording({f"{command} --help": result.stdout}) == []
    assert not list(tmp_path.iterdir())  # a help writes nothing


def docs_page(name: str) -> str:
    """A page of the reference in ``docs/``."""
    return (REPO / "docs" / name).read_text()


def test_every_stated_number_of_checks_is_the_number_doctor_runs(capsys):
    """The usage line, the README and the docs say how many checks the checklist has; doctor runs
    ``CHECKS``, and the doctor page numbers each one."""
    usage = help_of(capsys, "--help")
    texts = [usage, (REPO / "README.md").read_text(), *(p.read_text() for p in (REPO / "docs").glob("*.md"))]
    stated = [match[1].lower() for text in texts for match in CHECK_COUNT.finditer(text)]
    assert stated, "the usage and the docs state the checklist's size"
    assert [int(NUMBER_WORDS.get(word, word)) for word in stated] == [len(CHECKS)] * len(stated)
    doctor = docs_page("doctor.md")
    assert CHECK_COUNT.search(doctor), "the doctor page states the checklist's size"
    section = doctor.split("# When training breaks: `runner doctor`")[1].split("It prints a table")[0]
    numbered = re.findall(r"^(\d+)\. ", section, flags=re.MULTILINE)
    assert numbered == [str(number) for number in range(1, len(CHECKS) + 1)]


def checkpoint_examples(text: str) -> list[str]:
    return re.findall(r"\bstep_\d+\.pt\b", text)


def test_readme_and_docs_name_periodic_checkpoints_by_example_not_as_step_n():
    """``step_<N>.pt`` reads as ``step_45.pt``; the files are zero-padded, and the README and the
    checkpoints page show one (its length is checked against written files in the slow table test)."""
    from runner.checkpoint.policy import PERIODIC_NAME

    pages = {"README.md": (REPO / "README.md").read_text(), "checkpoints.md": docs_page("checkpoints.md")}
    pages |= {path.name: path.read_text() for path in (REPO / "docs").glob("*.md")}
    for name in ("README.md", "checkpoints.md"):
        assert checkpoint_examples(pages[name]), name
    for name, text in pages.items():
        assert all(PERIODIC_NAME.fullmatch(example) for example in checkpoint_examples(text)), name
        assert "step_<N>.pt" not in text, name


@pytest.mark.slow
def test_an_optuna_sweep_writes_no_colour_codes_where_output_is_not_a_terminal(tmp_path):
    """Output to a file or a pipe (a scheduler's log, ``> out.txt 2>&1``) and the sweep's files hold
    plain text: no ANSI colour codes from Optuna's or anyone's log handler."""
    sweep_dir = tmp_path / "sweep"
    result = run_cli(
        "train", "-m", "hparams_search=digits_optuna", "hydra.sweeper.n_trials=2", "trainer.max_steps=20",
        f"hydra.sweep.dir={sweep_dir}", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    output = result.stdout + result.stderr
    assert "Optuna search: 2 trials" in output
    assert not ANSI.search(output), [line for line in output.splitlines() if ANSI.search(line)]
    text_files = [p for p in sweep_dir.rglob("*") if p.suffix in {".log", ".yaml", ".json", ".md", ".csv"}]
    assert any(path.suffix == ".log" for path in text_files)
    assert [path for path in text_files if ANSI.search(path.read_text())] == []


def table_rows(text: str, after: str, before: str) -> list[str]:
    """The first column of a docs page's table of files between two headings or phrases."""
    table = text.split(after)[1].split(before)[0]
    return re.findall(r"^\| `([^`]+)`", table, flags=re.MULTILINE)


def matches(row: str, name: str) -> bool:
    """Whether a docs table's row (``result.json``, ``checkpoints/``, ``events.out.tfevents.<time>...``)
    names this file or folder (a folder's name ends in ``/``); ``<...>`` stands for any text."""
    pattern = "".join(
        ".+" if part.startswith("<") else re.escape(part) for part in re.split(r"(<[^>]+>)", row)
    )
    return re.fullmatch(pattern, name) is not None


def unlisted(directory: Path, rows: list[str]) -> list[str]:
    names = [path.name + ("/" if path.is_dir() else "") for path in directory.iterdir()]
    return [name for name in names if not any(matches(row, name) for row in rows)]


@pytest.mark.slow
def test_docs_tables_of_files_name_everything_train_resume_and_lr_find_write(tmp_path):
    """A user who finds a file in a run's (or lr_find's) directory finds it in the docs' tables:
    the default run directory, its ``.hydra/`` record, what a resume adds, the checkpoints' names."""
    from conftest import TINY

    runs, checkpoints, doctor = docs_page("runs.md"), docs_page("checkpoints.md"), docs_page("doctor.md")
    run_rows = table_rows(runs, "# What a run writes", "At start the run prints")
    checkpoint_rows = table_rows(checkpoints, "Checkpoints live in", "Presets:")
    lr_find_rows = table_rows(doctor, "## Learning-rate finder", "## Clipping matters")

    first = run_cli("train", *TINY, "checkpoint.every_n_steps=2", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    (run_dir,) = (tmp_path / "outputs").glob("*/*")
    assert re.fullmatch(r"\d{2}-\d{2}-\d{2}-[0-9a-f]{4}", run_dir.name)  # <time>-<4 hex digits>
    assert "outputs/<date>/<time>-<suffix>/" in runs
    resumed = run_cli("train", f"resume={run_dir}", "trainer.max_steps=6", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr

    assert unlisted(run_dir, run_rows) == []
    hydra_row = next(row for row in runs.splitlines() if row.startswith("| `.hydra/` | Hydra's record"))
    record = [path.name for path in (run_dir / ".hydra").iterdir()]
    assert [name for name in record if f"`{name}`" not in hydra_row and not name.startswith("resume-")] == []
    assert any(name.startswith("resume-") for name in record) and "resume-<date>_<time>" in hydra_row
    assert unlisted(run_dir / "checkpoints", checkpoint_rows) == []
    periodic = [path.name for path in (run_dir / "checkpoints").glob("step_*.pt")]
    assert periodic and {len(name) for name in periodic} == {
        len(name) for name in checkpoint_examples(checkpoints)
    }

    found = run_cli("lr_find", *TINY, cwd=tmp_path)
    assert found.returncode in (0, 1), found.stderr  # 1: no suggestion on so small a run, files all the same
    (lr_find_dir,) = (tmp_path / "outputs" / "lr_find").glob("*/*")
    assert re.fullmatch(r"\d{2}-\d{2}-\d{2}-[0-9a-f]{4}", lr_find_dir.name)
    assert "outputs/lr_find/<date>/<time>-<suffix>/" in doctor
    assert unlisted(lr_find_dir, lr_find_rows) == []


def test_train_help_lists_the_options_to_choose_not_the_data_schema(capsys):
    """``base_data`` is the typed schema data configs build on (``defaults: [base_data]``), not a data
    set: ``--help`` leaves it out of the data options."""
    text = help_of(capsys, "train", "--help")
    data = next(line for line in text.splitlines() if line.startswith("data: "))
    assert data == "data: classification, digits, regression, text"
    assert "base_data" not in text and "model: char_rnn, char_transformer, cnn, mlp" in text
