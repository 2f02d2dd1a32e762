"""The digits as a map-style PyTorch dataset with its own augmentation.

Nothing here knows about hetgen: it is the Dataset a DataLoader would take. hetgen's data hosts
build it with `make_train_set(path, hyperparameters)` (the `training` channel's folder there)
and call `__getitem__` for the samples each rank needs, seeding Python's, numpy's and torch's
random generators from (job seed, epoch, sample id) before every call, so the random
augmentation of a sample does not depend on which host made it.
"""

import os

import torch
from torchvision.io import ImageReadMode, decode_image
from torchvision.transforms import v2


class Digits(torch.utils.data.Dataset):
    """`root/<label>/<n>.png`, 8×8 grey: `(image float32 [1, 8, 8], label int64)`."""

    def __init__(self, root, train):
        # Sorted, so every host numbers the samples the same way.
        self.files = [
            (os.path.join(root, label, name), int(label))
            for label in sorted(os.listdir(root))
            for name in sorted(os.listdir(os.path.join(root, label)))
        ]
        augment = [
            v2.RandomAffine(degrees=12, translate=(0.1, 0.1), scale=(0.9, 1.1)),
            v2.RandomApply([v2.GaussianBlur(3, sigma=(0.1, 0.7))], p=0.3),
            v2.RandomErasing(p=0.1, scale=(0.02, 0.06), value=0),
        ]
        self.transform = v2.Compose(
            [
                v2.ToDtype(torch.float32, scale=True),
                *(augment if train else []),
                v2.Normalize([0.5], [0.5]),
            ]
        )

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        path, label = self.files[i]
        image = decode_image(path, mode=ImageReadMode.GRAY)
        return self.transform(image), label


def make_train_set(path, hyperparameters):
    return Digits(path, train=True)


def make_test_set(path):
    return Digits(path, train=False)
