"""``tm doctor [--json] [--gpu-backend SPEC]``: what trainmeter can see on this node and what to
do about each gap. The report itself is :mod:`trainmeter.doctor`'s (``look`` and ``lines``).

Exit status: 0 whenever it could look; 2 for a usage error or a ``--gpu-backend`` it cannot
read.
"""

from __future__ import annotations

import json
import os
import sys

from trainmeter.commands.args import Parser
from trainmeter.core.envnames import GPU_BACKEND


def main(argv: list[str]) -> int:
    p = Parser(prog="tm doctor", description="What trainmeter can see on this node (NVML, "
                "driver, GPUs, peaks, GPM, MIG, torch, trackers, front end) and what to do "
                "about each gap. Exit 0 whenever it could look.")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--gpu-backend", metavar="SPEC", default=os.environ.get(GPU_BACKEND),
                   help="look through this backend (nvml, none, fake:h100x2, ...; default: "
                        f"${GPU_BACKEND}, else NVML when it loads)")  # fmt: skip
    args = p.parse_args(argv)
    from trainmeter.doctor import lines, look

    try:
        report = look(args.gpu_backend or None)
    except ValueError as exc:
        print(f"tm: --gpu-backend: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=2) if args.json else "\n".join(lines(report)))
    return 0
