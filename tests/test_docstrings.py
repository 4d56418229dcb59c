"""Docstrings cite papers by author, year and equation, and carry no timings (issue #55).

Pure ``ast`` over the source files under ``jaxbio/``: nothing is imported. A paper is cited as
"Du 2021, eq. 2", never by the project's file number of its source document ("seed 001"), which
means nothing outside the project; every string constant (error messages, command-line help and
output, plot titles) is held to that too. Measured speeds, wall times, "N× faster" and the
machines they were measured on belong in ``benchmarks/README.md`` (its section "Measurements
behind design choices"), not in docstrings: a docstring may say *that* a measurement chose a
design and point there, without the numbers.

The timing patterns are written so that physical units are not timings: a model's time constant
("τ = 5 ms"), a time step ("dt = 1e-4 s"), shapes and units ("``(n,)`` s", "rad/s"). A number
with a time unit counts as a timing only in a sentence that also speaks of measuring or running
code (measured, took, wall, per call, compile, cold, warm, …); µs and ns count by themselves.
"""

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "jaxbio"

# ---- paper citations by file number -------------------------------------------------------------
# "seed 001", "seeds 002, 003", "seed-003", "Seed 000's"; a bare "001 eq. 2" / "003 §3"; and "the
# seed's link" (the word names a source document only in this project: a random seed is
# "``seed``" or "random seed", which these patterns leave alone).
SEED_PATTERNS = [
    re.compile(r"\bseeds?[\s-]+0\d\d\b", re.IGNORECASE),
    re.compile(r"(?<![\d.,])0\d\d,? (?:eqs?\.|§|ref\.|appendix)", re.IGNORECASE),
    re.compile(
        r"\bseed's\b|\b(?:the|each|its|this|that) seeds?(?=[\s.,;:)])(?! (?:value|key|argument)\b)", re.IGNORECASE
    ),
]

# ---- timings --------------------------------------------------------------------------------------
_NUMBER = r"\d[\d,]*(?:\.\d+)?"
# timings by themselves: sub-millisecond units, speed-up factors, load averages
TIMING_ALWAYS = [
    re.compile(rf"{_NUMBER}\s*(?:µs|μs|us|ns)\b"),
    re.compile(
        rf"{_NUMBER}\s*[×x]\s*(?:faster|slower|quicker|dearer|cheaper|less|more|the speed|speed-?up)", re.IGNORECASE
    ),
    re.compile(rf"(?:faster|slower|speed-?up)\s+(?:by\s+)?(?:of\s+)?{_NUMBER}\s*[×x]", re.IGNORECASE),
    re.compile(r"load average", re.IGNORECASE),
    re.compile(rf"{_NUMBER}\s*(?:ms)?\s+(?:against|vs\.?|→|->)\s+{_NUMBER}\s*ms\b"),
]
# a number with a time unit (not an exponent's digits: "1e-5 s" is an error in seconds) ...
_TIME_QUANTITY = re.compile(
    rf"(?<![\d.eE−-]){_NUMBER}\s*(?:ms|s|sec|secs|seconds?|min|minutes?|h|hours?)\b(?!\s*[/⁻²·^])"
)
# ... is a timing in a sentence that speaks of running code ("faster", "timing" are no such words:
# a sprinter runs faster, a race has timing noise)
_TIMING_WORDS = re.compile(
    r"\b(?:measured|measures|took|takes?\s+(?:about\s+|~|≈\s*)?\d|wall|per (?:call|frame|step|solve|round|race|sample|"
    r"trajectory|iteration|evaluation)|compiles?|compiled|compiling|compilation|cold|warm|tracing|"
    r"spent|spends?|costs?|"
    r"speed-?up|run ?time|benchmark\w*|XLA|jit|on (?:a|the|this|one|two) (?:\w+ )?(?:CPU|GPU|core|cores|"
    r"machine|laptop))\b",
    re.IGNORECASE,
)
# ... or that names the machine (a machine named where no time is given, e.g. where a deadlock was
# observed, is no timing)
_MACHINE = re.compile(r"\b\d+-core\b|\bEPYC\b|\bXeon\b|\bRyzen\b|\b[AH]100\b|\bH200\b|\bRTX\b", re.IGNORECASE)
# sentences end at ". ", "; ", ": " or a blank line; "1.7 s" and "e.g. the" do not end one
_SENTENCE_END = re.compile(r"(?<=[.;:!?])\s+(?=[A-Z`(*-])|\n\s*\n|\n\s*[-*] ")


def _sources():
    return sorted(ROOT.rglob("*.py"))


def _docstrings(tree: ast.Module):
    """``(name, first line, text)`` of the module's, classes' and functions' docstrings."""
    yield "<module>", 1, ast.get_docstring(tree, clean=True)
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            yield node.name, node.body[0].lineno if node.body else node.lineno, ast.get_docstring(node, clean=True)


def _line(text: str, start: int) -> str:
    begin = text.rfind("\n", 0, start) + 1
    end = text.find("\n", start)
    return text[begin : end if end >= 0 else len(text)].strip()


def seed_citations(text: str):
    """The lines of ``text`` that cite a source document by its file number."""
    for pattern in SEED_PATTERNS:
        for m in pattern.finditer(text):
            yield text.count("\n", 0, m.start()), _line(text, m.start())


def timings(text: str):
    """The lines of ``text`` that give a measured speed or the machine it was measured on."""
    for pattern in TIMING_ALWAYS:
        for m in pattern.finditer(text):
            yield text.count("\n", 0, m.start()), _line(text, m.start())
    start = 0
    for end in [m.start() for m in _SENTENCE_END.finditer(text)] + [len(text)]:
        sentence = text[start:end]
        quantity = _TIME_QUANTITY.search(sentence)
        if quantity and (_TIMING_WORDS.search(sentence) or _MACHINE.search(sentence)):
            pos = start + quantity.start()
            yield text.count("\n", 0, pos), _line(text, pos)
        start = end


def _offences(check):
    found = []
    for path in _sources():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for name, lineno, doc in _docstrings(tree):
            if not doc:
                continue
            for offset, line in dict.fromkeys(check(doc)):
                found.append(f"{path.relative_to(ROOT.parent)}:{lineno + offset} {name}: {line}")
    return found


def test_docstrings_cite_papers_by_author_and_year():
    found = _offences(seed_citations)
    assert not found, "cite the paper (e.g. 'Du 2021, eq. 2'), not the seed's file number:\n" + "\n".join(found)


def test_docstrings_carry_no_timings():
    found = _offences(timings)
    assert not found, "timings belong in benchmarks/README.md, not in docstrings:\n" + "\n".join(found)


def test_strings_cite_papers_by_author_and_year():
    """Every string constant too: error messages, command-line help and output, plot titles."""
    found = []
    for path in _sources():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        docstrings = {  # checked above, by name
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and ast.get_docstring(node, clean=False) is not None
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                for _, line in seed_citations(node.value):
                    found.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}: {line}")
    assert not found, "cite the paper, not the seed's file number:\n" + "\n".join(found)


# ---- the patterns themselves ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "The wrench recursion (seed 001 eq. 2).",
        "Muscles and actuators (seeds 000, 001, 002).",
        "The seed-003 hybrid body.",
        "Seed 000's dissipation.",
        "as in 001 eq. 3",
        "index a is the seed's link a + 1",
        "the l_k terms (seed's 1-based k)",
        "as in seed\n003, the moments are unique",
    ],
)
def test_seed_citations_are_found(text):
    assert list(seed_citations(text))


@pytest.mark.parametrize(
    "text",
    [
        "The wrench recursion (Du 2021, eq. 2).",
        "A trace with noise and lag-1 correlation ``rho`` (``seed``).",
        "key: a random seed for the noise.",
        "1,000 segments, 0.001 s steps",
    ],
)
def test_paper_citations_pass(text):
    assert not list(seed_citations(text))


@pytest.mark.parametrize(
    "text",
    [
        "Measured on 1,000 races: compile 9.6 s vs 29.3 s, run 1.7 s vs 11.0 s.",
        "3.5 µs per frame.",
        "This is 4× faster than scipy.",
        "it is 3–10× dearer than the recursion",
        "It took 12 s on the laptop.",
        "Wall time 0.68 -> 0.13 s.",
        "Measured under a load average of 2.",
        "0.15 s of imports on a 2-core machine.",
        "a 1,000-segment chain: 0.05 s, the cost of the closed form.",
        "The cold call (first compile) costs 2.7 s,\nthe warm one 0.1 s.",
    ],
)
def test_timings_are_found(text):
    assert list(timings(text))


@pytest.mark.parametrize(
    "text",
    [
        "t: ``(T,)`` time in s.",
        "tau: activation time constant, 5 ms (Thelen 2003).",
        "dt = 1e-4 s, the notebook's explicit Euler step, integrated for 20 s.",
        "qd: ``(n,)`` rad/s; the speed in m/s; 9.69 s (Bolt 2009) for 100 m.",
        "One recursion to compile instead of two.",
        "the excitation rises within 0.1 s of the start.",
        "a step of 1 ms; the speed at 70 m.",
        "Observed on a 2-core machine, jax 0.10.2: the solve hung on its first round.",
        "a reaction time of 0.15 s; Bolt ran faster than 9.7 s, traced at 100 Hz.",
    ],
)
def test_physical_units_are_not_timings(text):
    assert not list(timings(text))
