"""Regenerate ``definition_pb2.py``/``service_pb2.py`` (and their ``.pyi``) from ``proto/``.

    python -m wire.grpc_v2.generate          # writes the modules next to this file
    python -m wire.grpc_v2.generate --check  # exit 1 when a committed module is stale

Needs ``grpcio-tools`` (a development dependency: it bundles ``protoc`` and the well-known
types); the broker and proxy need only ``protobuf`` at run time. The generated imports are
rewritten to this package (``wire.grpc_v2``) so the modules do not claim a top-level
``apache`` package.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROTO_ROOT = HERE / "proto"
SOURCES = ("apache/rocketmq/v2/definition.proto", "apache/rocketmq/v2/service.proto")
OUTPUTS = ("definition_pb2.py", "definition_pb2.pyi", "service_pb2.py", "service_pb2.pyi")
_IMPORT = "from apache.rocketmq.v2 import definition_pb2 as "
_LOCAL_IMPORT = "from wire.grpc_v2 import definition_pb2 as "


def generate(target: Path) -> None:
    import grpc_tools

    includes = Path(grpc_tools.__file__).parent / "_proto"
    with tempfile.TemporaryDirectory() as out:
        subprocess.run(
            [sys.executable, "-m", "grpc_tools.protoc", f"-I{PROTO_ROOT}", f"-I{includes}",
             f"--python_out={out}", f"--pyi_out={out}", *SOURCES],
            check=True,
        )  # fmt: skip
        generated = Path(out) / "apache" / "rocketmq" / "v2"
        for name in OUTPUTS:
            text = (generated / name).read_text().replace(_IMPORT, _LOCAL_IMPORT)
            (target / name).write_text(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args()
    if not args.check:
        generate(HERE)
        return 0
    with tempfile.TemporaryDirectory() as scratch:
        generate(Path(scratch))
        stale = [n for n in OUTPUTS if (Path(scratch) / n).read_text() != (HERE / n).read_text()]
    if stale:
        print(f"stale: {', '.join(stale)}; run python -m wire.grpc_v2.generate", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    os.chdir(HERE)
    sys.exit(main())
