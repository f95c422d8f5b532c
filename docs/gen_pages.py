"""Generates the site's derived pages at build time (run by mkdocs-gen-files).

First it parses every docstring as the API pages will (``check_docstrings.py``) and
stops the build on the first warning, before the main job and the notebooks run.

- ``index.md``: the README, its ``docs/`` links made relative to the site;
- ``api/*.md``: one page per public namespace, grouped as its ``__init__`` lists
  the names (one section per implementation module, in import order);
- ``cli/*.md``: the ``--help`` of every command and subcommand, from the parsers;
- ``notebooks/*.ipynb``: the notebooks (mkdocs-jupyter executes them);
- ``examples/main_job/``: the main job's report (``neural demo``), run now, or
  copied from ``FEDKRR_DOCS_MAIN_JOB=DIR`` (a finished ``neural demo --out DIR``).
"""

from __future__ import annotations

import argparse
import ast
import os
from pathlib import Path
import re
import shutil
import subprocess
import sys
import tempfile

import mkdocs_gen_files

sys.path.insert(0, str(Path(__file__).resolve().parent))   # docs/, for api_names
from api_names import NAMESPACES  # noqa: E402
from api_names import ROOT  # noqa: E402
from api_names import public_names  # noqa: E402
from check_docstrings import docstring_warnings  # noqa: E402

# What the report links to; checkpoints, metrics and arrays stay out of the site.
REPORT_SUFFIXES = (".md", ".png", ".json")


def module_summary(module: str) -> str:
  """The first paragraph of a module's docstring, read without importing it."""
  path = ROOT / (module.replace(".", "/") + ".py")
  doc = ast.get_docstring(ast.parse(path.read_text())) or ""
  return doc.split("\n\n")[0].replace("\n", " ")


def api_page(namespace: str, init_file: str) -> str:
  doc = ast.get_docstring(ast.parse((ROOT / init_file).read_text())) or ""
  lines = [f"# `{namespace}`", "", doc.split("\n\n")[0].replace("\n", " "), ""]
  for module, names in public_names(init_file):
    section = module.rsplit(".", 1)[-1].replace("_", " ")
    lines += [f"## {section.capitalize()}", "",
              module_summary(module), ""]
    for name in names:
      lines += [f"::: {namespace}.{name}", "    options:", "      heading_level: 3", ""]
  return "\n".join(lines)


def subcommands(program: str, parser: argparse.ArgumentParser):
  yield program, parser
  for action in parser._actions:   # argparse exposes no public walk of its subparsers
    if isinstance(action, argparse._SubParsersAction):
      for name, sub in action.choices.items():
        yield f"{program} {name}", sub


def cli_page(program: str, parsers) -> str:
  lines = [f"# `{program}` command line", "",
           f"Every command's `--help`, as the installed `{program}` prints it. "
           "The guide to the commands is [the command line](../cli.md).", ""]
  if program == "neural":
    lines += ["`neural run` offers the fields of the config it runs as flags: the KD "
              "protocols' by default, a method's with `--method NAME` (or a config naming "
              "it); each is shown below.", ""]
  for line, sub in parsers:
    lines += [f"## `{line}`", "", "```text", sub.format_help().rstrip(), "```", ""]
  return "\n".join(lines)


def readme_as_index() -> str:
  text = (ROOT / "README.md").read_text()
  text = re.sub(r"\]\(docs/([^)]+)\)", r"](\1)", text)
  return text


def main_job_dir() -> Path:
  given = os.environ.get("FEDKRR_DOCS_MAIN_JOB")
  if given:
    path = Path(given)
    if not (path / "report.md").is_file():
      raise SystemExit(f"FEDKRR_DOCS_MAIN_JOB: expected a neural demo directory with report.md, "
                       f"got {path}")
    return path
  out = Path(tempfile.mkdtemp(prefix="fedkrr-docs-")) / "main-job"
  code = "import sys; from neural._src.cli import main; sys.exit(main(sys.argv[1:]))"
  run = subprocess.run([sys.executable, "-c", code, "demo", "--out", str(out)],
                       capture_output=True, text=True)
  if run.returncode != 0:   # progress bars are noise in a build log; a failure's output is not
    raise SystemExit(f"neural demo failed ({run.returncode}):\n{run.stdout}\n{run.stderr}")
  return out


def main() -> None:
  # Before anything slow: a docstring the API pages cannot parse fails the build now.
  warnings = docstring_warnings()
  if warnings:
    raise SystemExit("docstrings griffe cannot parse:\n" + "\n".join(warnings))
  with mkdocs_gen_files.open("index.md", "w") as f:
    f.write(readme_as_index())

  for namespace, init_file in NAMESPACES:
    with mkdocs_gen_files.open(f"api/{namespace}.md", "w") as f:
      f.write(api_page(namespace, init_file))

  os.environ["COLUMNS"] = "100"   # argparse wraps help at the terminal's width
  from fedkrr._src.cli import _parser as fedkrr_parser
  from neural._src.cli import command_parsers
  for program, parsers in (("fedkrr", subcommands("fedkrr", fedkrr_parser())),
                           ("neural", command_parsers())):
    with mkdocs_gen_files.open(f"cli/{program}.md", "w") as f:
      f.write(cli_page(program, parsers))

  for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
    with mkdocs_gen_files.open(f"notebooks/{notebook.name}", "wb") as f:
      f.write(notebook.read_bytes())

  given = "FEDKRR_DOCS_MAIN_JOB" in os.environ
  job = main_job_dir()
  for path in sorted(job.rglob("*")):
    if path.is_file() and path.suffix in REPORT_SUFFIXES and path.name != "metrics.jsonl":
      relative = path.relative_to(job)
      name = "index.md" if relative == Path("report.md") else relative.as_posix()
      with mkdocs_gen_files.open(f"examples/main_job/{name}", "wb") as f:
        f.write(path.read_bytes())
  if not given:
    shutil.rmtree(job.parent, ignore_errors=True)


main()
