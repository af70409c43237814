package wire

import (
	"errors"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	loadstats "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// The fields of LoadStatsRequest and Node that UnmarshalLoadStats reads.
const (
	loadStatsNode protowire.Number = 1 // LoadStatsRequest.node
	nodeID        protowire.Number = 1 // Node.id
)

// errNodeIDUTF8 is a node id that is not valid UTF-8 (a full decode fails
// on it too).
var errNodeIDUTF8 = errors.New("wire: LoadStatsRequest.node.id: invalid UTF-8")

// UnmarshalLoadStats decodes an LRS LoadStatsRequest into m, with its node
// reduced to the node's id: every other field of the node is skipped
// unread, and not validated. Envoy 1.40 sends its whole node (about 61 KB
// with its 516 extensions) in every load report even with
// set_node_on_first_message_only, and the daemon reads only its id;
// decoding the node whole was most of the daemon's cost per Envoy in
// shares mode. The other fields are decoded by the standard protobuf
// decoder, with its semantics (a node given twice merges: its id is the
// last one given). m is reset first; it keeps nothing of b.
func UnmarshalLoadStats(b []byte, m *loadstats.LoadStatsRequest) error {
	proto.Reset(m)
	var (
		id      []byte
		hasNode bool
		rest    []byte // the fields other than the node
		from    = -1   // rest is b[from:to] while those fields are contiguous
		to      int
		copied  bool
	)
	r := NewReader(b)
	for {
		start := len(b) - len(r.b)
		if !r.Next() {
			break
		}
		end := len(b) - len(r.b)
		if r.Is(loadStatsNode, protowire.BytesType) {
			hasNode = true
			nr := NewReader(r.Bytes())
			for nr.Next() {
				if nr.Is(nodeID, protowire.BytesType) {
					id = nr.Bytes()
				}
			}
			if err := nr.Err(); err != nil {
				return err
			}
			continue
		}
		switch {
		case copied:
			rest = append(rest, b[start:end]...)
		case from < 0:
			from, to = start, end
		case start == to:
			to = end
		default: // a node between two other fields: copy them
			rest = append(append(make([]byte, 0, to-from+end-start), b[from:to]...), b[start:end]...)
			copied = true
		}
	}
	if err := r.Err(); err != nil {
		return err
	}
	if !copied && from >= 0 {
		rest = b[from:to]
	}
	if len(rest) > 0 {
		if err := (proto.UnmarshalOptions{Merge: true}).Unmarshal(rest, m); err != nil {
			return err
		}
	}
	if hasNode {
		if !utf8.Valid(id) {
			return errNodeIDUTF8
		}
		m.Node = &corev3.Node{Id: string(id)}
	}
	return nil
}
