"""The getting-started tutorial's snippets run as written, in order, in one namespace."""

from __future__ import annotations

import pathlib
import re

DOC = pathlib.Path(__file__).resolve().parents[1] / "docs" / "getting-started.md"


def test_getting_started_snippets_run(capsys):
    code = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(code) >= 7
    namespace: dict = {}
    for block in code:
        exec(compile(block, str(DOC), "exec"), namespace)  # noqa: S102
    printed = capsys.readouterr().out
    assert "FusedBatchNormGradV3 ['bn:3', 'bn:4', 'bn:5']" in printed
    assert "(None, 4, 4, 3) (3,)" in printed
    assert printed.strip().splitlines()[-1] == "True"
    assert "must have one element per channel" in printed
