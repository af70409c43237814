package accesslog

import (
	"time"

	datav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	alsv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
	"github.com/bulkhead-mesh/bulkhead/pkg/wire"
)

// message is what the server reads of one StreamAccessLogsMessage: the
// stream's identifier and, per entry (an HTTP request's or a TCP
// connection's), what releasing its permit and classifying its outcome
// take. It is built from a decoded message
// (messageOf) or straight from its encoding (UnmarshalWire), with the same
// result. A stream reuses one message.
type message struct {
	identified    bool // the identifier was given (the first message of a stream)
	node, logName string
	entries       []entry // a message holds HTTP entries or TCP entries
	// arena holds the bytes entries keep (entry.bulkhead), copied out of
	// the encoding, which the codec reuses; it is reused per message.
	arena []byte
}

// entry is what the server reads of one HTTPAccessLogEntry or, for a
// connection, one TCPAccessLogEntry: the two share common_properties, and
// differ in the log types that end and renew, the namespace of the
// ext_authz filter's metadata (permit.MetadataNamespaceOf) and the response.
type entry struct {
	conn     bool   // a TCP connection's entry
	end      bool   // access_log_type is DownstreamEnd (TcpConnectionEnd)
	periodic bool   // access_log_type is DownstreamPeriodic (TcpPeriodic)
	token    string // the permit token in the ext_authz filter metadata, or ""
	// bulkhead is the permit's bulkhead in the same metadata, or empty; it
	// is valid until the next message is read (it points into the arena).
	bulkhead []byte
	code     uint32 // response.response_code; 0 for a connection
	flags    flags  // common_properties.response_flags
	// The upstream's part, from common_properties: time to the first
	// upstream byte sent and to the last one received, from the start of
	// the request; unset when Envoy sent nothing upstream.
	firstUpstreamTx, lastUpstreamRx duration
}

// duration is a google.protobuf.Duration as given, and whether it was.
type duration struct {
	seconds int64
	nanos   int32
	set     bool
}

func durationOf(d *durationpb.Duration) duration {
	return duration{seconds: d.GetSeconds(), nanos: d.GetNanos(), set: d != nil}
}

// upstream is how long the upstream took as Envoy saw it (first byte sent
// to last byte received), and whether Envoy reported both ends.
func (e *entry) upstream() (time.Duration, bool) {
	a, b := e.firstUpstreamTx, e.lastUpstreamRx
	if !a.set || !b.set {
		return 0, false
	}
	d := time.Duration(b.seconds-a.seconds)*time.Second + time.Duration(b.nanos-a.nanos)
	return d, d >= 0
}

// flags holds the bool fields of ResponseFlags, bit n for field number n.
type flags uint32

func (f flags) has(n protowire.Number) bool { return f&(1<<n) != 0 }

// The ResponseFlags field numbers outcome reads (envoy.data.accesslog.v3).
const (
	flagNoHealthyUpstream                protowire.Number = 2
	flagUpstreamRequestTimeout           protowire.Number = 3
	flagLocalReset                       protowire.Number = 4
	flagUpstreamRemoteReset              protowire.Number = 5
	flagUpstreamConnectionFailure        protowire.Number = 6
	flagUpstreamConnectionTermination    protowire.Number = 7
	flagUpstreamOverflow                 protowire.Number = 8
	flagDownstreamConnectionTermination  protowire.Number = 15
	flagUpstreamRetryLimitExceeded       protowire.Number = 16
	flagStreamIdleTimeout                protowire.Number = 17
	flagUpstreamMaxStreamDurationReached protowire.Number = 20
	flagDurationTimeout                  protowire.Number = 23
	flagUpstreamProtocolError            protowire.Number = 24
	flagDownstreamRemoteReset            protowire.Number = 28
	maxFlag                              protowire.Number = 31 // flags has room for 1..31
)

var _ wire.Unmarshaler = (*message)(nil)

// messageOf reads a decoded message into m.
func messageOf(msg *alsv3.StreamAccessLogsMessage, m *message) {
	*m = message{entries: m.entries[:0], arena: m.arena[:0]}
	if id := msg.GetIdentifier(); id != nil {
		m.identified, m.node, m.logName = true, id.GetNode().GetId(), id.GetLogName()
	}
	for _, e := range msg.GetHttpLogs().GetLogEntry() {
		en := entryOf(e.GetCommonProperties(), false)
		en.code = e.GetResponse().GetResponseCode().GetValue()
		m.entries = append(m.entries, en)
	}
	for _, e := range msg.GetTcpLogs().GetLogEntry() {
		m.entries = append(m.entries, entryOf(e.GetCommonProperties(), true))
	}
}

// entryOf reads a decoded entry's common properties.
func entryOf(cp *datav3.AccessLogCommon, conn bool) entry {
	rf := cp.GetResponseFlags()
	var f flags
	for _, fl := range []struct {
		n   protowire.Number
		set bool
	}{
		{flagNoHealthyUpstream, rf.GetNoHealthyUpstream()}, {flagUpstreamRequestTimeout, rf.GetUpstreamRequestTimeout()},
		{flagLocalReset, rf.GetLocalReset()}, {flagUpstreamRemoteReset, rf.GetUpstreamRemoteReset()},
		{flagUpstreamConnectionFailure, rf.GetUpstreamConnectionFailure()},
		{flagUpstreamConnectionTermination, rf.GetUpstreamConnectionTermination()},
		{flagUpstreamOverflow, rf.GetUpstreamOverflow()}, {flagDownstreamConnectionTermination, rf.GetDownstreamConnectionTermination()},
		{flagUpstreamRetryLimitExceeded, rf.GetUpstreamRetryLimitExceeded()}, {flagStreamIdleTimeout, rf.GetStreamIdleTimeout()},
		{flagUpstreamMaxStreamDurationReached, rf.GetUpstreamMaxStreamDurationReached()}, {flagDurationTimeout, rf.GetDurationTimeout()},
		{flagUpstreamProtocolError, rf.GetUpstreamProtocolError()}, {flagDownstreamRemoteReset, rf.GetDownstreamRemoteReset()},
	} {
		if fl.set {
			f |= 1 << fl.n
		}
	}
	md := cp.GetMetadata().GetFilterMetadata()[permit.MetadataNamespaceOf(conn)].GetFields()
	var bh []byte
	if v := md[permit.MetadataBulkhead].GetStringValue(); v != "" {
		bh = []byte(v)
	}
	end, periodic := logTypes(conn)
	return entry{
		conn:            conn,
		end:             int32(cp.GetAccessLogType()) == end,
		periodic:        int32(cp.GetAccessLogType()) == periodic,
		token:           md[permit.MetadataToken].GetStringValue(),
		bulkhead:        bh,
		flags:           f,
		firstUpstreamTx: durationOf(cp.GetTimeToFirstUpstreamTxByte()),
		lastUpstreamRx:  durationOf(cp.GetTimeToLastUpstreamRxByte()),
	}
}

// logTypes are the access_log_type values of an end entry and of a
// periodic entry: a connection's (TcpConnectionEnd, TcpPeriodic, with
// access_log_flush_interval on the TCP proxy) or a request's.
func logTypes(conn bool) (end, periodic int32) {
	if conn {
		return tcpEnd, tcpPeriodic
	}
	return downstreamEnd, downstreamPeriodic
}

// Field numbers of the StreamAccessLogsMessage path read
// (envoy.service.accesslog.v3, envoy.data.accesslog.v3,
// envoy.config.core.v3, google.protobuf).
const (
	fieldMsgIdentifier   = 1  // StreamAccessLogsMessage.identifier
	fieldMsgHTTPLogs     = 2  // StreamAccessLogsMessage.http_logs (oneof log_entries)
	fieldMsgTCPLogs      = 3  // StreamAccessLogsMessage.tcp_logs (oneof log_entries)
	fieldIdentNode       = 1  // Identifier.node
	fieldIdentLogName    = 2  // Identifier.log_name
	fieldNodeID          = 1  // Node.id
	fieldEntries         = 1  // HTTPAccessLogEntries.log_entry, TCPAccessLogEntries.log_entry
	fieldEntryCommon     = 1  // HTTPAccessLogEntry.common_properties, TCPAccessLogEntry.common_properties
	fieldEntryResponse   = 4  // HTTPAccessLogEntry.response
	fieldCommonFirstUpTx = 7  // AccessLogCommon.time_to_first_upstream_tx_byte
	fieldCommonLastUpRx  = 10 // AccessLogCommon.time_to_last_upstream_rx_byte
	fieldDurationSeconds = 1  // Duration.seconds
	fieldDurationNanos   = 2  // Duration.nanos
	fieldCommonFlags     = 16 // AccessLogCommon.response_flags
	fieldCommonMetadata  = 17 // AccessLogCommon.metadata
	fieldCommonType      = 33 // AccessLogCommon.access_log_type
	fieldResponseCode    = 1  // HTTPResponseProperties.response_code (UInt32Value)
	fieldWrapperValue    = 1  // UInt32Value.value
	fieldMetadataFilter  = 1  // Metadata.filter_metadata (map<string, Struct>)
	fieldStructFields    = 1  // Struct.fields (map<string, Value>)
	fieldValueString     = 3  // Value.string_value (oneof kind)
	fieldValueNull       = 1  // Value.null_value
	fieldValueNumber     = 2  // Value.number_value
	fieldValueBool       = 4  // Value.bool_value
	fieldValueStruct     = 5  // Value.struct_value
	fieldValueList       = 6  // Value.list_value
	downstreamEnd        = int32(datav3.AccessLogType_DownstreamEnd)
	downstreamPeriodic   = int32(datav3.AccessLogType_DownstreamPeriodic)
	tcpEnd               = int32(datav3.AccessLogType_TcpConnectionEnd)
	tcpPeriodic          = int32(datav3.AccessLogType_TcpPeriodic)
)

// Which member of the log_entries oneof a message holds.
const (
	logEntriesNone uint8 = iota
	logEntriesHTTP
	logEntriesTCP
)

// UnmarshalWire implements wire.Unmarshaler: it reads an encoded
// StreamAccessLogsMessage as messageOf reads the decoded one, with a full
// decode's rules: repeated scalars keep the last value, messages given
// twice merge, a oneof keeps its last member. Strings are copied.
func (m *message) UnmarshalWire(b []byte) error {
	*m = message{entries: m.entries[:0], arena: m.arena[:0]}
	kind := logEntriesNone
	rd := wire.NewReader(b)
	for rd.Next() {
		var err error
		switch {
		case rd.Is(fieldMsgIdentifier, protowire.BytesType):
			m.identified = true
			err = m.identifier(rd.Bytes())
		case rd.Is(fieldMsgHTTPLogs, protowire.BytesType):
			if kind != logEntriesHTTP {
				m.entries, kind = m.entries[:0], logEntriesHTTP
			}
			err = m.readEntries(rd.Bytes(), false)
		case rd.Is(fieldMsgTCPLogs, protowire.BytesType):
			if kind != logEntriesTCP {
				m.entries, kind = m.entries[:0], logEntriesTCP
			}
			err = m.readEntries(rd.Bytes(), true)
		}
		if err != nil {
			return err
		}
	}
	return rd.Err()
}

func (m *message) identifier(b []byte) error {
	rd := wire.NewReader(b)
	for rd.Next() {
		switch {
		case rd.Is(fieldIdentNode, protowire.BytesType):
			nd := wire.NewReader(rd.Bytes())
			for nd.Next() {
				if nd.Is(fieldNodeID, protowire.BytesType) {
					m.node = string(nd.Bytes())
				}
			}
			if err := nd.Err(); err != nil {
				return err
			}
		case rd.Is(fieldIdentLogName, protowire.BytesType):
			m.logName = string(rd.Bytes())
		}
	}
	return rd.Err()
}

// readEntries reads HTTPAccessLogEntries, or TCPAccessLogEntries when conn.
func (m *message) readEntries(b []byte, conn bool) error {
	rd := wire.NewReader(b)
	for rd.Next() {
		if !rd.Is(fieldEntries, protowire.BytesType) {
			continue
		}
		e := entry{conn: conn}
		if err := e.read(rd.Bytes(), &m.arena); err != nil {
			return err
		}
		m.entries = append(m.entries, e)
	}
	return rd.Err()
}

// read reads one entry of e.conn's kind; what it keeps of the encoding is
// copied to arena.
func (e *entry) read(b []byte, arena *[]byte) error {
	var logType int32
	rd := wire.NewReader(b)
	for rd.Next() {
		var err error
		switch {
		case rd.Is(fieldEntryCommon, protowire.BytesType):
			err = e.common(rd.Bytes(), &logType, arena)
		case !e.conn && rd.Is(fieldEntryResponse, protowire.BytesType):
			err = e.response(rd.Bytes())
		}
		if err != nil {
			return err
		}
	}
	end, periodic := logTypes(e.conn)
	e.end = logType == end
	e.periodic = logType == periodic
	return rd.Err()
}

func (e *entry) common(b []byte, logType *int32, arena *[]byte) error {
	rd := wire.NewReader(b)
	for rd.Next() {
		var err error
		switch {
		case rd.Is(fieldCommonType, protowire.VarintType):
			*logType = int32(rd.Varint())
		case rd.Is(fieldCommonFlags, protowire.BytesType):
			err = e.responseFlags(rd.Bytes())
		case rd.Is(fieldCommonFirstUpTx, protowire.BytesType):
			err = e.firstUpstreamTx.read(rd.Bytes())
		case rd.Is(fieldCommonLastUpRx, protowire.BytesType):
			err = e.lastUpstreamRx.read(rd.Bytes())
		case rd.Is(fieldCommonMetadata, protowire.BytesType):
			err = e.metadata(rd.Bytes(), arena)
		}
		if err != nil {
			return err
		}
	}
	return rd.Err()
}

// read merges an encoded Duration into d.
func (d *duration) read(b []byte) error {
	d.set = true
	rd := wire.NewReader(b)
	for rd.Next() {
		switch {
		case rd.Is(fieldDurationSeconds, protowire.VarintType):
			d.seconds = int64(rd.Varint())
		case rd.Is(fieldDurationNanos, protowire.VarintType):
			d.nanos = int32(rd.Varint())
		}
	}
	return rd.Err()
}

func (e *entry) responseFlags(b []byte) error {
	rd := wire.NewReader(b)
	for rd.Next() {
		n, typ := rd.Field()
		if typ != protowire.VarintType || n > maxFlag {
			continue
		}
		if rd.Bool() {
			e.flags |= 1 << n
		} else {
			e.flags &^= 1 << n
		}
	}
	return rd.Err()
}

func (e *entry) response(b []byte) error {
	rd := wire.NewReader(b)
	for rd.Next() {
		if !rd.Is(fieldResponseCode, protowire.BytesType) {
			continue
		}
		v := wire.NewReader(rd.Bytes())
		for v.Next() {
			if v.Is(fieldWrapperValue, protowire.VarintType) {
				e.code = uint32(v.Varint())
			}
		}
		if err := v.Err(); err != nil {
			return err
		}
	}
	return rd.Err()
}

// metadata finds the token and the bulkhead:
// filter_metadata[permit.MetadataNamespaceOf(e.conn)].fields[permit.MetadataToken] and
// [permit.MetadataBulkhead], when they are strings. A map entry replaces an
// earlier one of the same key; an entry's value given twice is merged.
func (e *entry) metadata(b []byte, arena *[]byte) error {
	rd := wire.NewReader(b)
	for rd.Next() {
		if !rd.Is(fieldMetadataFilter, protowire.BytesType) {
			continue
		}
		values, ok, err := entryValues(rd.Bytes(), permit.MetadataNamespaceOf(e.conn))
		if err != nil || !ok {
			if err != nil {
				return err
			}
			continue
		}
		e.token, e.bulkhead = "", nil
		for values.Next() {
			if values.Is(wire.MapValue, protowire.BytesType) {
				if err := e.fieldsIn(values.Bytes(), arena); err != nil {
					return err
				}
			}
		}
	}
	return rd.Err()
}

// fieldsIn reads a Struct for the permit.MetadataToken and
// permit.MetadataBulkhead fields.
func (e *entry) fieldsIn(st []byte, arena *[]byte) error {
	rd := wire.NewReader(st)
	for rd.Next() {
		if !rd.Is(fieldStructFields, protowire.BytesType) {
			continue
		}
		k, _, err := wire.MapEntry(rd.Bytes())
		if err != nil {
			return err
		}
		var bulkhead bool
		switch string(k) {
		case permit.MetadataToken:
		case permit.MetadataBulkhead:
			bulkhead = true
		default:
			continue
		}
		v, ok, err := stringValue(rd.Bytes())
		if err != nil {
			return err
		}
		switch {
		case !bulkhead && ok:
			e.token = string(v)
		case !bulkhead:
			e.token = ""
		case ok && len(v) > 0:
			start := len(*arena)
			*arena = append(*arena, v...)
			e.bulkhead = (*arena)[start:len(*arena):len(*arena)]
		default:
			e.bulkhead = nil
		}
	}
	return rd.Err()
}

// stringValue reads the Value of the map entry b: its string_value, and
// whether the oneof's last member is a string.
func stringValue(b []byte) ([]byte, bool, error) {
	var out []byte
	ok := false
	values := wire.NewReader(b)
	for values.Next() {
		if !values.Is(wire.MapValue, protowire.BytesType) {
			continue
		}
		v := wire.NewReader(values.Bytes())
		for v.Next() {
			switch {
			case v.Is(fieldValueString, protowire.BytesType):
				out, ok = v.Bytes(), true
			case v.Is(fieldValueNull, protowire.VarintType), v.Is(fieldValueNumber, protowire.Fixed64Type),
				v.Is(fieldValueBool, protowire.VarintType), v.Is(fieldValueStruct, protowire.BytesType),
				v.Is(fieldValueList, protowire.BytesType):
				out, ok = nil, false // another member of the oneof
			}
		}
		if err := v.Err(); err != nil {
			return nil, false, err
		}
	}
	return out, ok, values.Err()
}

// entryValues reports whether the map entry b has key key and returns a
// Reader of its fields, to walk its values with.
func entryValues(b []byte, key string) (wire.Reader, bool, error) {
	k, _, err := wire.MapEntry(b)
	if err != nil {
		return wire.Reader{}, false, err
	}
	return wire.NewReader(b), string(k) == key, nil
}
