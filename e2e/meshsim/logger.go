package meshsim

import (
	"context"
	"sync"
	"time"

	datav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	alsv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// logger is one gRPC access logger of one Envoy worker, as Envoy's
// http_grpc logger behaves: it opens its stream with its first entry, names
// the node in that stream's first message only, sends each entry at once
// (flush 0: the release log, buffer_size_bytes 0) or batches entries for
// flush or until maxBytes (the heartbeat log), drops what it cannot send
// (a broken stream loses its message; the next entry opens a new stream),
// and keeps at most maxPending entries waiting. Safe for concurrent use.
type logger struct {
	client   alsv3.AccessLogServiceClient
	ident    func() []byte // the first message's identifier field (templates.identifierField)
	flush    time.Duration // 0: every entry is sent at once
	maxBytes int
	stats    *Stats

	mu      sync.Mutex // held while sending: one worker sends in order
	stream  alsv3.AccessLogService_StreamAccessLogsClient
	cancel  context.CancelFunc // ends stream
	ended   chan struct{}      // closed once stream ended (the daemon closed it, or the connection broke)
	pending []*datav3.HTTPAccessLogEntry
	bytes   int
	timer   *time.Timer // armed while entries are pending
}

// maxPending bounds a logger's buffer (Envoy drops above its high
// watermark too).
const maxPending = 4096

// log logs e. ctx is the mesh's: a stream opened for e lives until it
// ends (or breaks).
func (l *logger) log(ctx context.Context, e *datav3.HTTPAccessLogEntry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.flush == 0 {
		l.send(ctx, []*datav3.HTTPAccessLogEntry{e})
		return
	}
	if len(l.pending) >= maxPending {
		l.stats.EntriesDropped.Add(1)
		return
	}
	l.pending = append(l.pending, e)
	l.bytes += proto.Size(e)
	if l.bytes >= l.maxBytes {
		l.flushLocked(ctx)
		return
	}
	if l.timer == nil {
		l.timer = time.AfterFunc(l.flush, func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.flushLocked(ctx)
		})
	}
}

func (l *logger) flushLocked(ctx context.Context) {
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	if len(l.pending) == 0 {
		return
	}
	batch := l.pending
	l.pending, l.bytes = nil, 0
	l.send(ctx, batch)
}

// send sends entries as one message, opening the stream first if none is
// open; entries that cannot be sent are dropped and counted.
func (l *logger) send(ctx context.Context, entries []*datav3.HTTPAccessLogEntry) {
	msg := &alsv3.StreamAccessLogsMessage{LogEntries: &alsv3.StreamAccessLogsMessage_HttpLogs{
		HttpLogs: &alsv3.StreamAccessLogsMessage_HTTPAccessLogEntries{LogEntry: entries}}}
	if l.stream != nil {
		select {
		case <-l.ended:
			// Envoy learns of a stream's end at once and opens a new one
			// for its next entries.
			l.cancel()
			l.stream, l.cancel = nil, nil
		default:
		}
	}
	var first []byte // the stream's first message, encoded: its identifier, then msg
	if l.stream == nil {
		if ctx.Err() != nil {
			l.stats.EntriesDropped.Add(int64(len(entries)))
			return
		}
		body, err := proto.Marshal(msg)
		if err != nil {
			l.stats.EntriesDropped.Add(int64(len(entries)))
			l.stats.StreamErrors.Add(1)
			return
		}
		first = append(l.ident(), body...)
		ctx, cancel := context.WithCancel(ctx)
		// Envoy's pool waits for a connection as long as its
		// connect_timeout; then the entries are lost.
		t := time.AfterFunc(time.Second, cancel)
		stream, err := l.client.StreamAccessLogs(ctx, grpc.WaitForReady(true), grpc.ForceCodecV2(encodedCodec{}))
		if !t.Stop() || err != nil {
			cancel()
			l.stats.EntriesDropped.Add(int64(len(entries)))
			l.stats.StreamErrors.Add(1)
			return
		}
		l.stream, l.cancel, l.ended = stream, cancel, make(chan struct{})
		// The stream's receiving side: it returns when the stream ends
		// (the daemon answers only then), or when cancel is called.
		ended := l.ended
		go func() {
			defer close(ended)
			_ = stream.RecvMsg(new(alsv3.StreamAccessLogsResponse))
		}()
		l.stats.StreamsOpened.Add(1)
	}
	var err error
	if first != nil {
		err = l.stream.SendMsg(encoded(first))
	} else {
		err = l.stream.Send(msg)
	}
	if err != nil {
		l.cancel()
		l.stream, l.cancel = nil, nil
		l.stats.EntriesDropped.Add(int64(len(entries)))
		l.stats.StreamErrors.Add(1)
		return
	}
	l.stats.EntriesSent.Add(int64(len(entries)))
	l.stats.MessagesSent.Add(1)
}

// close ends the logger's stream (its pending entries are dropped).
func (l *logger) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	if l.stream != nil {
		_ = l.stream.CloseSend()
		l.cancel()
		<-l.ended // its receiving side returned
		l.stream, l.cancel = nil, nil
	}
}

// encoded is a message already in its protobuf encoding, which
// encodedCodec sends as it is (a stream's first message: its identifier's
// encoding is built, not marshalled; templates.identifierField).
type encoded []byte

// encodedCodec is grpc-go's proto codec, but for encoded.
type encodedCodec struct{}

func (encodedCodec) Marshal(v any) (mem.BufferSlice, error) {
	if b, ok := v.(encoded); ok {
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	return encoding.GetCodecV2(protocodec.Name).Marshal(v)
}

func (encodedCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return encoding.GetCodecV2(protocodec.Name).Unmarshal(data, v)
}

func (encodedCodec) Name() string { return protocodec.Name }
