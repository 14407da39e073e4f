"""``tm peaks [NAME] [--json]``: the dense peaks table (``core/peaks.py``); with NAME, the row
that GPU name finds, and why (docs/spec.md "`tm peaks` and `tm doctor`").

Exit status: 0; 1 when no row has NAME (close names are suggested on stderr); 2 for a usage
error.
"""

from __future__ import annotations

import json
import sys

from trainmeter.commands.args import Parser
from trainmeter.core import peaks
from trainmeter.core.passport_md import short_citation
from trainmeter.doctor import UNKNOWN_PEAK

_PEAK_HEAD = ("device", "kind", *(d.upper() for d in peaks.DTYPES), "GB/s", "W", "verified")


def main(argv: list[str]) -> int:
    p = Parser(prog="tm peaks", description="The dense peaks table (TFLOP/s, not 2:4 sparse); "
                "with NAME, the row that GPU name finds, and why.")  # fmt: skip
    p.add_argument("name", nargs="?", help='a GPU: NVML name ("NVIDIA H100 80GB HBM3"), row '
                   'label ("H100 SXM") or short name (h100-sxm, mi300x)')  # fmt: skip
    p.add_argument("--json", action="store_true", help="print JSON (full citations)")
    args = p.parse_args(argv)
    if args.name is None:
        rows = peaks.table()
        if args.json:
            print(json.dumps([{**r, "citation_short": short_citation(r["citation"])} for r in rows],
                             indent=2))  # fmt: skip
        else:
            print("\n".join(peak_table(rows)))
        return 0
    found = peaks.match_gpu(args.name)
    if found is None:
        close = peaks.close_gpu_names(args.name)
        hint = f" (no row has this name; close but not the same: {', '.join(close)})"
        if args.json:
            print(json.dumps({"name": args.name, "match": None, "why": UNKNOWN_PEAK,
                              "close": close}, indent=2))  # fmt: skip
        print(f"tm: {args.name!r}: {UNKNOWN_PEAK}{hint if close else ''}", file=sys.stderr)
        return 1
    row, why = found
    if args.json:
        d = row.as_dict()
        print(json.dumps({"name": args.name, "match": {**d, "citation_short":
                          short_citation(d["citation"])}, "why": why}, indent=2))  # fmt: skip
        return 0
    print("\n".join(peak_table([row.as_dict()])))
    print(f"why: {why}")
    print(f"citation: {row.citation}")
    return 0


def peak_table(rows) -> list[str]:
    """Rows of ``peaks.table()`` as aligned text: one line of figures, one of names and source."""

    def num(x) -> str:
        return "-" if x is None else f"{x:g}"

    cells = [[r["label"], r["kind"], *(num(r["tflops"][d]) for d in peaks.DTYPES),
              num(r["mem_bw"] / 1e9), num(r["tdp_w"]), "yes" if r["verified"] else "no"]
             for r in rows]  # fmt: skip
    width = [max(len(c[i]) for c in [list(_PEAK_HEAD), *cells]) for i in range(len(_PEAK_HEAD))]

    def line(c) -> str:
        last = len(c) - 1
        cols = [c[i].ljust(width[i]) if i in (0, 1, last) else c[i].rjust(width[i])
                for i in range(len(c))]  # fmt: skip
        return "  ".join(cols).rstrip()

    out = ["Dense peaks per device: TFLOP/s by dtype (tensor or matrix cores; FP32 is the "
           "CUDA-core or vector rate; '-': no rate), memory GB/s, board W.",
           line(list(_PEAK_HEAD))]  # fmt: skip
    for r, c in zip(rows, cells, strict=True):
        out.append(line(c))
        names = " / ".join(f'"{n}"' for n in r["names"])
        source = peaks.NAME_SOURCE[r["vendor"]]
        out.append(f"    {source} {names} · {short_citation(r['citation'])}")
    return out
