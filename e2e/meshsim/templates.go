package meshsim

import (
	"embed"
	"fmt"
	"strconv"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	datav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	alsv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/bulkhead-mesh/bulkhead/pkg/authz"
	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
)

//go:embed captures/*.txtpb
var captures embed.FS

// templates are the captured messages every simulated one is made from.
// They are read only after loading (proto.Marshal of a shared message is
// safe for concurrent use), so one set serves every goroutine.
type templates struct {
	check     *authv3.CheckRequest
	node      *corev3.Node // the captured Envoy's node: about 61 KB with its extensions
	end       *datav3.HTTPAccessLogEntry
	periodic  *datav3.HTTPAccessLogEntry
	release   string // the release log's log_name
	heartbeat string // the heartbeat log's log_name
	nodeRest  []byte // node's encoding without its id and cluster (identifierField)
}

var loadTemplates = sync.OnceValues(func() (*templates, error) {
	var t templates
	var check authv3.CheckRequest
	var rel, hb alsv3.StreamAccessLogsMessage
	for name, m := range map[string]proto.Message{captureCheck: &check, captureRelease: &rel, captureHeartbeat: &hb} {
		b, err := captures.ReadFile("captures/" + name)
		if err != nil {
			return nil, err
		}
		if err := prototext.Unmarshal(b, m); err != nil {
			return nil, fmt.Errorf("captures/%s: %w", name, err)
		}
	}
	t.check, t.node = &check, rel.GetIdentifier().GetNode()
	t.release, t.heartbeat = rel.GetIdentifier().GetLogName(), hb.GetIdentifier().GetLogName()
	for _, e := range append(rel.GetHttpLogs().GetLogEntry(), hb.GetHttpLogs().GetLogEntry()...) {
		switch e.GetCommonProperties().GetAccessLogType() {
		case datav3.AccessLogType_DownstreamEnd:
			t.end = e
		case datav3.AccessLogType_DownstreamPeriodic:
			t.periodic = e
		}
	}
	if t.node == nil || t.end == nil || t.periodic == nil || t.release == "" || t.heartbeat == "" {
		return nil, fmt.Errorf("captures/: want a node, an end and a periodic entry and two log names")
	}
	rest, err := proto.Marshal(t.nodeOf(""))
	if err != nil {
		return nil, fmt.Errorf("captures/: the node: %w", err)
	}
	t.nodeRest = rest
	return &t, nil
})

// identifierField is the encoding of a stream's first message's
// identifier field (StreamAccessLogsMessage field 1) for node's logger
// name: what proto.Marshal makes of identifier(node, name), built from the
// captured node's encoding (nodeRest) rather than marshalled again. The
// node is 61 KB whose extensions list costs proto.Marshal about 170 us,
// once per stream: 3.4 s of the simulator's CPU when 5,000 Envoys open
// their 20,000 streams, all at once in a reconnect storm. A message's
// encoding is its fields' in any order, so the stream's first message is
// this followed by the encoding of its entries.
func (t *templates) identifierField(node, name string) []byte {
	n := len(t.nodeRest) + 2*len(node) + 32
	b := make([]byte, 0, n+len(name)+32)
	b = protowire.AppendTag(b, 1, protowire.BytesType) // StreamAccessLogsMessage.identifier
	b = protowire.AppendVarint(b, uint64(identifierSize(node, name, len(t.nodeRest))))
	b = protowire.AppendTag(b, 1, protowire.BytesType) // Identifier.node
	b = protowire.AppendVarint(b, uint64(nodeSize(node, len(t.nodeRest))))
	b = protowire.AppendTag(b, 1, protowire.BytesType) // Node.id
	b = protowire.AppendString(b, node)
	b = protowire.AppendTag(b, 2, protowire.BytesType) // Node.cluster
	b = protowire.AppendString(b, node)
	b = append(b, t.nodeRest...)
	b = protowire.AppendTag(b, 2, protowire.BytesType) // Identifier.log_name
	return protowire.AppendString(b, name)
}

func nodeSize(node string, rest int) int {
	return 2*(protowire.SizeTag(1)+protowire.SizeBytes(len(node))) + rest
}

func identifierSize(node, name string, rest int) int {
	return protowire.SizeTag(1) + protowire.SizeBytes(nodeSize(node, rest)) + protowire.SizeTag(2) + protowire.SizeBytes(len(name))
}

// identifier is the first message's identifier of a stream of node's
// logger name: the captured node, its id and cluster replaced (the rest,
// the extensions list above all, is shared, not copied).
func (t *templates) identifier(node, name string) *alsv3.StreamAccessLogsMessage_Identifier {
	return &alsv3.StreamAccessLogsMessage_Identifier{Node: t.nodeOf(node), LogName: name}
}

// nodeOf is the captured node with id node (and cluster): what a real
// Envoy 1.40 sends in its first RTDS request and in every LRS request.
func (t *templates) nodeOf(node string) *corev3.Node {
	return &corev3.Node{Id: node, Cluster: node, Metadata: t.node.GetMetadata(), Locality: t.node.GetLocality(),
		UserAgentName: t.node.GetUserAgentName(), UserAgentVersionType: t.node.GetUserAgentVersionType(),
		Extensions: t.node.GetExtensions(), ClientFeatures: t.node.GetClientFeatures()}
}

// request is one simulated HTTP request, as its Envoy sees it.
type request struct {
	id       uint64
	bulkhead string
	priority string // "" = the route names none
	tenant   string // "" = no tenant header
	start    time.Time
	admitted time.Time // when the Check's OK came
	duration time.Duration
	token    string // the permit's, from the Check's answer
}

func (r *request) requestID() string { return "sim-" + strconv.FormatUint(r.id, 16) }

// checkRequest is the Check Envoy sends for r: the captured one with r's
// route, headers, stream id and time.
func (t *templates) checkRequest(r *request) *authv3.CheckRequest {
	c := proto.Clone(t.check).(*authv3.CheckRequest)
	a := c.GetAttributes()
	a.GetRequest().Time = timestamppb.New(r.start)
	h := a.GetRequest().GetHttp()
	h.Id = strconv.FormatUint(r.id, 10)
	path := "/" + r.bulkhead + "/items?page=2"
	h.Path = path
	hdr := h.GetHeaders()
	hdr[":path"] = path
	hdr["x-request-id"] = r.requestID()
	delete(hdr, "x-upstream-delay")
	delete(hdr, captureTenant)
	if r.tenant != "" {
		hdr[captureTenant] = r.tenant
	}
	a.ContextExtensions = map[string]string{authz.ExtBulkhead: r.bulkhead}
	if r.priority != "" {
		a.ContextExtensions[authz.ExtPriority] = r.priority
	}
	return c
}

// endEntry is r's DownstreamEnd entry, sent when it ends (now).
func (t *templates) endEntry(r *request, now time.Time) *datav3.HTTPAccessLogEntry {
	e := proto.Clone(t.end).(*datav3.HTTPAccessLogEntry)
	t.fill(e, r, now)
	e.GetResponse().ResponseCode = wrapperspb.UInt32(200)
	return e
}

// periodicEntry is r's DownstreamPeriodic entry at now.
func (t *templates) periodicEntry(r *request, now time.Time) *datav3.HTTPAccessLogEntry {
	e := proto.Clone(t.periodic).(*datav3.HTTPAccessLogEntry)
	t.fill(e, r, now)
	return e
}

// fill sets what differs from request to request: the permit, the ids, the
// start and the upstream's timings (Envoy sends upstream 100 us after the
// Check's answer; the last upstream byte comes 50 us before the end).
func (t *templates) fill(e *datav3.HTTPAccessLogEntry, r *request, now time.Time) {
	cp := e.GetCommonProperties()
	cp.StartTime = timestamppb.New(r.start)
	cp.StreamId = r.requestID()
	e.GetRequest().RequestId = r.requestID()
	e.GetRequest().Path = "/" + r.bulkhead + "/items?page=2"
	cp.UpstreamCluster = r.bulkhead
	el := now.Sub(r.start)
	lead := r.admitted.Sub(r.start) + 100*time.Microsecond
	if cp.TimeToFirstUpstreamTxByte != nil {
		cp.TimeToFirstUpstreamTxByte = durationpb.New(lead)
	}
	if cp.TimeToLastUpstreamRxByte != nil {
		cp.TimeToLastUpstreamRxByte = durationpb.New(max(lead, el-50*time.Microsecond))
	}
	if cp.Duration != nil {
		cp.Duration = durationpb.New(el)
	}
	cp.Metadata.FilterMetadata[permit.MetadataNamespace] = &structpb.Struct{Fields: map[string]*structpb.Value{
		permit.MetadataToken:    structpb.NewStringValue(r.token),
		permit.MetadataBulkhead: structpb.NewStringValue(r.bulkhead),
		"ext_authz_duration":    structpb.NewNumberValue(1),
	}}
}
