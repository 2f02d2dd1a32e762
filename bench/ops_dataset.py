"""bench/light_dataset.py's Dataset written with hetgen's image operations (`hetgen.image`):
the same files, the same augmentation (a random resized crop to 224, a random horizontal flip),
the same `(uint8 [3, 224, 224], label)` samples, for bench/python_loader.py's `ops-workers`.
"""

import hetgen.image as hi

from labelled_files import labelled_files


class Ops:
    def __init__(self, root):
        self.files = labelled_files(root)

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        path, label = self.files[i]
        image = hi.random_horizontal_flip(hi.decode_random_resized_crop(path, 224))
        return hi.to_chw(image), label


def make(path, hyperparameters):
    return Ops(path)
