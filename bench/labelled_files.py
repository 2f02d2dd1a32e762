"""The samples the benches' Datasets share (bench/folder_dataset.py, light_dataset.py,
ops_dataset.py), with nothing imported beyond the standard library, so that a Dataset's workers
import only what the Dataset itself does."""

import os


def labelled_files(root):
    """`(path, label)` of every file of a class folder, classes and files sorted."""
    classes = sorted(os.listdir(root))
    return [
        (os.path.join(root, c, name), label)
        for label, c in enumerate(classes)
        for name in sorted(os.listdir(os.path.join(root, c)))
    ]
