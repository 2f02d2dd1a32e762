"""Stream batches through `hetgen.Loader` and record them, one JSON line per batch.

Used by the tests as a stand-in for a training script: it can run as one rank of a
`torch.distributed` (gloo) job, stepping in lockstep like DDP, stop after some batches and save
the loader's state, or start from a saved state.
"""

import argparse
import hashlib
import json
import time

import hetgen


def leaves(node, path=()):
    """`(path, array)` of every field of a Python dataset's batch, in its order."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from leaves(value, path + (key,))
    elif isinstance(node, (tuple, list)):
        for i, value in enumerate(node):
            yield from leaves(value, path + (str(i),))
    else:
        yield path, node


def dataset_record(batch):
    """A batch of the tests' `fields` dataset (whose samples carry their `id`): its ids, a
    digest of its bytes, and one of each sample's bytes."""
    fields = list(leaves(batch))
    ids = batch["id"].tolist()
    whole = hashlib.sha256()
    for path, array in fields:
        whole.update(".".join(path).encode() + str(array.dtype).encode() + array.tobytes())
    samples = []
    for k in range(len(ids)):
        one = hashlib.sha256()
        for _, array in fields:
            one.update(array[k].tobytes())
        samples.append(one.hexdigest())
    return {"ids": ids, "sha256": whole.hexdigest(), "samples": samples}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--spec")
    parser.add_argument("--mode")
    parser.add_argument("--channels", type=json.loads)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--deterministic", action="store_true")
    parser.add_argument("--out", required=True)
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--stop-after", type=int)
    parser.add_argument("--state")
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--distributed", action="store_true")
    parser.add_argument("--shutdown", action="store_true")
    parser.add_argument("--hosts")
    parser.add_argument("--token")
    args = parser.parse_args()

    if args.distributed:
        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo")
    loader = hetgen.Loader(
        args.spec,
        mode=args.mode,
        channels=args.channels,
        deterministic=args.deterministic or None,
        epochs=args.epochs,
        hosts=args.hosts.split(",") if args.hosts else None,
        token=args.token,
    )
    if args.resume:
        with open(args.state) as f:
            loader.load_state_dict(json.load(f))
    seen = 0
    with open(args.out, "w") as out:
        for epoch in range(loader.epoch, args.epochs):
            for batch in loader:
                if isinstance(batch, hetgen.Batch):
                    images, labels = batch
                    digest = hashlib.sha256(images.tobytes() + labels.tobytes()).hexdigest()
                    record = {
                        "rank": loader.rank,
                        "epoch": batch.epoch,
                        "shard": batch.shard,
                        "index": batch.index,
                        "ids": batch.sample_ids.tolist(),
                        "sha256": digest,
                    }
                else:
                    record = {"epoch": epoch, **dataset_record(batch)}
                out.write(json.dumps(record) + "\n")
                out.flush()
                seen += 1
                if args.distributed:
                    # What DDP's gradient all-reduce does every step: a rank with fewer batches
                    # than the others would leave them waiting here forever.
                    dist.all_reduce(torch.ones(1))
                if args.sleep:
                    time.sleep(args.sleep)
                if args.stop_after is not None and seen == args.stop_after:
                    with open(args.state, "w") as f:
                        json.dump(loader.state_dict(), f)
                    return
    if args.distributed:
        dist.barrier()
    if args.shutdown and loader.rank == 0:
        loader.shutdown()
    loader.close()


if __name__ == "__main__":
    main()
