#!/usr/bin/env bash
# Regenerate the Python modules of pykubelet's own protobuf definitions
# (pykubelet/api/proto/*.proto: the device plugin, pod-resources and plugin
# registration APIs).
#
# The generated *_pb2.py, *_pb2.pyi and *_pb2_grpc.py files are committed, so
# neither running nor testing pykubelet needs a protobuf compiler. Only this
# script does: grpcio-tools, at a pinned version whose protoc matches the
# protobuf runtime in requirements.lock (the generated code checks the
# runtime's version on import), in a throwaway venv. Run it after editing a
# .proto file and commit the results with it.
#
#   bash scripts/gen-proto.sh
set -euo pipefail

GRPCIO_TOOLS_VERSION=1.81.1   # protoc 33.5: generated code needs protobuf >= 6.33.5
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

venv="$(mktemp -d)"
trap 'rm -rf "$venv"' EXIT
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet "grpcio-tools==$GRPCIO_TOOLS_VERSION"

cd "$REPO"
# Paths relative to the repository root, so the generated modules import each
# other as pykubelet.api.proto.<name>_pb2.
"$venv/bin/python" -m grpc_tools.protoc --proto_path=. \
  --python_out=. --pyi_out=. --grpc_python_out=. \
  pykubelet/api/proto/*.proto
echo "gen-proto.sh: generated $(ls pykubelet/api/proto/*_pb2*.py* | wc -l) files"
