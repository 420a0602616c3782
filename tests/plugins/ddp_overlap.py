"""Run under torchrun with 2 processes by tests/test_ddp_overlap.py: the model spread as the real
composed config says (``spread_model``), one window trained by runner's own step, and DDP's reducer
watched through its public comm hook. Each rank writes to ``rank<N>.txt`` how many gradient buckets
DDP reduced in the second step and how many of them while the synced backward was still running (before
that backward made the first layer's gradient, the last one it computes)."""

import sys
from pathlib import Path

import torch
import torch.distributed as torch_dist
from hydra import compose, initialize_config_dir
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from runner.cli.hydra.hydra_app import CONFIG_DIR
from runner.config.typed import typed_config
from runner.experiment.parallel import spread_model
from runner.training.distributed import from_environment
from runner.training.precision import resolve_precision
from runner.training.step import Learner


def main(overrides: list[str]) -> None:
    torch_dist.init_process_group("gloo")
    process, cpu = from_environment(), torch.device("cpu")
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        config = typed_config(compose("config", overrides=overrides))
    torch.manual_seed(0)
    # DDP's first bucket holds about 1 MB of the last parameters (the last layer's 4 MB weight closes
    # it), the rest go in a second: the first is reduced while the backward goes on to the first layer.
    model = nn.Sequential(*(nn.Sequential(nn.Linear(1024, 1024), nn.ReLU()) for _ in range(4)))
    micro_batches = 2  # the first under no_sync, the second synced: DDP reduces in its backward
    first_layer_grads = {"made": 0}  # one per micro-batch's backward

    def made(grad: torch.Tensor) -> None:
        first_layer_grads["made"] += 1

    model[0][0].weight.register_hook(made)
    spread = spread_model(config, model, model, cpu, "fp32", process)
    buckets = {"reduced": 0, "during the backward": 0}
    if isinstance(spread.forward_model, DistributedDataParallel):

        def counted(state, bucket):
            buckets["reduced"] += 1
            buckets["during the backward"] += first_layer_grads["made"] < micro_batches
            work = torch_dist.all_reduce(bucket.buffer() / process.world_size, async_op=True)
            return work.get_future().then(lambda future: future.value()[0])

        spread.forward_model.register_comm_hook(None, counted)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    precision = resolve_precision("fp32", cpu)
    learner = Learner(spread.forward_model, nn.functional.mse_loss, optimizer, precision, cpu, False,
                      "labels", skip_grad_sync=spread.skip_grad_sync, plain_model=model,
                      processes=process.world_size, step=spread.step)  # fmt: skip
    for _step in range(2):  # DDP sizes its buckets anew after the first step, in the order grads came
        buckets.update({"reduced": 0, "during the backward": 0})
        first_layer_grads["made"] = 0
        window = [(torch.randn(8, 1024), torch.randn(8, 1024)) for _ in range(micro_batches)]
        learner.step.train(learner, window, clip_norm=None)
    strategy = spread.notes.get("strategy", "")
    Path(f"rank{process.rank}.txt").write_text(
        f"{buckets['reduced']} {buckets['during the backward']}\n{strategy}\n"
    )
    torch_dist.barrier()
    torch_dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
