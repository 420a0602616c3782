"""``runner export --format safetensors`` of a model with tied weights (export.py's promise): safetensors'
``save_file`` refuses tensors that share memory, so a tied weight is written under each of its names,
and the file holds the trained model's every weight."""

import pytest
import torch
from conftest import TINY

from runner.cli.tools import main_export

safetensors_torch = pytest.importorskip("safetensors.torch", reason="safetensors (the peft extra)")


def test_a_tied_weight_is_exported_under_each_of_its_names(train_here):
    run_dir = train_here(*TINY, "model._target_=tied.TiedNet", "~model.hidden", "~model.dropout")
    main_export([str(run_dir), "--format", "safetensors", "allow_targets=tied.TiedNet"])
    written = safetensors_torch.load_file(str(run_dir / "export" / "safetensors" / "model.safetensors"))
    trained = torch.load(run_dir / "checkpoints" / "best.pt")["model_state_dict"]
    assert written.keys() == trained.keys() and {"first.weight", "second.weight"} <= written.keys()
    assert all(torch.equal(written[name], trained[name]) for name in trained)
    assert torch.equal(written["first.weight"], written["second.weight"])
