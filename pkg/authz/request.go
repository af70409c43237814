package authz

import (
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/bulkhead-mesh/bulkhead/pkg/permit"
	"github.com/bulkhead-mesh/bulkhead/pkg/wire"
)

// The context_extensions keys a route sets (ExtLeaseTTL is the third).
const (
	ExtBulkhead = "bulkhead"
	ExtPriority = "priority"
)

// request is what a Check reads of Envoy's CheckRequest: three route
// context_extensions, the two configured headers and the downstream
// address. It is built from a decoded CheckRequest (requestOf) or straight
// from its encoding (UnmarshalWire), with the same result.
type request struct {
	// The headers to keep: the Policy's, set before decoding ("" = none).
	priorityHeader, tenantHeader string

	bulkhead string   // context_extensions["bulkhead"]
	priority optional // context_extensions["priority"]
	leaseTTL optional // context_extensions["lease_ttl"]
	header   optional // the priority header
	tenant   string   // the tenant header
	source   string   // attributes.source.address.socket_address.address

	sourceIsSocket bool // the source Address oneof holds socket_address

	// A network (TCP) Check has no HTTP request; it names its bulkhead by
	// the destination port (the listener's), and its class may come from
	// the Envoy node's label permit.LabelPriority (destination.labels).
	http  bool     // attributes.request.http was given
	port  uint32   // attributes.destination.address.socket_address.port_value
	label optional // attributes.destination.labels[permit.LabelPriority]
}

// optional is a map value, and whether the key was there.
type optional struct {
	v  string
	ok bool
}

var _ wire.Unmarshaler = (*request)(nil)

// requestOf reads req as pol says.
func requestOf(pol *Policy, req *authv3.CheckRequest) *request {
	r := newRequest(pol)
	attrs := req.GetAttributes()
	ext := attrs.GetContextExtensions()
	r.bulkhead = ext[ExtBulkhead]
	r.priority.v, r.priority.ok = ext[ExtPriority]
	r.leaseTTL.v, r.leaseTTL.ok = ext[ExtLeaseTTL]
	h := attrs.GetRequest().GetHttp().GetHeaders()
	if r.priorityHeader != "" {
		r.header.v, r.header.ok = h[r.priorityHeader]
	}
	if r.tenantHeader != "" {
		r.tenant = h[r.tenantHeader]
	}
	r.source = attrs.GetSource().GetAddress().GetSocketAddress().GetAddress()
	r.http = attrs.GetRequest().GetHttp() != nil
	dst := attrs.GetDestination()
	r.port = dst.GetAddress().GetSocketAddress().GetPortValue()
	r.label.v, r.label.ok = dst.GetLabels()[permit.LabelPriority]
	return r
}

// Field numbers of the CheckRequest path read (envoy.service.auth.v3 and
// envoy.config.core.v3).
const (
	fieldCheckAttributes   = 1  // CheckRequest.attributes
	fieldAttrSource        = 1  // AttributeContext.source (Peer)
	fieldAttrDestination   = 2  // AttributeContext.destination (Peer)
	fieldAttrRequest       = 4  // AttributeContext.request
	fieldAttrExtensions    = 10 // AttributeContext.context_extensions (map)
	fieldPeerAddress       = 1  // Peer.address (Address)
	fieldPeerLabels        = 3  // Peer.labels (map)
	fieldAddressSocket     = 1  // Address.socket_address (oneof)
	fieldAddressPipe       = 2  // Address.pipe (oneof)
	fieldAddressInternal   = 3  // Address.envoy_internal_address (oneof)
	fieldSocketAddressHost = 2  // SocketAddress.address
	fieldSocketAddressPort = 3  // SocketAddress.port_value
	fieldRequestHTTP       = 2  // Request.http
	fieldHTTPHeaders       = 3  // HttpRequest.headers (map)
)

// UnmarshalWire implements wire.Unmarshaler: it reads an encoded
// CheckRequest as requestOf reads the decoded one. Strings are copied.
func (r *request) UnmarshalWire(b []byte) error {
	*r = request{priorityHeader: r.priorityHeader, tenantHeader: r.tenantHeader}
	rd := wire.NewReader(b)
	for rd.Next() {
		if rd.Is(fieldCheckAttributes, protowire.BytesType) {
			if err := r.attributes(rd.Bytes()); err != nil {
				return err
			}
		}
	}
	return rd.Err()
}

func (r *request) attributes(b []byte) error {
	rd := wire.NewReader(b)
	for rd.Next() {
		var err error
		switch {
		case rd.Is(fieldAttrSource, protowire.BytesType):
			err = r.peer(rd.Bytes())
		case rd.Is(fieldAttrDestination, protowire.BytesType):
			err = r.destination(rd.Bytes())
		case rd.Is(fieldAttrRequest, protowire.BytesType):
			err = r.httpOf(rd.Bytes())
		case rd.Is(fieldAttrExtensions, protowire.BytesType):
			var k, v []byte
			if k, v, err = wire.MapEntry(rd.Bytes()); err == nil {
				switch string(k) {
				case ExtBulkhead:
					r.bulkhead = string(v)
				case ExtPriority:
					r.priority = optional{string(v), true}
				case ExtLeaseTTL:
					r.leaseTTL = optional{string(v), true}
				}
			}
		}
		if err != nil {
			return err
		}
	}
	return rd.Err()
}

// peer reads the source Peer. A message given twice is merged, so every
// occurrence updates the same state; a oneof member other than
// socket_address clears the address, and socket_address after one starts
// afresh.
func (r *request) peer(b []byte) error {
	rd := wire.NewReader(b)
	for rd.Next() {
		if !rd.Is(fieldPeerAddress, protowire.BytesType) {
			continue
		}
		ad := wire.NewReader(rd.Bytes())
		for ad.Next() {
			switch {
			case ad.Is(fieldAddressSocket, protowire.BytesType):
				if !r.sourceIsSocket {
					r.source, r.sourceIsSocket = "", true
				}
				sa := wire.NewReader(ad.Bytes())
				for sa.Next() {
					if sa.Is(fieldSocketAddressHost, protowire.BytesType) {
						r.source = string(sa.Bytes())
					}
				}
				if err := sa.Err(); err != nil {
					return err
				}
			case ad.Is(fieldAddressPipe, protowire.BytesType), ad.Is(fieldAddressInternal, protowire.BytesType):
				r.source, r.sourceIsSocket = "", false
			}
		}
		if err := ad.Err(); err != nil {
			return err
		}
	}
	return rd.Err()
}

// httpOf reads AttributeContext.request: the configured headers of its
// http member.
func (r *request) httpOf(b []byte) error {
	rd := wire.NewReader(b)
	for rd.Next() {
		if !rd.Is(fieldRequestHTTP, protowire.BytesType) {
			continue
		}
		r.http = true
		h := wire.NewReader(rd.Bytes())
		for h.Next() {
			if !h.Is(fieldHTTPHeaders, protowire.BytesType) {
				continue
			}
			k, v, err := wire.MapEntry(h.Bytes())
			if err != nil {
				return err
			}
			if r.priorityHeader != "" && string(k) == r.priorityHeader {
				r.header = optional{string(v), true}
			}
			if r.tenantHeader != "" && string(k) == r.tenantHeader {
				r.tenant = string(v)
			}
		}
		if err := h.Err(); err != nil {
			return err
		}
	}
	return rd.Err()
}

// destination reads the destination Peer of a network Check: the port of
// its socket address (another member of the Address oneof clears it) and
// the label permit.LabelPriority.
func (r *request) destination(b []byte) error {
	rd := wire.NewReader(b)
	for rd.Next() {
		var err error
		switch {
		case rd.Is(fieldPeerAddress, protowire.BytesType):
			err = r.destinationAddress(rd.Bytes())
		case rd.Is(fieldPeerLabels, protowire.BytesType):
			var k, v []byte
			if k, v, err = wire.MapEntry(rd.Bytes()); err == nil && string(k) == permit.LabelPriority {
				r.label = optional{string(v), true}
			}
		}
		if err != nil {
			return err
		}
	}
	return rd.Err()
}

func (r *request) destinationAddress(b []byte) error {
	ad := wire.NewReader(b)
	for ad.Next() {
		switch {
		case ad.Is(fieldAddressSocket, protowire.BytesType):
			sa := wire.NewReader(ad.Bytes())
			for sa.Next() {
				if sa.Is(fieldSocketAddressPort, protowire.VarintType) {
					r.port = uint32(sa.Varint())
				}
			}
			if err := sa.Err(); err != nil {
				return err
			}
		case ad.Is(fieldAddressPipe, protowire.BytesType), ad.Is(fieldAddressInternal, protowire.BytesType):
			r.port = 0
		}
	}
	return ad.Err()
}

// ExtLeaseTTL is the context_extensions key of a route's own lease TTL, a Go
// duration ("90s"); it is capped at Policy.MaxRouteLeaseTTL.
const ExtLeaseTTL = "lease_ttl"

// MaxTenantLen bounds the tenant header value, in bytes. A longer value is
// ignored (the request is treated as naming no tenant, as if it had left
// the header out) and counted as bulkhead.InputTenant.
const MaxTenantLen = 128

// MaxPriorityLen bounds a priority value (header or context_extensions) that
// is parsed; a longer one is invalid without being looked at.
const MaxPriorityLen = 32
