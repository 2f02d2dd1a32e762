"""A small DDP training loop for the sizing tests: an MLP on `datasets/sizing.py`'s samples.

Run under torchrun. Its batches come from `hetgen.Loader()`, which `hetgen profile --trainer`
turns into a replay from memory; with `--spec` it reads the spec's dataset on this host instead
(one worker, batches prefetched), the reference run whose data is never late. `--fail` makes it
fail after building the loader, as a script with a bug would; `--cuda` insists on a GPU.
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import hetgen
import hetgen.torch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--spec")
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--fail", action="store_true")
    parser.add_argument("--cuda", action="store_true", help="insist on a GPU")
    args = parser.parse_args()

    if args.cuda:
        torch.zeros(1, device="cuda")
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(
        nn.Sequential(nn.Linear(32, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 10))
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    if args.spec:
        loader = hetgen.Loader(args.spec, mode="local", threads=1, prefetch=16, progress_every=10)
    else:
        loader = hetgen.Loader()
    if args.fail:
        raise RuntimeError("the model does not fit on this device")
    steps = 0
    while steps < args.steps:
        for batch in loader:
            x, y = hetgen.torch.to_device(batch, "cpu")
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            steps += 1
            if steps >= args.steps:
                break
    del model, optimizer
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
