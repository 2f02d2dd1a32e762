"""data.py's training set with hetgen's image operations instead of torchvision's transforms.

The same contract (`make_train_set(path, hyperparameters)`, samples `(float32 [1, 8, 8],
label)`), the augmentation written with `hetgen.image`: the decoder and resampler of hetgen's
built-in pipeline as plain functions that release the GIL. Point the spec's `dataset` at
`data_hetgen.py:make_train_set` to use it. Its random choices come from Python's `random`,
which hetgen's workers seed per sample, so a sample is still the same whichever host makes it.

On these 8×8 PNGs the gain is small; on photos it is what hetgen.image is for:
`decode_random_resized_crop` decodes only the crop's region of a JPEG, at reduced scale where
the crop allows (see BENCHMARKS.md).
"""

import os

import hetgen.image as hi


class Digits:
    """`root/<label>/<n>.png`, 8×8 grey: `(image float32 [1, 8, 8], label int64)`."""

    def __init__(self, root):
        # Sorted, so every host numbers the samples the same way.
        self.files = [
            (os.path.join(root, label, name), int(label))
            for label in sorted(os.listdir(root))
            for name in sorted(os.listdir(os.path.join(root, label)))
        ]

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        path, label = self.files[i]
        # A mild random zoom and shift: most of the digit, stretched back to 8×8.
        image = hi.decode_random_resized_crop(
            path, 8, scale=(0.8, 1.0), ratio=(0.9, 1.1), mode="GRAY"
        )
        return hi.normalize(image, [0.5], [0.5]), label


def make_train_set(path, hyperparameters):
    return Digits(path)
