"""``cfgcheck rules`` lists every finding id with its severity and one line;
``cfgcheck explain RULE`` prints what it checks, the failure it prevents and the fix.

Both read :mod:`cfgcheck.rules.explanations`; ``cfgcheck rules --format markdown`` prints
``docs/rules.md``.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from typing import Any


def register(sub: Any) -> None:
    rules = sub.add_parser(
        "rules",
        help="list every rule id with its severity and what it checks",
        description="List every finding id cfgcheck can report (registered rules, schema "
        "findings, dataset-scan findings) with its severity and one line. Exit 0.",
    )
    rules.add_argument("--format", choices=["text", "json", "markdown"], default="text")
    rules.set_defaults(run=run_rules)
    explain = sub.add_parser(
        "explain",
        help="what a rule checks, the failure it prevents, how to fix it",
        description="Explain one finding id: what it checks, the real failure it prevents "
        "(the error text users see) and how to fix it. Exit 0, or 2 for an unknown id.",
    )
    explain.add_argument("rule", metavar="RULE", help="a rule id, e.g. seq-len-over-block-size")
    explain.set_defaults(run=run_explain)


def run_rules(args: argparse.Namespace) -> int:
    from cfgcheck.rules.explanations import (
        EXPLANATIONS,
        doc_link,
        emitted_ids,
        render_markdown,
        summary,
    )

    ids = emitted_ids()
    if args.format == "markdown":
        sys.stdout.write(render_markdown())
    elif args.format == "json":
        rows = [
            {
                "rule": i,
                "severity": e.severity if (e := EXPLANATIONS.get(i)) else None,
                "summary": summary(i),
                "doc": doc_link(i),
            }
            for i in ids
        ]
        json.dump(rows, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        width = max(len(i) for i in ids)
        for i in ids:
            e = EXPLANATIONS.get(i)
            severity = e.severity if e else "?"
            print(f"{i:<{width}}  {severity:<22}  {summary(i)}")
        print("\n`cfgcheck explain RULE` for what a rule prevents and how to fix it.")
    return 0


def run_explain(args: argparse.Namespace) -> int:
    from cfgcheck.cli import EXIT_LOAD, EXIT_OK
    from cfgcheck.rules.explanations import emitted_ids, explain_text

    text = explain_text(args.rule)
    if text is None:
        ids = emitted_ids()
        close = [i for i in ids if args.rule in i][:1] or difflib.get_close_matches(
            args.rule, ids, n=1
        )
        hint = f" (did you mean {close[0]}?)" if close else ""
        print(
            f"cfgcheck: error: unknown rule {args.rule!r}{hint}; `cfgcheck rules` lists them",
            file=sys.stderr,
        )
        return EXIT_LOAD
    print(text)
    return EXIT_OK
