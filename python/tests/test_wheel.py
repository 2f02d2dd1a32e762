"""The built wheel is what AWS's PyTorch image installs from a job's source bundle.

It must be manylinux (the image is Ubuntu 22.04 with glibc 2.35 and no compiler), carry its own
libjpeg-turbo, install into a fresh environment, decode a JPEG there, and bring the role
launcher (`python -m hetgen`, `hetgen-launcher`). The wheel is the one `make wheel` built
(HETGEN_WHEEL), installed into a new venv of this interpreter, so nothing of the test
environment's own copy of hetgen is used.
"""

import json
import os
import subprocess
import textwrap
import zipfile
from pathlib import Path

import pytest

from conftest import hetgen_fixtures

DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture(scope="module")
def fresh(installed) -> Path:
    """The python of a new venv with only the wheel installed (conftest's `installed`)."""
    return installed / "python"


def tags(wheel: Path) -> list[str]:
    """The platform tags of the wheel's file name (`…-cp39-abi3-<platform>.whl`)."""
    return wheel.name.removesuffix(".whl").split("-")[-1].split(".")


def test_the_wheel_is_manylinux_abi3_and_old_enough_for_aws_images(wheel):
    name = wheel.name.removesuffix(".whl").split("-")
    assert name[2:4] == ["cp39", "abi3"], wheel.name
    for tag in tags(wheel):
        assert tag.startswith(("manylinux_2_", "manylinux2014_")), wheel.name
        if tag.startswith("manylinux_2_"):
            glibc_minor = int(tag.split("_")[2])
            # Ubuntu 22.04, AWS's PyTorch training images, has glibc 2.35.
            assert glibc_minor <= 35, wheel.name
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    bundled = [n for n in names if n.startswith("hetgen.libs/")]
    assert any("libjpeg" in n for n in bundled), names


def test_the_native_module_resolves_libjpeg_inside_the_wheel(fresh):
    site = subprocess.run(
        [str(fresh), "-c", "import hetgen._native as n; print(n.__file__)"],
        capture_output=True, text=True, check=True).stdout.strip()
    ldd = subprocess.run(["ldd", site], capture_output=True, text=True, check=True).stdout
    [line] = [l for l in ldd.splitlines() if "libjpeg" in l]
    resolved = Path(line.split("=>")[1].split("(")[0].strip()).resolve()
    libs = (Path(site).parent.parent / "hetgen.libs").resolve()
    assert resolved.parent == libs, f"libjpeg resolves to {resolved}, not into {libs}"


def test_a_fresh_install_decodes_a_jpeg(fresh, tmp_path):
    # `halves.jpg`: 16×16 grey, the left half 40, the right half 200 (JPEG, quality 95).
    folder = tmp_path / "images" / "0"
    folder.mkdir(parents=True)
    (folder / "a.jpg").write_bytes((DATA / "halves.jpg").read_bytes())
    decode = hetgen_fixtures.load("decode")
    decode["channel"][0]["uri"] = str(tmp_path / "images")
    spec = hetgen_fixtures.write(tmp_path / "hetgen.toml", decode)
    script = textwrap.dedent(f"""\
        import json
        import hetgen
        [batch] = list(hetgen.Loader({str(spec)!r}, epochs=1))
        images, labels = batch
        image = images[0, :, :, 0]
        print(json.dumps([list(image.shape), float(image[:, :6].mean()),
                          float(image[:, 10:].mean()), int(labels[0])]))
        """)
    run = subprocess.run([str(fresh), "-c", script], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    shape, left, right, label = json.loads(run.stdout)
    assert shape == [16, 16] and label == 0, run.stdout
    assert abs(left - 40) <= 6 and abs(right - 200) <= 6, run.stdout


def test_the_wheel_brings_the_role_launcher(fresh):
    bin_dir = fresh.parent
    for command in ([str(fresh), "-m", "hetgen", "--help"], [str(bin_dir / "hetgen-launcher"), "--help"]):
        run = subprocess.run(command, capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        assert run.stdout.startswith("usage: launcher train"), run.stdout
    # Outside a job it says what is missing and fails.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SAGEMAKER_", "HETGEN_"))}
    env["SAGEMAKER_BASE_DIR"] = "/nonexistent/hetgen-test"
    run = subprocess.run([str(fresh), "-m", "hetgen", "train"], capture_output=True, text=True,
                         timeout=60, env=env)
    assert run.returncode == 1
    assert "resourceconfig.json" in run.stderr
