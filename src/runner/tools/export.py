"""``runner export RUN --format safetensors|peft``: a run's trained model written in its library's own
format, with that library's public API: the weights as one ``model.safetensors`` (safetensors'
``save_file``), or a peft model's adapter (peft's ``save_pretrained``: ``adapter_config.json`` and
``adapter_model.safetensors``, which ``PeftModel.from_pretrained`` loads). The model is loaded as
``load_model`` loads it (the stored config builds it under the same trust rules; a trainable-only
checkpoint's base is checked against its digest first). Written through a staging folder and renamed
(``export_place.py``): an export is whole or absent, and an existing one is never overwritten."""

from collections.abc import Set
from pathlib import Path

from torch import nn

from runner.checkpoint.locate import checkpoint_to_evaluate
from runner.config.errors import ConfigError
from runner.experiment.setup import Build
from runner.tools.export_place import check_output, write_staged
from runner.tools.trained_model import load_trained_model

FORMATS = ("safetensors", "peft")
ALLOW = "allow them with allow_targets={targets} on export's command line"


def export_run(path: Path, format: str, output: Path | None, build: Build, trusted: Set[str]) -> Path:
    """Write the model of ``path`` (a run directory or a checkpoint) into ``output`` (by default
    ``<run dir>/export/<format>``); return where."""
    if format not in FORMATS:
        raise ConfigError(
            f"export --format {format} is not allowed; --format must be one of {', '.join(FORMATS)}"
        )
    if not path.exists():
        raise ConfigError(f"{path}: no such run directory or checkpoint")
    checkpoint = checkpoint_to_evaluate(path)
    output = output or checkpoint.parent.parent / "export" / format
    check_output(output)
    model = load_trained_model(path, build, trusted, allow=ALLOW)
    if format == "safetensors":
        write_staged(output, lambda folder: write_safetensors(model, folder / "model.safetensors"))
    else:
        adapter = adapter_of(model)
        write_staged(output, lambda folder: adapter.save_pretrained(str(folder)))
    return output


def write_safetensors(model: nn.Module, path: Path) -> None:
    """The model's state dict, each name a whole tensor: a tied weight (GPT-2's embedding and head) is
    written under each of its names, which safetensors' ``save_file`` asks for."""
    from safetensors.torch import save_file

    tensors, storages = {}, set()
    for name, tensor in model.state_dict().items():
        tensor = tensor.detach().to("cpu").contiguous()
        storage = tensor.untyped_storage().data_ptr()
        tensors[name] = tensor.clone() if storage in storages else tensor
        storages.add(storage)
    save_file(tensors, str(path), metadata={"format": "pt"})


def adapter_of(model: nn.Module) -> nn.Module:
    """The peft model in the run's model (the model itself, or one part of it)."""
    try:
        from peft import PeftModel
    except ImportError:
        raise ConfigError(
            'export --format peft needs peft: pip install -e ".[peft]" (with torch==2.13.0 beside it)'
        ) from None
    found = [module for module in model.modules() if isinstance(module, PeftModel)]
    if len(found) != 1:
        raise ConfigError(
            f"export --format peft: the run's model ({type(model).__name__}) holds "
            f"{'no' if not found else len(found)} peft models (PeftModel); --format peft writes one "
            "model's adapter, --format safetensors writes the weights of any model"
        )
    return found[0]
