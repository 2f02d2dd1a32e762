"""The dataset both sides of bench/python_dataset.py run: a map-style torch Dataset over a
class-folder of JPEGs with torchvision's v2 augmentation, as a user writes one for a DataLoader.
It returns `(image uint8 [3, 224, 224], label)`: compact bytes, as hetgen's own pipeline sends.
"""

import torch
from PIL import Image
from torchvision.transforms import v2

from labelled_files import labelled_files


class Folder(torch.utils.data.Dataset):
    def __init__(self, root):
        self.files = labelled_files(root)
        self.transform = v2.Compose(
            [
                v2.PILToTensor(),
                v2.RandomResizedCrop(224, antialias=True),
                v2.RandomHorizontalFlip(),
            ]
        )

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        path, label = self.files[i]
        with Image.open(path) as image:
            return self.transform(image.convert("RGB")), label


def make(path, hyperparameters):
    return Folder(path)
