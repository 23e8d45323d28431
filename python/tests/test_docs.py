"""The examples of docs/python.md run as written."""
import re

import pytest

from conftest import ROOT
from ferry.testing import SceneTestCase

BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "docs/python.md").read_text(), re.S)


def test_the_page_has_its_examples():
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("i", range(len(BLOCKS)))
def test_example_runs(i, tmp_path):
    ns: dict = {}
    exec(compile(BLOCKS[i], f"docs/python.md block {i}", "exec"), ns)
    scenes = [v for v in ns.values() if isinstance(v, type) and issubclass(v, SceneTestCase) and v is not SceneTestCase]
    for scene in scenes:
        for platform in scene.platforms:
            scene().test_scene(platform, tmp_path / platform)
