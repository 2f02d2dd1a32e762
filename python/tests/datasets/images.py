"""A dataset of image files decoded and augmented with `hetgen.image` in `__getitem__`, as a
user writes one (the tests write the files). A file named `bad-*` holds bytes that are no
image. Samples are `(uint8 [3, 32, 32], id)`."""

import os

import hetgen.image as hi


class Images:
    def __init__(self, path):
        self.files = sorted(os.path.join(path, name) for name in os.listdir(path))

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        image = hi.decode_random_resized_crop(self.files[i], 32, scale=(0.25, 1.0))
        image = hi.random_horizontal_flip(image)
        return hi.to_chw(image), i


def make(path, hyperparameters):
    return Images(path)
