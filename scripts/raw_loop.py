"""The hand-written loop the benchmark compares runner with: zero_grad, forward, loss,
backward, clip, step (plus accumulation and TensorBoard logging of loss and grad norm every step),
on the same data runner's built-ins make.

    python scripts/raw_loop.py RUN_DIR FEATURES HIDDEN OUTPUTS TASK ACCUMULATE STEPS [--no-log]

``--no-log`` leaves out the logging: the floor of a loop doing this math on this model and data
(``bench_against.py``).
"""

import itertools
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset
from torch.utils.tensorboard import SummaryWriter

from runner.data import make_classification, make_regression


def build(features: int, hidden: str, outputs: int, task: str) -> tuple[nn.Module, Dataset, nn.Module]:
    """Model, training data and loss of a workload (the Lightning contender builds the same)."""
    widths = [features, *map(int, hidden.split(","))]
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for width_in, width_out in itertools.pairwise(widths):
        layers += [nn.Linear(width_in, width_out), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(widths[-1], outputs))
    if task == "regression":
        train_set, _ = make_regression(num_train=4096, num_val=64, num_features=features, learnable=True)
        return model, train_set, nn.MSELoss()
    train_set, _ = make_classification(num_train=4096, num_val=64, num_features=features, num_classes=outputs)
    return model, train_set, nn.CrossEntropyLoss()


def main() -> None:
    flags = {argument for argument in sys.argv[1:] if argument.startswith("--")}
    run_dir, features, hidden, outputs, task, accumulate, steps = (a for a in sys.argv[1:] if a not in flags)
    logs = "--no-log" not in flags
    features, outputs, accumulate, steps = int(features), int(outputs), int(accumulate), int(steps)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model, train_set, loss_fn = build(features, hidden, outputs, task)
    model = model.to(device)
    train_loader = DataLoader(train_set, batch_size=32, shuffle=True)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    writer = SummaryWriter(run_dir) if logs else None

    step = 0
    model.train()
    while step < steps:
        batches = iter(train_loader)
        while step < steps:
            window = [batch for _, batch in zip(range(accumulate), batches, strict=False)]
            if not window:
                break
            optimizer.zero_grad()
            window_loss = 0.0
            for batch_x, batch_y in window:
                batch_x, batch_y = batch_x.to(device), batch_y.to(device)
                pred = model(batch_x)
                loss = loss_fn(pred, batch_y) / len(window)
                loss.backward()
                if logs:
                    window_loss += loss.item()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
            optimizer.step()
            step += 1
            if logs:
                writer.add_scalar("train/loss", window_loss, step)
                writer.add_scalar("train/grad_norm", grad_norm.item(), step)
    if logs:
        writer.close()


if __name__ == "__main__":
    main()
