"""Check the built distributions as a package index and a new user would: the wheel holds every
subpackage of ``pytest_hpml``, and installed alone into a fresh virtualenv (without torch) it
passes one pytester test.

    python tools/check_wheel.py DIST_DIR      (run by ``tox -e build`` after ``twine check``)
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import venv
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The one test the installed wheel runs. torch is left out of the fresh virtualenv (several
# GB): the plugin loads into every run where it is installed, and must cost a run that uses
# none of it nothing, torch included; its options and command are there.
SMOKE = """
from pytest_hpml.config.options import GROUP

pytest_plugins = ["pytester"]


def test_the_installed_plugin_loads_without_torch(pytester):
    pytester.makepyfile("def test_plain():\\n    assert True\\n")
    result = pytester.runpytest_subprocess()
    assert result.ret == 0
    result.stdout.fnmatch_lines(["plugins:*hpml-*", "*1 passed*"])
    help = pytester.runpytest_subprocess("--help")
    assert f"{GROUP}:" in help.stdout.lines
    command = pytester.run("pytest-hpml", "--help")
    assert command.ret == 0
"""


def subpackages() -> set[str]:
    """Every folder of pytest_hpml holding modules, as the wheel names them."""
    package = ROOT / "pytest_hpml"
    return {p.parent.relative_to(ROOT).as_posix() for p in package.rglob("*.py")}


def check_contents(wheel: Path) -> None:
    held = {name.rsplit("/", 1)[0] for name in zipfile.ZipFile(wheel).namelist()}
    missing = sorted(subpackages() - held)
    if missing:
        sys.exit(f"{wheel.name} lacks {', '.join(missing)}")
    print(f"{wheel.name}: every subpackage is in it ({len(subpackages())})")


def check_installed(wheel: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="pytest-hpml-wheel-") as scratch:
        home = Path(scratch)
        venv.create(home / "env", with_pip=True)
        python = str(home / "env" / "bin" / "python")
        pip = [python, "-m", "pip", "install", "--quiet"]
        # the wheel's own requirements but torch: a user without torch still gets the plugin
        subprocess.run([*pip, "pytest", "pytest-benchmark", "numpy", "scipy"], check=True)
        subprocess.run([*pip, "--no-deps", str(wheel)], check=True)
        (home / "test_smoke.py").write_text(SMOKE, encoding="utf-8")
        command = [python, "-m", "pytest", "-p", "no:cacheprovider", "-q", "test_smoke.py"]
        env = {**os.environ, "PATH": f"{home / 'env' / 'bin'}{os.pathsep}{os.environ['PATH']}"}
        done = subprocess.run(command, cwd=home, env=env)
        if done.returncode:
            sys.exit(f"the installed wheel failed its test (exit {done.returncode})")


def main(directory: str) -> None:
    [wheel] = Path(directory).glob("*.whl")
    check_contents(wheel)
    check_installed(wheel)


if __name__ == "__main__":
    main(sys.argv[1])
