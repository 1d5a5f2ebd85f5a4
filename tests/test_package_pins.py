"""The agent wheel installs the pinned versions (issue 36: its Requires-Dist named only the direct
requirements, so `pip install` of it took the newest of everything else: 6 transitive versions differed
from constraints.txt's; and it listed google-cloud-storage twice). Built as `make package` builds it."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile

from packaging.requirements import Requirement

from tests.conftest import ROOT


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_wheel_requires_every_package_once_at_its_pinned_version(tmp_path):
    subprocess.run([sys.executable, str(ROOT / "scripts" / "package.py"), "--out", str(tmp_path)], check=True,
                   capture_output=True)
    [wheel] = tmp_path.glob("zen-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        [name] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = archive.read(name).decode()
    required = [Requirement(line.split(": ", 1)[1]) for line in metadata.splitlines()
                if line.startswith("Requires-Dist: ")]
    names = [_normal(r.name) for r in required]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    pins = {_normal(Requirement(line).name): str(Requirement(line).specifier)
            for line in (ROOT / "constraints.txt").read_text().splitlines() if line.split("#")[0].strip()}
    for requirement in required:  # each exact, at constraints.txt's version
        assert str(requirement.specifier) == pins[_normal(requirement.name)], requirement
    # Everything the runtime requirements pull in, as installed here, is among them
    from tests.test_usercli_wheel import _runtime_closure

    assert {_normal(d.metadata["Name"]) for d in _runtime_closure()} <= set(names)
    direct = [line.split("#")[0].strip() for path in ("requirements.txt", "requirements-agent.txt")
              for line in (ROOT / path).read_text().splitlines() if line.split("#")[0].strip()]
    assert [str(r) for r in required[:len(direct)]] == [str(Requirement(line)) for line in direct]
