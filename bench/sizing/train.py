"""A small CNN on 224x224 images from hetgen's data hosts, for bench/sizing.sh's heavier case:
the dataset (bench/folder_dataset.py: PIL decode, RandomResizedCrop, flip) costs far more per
sample than this model, so the run is input-bound and the stall is the figure to predict."""

import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import hetgen
import hetgen.torch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=4)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(
        nn.Sequential(
            nn.Conv2d(3, 16, 5, stride=4), nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10),
        )
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = hetgen.Loader(progress_every=10)
    for _ in range(args.epochs):
        for batch in loader:
            images, labels = hetgen.torch.to_device(batch, "cpu")
            loss = F.cross_entropy(model(images.float() / 255), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    del model, optimizer
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
