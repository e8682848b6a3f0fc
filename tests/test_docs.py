"""The docs as a newcomer copies them: every ```python block of README.md and docs/**/*.md runs
as written (one fresh process per page, blocks in order, one namespace), links resolve.

A page opts a block out only with ``<!-- not run: reason -->`` on the line(s) right before its
fence; the opted-out blocks are counted and printed (``pytest -s``). A block that needs a
component this machine lacks (``mg.errors.UnavailableError``: Graphviz's ``dot``, an OpenCL
device; or a missing optional package) skips its page with the reason - except under CI
(``CI=true``), which installs them all, where it fails.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

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


# ------------------------------------------------------------------ every page's python blocks

FENCE = re.compile(r"^```python[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
NOT_RUN = re.compile(r"<!--\s*not run:\s*(.*?)\s*-->\s*\Z", re.S)
IN_CI = os.environ.get("CI", "").strip().lower() in {"true", "1", "yes"}
UNAVAILABLE = 3  # the runner's exit status when a block needs a missing component


def python_blocks(page: pathlib.Path) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """([(first line, code)] to run, [(first line, reason)] opted out), in page order."""
    text = page.read_text()
    run, skipped = [], []
    for match in FENCE.finditer(text):
        line = text.count("\n", 0, match.start(1)) + 1
        opt_out = NOT_RUN.search(text, 0, match.start())
        if opt_out:
            skipped.append((line, opt_out.group(1)))
        else:
            run.append((line, match.group(1)))
    return run, skipped


DOC_PAGES = [page for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
             if FENCE.search(page.read_text())]

RUNNER = """
import json, sys
page, blocks = sys.argv[1], json.load(open(sys.argv[2]))
namespace = {"__name__": "__main__"}
for line, code in blocks:
    try:
        exec(compile("\\n" * (line - 1) + code, page, "exec"), namespace)
    except Exception as error:
        import minigraph
        if isinstance(error, (ModuleNotFoundError, minigraph.errors.UnavailableError)):
            print(f"block at line {line} needs what is missing: {error}", file=sys.stderr)
            sys.exit(UNAVAILABLE)
        raise
""".replace("UNAVAILABLE", str(UNAVAILABLE))


def test_every_page_with_python_is_found():
    names = {page.relative_to(ROOT).as_posix() for page in DOC_PAGES}
    assert {"README.md", "docs/getting-started.md", "docs/autodiff.md",
            "docs/visualization.md", "docs/distributed.md", "docs/opencl.md"} <= names


@pytest.mark.parametrize("page", DOC_PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_page_snippets_run(page, tmp_path):
    blocks, skipped = python_blocks(page)
    for line, reason in skipped:
        print(f"{page.relative_to(ROOT)}:{line}: block not run: {reason}")
    blocks_file = tmp_path / "blocks.json"
    blocks_file.write_text(json.dumps(blocks))
    work = tmp_path / "cwd"  # files a snippet writes (graph.svg, runs/) land here
    work.mkdir()
    result = subprocess.run([sys.executable, "-c", RUNNER, str(page), str(blocks_file)],
                            cwd=work, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"})
    if result.returncode == UNAVAILABLE and not IN_CI:
        pytest.skip(f"{page.relative_to(ROOT)}: {result.stderr.strip().splitlines()[-1]}")
    assert result.returncode == 0, (
        f"{page.relative_to(ROOT)}: {len(blocks)} block(s), one failed:\n{result.stderr}")


def test_the_not_run_marker_applies_to_the_next_block_only(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("text\n\n```python\na = 1\n```\n\n<!-- not run: needs a GPU -->\n"
                    "```python\nraise SystemExit(1)\n```\n\n```python\nb = a\n```\n")
    run, skipped = python_blocks(page)
    assert [line for line, _ in run] == [4, 13]
    assert skipped == [(9, "needs a GPU")]


def test_opted_out_blocks_are_counted_and_give_a_reason():
    opted_out = [(page.relative_to(ROOT).as_posix(), line, reason)
                 for page in DOC_PAGES for line, reason in python_blocks(page)[1]]
    total = sum(len(python_blocks(page)[0]) for page in DOC_PAGES)
    print(f"{total} python blocks run, {len(opted_out)} opted out: {opted_out}")
    assert all(reason for _, _, reason in opted_out), opted_out
    assert total >= 15


def test_supported_ops_table_is_current():
    """docs/tf-interop.md's table of supported ops is what the registries hold now
    (regenerate it with ``python -m minigraph.interop.supported --write``)."""
    from minigraph.interop import supported

    page = supported.PAGE.read_text(encoding="utf-8")
    assert supported.render(page) == page, "run python -m minigraph.interop.supported --write"
    assert "| `FusedBatchNormGradV3` | batch_norm |" in page
