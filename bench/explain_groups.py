"""Sums auto_explain's plans of the write groups' statements (``WITH input AS …``) in a
PostgreSQL log: the statement's own plan and each statement trigger, per group and per row
(bench/put-explain.sh)."""

import collections
import re
import sys

# A log line's prefix is PostgreSQL's default (`%m [%p] `): the time and its zone, the process.
ENTRY = re.compile(r"\n(?=\d{4}-\d\d-\d\d [\d:.]+ \S+ \[\d+\] LOG:  duration: )")
DURATION = re.compile(r"duration: ([\d.]+) ms")
# The plan's top node: its total time and the rows the group statement answered (one a write).
TOP = re.compile(r"Query Text: WITH input.*?\n\t\S[^\n]*actual time=[\d.]+\.\.([\d.]+) rows=(\d+) loops", re.S)
TRIGGER = re.compile(r"Trigger (\S+) on entries: time=([\d.]+) calls=(\d+)")
#: The row trigger that runs inside the plan's time (counted there, not again).
IN_PLAN = {"entries_no_prompt_when_encrypted"}


def main(path: str) -> None:
    groups, rows, whole, plan = 0, 0, 0.0, 0.0
    triggers: collections.Counter[str] = collections.Counter()
    entries = ENTRY.split(open(path, encoding="utf-8", errors="replace").read())
    for entry in entries:
        duration, top = DURATION.search(entry), TOP.search(entry)
        if duration is None or top is None:
            continue
        groups += 1
        rows += int(top.group(2))
        whole += float(duration.group(1))
        plan += float(top.group(1))
        for name, took, _ in TRIGGER.findall(entry):
            if name not in IN_PLAN:
                triggers[name] += float(took)
    if groups == 0 or len(entries) < 2:
        sys.exit("no group statement in the log (or its lines do not start as PostgreSQL's default prefix)")
    print(f"{groups} group statements, {rows / groups:.1f} writes a group\n")
    print("| part | ms a group | µs a write |\n| --- | --- | --- |")

    def line(name: str, ms: float) -> None:
        print(f"| {name} | {ms / groups:.3f} | {1000 * ms / rows:.1f} |")

    line("the statement, triggers included (auto_explain's duration)", whole)
    line("its plan (the top node's time)", plan)
    line("its statement triggers, all", sum(triggers.values()))
    for name, took in triggers.most_common():
        line(f"`{name}`", took)
    line("the rest: the access rows' CTE (it runs after the plan's top node), the after-trigger queue",
         whole - plan - sum(triggers.values()))


if __name__ == "__main__":
    main(sys.argv[1])
