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


ROOT = pathlib.Path(__file__).resolve().parents[1]
SKIP_DIRS = {".git", ".venv", "build", "__pycache__", ".pytest_cache", ".ruff_cache",
             ".hypothesis", "minigraph.egg-info"}


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: pathlib.Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M)
    seen: dict[str, int] = {}
    anchors = set()
    for heading in re.findall(r"^#{1,6}\s+(.*?)\s*#*\s*$", text, flags=re.M):
        slug = _slug(heading)
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def test_links_and_anchors_resolve():
    """Every relative markdown link in README.md and docs/ resolves to a file (and a heading
    when it has an #anchor); so does every ``docs/<page>.md#anchor`` that code cites."""
    broken = []
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for page in pages:
        text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
        text = re.sub(r"`[^`\n]*`", "", text)
        for target in re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", text):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            dest = (page.parent / file_part).resolve() if file_part else page
            if not dest.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    cited = re.compile(r"\bdocs/[\w./-]*?\.md(?:#[\w-]+)?")
    for folder in ("minigraph", "kernels_c", "tests"):
        for source in sorted((ROOT / folder).rglob("*")):
            if source.suffix not in {".py", ".c", ".h"} or SKIP_DIRS & set(source.parts):
                continue
            for target in cited.findall(source.read_text(errors="replace")):
                file_part, _, anchor = target.partition("#")
                dest = ROOT / file_part
                if not dest.exists():
                    broken.append(f"{source.relative_to(ROOT)}: {target} (no such file)")
                elif anchor and anchor not in _anchors(dest):
                    broken.append(f"{source.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_no_pointer_to_an_outside_spec():
    """The TF semantics live in docs/tf-semantics.md; nothing points at the old spec file."""
    name = "TF_" + "SEMANTICS"
    hits = []
    for path in sorted(ROOT.rglob("*")):
        if SKIP_DIRS & set(path.relative_to(ROOT).parts) or not path.is_file():
            continue
        if path.suffix in {".so", ".o", ".a", ".png", ".svg", ".pyc", ".npz", ".gz"}:
            continue
        if name in path.read_text(errors="ignore"):
            hits.append(str(path.relative_to(ROOT)))
    assert not hits, f"{name} is mentioned in: {hits}"
