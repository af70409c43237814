#!/usr/bin/env bash
# Usage: proto/gen.sh [OUT]    generate the Go code of every .proto under
#                              proto/ into OUT (default proto/, beside each
#                              .proto): `make proto`
#        proto/gen.sh --check  generate into a temporary directory and fail
#                              when the committed code differs: `make proto-check`
#
# Pinned tools: protoc from Debian's protobuf-compiler (PROTOC_VERSION; the
# well-known types come from libprotobuf-dev), protoc-gen-go at the version of
# google.golang.org/protobuf in go.mod, protoc-gen-go-grpc at
# PROTOC_GEN_GO_GRPC_VERSION. The Go plugins are installed into BIN (default
# .bin/) when missing or at another version.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--check" ]; then
	tmp="$(mktemp -d)"
	trap 'rm -rf "$tmp"' EXIT
	"$0" "$tmp"
	stale=0
	# The protoc version in the headers is ignored: a different protoc only
	# warns (above), it does not make the code stale.
	while IFS= read -r f; do
		if [ ! -f "proto/$f" ]; then
			echo "proto-check: proto/$f is missing" >&2
			stale=1
		elif ! diff -u -I '^// .*protoc  *v[0-9]' "proto/$f" "$tmp/$f" >&2; then
			stale=1
		fi
	done < <(cd "$tmp" && find . -name '*.go' | sed 's|^\./||' | LC_ALL=C sort)
	while IFS= read -r f; do
		if [ ! -f "$tmp/$f" ]; then
			echo "proto-check: proto/$f has no .proto any more" >&2
			stale=1
		fi
	done < <(cd proto && find . -name '*.pb.go' | sed 's|^\./||' | LC_ALL=C sort)
	if [ "$stale" -ne 0 ]; then
		echo "proto-check: the generated Go code under proto/ is stale or hand-edited; run 'make proto' and commit the result" >&2
		exit 1
	fi
	echo "proto-check: generated code is up to date"
	exit 0
fi

OUT="${1:-proto}"
BIN="${BIN:-$PWD/.bin}"
GO="${GO:-go}"
PROTOC_VERSION="${PROTOC_VERSION:-3.21.12}"
PROTOC_GEN_GO_GRPC_VERSION="${PROTOC_GEN_GO_GRPC_VERSION:-v1.6.2}"
PROTOC_GEN_GO_VERSION="$("$GO" list -m -f '{{.Version}}' google.golang.org/protobuf)"
WKT_INCLUDE="${WKT_INCLUDE:-/usr/include}"

if ! command -v protoc >/dev/null; then
	echo "proto/gen.sh: protoc not found; install it with: apt-get install -y protobuf-compiler libprotobuf-dev" >&2
	exit 1
fi
if [ ! -f "$WKT_INCLUDE/google/protobuf/duration.proto" ]; then
	echo "proto/gen.sh: google/protobuf/duration.proto not under $WKT_INCLUDE; install it with: apt-get install -y libprotobuf-dev" >&2
	exit 1
fi
have="$(protoc --version | awk '{print $2}')"
if [ "$have" != "$PROTOC_VERSION" ]; then
	echo "proto/gen.sh: warning: protoc $have, pinned $PROTOC_VERSION (the generated headers will differ)" >&2
fi

# install PLUGIN MODULE VERSION: put the plugin into $BIN unless it is there
# at VERSION already.
install() {
	local name="$1" pkg="$2" version="$3"
	if [ -x "$BIN/$name" ] && "$BIN/$name" --version 2>/dev/null | grep -qE " v?${version#v}$"; then
		return
	fi
	echo "proto/gen.sh: installing $pkg@$version into $BIN" >&2
	GOBIN="$BIN" "$GO" install "$pkg@$version"
}
install protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go "$PROTOC_GEN_GO_VERSION"
install protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc "$PROTOC_GEN_GO_GRPC_VERSION"

mkdir -p "$OUT"
mapfile -t files < <(cd proto && find . -name '*.proto' | sed 's|^\./||' | LC_ALL=C sort)
(
	cd proto
	PATH="$BIN:$PATH" protoc -I . -I "$WKT_INCLUDE" \
		--plugin=protoc-gen-go="$BIN/protoc-gen-go" \
		--plugin=protoc-gen-go-grpc="$BIN/protoc-gen-go-grpc" \
		--go_out="$(cd .. && cd "$OUT" && pwd)" --go_opt=paths=source_relative \
		--go-grpc_out="$(cd .. && cd "$OUT" && pwd)" --go-grpc_opt=paths=source_relative \
		"${files[@]}"
)
