"""Every image a Markdown file of the repository shows exists.

Each `![alt](path)` (and `<img src="path">`) in every tracked Markdown file (README.md, docs/**/*.md,
reproduce/README.md, ...) outside fenced code blocks and inline code must name a file that exists relative to the
Markdown file (a URL is not checked). So must an image path written as plain prose ("the curves are in
figures/training_curves.png"): `reproduce.report.publish` rewrites only `](figures/` links to the published figure
directory, so a prose path to a figure is wrong in docs/reproduction.md (its figures are in docs/reproduction/).
Paths in inline code (`DIR/figures/x.png`) are examples, not links, and are left alone.
"""

import re
import subprocess
from pathlib import Path

import pytest

from tests.module_loader import ROOT

IMAGE = re.compile(r"!\[[^\]]*\]\(\s*(?:<([^>\n]+)>|([^)\s]+))(?:\s+[\"'][^\"'\n]*[\"'])?\s*\)")
HTML_IMAGE = re.compile(r"<img\b[^>]*\bsrc\s*=\s*[\"']([^\"']+)[\"']", re.IGNORECASE)
FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")
SKIP_DIRS = {".git", ".venv", "workdir", "node_modules", "build", "dist", ".pytest_cache"}


def markdown_files() -> list[Path]:
    """The tracked Markdown files (git ls-files); without git, every .md outside virtual envs and run outputs."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--", "*.md"], cwd=ROOT, capture_output=True, check=True,
                             timeout=60).stdout.decode()
        files = [ROOT / p for p in out.split("\0") if p]
    except (OSError, subprocess.SubprocessError):
        files = [p for p in ROOT.rglob("*.md") if not SKIP_DIRS & set(p.relative_to(ROOT).parts)]
    return sorted(p for p in files if p.is_file())


def image_links(text: str) -> list[str]:
    """The image targets of a Markdown text, code blocks and inline code left out."""
    text = INLINE_CODE.sub("", FENCE.sub("", text))
    return [a or b for a, b in IMAGE.findall(text)] + HTML_IMAGE.findall(text)


PROSE_IMAGE = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w.-]+\.(?:png|svg|jpe?g|gif))\b", re.IGNORECASE)
LINK = re.compile(r"!?\[[^\]]*\]\([^)]*\)|<img\b[^>]*>|https?://\S+", re.IGNORECASE)


def prose_images(text: str) -> list[str]:
    """Image paths named in running text (not in a link, an <img>, a URL or code)."""
    return PROSE_IMAGE.findall(LINK.sub("", INLINE_CODE.sub("", FENCE.sub("", text))))


def missing_images(md: Path) -> list[str]:
    missing = []
    text = md.read_text(encoding="utf-8")
    for target in image_links(text) + prose_images(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE) or target.startswith("#"):
            continue  # a URL (http:, data:, ...) or an anchor
        path = target.split("#", 1)[0].split("?", 1)[0]
        if not (md.parent / path).is_file():
            missing.append(target)
    return missing


def test_the_link_finder_reads_markdown_images():
    text = ("![a](figs/x.png) ![b](<y z.png>) ![c](d.png \"title\") <img src='e.svg' width=3>\n"
            "`![not](code.png)`\n```\n![not](fenced.png)\n```\n[a link](not_an_image.md)\n")
    assert image_links(text) == ["figs/x.png", "y z.png", "d.png", "e.svg"]


def test_a_missing_image_is_reported(tmp_path):
    (tmp_path / "here.png").write_bytes(b"")
    md = tmp_path / "doc.md"
    md.write_text("![ok](here.png) ![gone](figures/training_curves.png) ![web](https://x.org/a.png)\n")
    assert missing_images(md) == ["figures/training_curves.png"]


def test_a_figure_path_in_prose_is_checked_too(tmp_path):
    """The published report once said 'the curves themselves are in figures/training_curves.png': right in the
    report's own directory, wrong in docs/reproduction.md, whose figures are in docs/reproduction/."""
    (tmp_path / "reproduction").mkdir()
    (tmp_path / "reproduction" / "training_curves.png").write_bytes(b"")
    md = tmp_path / "reproduction.md"
    md.write_text("The curves themselves are in figures/training_curves.png. See also reproduction/training_curves.png"
                  " and `DIR/figures/x.png` and http://x.org/y.png.\n")
    assert missing_images(md) == ["figures/training_curves.png"]


def test_the_repository_has_markdown_files():
    names = {p.relative_to(ROOT).as_posix() for p in markdown_files()}
    assert {"README.md", "docs/reproduction.md"} <= names


@pytest.mark.parametrize("md", markdown_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_image_a_markdown_file_links_exists(md):
    missing = missing_images(md)
    assert not missing, f"{md.relative_to(ROOT)} links images that do not exist (relative to it): {missing}"
