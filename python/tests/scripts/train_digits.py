"""A plain PyTorch training loop on the digits data, fed by `hetgen.Loader`.

Inside a hetgen job the loader finds the job's data servers itself; the held-out images are read
with the same pipeline, in-process (`mode="local"`), from `--test-folder`. Prints one JSON line:
the held-out accuracy and what the loader did.
"""

import argparse
import json
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import hetgen
import hetgen.torch

# The network of the example project (what `hetgen new` writes), so the model users start from
# is the one this loop shows learning the digits.
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples" / "pytorch"))
from train import Net  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--test-folder", required=True)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)

    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    batches = 0
    with hetgen.Loader() as loader:
        for epoch in range(args.epochs):
            for batch in loader:
                x, y = hetgen.torch.to_device(batch, "cpu", loader.normalization)
                loss = F.cross_entropy(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                batches += 1
        mode, hosts, per_epoch = loader.mode, loader.hosts, len(loader)

    test = hetgen.Loader(
        os.environ["HETGEN_JOB_FILE"],
        mode="local",
        channels={"training": args.test_folder},
        deterministic=True,
        epochs=1,
    )
    correct = total = 0
    model.eval()
    with torch.no_grad():
        for batch in test:
            x, y = hetgen.torch.to_device(batch, "cpu", test.normalization)
            correct += (model(x).argmax(1) == y).sum().item()
            total += len(y)
    print(
        json.dumps(
            {
                "accuracy": correct / total,
                "held_out": total,
                "batches": batches,
                "batches_per_epoch": per_epoch,
                "mode": mode,
                "hosts": hosts,
                "final_loss": loss.item(),
            }
        )
    )


if __name__ == "__main__":
    main()
