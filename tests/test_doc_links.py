"""The README and every committed report's markdown link only to files that exist and to headings they have.

The README's benchmark log moved to reports/benchmarks/README.md (its paths one level down, its links to the
README's sections now cross-file): a link that a move or a rename breaks fails here, not in a reader's browser.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FENCED = re.compile(r"```.*?```", re.S)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def heading_anchors(text: str) -> set[str]:
    """GitHub's anchors for a markdown text: each heading lower-cased, punctuation but '-' and '_' dropped, spaces
    as '-', a repeated heading numbered -1, -2, ...; plus explicit ``<a name="...">`` anchors."""
    anchors, seen = set(), {}
    for heading in re.findall(r"^#+ (.*)$", FENCED.sub("", text), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors | set(re.findall(r'<a name="([^"]+)"', text))


def broken_links(md: Path) -> list[str]:
    """Relative links in ``md`` (outside code blocks) whose file is missing or whose #anchor is not a heading."""
    broken = []
    for link in LINK.findall(FENCED.sub("", md.read_text())):
        if re.match(r"[a-z][a-z0-9+.-]*:", link):  # http:, https:, mailto:
            continue
        path, _, fragment = link.partition("#")
        target = (md.parent / path) if path else md
        if not target.exists():
            broken.append(f"{link} (no such file)")
        elif fragment and target.suffix == ".md" and fragment not in heading_anchors(target.read_text()):
            broken.append(f"{link} (no such heading)")
    return broken


def test_the_anchor_rules_on_a_small_case():
    text = "# Training: `pe-probe train`, `demo`\n## GPU (one H200)\n## GPU (one H200)\n```\n# not a heading\n```\n"
    assert heading_anchors(text + '<a name="layout"></a>') == {
        "training-pe-probe-train-demo", "gpu-one-h200", "gpu-one-h200-1", "layout"}


def test_a_broken_link_is_caught(tmp_path):
    (tmp_path / "there.md").write_text("## Training on the CPU\n")
    md = tmp_path / "doc.md"
    md.write_text("[a](there.md#training-on-the-cpu) [b](gone.md) [c](there.md#gpu) [d](https://x.org/y) [e](#top)\n"
                  "# Top\n```\n[f](inside-code.md)\n```\n")
    assert broken_links(md) == ["gone.md (no such file)", "there.md#gpu (no such heading)"]


MARKDOWN = [ROOT / "README.md", *sorted((ROOT / "reports").rglob("*.md"))]


@pytest.mark.parametrize("md", MARKDOWN, ids=[str(p.relative_to(ROOT)) for p in MARKDOWN])
def test_every_relative_link_resolves(md):
    assert broken_links(md) == []


def test_the_benchmark_record_is_linked_from_the_readme():
    readme = (ROOT / "README.md").read_text()
    assert "](reports/benchmarks/README.md)" in readme
    assert "## Training on the CPU" in (ROOT / "reports" / "benchmarks" / "README.md").read_text()
