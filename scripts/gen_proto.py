"""Regenerate configs/fleetcast_pb2.py from configs/fleetcast.proto with grpcio-tools.

    python scripts/gen_proto.py            # rewrite configs/fleetcast_pb2.py in place
    python scripts/gen_proto.py --out DIR  # write DIR/configs/fleetcast_pb2.py instead

No system protoc is needed: grpcio-tools bundles the compiler.
"""

import argparse
import pathlib
import sys

from grpc_tools import protoc

REPO = pathlib.Path(__file__).resolve().parent.parent
PROTO = "configs/fleetcast.proto"


def generate(out_dir: pathlib.Path) -> pathlib.Path:
    """Compiles the schema into `out_dir`; returns the generated module's path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    status = protoc.main(["protoc", f"-I{REPO}", f"--python_out={out_dir}", str(REPO / PROTO)])
    if status != 0:
        raise RuntimeError(f"protoc failed on {PROTO} with status {status}")
    return out_dir / "configs" / "fleetcast_pb2.py"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=REPO, help="output root")
    args = parser.parse_args(argv)
    print(generate(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
