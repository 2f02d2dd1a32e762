"""`hetgen.Loader(spec, mode="local")` with the user's own dataset on a workstation, outside any
job: the dataset's file is read from the spec's `source_dir`, as `hetgen deploy --local` reads
it (not from an image's `/opt/ml/code`), and a code folder that does not exist is named as
such."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

import hetgen

pytestmark = pytest.mark.timeout(300)

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from test_sizing import SPEC  # noqa: E402


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project whose code is in `code/` (`source_dir`), read from another folder."""
    root = tmp_path / "project"
    (root / "code").mkdir(parents=True)
    (root / "data").mkdir()
    shutil.copy(HERE / "datasets" / "sizing.py", root / "code")
    (root / "code" / "train_sizing.py").write_text("# the job's script\n")
    spec = SPEC.format(factory="make_cheap", batch=16).replace(
        'script = "train_sizing.py"', 'script = "train_sizing.py"\nsource_dir = "code"'
    )
    (root / "hetgen.toml").write_text(spec)
    monkeypatch.delenv("HETGEN_CODE_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    return root


def test_local_mode_reads_the_dataset_from_the_specs_source_dir(project):
    loader = hetgen.Loader(project / "hetgen.toml", mode="local", threads=1)
    features, labels = next(iter(loader))
    assert features.shape == (16, 32) and features.dtype == np.float32
    assert labels.shape == (16,)
    loader.close()


def test_a_code_folder_that_does_not_exist_is_named(project, monkeypatch):
    # A spec's missing `source_dir` is a spec error at its line (validation); a code folder
    # named by HETGEN_CODE_DIR that is not there is named as such, not blamed on the Python.
    missing = project / "elsewhere"
    monkeypatch.setenv("HETGEN_CODE_DIR", str(missing))
    with pytest.raises(hetgen.ConfigurationError) as refused:
        hetgen.Loader(project / "hetgen.toml", mode="local", threads=1)
    message = str(refused.value)
    assert str(missing) in message and "does not exist" in message, message
    assert "sizing.py" in message, message


def _batch_mappings() -> int:
    """Batches of hetgen's Python workers this process maps: files of its shared-memory
    folders, unlinked once mapped."""
    with open("/proc/self/maps") as maps:
        return sum(1 for line in maps if "/hetgen-" in line and line.rstrip().endswith("(deleted)"))


def test_a_batch_is_let_go_of_as_soon_as_the_loop_lets_go_of_it(project):
    # With the cycle collector off, a batch kept alive by a reference cycle would stay mapped
    # for ever: every batch of the epoch would pile up here. Let go of, a batch returns its
    # worker's segment at once, so what is mapped stays what is in flight.
    import gc

    loader = hetgen.Loader(project / "hetgen.toml", mode="local", threads=1)
    gc.disable()
    try:
        seen = 0
        for features, labels in loader:
            seen += 1
            del features, labels
        assert seen >= 40, seen
        mapped = _batch_mappings()
    finally:
        gc.enable()
        loader.close()
    assert mapped <= 12, f"{mapped} batches still mapped after {seen} were let go of"
