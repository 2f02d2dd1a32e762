"""A small CNN on the digits, trained with DistributedDataParallel from WebDataset-style tar
shards that hetgen's data hosts read (data.py's `read`, as `hetgen.Shards`).

hetgen runs this script under torchrun on every host of the trainer group
(`hetgen render && hetgen deploy --local` here, `hetgen deploy` on SageMaker). The lines marked
`# hetgen` are the only ones that differ from the same script reading the shards itself, as a
WebDataset user would (shown beside them): splitting the shards by node and by worker, the
worker processes and the decoding move to the data hosts, which stream every rank its batches.

At the end rank 0 scores the held-out shards of the `test` channel (read here, without
augmentation) and writes the model and its accuracy to the model folder.
"""

import argparse
import json
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader

import data
import hetgen  # hetgen
import hetgen.torch  # hetgen

BASE = os.environ.get("SAGEMAKER_BASE_DIR", "/opt/ml")
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
    """Accuracy on the `test` channel's shards, read on this process."""
    samples = data.test_samples(os.environ["SM_CHANNEL_TEST"])
    loader = DataLoader(list(samples), batch_size=128)
    correct = total = 0
    model.eval()
    with torch.no_grad():
        for images, labels in loader:
            images, labels = images.to(device), labels.to(device)
            correct += (model(images).argmax(1) == labels).sum().item()
            total += len(labels)
    return correct / total


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=10)
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
    # urls = data.shards(os.environ["SM_CHANNEL_TRAINING"])
    # dataset = wds.DataPipeline(
    #     wds.SimpleShardList(urls), wds.split_by_node, wds.split_by_worker,
    #     lambda src: (sample for shard in src for sample in data.read(shard["url"])),
    #     wds.batched(32))
    # loader = wds.WebLoader(dataset, batch_size=None, num_workers=4)
    loader = hetgen.Loader()  # hetgen: the data hosts read this rank's shards

    for epoch in range(args.epochs):
        # (WebDataset reshuffles shards per epoch; hetgen draws each epoch's order from the
        # job's seed, and ends an epoch for every rank at once: see docs/spec.md)
        model.train()
        for batch in loader:
            images, labels = hetgen.torch.to_device(batch, device)  # hetgen (was: .to(device))
            loss = F.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if rank == 0:
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
