"""A small CNN on the digits data, trained with DistributedDataParallel and fed by hetgen.

hetgen runs this script under torchrun on every host of the trainer group
(`hetgen render && hetgen deploy --local` here, `hetgen deploy` on SageMaker). The data group's
instances decode and augment the images as hetgen.toml says and stream them to every rank; the
lines marked `# hetgen` are the only ones that differ from a plain PyTorch script.

After every epoch rank 0 saves the model, the optimizer and every rank's loader position to the
checkpoint folder; a restarted job resumes from there. At the end it scores the held-out images
of the `test` channel and writes the model and its accuracy to the model folder.
"""

import argparse
import json
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

import hetgen  # hetgen
import hetgen.torch  # hetgen

BASE = os.environ.get("SAGEMAKER_BASE_DIR", "/opt/ml")
CHECKPOINT = os.path.join(BASE, "checkpoints", "checkpoint.pt")
MODEL_DIR = os.environ.get("SM_MODEL_DIR", os.path.join(BASE, "model"))


class Net(nn.Module):
    """Two 3×3 convolutions and a linear layer: enough for 8×8 digits."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc = nn.Linear(32 * 2 * 2, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


def evaluate(model, device):
    """Accuracy on the `test` channel's images, through the same pipeline, on this process."""
    loader = hetgen.Loader(  # hetgen
        os.environ["HETGEN_JOB_FILE"],
        mode="local",
        channels={"training": os.environ["SM_CHANNEL_TEST"]},
        rank=0,
        world_size=1,
        epochs=1,
        audit=False,
    )
    correct = total = 0
    model.eval()
    with torch.no_grad():
        for batch in loader:
            images, labels = hetgen.torch.to_device(batch, device, loader.normalization)  # hetgen
            correct += (model(images).argmax(1) == labels).sum().item()
            total += len(labels)
    return correct / total


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--lr", type=float, default=3e-3)
    args = parser.parse_args()

    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(1)
    torch.manual_seed(0)

    model = DistributedDataParallel(Net().to(device), device_ids=[local_rank] if cuda else None)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    loader = hetgen.Loader()  # hetgen: this job's data servers, this rank's share

    if os.path.exists(CHECKPOINT):
        state = torch.load(CHECKPOINT, map_location=device)
        model.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        loader.load_state_dict(state["loader"])  # hetgen
        if rank == 0:
            print(f"resumed from {CHECKPOINT} at epoch {loader.epoch}", flush=True)

    for epoch in range(loader.epoch, args.epochs):  # hetgen: loader.epoch is 0 unless resumed
        model.train()
        for batch in loader:
            images, labels = hetgen.torch.to_device(batch, device, loader.normalization)  # hetgen
            loss = F.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        positions = [None] * world
        dist.all_gather_object(positions, loader.state_dict())  # hetgen
        if rank == 0:
            os.makedirs(os.path.dirname(CHECKPOINT), exist_ok=True)
            state = {
                "model": model.module.state_dict(),
                "optimizer": optimizer.state_dict(),
                "loader": positions,
            }
            torch.save(state, CHECKPOINT + ".tmp")
            os.replace(CHECKPOINT + ".tmp", CHECKPOINT)
            print(f"epoch {epoch}: loss {loss.item():.4f}", flush=True)

    if rank == 0:
        os.makedirs(MODEL_DIR, exist_ok=True)
        torch.save(model.module.state_dict(), os.path.join(MODEL_DIR, "model.pt"))
        if "SM_CHANNEL_TEST" in os.environ:
            accuracy = evaluate(model.module, device)
            print(f"held-out accuracy: {accuracy:.4f}", flush=True)
            with open(os.path.join(MODEL_DIR, "metrics.json"), "w") as f:
                json.dump({"accuracy": accuracy, "epochs": args.epochs, "ranks": world}, f)
    dist.barrier()
    # Free the DDP model before the process group. Its C++ reducer holds the group too, and if
    # the reducer lets go of it last (here: when main() returns), the group's worker threads
    # are joined while this thread holds the GIL, and a worker still freeing its last
    # collective waits for the GIL: the process never exits (torch 2.x with gloo). A group
    # that destroy_process_group() lets go of last is joined with the GIL released.
    del model, optimizer
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
