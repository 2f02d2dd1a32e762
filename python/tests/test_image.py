"""`hetgen.image`: hetgen's image operations as functions a user's Dataset calls. What they
compute (against numpy's and PIL's own), that a sample's random choices depend on its seed alone
(so on (job seed, epoch, id) under hetgen's workers, whichever worker makes it), that bad input
is a clear exception and never a crash of the worker, and that they work under a plain
DataLoader."""

from __future__ import annotations

import io
import random
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import hetgen
import hetgen.image as hi

pytestmark = pytest.mark.timeout(300)

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE / "datasets"))
from test_sizing import SPEC  # noqa: E402


def picture(height=375, width=500, seed=0) -> np.ndarray:
    """A smooth RGB picture (gradients and a disc), so JPEG keeps it close."""
    y, x = np.mgrid[0:height, 0:width]
    disc = ((y - height / 2) ** 2 + (x - width / 3) ** 2 < (height / 4) ** 2) * 90
    r = (x * 255 // max(width - 1, 1) + seed * 17) % 256
    g = y * 255 // max(height - 1, 1)
    b = np.clip(disc + 40, 0, 255)
    return np.stack([r, g, b], axis=-1).astype(np.uint8)


def encoded(array: np.ndarray, fmt="JPEG") -> bytes:
    out = io.BytesIO()
    Image.fromarray(array).save(out, format=fmt, quality=95)
    return out.getvalue()


def test_decode_reads_png_exactly_and_jpeg_as_pil_does():
    pixels = picture(40, 60)
    assert np.array_equal(hi.decode(encoded(pixels, "PNG")), pixels)
    jpeg = encoded(pixels)
    ours = hi.decode(jpeg).astype(int)
    theirs = np.asarray(Image.open(io.BytesIO(jpeg)).convert("RGB")).astype(int)
    assert ours.shape == (40, 60, 3) and hi.decode(jpeg).dtype == np.uint8
    # Both are libjpeg; only the upsampling of the colour planes may differ by a little.
    assert np.abs(ours - theirs).mean() < 2.0
    gray = hi.decode(jpeg, mode="GRAY")
    assert gray.shape == (40, 60, 1)
    # Any form of the bytes, or a path.
    for source in (bytearray(jpeg), memoryview(jpeg), np.frombuffer(jpeg, np.uint8)):
        assert np.array_equal(hi.decode(source), hi.decode(jpeg))


def test_the_deterministic_ops_compute_what_torchvision_would():
    image = picture(30, 40)
    assert np.array_equal(hi.horizontal_flip(image), image[:, ::-1])
    assert np.array_equal(hi.to_chw(image), image.transpose(2, 0, 1))
    assert hi.to_chw(image).flags["C_CONTIGUOUS"]
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    want = (image.transpose(2, 0, 1) / 255.0 - np.array(mean)[:, None, None]) / np.array(std)[
        :, None, None
    ]
    got = hi.normalize(image, mean, std)
    assert got.dtype == np.float32 and got.shape == (3, 30, 40)
    np.testing.assert_allclose(got, want, atol=1e-5)
    flat = np.full((50, 70, 3), 123, np.uint8)
    assert np.array_equal(hi.resize(flat, (20, 30)), np.full((20, 30, 3), 123, np.uint8))
    # Strided input is read as what it shows.
    assert np.array_equal(hi.horizontal_flip(image[:, ::2]), image[:, ::2][:, ::-1])
    # Downscaling averages, as an antialiased resize does: a 2x2 checkerboard becomes grey.
    checker = np.indices((64, 64)).sum(axis=0) % 2 * 255
    grey = hi.resize(np.repeat(checker[..., None], 3, -1).astype(np.uint8), 8)
    assert np.abs(grey.astype(int) - 128).max() <= 2


def test_random_choices_come_from_the_samples_generators_alone():
    jpeg = encoded(picture())

    def crop(seed):
        random.seed(seed)
        return hi.random_horizontal_flip(hi.decode_random_resized_crop(jpeg, 64))

    assert np.array_equal(crop(7), crop(7))
    assert not np.array_equal(crop(7), crop(8))
    explicit = [hi.random_resized_crop(picture(), 16, generator=random.Random(3)) for _ in "ab"]
    assert np.array_equal(*explicit)
    rng = [np.random.default_rng(5), np.random.default_rng(5)]
    pair = [hi.decode_random_resized_crop(jpeg, 16, generator=g) for g in rng]
    assert np.array_equal(*pair)
    # An explicit generator leaves Python's own untouched.
    random.seed(1)
    before = random.random()
    random.seed(1)
    hi.decode_random_resized_crop(jpeg, 16, generator=random.Random(0))
    assert random.random() == before
    # A full-scale crop of the whole image is the resize, at any seed.
    whole = hi.decode_random_resized_crop(jpeg, (75, 100), scale=(1, 1), ratio=(4 / 3, 4 / 3))
    assert np.array_equal(whole, hi.decode_resize(jpeg, (75, 100)))


@pytest.mark.parametrize(
    "call, kind, words",
    [
        (lambda j: hi.decode(j[: len(j) // 3]), ValueError, "JPEG"),
        (lambda j: hi.decode(b"GIF89a" + b"\0" * 40), ValueError, "neither JPEG nor PNG"),
        (lambda j: hi.decode(b""), ValueError, "neither JPEG nor PNG"),
        (lambda j: hi.decode(42), TypeError, "encoded bytes"),
        (lambda j: hi.decode("/no/such/file.jpg"), ValueError, "/no/such/file.jpg"),
        (lambda j: hi.decode_random_resized_crop(j, 0), ValueError, "empty"),
        (lambda j: hi.decode_random_resized_crop(j, (8, 0)), ValueError, "empty"),
        (lambda j: hi.decode_resize(j, 10**6), ValueError, "beyond"),
        (lambda j: hi.decode_random_resized_crop(j, 8, scale=(0, 1)), ValueError, "scale"),
        (lambda j: hi.decode_random_resized_crop(j, 8, ratio=(2, 1)), ValueError, "ratio"),
        (lambda j: hi.decode(j, mode="CMYK"), ValueError, "mode"),
        (lambda j: hi.resize(np.zeros((0, 4, 3), np.uint8), 2), ValueError, "empty"),
        (lambda j: hi.resize(np.zeros((4, 4, 3), np.float32), 2), TypeError, "uint8"),
        (lambda j: hi.resize(np.zeros((4, 4, 3, 1), np.uint8), 2), ValueError, "shape"),
        (lambda j: hi.normalize(np.zeros((4, 4, 3), np.uint8), [0, 0], [1]), ValueError, "mean"),
        (lambda j: hi.normalize(np.zeros((4, 4, 3), np.uint8), [0], [0]), ValueError, "std"),
        (
            lambda j: hi.random_horizontal_flip(np.zeros((2, 2, 3), np.uint8), generator=3),
            TypeError,
            "generator",
        ),
    ],
)
def test_bad_input_is_a_clear_exception(call, kind, words):
    with pytest.raises(kind) as raised:
        call(encoded(picture(64, 64)))
    assert words in str(raised.value), raised.value


def test_an_image_whose_header_claims_huge_dimensions_is_refused():
    jpeg = bytearray(encoded(picture(16, 16)))
    # The SOF0 frame header's height and width, rewritten to 65535 x 65535.
    sof = jpeg.index(b"\xff\xc0")
    jpeg[sof + 5 : sof + 9] = b"\xff\xff\xff\xff"
    with pytest.raises(ValueError):
        hi.decode(bytes(jpeg))
    with pytest.raises(ValueError):
        hi.decode_random_resized_crop(bytes(jpeg), 8)


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A job whose Python dataset (datasets/images.py) reads 24 JPEGs with `hetgen.image`."""
    root = tmp_path / "project"
    (root / "data").mkdir(parents=True)
    for i in range(24):
        (root / "data" / f"{i:03}.jpg").write_bytes(encoded(picture(60 + i, 80, seed=i)))
    shutil.copy(HERE / "datasets" / "images.py", root)
    (root / "train_sizing.py").write_text("# the job's script\n")
    spec = SPEC.format(factory="make", batch=8).replace("sizing.py:make", "images.py:make")
    (root / "hetgen.toml").write_text(spec)
    monkeypatch.delenv("HETGEN_CODE_DIR", raising=False)
    monkeypatch.chdir(root)
    return root


def samples(loader) -> dict:
    """One epoch of `loader`: each sample's image by its id."""
    out = {}
    try:
        for images, ids in loader:
            for image, sid in zip(images, ids):
                out[int(sid)] = image.copy()
    finally:
        loader.close()
    return out


def test_a_sample_is_the_same_whichever_worker_makes_it(project):
    one = samples(hetgen.Loader(project / "hetgen.toml", mode="local", threads=1))
    two = samples(hetgen.Loader(project / "hetgen.toml", mode="local", threads=2))
    assert sorted(one) == list(range(24))
    assert all(one[i].shape == (3, 32, 32) and one[i].dtype == np.uint8 for i in one)
    assert all(np.array_equal(one[i], two[i]) for i in one)
    # Each sample its own draw: not one crop for all.
    assert len({one[i].tobytes() for i in one}) == 24


def test_a_file_that_is_no_image_fails_naming_the_sample_not_the_worker(project):
    (project / "data" / "bad.jpg").write_bytes(b"\xff\xd8\xff" + b"not a jpeg" * 20)
    loader = hetgen.Loader(project / "hetgen.toml", mode="local", threads=1)
    with pytest.raises(hetgen.DataError) as failed:
        samples(loader)
    error = failed.value
    # The bad file sorts after the 24 numbered ones: sample 24.
    assert error.sample == 24, error
    assert "ValueError" in error.traceback and "JPEG" in error.traceback, error.traceback
    assert "images.py" in error.traceback, error.traceback


def test_they_work_under_a_plain_dataloader(project):
    import torch

    sys.path.insert(0, str(project))
    from images import Images

    def epoch():
        loader = torch.utils.data.DataLoader(
            Images(str(project / "data")),
            batch_size=8,
            num_workers=2,
            generator=torch.Generator().manual_seed(0),
        )
        return [(x.clone(), y.clone()) for x, y in loader]

    first, again = epoch(), epoch()
    assert [x.shape for x, _ in first] == [torch.Size([8, 3, 32, 32])] * 3
    # torch seeds `random` in each worker from the loader's generator: the same run twice.
    assert all(torch.equal(a, b) for (a, _), (b, _) in zip(first, again))


def test_the_examples_hetgen_image_dataset_makes_its_batches(tmp_path, monkeypatch):
    # examples/pytorch-dataset/data_hetgen.py on digits laid out as `hetgen new` lays them out.
    from conftest import png

    root = tmp_path / "digits"
    for n in range(20):
        folder = root / "data" / "train" / str(n % 10)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{n:04}.png").write_bytes(png(bytes((n * 7 + k) % 256 for k in range(64)), 8, 8))
    shutil.copy(REPO / "examples" / "pytorch-dataset" / "data_hetgen.py", root)
    (root / "train_sizing.py").write_text("# the job's script\n")
    spec = SPEC.format(factory="make_train_set", batch=4)
    spec = spec.replace("sizing.py:", "data_hetgen.py:")
    spec = spec.replace('local_path = "data"', 'local_path = "data/train"')
    (root / "hetgen.toml").write_text(spec)
    monkeypatch.delenv("HETGEN_CODE_DIR", raising=False)
    monkeypatch.chdir(root)
    runs = []
    for threads in (1, 2):
        loader = hetgen.Loader(root / "hetgen.toml", mode="local", threads=threads)
        batches = list(loader)
        loader.close()
        runs.append(batches)
    images, labels = runs[0][0]
    assert images.shape == (4, 1, 8, 8) and images.dtype == np.float32
    assert labels.dtype == np.int64 and set(labels) <= set(range(10))
    assert -1.0 <= images.min() and images.max() <= 1.0
    assert sum(len(b[1]) for b in runs[0]) == 20
    for (a, la), (b, lb) in zip(runs[0], runs[1]):
        assert np.array_equal(a, b) and np.array_equal(la, lb)
