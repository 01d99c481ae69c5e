"""Write docs/hacking.md's probe tables from the probe's own output (a maintainer script of the repository, not
installed with the package): nothing in them is typed.

Each table sits between ``<!-- probe-table: NAME -->`` and ``<!-- /probe-table -->`` in docs/hacking.md, and its rows
are saved beside the page in ``docs/probe/NAME.json`` (what ``pluie-reward probe --json`` wrote). This script runs the
commands below on the default judge (or reads their JSON with ``--from``), keeps the rows and writes each table with the
package's own report (``markdown_report``, ``search_report``) and a line saying when and how it was produced.
``tests/test_probe_search.py`` checks that each table is the report of its saved rows, for the families of today, with
every column explained on the page.

Example (shell)::

    python scripts/probe_tables.py                    # both runs on the default judge (~10-20 min on 2 busy cores)
    python scripts/probe_tables.py --only search      # the search alone (~3-6 min)
    python scripts/probe_tables.py --from out/        # rows already written by pluie-reward probe --json out/NAME.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
import tempfile
from pathlib import Path
from typing import Sequence

from pluie_reward.tools import cli
from pluie_reward.tools.probe import markdown_report
from pluie_reward.tools.probe.report import search_report

ROOT = Path(__file__).resolve().parents[1]
PAGE, ROWS = ROOT / "docs" / "hacking.md", ROOT / "docs" / "probe"
TABLES = {  # name -> the command that makes its rows (on the default judge), the report that renders them
    "families": (["probe"], markdown_report),
    "search": (["probe", "--search"], search_report),
}
BLOCK = re.compile(r"(<!-- probe-table: (\w+) -->\n)(.*?)(<!-- /probe-table -->)", re.S)


def table(name: str, rows: list[dict], made: str) -> str:
    """The block's text: the report of the rows, then where it comes from."""
    return f"{TABLES[name][1](rows)}\n\n({made}; `python scripts/probe_tables.py` wrote this table from `docs/probe/{name}.json`.)\n"


def write_page(rows: dict[str, list[dict]], made: dict[str, str], page: Path = PAGE) -> None:
    """Replace each named block of the page by its table (blocks not in ``rows`` are left as they are)."""
    text = page.read_text(encoding="utf-8")
    names = [m.group(2) for m in BLOCK.finditer(text)]
    missing = sorted(set(rows) - set(names))
    if missing:
        raise ValueError(f"{page}: no <!-- probe-table: NAME --> block for {missing}")
    page.write_text(BLOCK.sub(lambda m: m.group(1) + table(m.group(2), rows[m.group(2)], made[m.group(2)]) + m.group(4)
                              if m.group(2) in rows else m.group(0), text), encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: run (or read) the probe's rows, save them beside the page, write the page's tables."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=sorted(TABLES), action="append", help="these tables only (default: all)")
    parser.add_argument("--from", dest="source", type=Path, default=None,
                        help="a folder holding NAME.json written by `pluie-reward probe --json` (default: run the probe)")
    args = parser.parse_args(argv)
    rows, made = {}, {}
    today = datetime.date.today().isoformat()
    for name in args.only or sorted(TABLES):
        command = TABLES[name][0]
        if args.source is None:
            with tempfile.TemporaryDirectory() as folder:
                out = Path(folder) / f"{name}.json"
                code = cli.main([*command, "--json", str(out)])
                if code not in (0, 1):  # 1: something flagged, which the table shows
                    return code
                rows[name] = json.loads(out.read_text(encoding="utf-8"))
        else:
            rows[name] = json.loads((args.source / f"{name}.json").read_text(encoding="utf-8"))
        made[name] = f"`pluie-reward {' '.join(command)}`, the default judge, {today}"
        ROWS.mkdir(exist_ok=True)
        (ROWS / f"{name}.json").write_text(json.dumps(rows[name], indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    write_page(rows, made)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
