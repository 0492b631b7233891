"""The docs against the code: fails when docs/ falls behind a change.

- docs/job-spec.md: every key the spec reader accepts (docs/spec_keys asks the reader itself) is a
  row of the table under its section's heading, and every row of those tables is a key the reader
  accepts; a transformer config's fixed-value and ignored Hugging Face keys appear in its section;
  every value the validation and the planner list for a field (data.source, model.layers[].type,
  pipeline.schedule, ...) appears in its section.
- docs/operations.md: every flag `weft-coordinator --help` and `weft-worker --help` list is a row
  of that daemon's flag table, with the default --help gives; every row is a flag of the daemon;
  every metric family the daemons register (docs/metric_families) is a row of the metrics table
  with its type and labels, and every row is a registered family.
- README.md and docs/*.md: every whole job spec they show (a YAML block that starts with `name:`)
  passes `weftctl plan`; every relative link reaches a file or folder that exists, and every
  #anchor a heading of the file it points into.

A section of a doc is found by its heading: the one that holds the section's path in backticks
(`model.layers[]`, `parallelize.<name>`; for a Hugging Face config also the arch's name; "Top-level
keys" for the top level). Its table is the one between that heading and the next.
"""

import os
import re
import subprocess
import tempfile
import unittest
from typing import Dict, List, Optional, Set, Tuple

ROOT = os.path.join(os.environ.get("TEST_SRCDIR", ""), os.environ.get("TEST_WORKSPACE", "weft"))
DOCS = ["README.md"] + sorted(
    os.path.join("docs", f) for f in os.listdir(os.path.join(ROOT, "docs")) if f.endswith(".md"))


def read(path: str) -> str:
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


def run(binary: str, *args: str, exit_codes=(0,)) -> str:
    """The binary's stdout and stderr together; an exit code not in exit_codes fails the test."""
    done = subprocess.run([os.path.join(ROOT, binary), *args], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=120, check=False)
    out = done.stdout.decode("utf-8", "replace")
    if done.returncode not in exit_codes:
        raise AssertionError(f"{binary} {' '.join(args)} exited {done.returncode}:\n{out}")
    return out


class Heading:
    def __init__(self, level: int, text: str, line: int):
        self.level, self.text, self.line = level, text, line


class Doc:
    """A Markdown file's headings and lines, fenced code blocks blanked so that neither a YAML
    comment (# ...) nor an example counts as a heading, a table or a link."""

    def __init__(self, path: str):
        self.path = path
        self.lines: List[str] = []
        fenced = False
        for line in read(path).split("\n"):
            if line.lstrip().startswith("```"):
                fenced = not fenced
                self.lines.append("")
                continue
            self.lines.append("" if fenced else line)
        self.headings: List[Heading] = []
        for i, line in enumerate(self.lines):
            m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
            if m:
                self.headings.append(Heading(len(m.group(1)), m.group(2), i))

    def find(self, *needles: str) -> Optional[Heading]:
        """The first heading that holds every needle."""
        for h in self.headings:
            if all(n in h.text for n in needles):
                return h
        return None

    def body(self, heading: Heading) -> List[str]:
        """From the heading to the next heading of any level: the section's own text."""
        end = next((h.line for h in self.headings if h.line > heading.line), len(self.lines))
        return self.lines[heading.line + 1:end]

    def subtree(self, heading: Heading) -> List[str]:
        """From the heading to the next one of the same or a higher level: with its subsections."""
        end = next((h.line for h in self.headings
                    if h.line > heading.line and h.level <= heading.level), len(self.lines))
        return self.lines[heading.line + 1:end]

    def slugs(self) -> Set[str]:
        """GitHub's anchors: lower case, punctuation but - and _ dropped, spaces to -; a repeated
        one gets -1, -2, ..."""
        seen: Dict[str, int] = {}
        out = set()
        for h in self.headings:
            text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", h.text)  # a link: its text
            slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
        return out


def table_rows(lines: List[str]) -> List[List[str]]:
    """The cells of every table row (not the header's rule)."""
    rows = []
    for line in lines:
        s = line.strip()
        if not s.startswith("|"):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", s.strip("|"))]
        if all(re.fullmatch(r":?-{3,}:?", c) for c in cells if c):
            continue
        rows.append(cells)
    return rows


def code_spans(text: str) -> List[str]:
    return re.findall(r"`([^`]+)`", text)


def first_code_span(cell: str) -> Optional[str]:
    spans = code_spans(cell)
    return spans[0] if spans else None


class JobSpecTest(unittest.TestCase):
    """docs/job-spec.md against the reader (docs/spec_keys)."""

    @classmethod
    def setUpClass(cls):
        cls.doc = Doc("docs/job-spec.md")
        # kind -> {(section, qualifier) -> {key}}
        cls.facts: Dict[str, Dict[Tuple[str, str], Set[str]]] = {}
        out = run("docs/spec_keys")
        for line in out.splitlines():
            parts = line.split("\t")
            if len(parts) != 4:
                raise AssertionError(f"docs/spec_keys: unexpected output: {out}")
            kind, section, qualifier, key = parts
            cls.facts.setdefault(kind, {}).setdefault((section, qualifier), set()).add(key)

    def heading_of(self, section: str, qualifier: str) -> Heading:
        needles = ["Top-level keys"] if section == "" else [f"`{section}`"]
        if qualifier and qualifier != "-":
            needles.append(qualifier)
        h = self.doc.find(*needles)
        self.assertIsNotNone(
            h, f"docs/job-spec.md has no heading with {' and '.join(needles)}: the section where "
               f"the spec reader's keys {sorted(self.facts['key'].get((section, qualifier), []))} "
               f"are documented")
        return h

    def test_the_reader_was_asked(self):
        # A probe that found nothing would make every other check here pass.
        top = self.facts["key"].get(("", ""), set())
        self.assertIn("mesh", top)
        self.assertIn(("model.layers[]", ""), self.facts["key"])
        self.assertIn(("model.config", "gpt2"), self.facts["key"])
        self.assertIn(("parallelize.<name>", ""), self.facts["key"])
        self.assertIn("data.source", {field for field, _ in self.facts["value"]})

    def test_every_key_is_a_row_of_its_section(self):
        missing = []
        for (section, qualifier), keys in sorted(self.facts["key"].items()):
            h = self.heading_of(section, qualifier)
            documented = {first_code_span(row[0]) for row in table_rows(self.doc.body(h)) if row}
            for key in sorted(keys - documented):
                missing.append(f"{section or '(top level)'}{' ' + qualifier if qualifier else ''}: "
                               f"{key}")
        self.assertEqual(missing, [], "keys the spec reader accepts but no row of their section's "
                                      "table in docs/job-spec.md names (`key` in the first cell)")

    def test_every_row_is_a_key_the_reader_accepts(self):
        stale = []
        for (section, qualifier), keys in sorted(self.facts["key"].items()):
            h = self.heading_of(section, qualifier)
            for row in table_rows(self.doc.body(h)):
                key = first_code_span(row[0]) if row else None
                if key is not None and key not in keys and row[0].strip() != "key":
                    stale.append(f"{section or '(top level)'}: {key}")
        self.assertEqual(stale, [], "rows of docs/job-spec.md for keys the spec reader refuses")

    def test_hugging_face_keys_are_named(self):
        missing = []
        for kind in ("fixed", "ignored"):
            for (section, qualifier), keys in sorted(self.facts.get(kind, {}).items()):
                text = "\n".join(self.doc.subtree(self.heading_of(section, qualifier)))
                spans = set(code_spans(text))
                missing += [f"{section} {qualifier} ({kind}): {k}" for k in sorted(keys - spans)]
        self.assertEqual(missing, [], "Hugging Face config keys the reader accepts that their "
                                      "section of docs/job-spec.md does not name")

    def test_every_value_is_named_in_its_section(self):
        missing = []
        for (field, _), values in sorted(self.facts["value"].items()):
            section = field.rsplit(".", 1)[0] if "." in field else ""
            text = "\n".join(self.doc.subtree(self.heading_of(section, "")))
            spans = set(code_spans(text))
            missing += [f"{field}: {v}" for v in sorted(values - spans)]
        self.assertEqual(missing, [], "values the code accepts that the field's section of "
                                      "docs/job-spec.md does not name (`value`)")


class OperationsTest(unittest.TestCase):
    """docs/operations.md against the daemons' --help and metric registries."""

    @classmethod
    def setUpClass(cls):
        cls.doc = Doc("docs/operations.md")

    def flags_of(self, binary: str) -> Dict[str, str]:
        """--help's flags of the daemon's main file, by name, with their defaults."""
        text = run(binary, "--help", exit_codes=(0, 1))  # absl's --help exits 1 or 0
        flags = {}
        # "    --listen (HOST:PORT to serve on; port 0 picks one);\n      default: "127.0.0.1:7070";"
        # (a flag four spaces in, its description's lines six).
        for m in re.finditer(r"^ {4}--(\w+) \((.*?)\);\s+default: (.*?);$", text, re.M | re.S):
            default = m.group(3)
            if default.startswith('"') and default.endswith('"'):
                default = default[1:-1]
            flags[m.group(1)] = default
        self.assertTrue(flags, f"{binary} --help listed no flags:\n{text}")
        return flags

    def check_flags(self, daemon: str, binary: str):
        flags = self.flags_of(binary)
        h = self.doc.find(f"`{daemon}`", "flags")
        self.assertIsNotNone(h, f"docs/operations.md has no heading with `{daemon}` and 'flags'")
        rows = {}
        for row in table_rows(self.doc.body(h)):
            flag = first_code_span(row[0]) if row else None
            if flag and flag.startswith("--"):
                rows[flag[2:]] = row
        self.assertEqual(sorted(set(flags) - set(rows)), [],
                         f"flags {daemon} --help lists that its table in docs/operations.md lacks")
        self.assertEqual(sorted(set(rows) - set(flags)), [],
                         f"rows of {daemon}'s flag table that {daemon} --help does not list")
        wrong = []
        for name, default in sorted(flags.items()):
            cells = rows[name]
            if default and (len(cells) < 2 or f"`{default}`" not in cells[1]):
                wrong.append(f"--{name}: --help says {default!r}, the table {cells[1:2]}")
        self.assertEqual(wrong, [], f"defaults in {daemon}'s flag table that --help contradicts "
                                    "(the second cell holds the default in backticks)")

    def test_coordinator_flags(self):
        self.check_flags("weft-coordinator", "coordinator/weft-coordinator")

    def test_worker_flags(self):
        self.check_flags("weft-worker", "worker/weft-worker")

    def test_metrics_table(self):
        families = {}
        for line in run("docs/metric_families").splitlines():
            name, kind, labels = line.split("\t")
            families[name] = (kind, sorted(filter(None, labels.split(","))))
        self.assertIn("weft_jobs", families)
        self.assertIn("weft_worker_steps_total", families)
        h = self.doc.find("Metrics")
        self.assertIsNotNone(h, "docs/operations.md has no Metrics heading")
        rows = {}
        for row in table_rows(self.doc.subtree(h)):
            name = first_code_span(row[0]) if row else None
            if name and name.startswith("weft_"):
                rows[name] = row
        self.assertEqual(sorted(set(families) - set(rows)), [],
                         "metric families the daemons register that the metrics table lacks")
        self.assertEqual(sorted(set(rows) - set(families)), [],
                         "rows of the metrics table that no daemon registers")
        wrong = []
        for name, (kind, labels) in sorted(families.items()):
            row = rows[name]
            table_labels = sorted(code_spans(row[2])) if len(row) > 2 else []
            if len(row) < 3 or row[1] != kind or table_labels != labels:
                wrong.append(f"{name}: registered as {kind} {labels}, the table says "
                             f"{row[1:3]}")
        self.assertEqual(wrong, [], "metrics whose type or labels the table gets wrong "
                                    "(| `name` | type | `label`, ... | what |)")


class ExamplesTest(unittest.TestCase):
    """Every whole job spec the docs show (a YAML block that starts with `name:`) is one that
    `weftctl plan` reads, validates and plans."""

    def test_whole_specs_plan(self):
        checked, failed = 0, []
        for path in DOCS:
            for block in re.findall(r"^```yaml\n(.*?)^```", read(path), re.M | re.S):
                if not block.startswith("name:"):
                    continue
                checked += 1
                with tempfile.TemporaryDirectory() as folder:
                    spec = os.path.join(folder, "job.yaml")
                    with open(spec, "w", encoding="utf-8") as f:
                        f.write(block)
                    done = subprocess.run([os.path.join(ROOT, "client/weftctl"), "plan", spec],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                          timeout=120, check=False)
                    if done.returncode != 0:
                        failed.append(f"{path}: {block.splitlines()[0]}: "
                                      f"{done.stderr.decode('utf-8', 'replace').strip()}")
        self.assertGreater(checked, 0, "no whole job spec found in the docs")
        self.assertEqual(failed, [], "job specs in the docs that weftctl plan refuses")


class LinksTest(unittest.TestCase):
    """Every relative link of README.md and docs/*.md reaches a file, and its anchor a heading."""

    def test_links_resolve(self):
        broken = []
        docs = {path: Doc(path) for path in DOCS}
        for path, doc in docs.items():
            text = "\n".join(re.sub(r"`[^`]*`", "", line) for line in doc.lines)
            for target in re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", text):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                    continue
                file, _, anchor = target.partition("#")
                resolved = os.path.normpath(os.path.join(os.path.dirname(path), file)) \
                    if file else path
                if not os.path.exists(os.path.join(ROOT, resolved)):
                    broken.append(f"{path}: ({target}): {resolved} does not exist (a file the "
                                  "docs link to is a data dependency of //docs:docs_test)")
                    continue
                if anchor and resolved.endswith(".md"):
                    linked = docs.get(resolved) or Doc(resolved)
                    if anchor not in linked.slugs():
                        broken.append(f"{path}: ({target}): {resolved} has no heading #{anchor}")
        self.assertEqual(broken, [], "links that lead nowhere")


if __name__ == "__main__":
    unittest.main()
