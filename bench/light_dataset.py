"""A light map-style Dataset for bench/python_loader.py: the per-sample work a user writes with
torchvision's tensor path (`decode_jpeg` on the file's bytes, v2 `RandomResizedCrop(224)` and
`RandomHorizontalFlip` on the uint8 tensor), which leaves the per-batch cost of moving batches
more visible than bench/folder_dataset.py's PIL path does. Returns `(uint8 [3, 224, 224],
label)`.
"""

import torch
from torchvision.io import decode_jpeg
from torchvision.transforms import v2

from labelled_files import labelled_files


class Light(torch.utils.data.Dataset):
    def __init__(self, root):
        self.files = labelled_files(root)
        self.transform = v2.Compose(
            [v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip()]
        )

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        path, label = self.files[i]
        with open(path, "rb") as f:
            data = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)
        return self.transform(decode_jpeg(data)), label


def make(path, hyperparameters):
    return Light(path)
