"""Every Markdown page is a reference, not a diary: a checker finds what goes stale.

The rules, for README.md, CONTRIBUTING.md and docs/*.md:

- at most MAX_LINES lines;
- no issue or pull-request references (``#18``, ``issue 31``);
- no branch names (``branch h14``, ``the h16 branch``, ``branch `fence```; ``main`` is fine);
- no session or diary words (``the session of``, ``this session``, ``an earlier run``,
  ``tried``, ``reverted``, ``not kept``): what was tried belongs in commit messages;
- a commit hash (7-40 hex digits, at least one digit and one letter) only inside the
  benchmark results block, which the benchmark writes, or on a line that also names the
  command that reproduces the figure (``python -m ...``, ``pytest ...``, ``scripts/*.sh``
  or ``scripts/*.py``).

The results block of docs/BENCHMARKS.md is checked to have the shape bench/report.py writes
and to name one commit that exists.
"""

import re
import subprocess
from pathlib import Path

import pytest

from bench import report
from tests.support.processes import ROOT

MAX_LINES = 450

HEX = r"[0-9a-f]{7,40}"
COMMIT = re.compile(rf"(?<![\w./-])(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])({HEX})(?![\w-])")
COMMAND = re.compile(r"python -m [\w.]+|pytest\b|scripts/[\w.-]+\.(?:sh|py)\b")
RULES: dict[str, re.Pattern[str]] = {
    "issue reference": re.compile(r"(?<![&\w/`])#\d+\b|\b(?:issue|PR|pull request) #?\d+\b", re.I),
    "branch name": re.compile(
        r"\bbranch(?:es)?\s+(?!`?main\b)(?:`[^`]+`|[A-Za-z][\w./-]*\d)"
        r"|\b[A-Za-z][\w./-]*\d[\w./-]*`?\s+branch\b",
        re.I,
    ),
    "session or diary word": re.compile(
        r"\bsession of\b|\b(?:this|that|previous|earlier|last|next|same) session\b"
        r"|\b(?:earlier|previous) runs?\b"
        r"|\btried\b|\breverted\b|\bnot kept\b",
        re.I,
    ),
}


def pages(root: Path = ROOT) -> list[Path]:
    """The Markdown pages a reader is sent to."""
    found = [root / "README.md", root / "CONTRIBUTING.md", *sorted((root / "docs").glob("*.md"))]
    return [page for page in found if page.exists()]


def results_lines(lines: list[str]) -> set[int]:
    """Line numbers (1-based) inside the generated benchmark results block."""
    inside, out = False, set()
    for n, line in enumerate(lines, 1):
        if line.strip() == report.BEGIN:
            inside = True
        elif line.strip() == report.END:
            inside = False
        elif inside:
            out.add(n)
    return out


def problems(text: str, name: str = "page.md") -> list[str]:
    """Every rule the page breaks, as 'name:line: rule: text'."""
    lines = text.splitlines()
    found = []
    if len(lines) > MAX_LINES:
        found.append(f"{name}: {len(lines)} lines (at most {MAX_LINES}): split it by audience")
    generated = results_lines(lines)
    for n, line in enumerate(lines, 1):
        if n in generated:
            continue
        for rule, pattern in RULES.items():
            if pattern.search(line):
                found.append(f"{name}:{n}: {rule}: {line.strip()}")
        if COMMIT.search(line) and not COMMAND.search(line):
            found.append(f"{name}:{n}: commit hash without the command beside it: {line.strip()}")
    return found


def relative(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


@pytest.mark.parametrize("page", pages(), ids=relative)
def test_every_page_is_a_reference(page: Path) -> None:
    assert problems(page.read_text(), relative(page)) == []


CLEAN = "# A page\n\nThe receiver answers 200 once the ledger recorded the delivery.\n"


@pytest.mark.parametrize(
    "line",
    [
        "Measured in the session of 2026-12-03 (evening).",
        "This session moved the sweeper.",
        "As #18's targets ask, the peak is met.",
        "See issue 31 for the plan.",
        "On the h14 branch the worker got faster.",
        "The restructuring (branch h14): before and after.",
        "Merged from branch `fence`.",
        "An earlier run read 0.80.",
        "Tried, not kept: glibc's malloc thresholds.",
        "The select change was reverted.",
        "The run at `08f33d9` read 1.74.",
        "Served the code of faa0553, one socket per worker.",
    ],
)
def test_the_checker_finds_a_diary_line(line: str) -> None:
    assert problems(CLEAN) == []
    found = problems(CLEAN + line + "\n")
    assert len(found) >= 1 and ":4: " in found[0], found


@pytest.mark.parametrize(
    "line",
    [
        "At `bf98336`, `.venv/bin/python -m bench.failover --runs 9 --only intake`:",
        "At `2711cb9`, `.venv/bin/pytest tests/system/test_connection_slots.py -s` prints it.",
        "Merge to the `main` branch; events such as `checkout.session.completed`.",
        "A Checkout Session; `retried` payments; the HTML entity &#8212; a [link](#section-2).",
        "The payload is hashed with `sha256`; a card ends 4242; the ledger keeps `deadbeef`.",
    ],
)
def test_the_checker_leaves_reference_lines_alone(line: str) -> None:
    assert problems(CLEAN + line + "\n") == []


def test_the_checker_counts_lines_and_spares_the_results_block() -> None:
    long_page = CLEAN + "line\n" * MAX_LINES
    assert any("lines (at most" in p for p in problems(long_page))
    block = f"{report.BEGIN}\nRun 2026-12-03 on git 08f33d9.\n| before (9bdc4e5) |\n{report.END}\n"
    assert problems(CLEAN + block) == []
    assert problems(CLEAN + block + "Read at `08f33d9`.\n") != []


RUN_HEADER = re.compile(
    rf"Run \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d UTC on git ({HEX}), (?:\*\*quick mode\*\*|total)"
)


def renderer_headings() -> list[str]:
    """The fixed start of every '### ' heading bench/report.py and its sections can write."""
    here = Path(report.__file__)
    sources = [here, *(here.with_name(f"{n}.py") for n in ("report_sections", "report_primary"))]
    heads = re.findall(r'"(### [^"{]+)', "".join(p.read_text() for p in sources))
    assert heads, "bench/report.py writes no headings?"
    return heads


def test_the_benchmark_results_block_is_the_reports_output() -> None:
    text = (ROOT / "docs" / "BENCHMARKS.md").read_text()
    assert text.count(report.BEGIN) == 1 and text.count(report.END) == 1
    block = text.split(report.BEGIN, 1)[1].split(report.END, 1)[0]
    assert block.startswith("\n") and block.endswith("\n")  # as update_doc writes it
    header = RUN_HEADER.match(block.strip())
    assert header, block.strip().splitlines()[0]
    assert "uncommitted changes" not in block.splitlines()[1]
    heads = renderer_headings()
    for line in block.splitlines():
        if line.startswith("### "):
            assert any(line.startswith(h) for h in heads), f"not written by bench.report: {line}"
    shown = subprocess.run(
        ["git", "-C", str(ROOT), "cat-file", "-t", header[1]], capture_output=True, text=True
    )
    if shown.returncode != 0 and "not a git repository" in shown.stderr:
        pytest.skip("no git history to look the commit up in")
    assert shown.stdout.strip() == "commit", f"the results name no commit here: {header[1]}"


def test_update_doc_rewrites_only_the_region(tmp_path: Path) -> None:
    doc = tmp_path / "BENCHMARKS.md"
    doc.write_text(f"# B\n\nmethod\n\n{report.BEGIN}\nold\n{report.END}\n\ncaveats\n")
    assert report.update_doc("Run new", doc)
    assert doc.read_text() == f"# B\n\nmethod\n\n{report.BEGIN}\nRun new\n{report.END}\n\ncaveats\n"
