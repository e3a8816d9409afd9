// The adapter program for amqp091-go, RabbitMQ's Go client (the adapter protocol:
// docs/adapter-protocol.md, conformance/drivers/wire_json.py).
//
// Reads one JSON request per line on stdin, answers each with one reply line on stdout, and writes
// the events amqp091-go gives its application: deliveries (a consumer's Go channel), broker
// cancels (NotifyCancel), confirms (NotifyPublish: one Confirmation per publish, the library
// expands a multiple ack), returns (NotifyReturn), closes (NotifyClose) and connection.blocked
// (NotifyBlocked). The library runs its own reader and heartbeat goroutines, so its I/O goes on
// between requests.
//
// Ordering: one goroutine per AMQP channel receives that channel's returns, confirms, cancels and
// close from unbuffered Go channels and writes each event before it takes the next, so the
// application's order (a return before its publish's confirm) is the order on stdout.
//
// Built offline by conformance/drivers/build.py (GOPATH mode over Debian's /usr/share/gocode).
// The library's version comes from the environment (AMQPC_CLIENT_VERSION: the Debian package's).
package main

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

var (
	outMu sync.Mutex
	out   = bufio.NewWriter(os.Stdout)
)

func emit(obj map[string]any) {
	line, err := json.Marshal(toJSON(obj))
	if err != nil {
		line, _ = json.Marshal(map[string]any{"event": "failure", "type": "EncodeError", "text": err.Error(), "where": "adapter"})
	}
	outMu.Lock()
	defer outMu.Unlock()
	out.Write(line)
	out.WriteByte('\n')
	out.Flush()
}

// toJSON turns library values into the protocol's JSON: bytes as {"$b64": ...}, timestamps in seconds.
func toJSON(v any) any {
	switch x := v.(type) {
	case []byte:
		return map[string]any{"$b64": base64.StdEncoding.EncodeToString(x)}
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = toJSON(e)
		}
		return m
	case amqp.Table:
		return toJSON(map[string]any(x))
	case []any:
		l := make([]any, len(x))
		for i, e := range x {
			l[i] = toJSON(e)
		}
		return l
	case time.Time:
		return x.Unix()
	case amqp.Decimal:
		return float64(x.Value) / math.Pow10(int(x.Scale))
	}
	return v
}

// fromJSON turns request JSON (decoded with UseNumber) into library values: {"$b64"} to bytes,
// integers to int64, objects to tables.
func fromJSON(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case map[string]any:
		if s, ok := x["$b64"].(string); ok && len(x) == 1 {
			b, _ := base64.StdEncoding.DecodeString(s)
			return b
		}
		t := amqp.Table{}
		for k, e := range x {
			t[k] = fromJSON(e)
		}
		return t
	case []any:
		l := make([]any, len(x))
		for i, e := range x {
			l[i] = fromJSON(e)
		}
		return l
	}
	return v
}

type args map[string]any

func (a args) str(k string) string { s, _ := a[k].(string); return s }
func (a args) flag(k string) bool  { b, _ := a[k].(bool); return b }
func (a args) num(k string) int64  { i, _ := a[k].(int64); return i }
func (a args) present(k string) bool {
	v, ok := a[k]
	return ok && v != nil
}
func (a args) table(k string) amqp.Table {
	if t, ok := a[k].(amqp.Table); ok {
		return t
	}
	return amqp.Table{}
}

type channelEntry struct {
	ch       *amqp.Channel
	state    string
	seq      int64         // publishes since confirm_select; -1 when not in confirm mode
	closeErr *amqp.Error   // the broker's channel.close, once NotifyClose told it
	gone     chan struct{} // closed when NotifyClose has told how the channel ended
	goneOnce sync.Once
}

func newEntry(ch *amqp.Channel) *channelEntry {
	return &channelEntry{ch: ch, state: "open", seq: -1, gone: make(chan struct{})}
}

// brokerClose turns the library's ErrClosed for an operation on a channel the broker closed into
// that close (its reply code), as NotifyClose told it to the application. The library marks the
// channel closed before it notifies, so the notification is waited for (bounded).
func brokerClose(e *channelEntry, err error) error {
	if err != amqp.ErrClosed || e == nil {
		return err
	}
	select {
	case <-e.gone:
	case <-time.After(2 * time.Second):
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.closeErr != nil {
		return e.closeErr
	}
	return err
}

type session struct {
	mu       sync.Mutex
	conn     *amqp.Connection
	channels map[int]*channelEntry
}

var (
	s           = &session{channels: map[int]*channelEntry{}}
	consumerSeq int // only the request loop consumes
)

type unsupported struct{ what string }

func (u unsupported) Error() string { return u.what }

func (s *session) entry(a args) (*channelEntry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.channels[int(a.num("channel"))]
	if e == nil {
		return nil, fmt.Errorf("no channel %d", a.num("channel"))
	}
	return e, nil
}

// channelNumber reads the library's channel id (it has no accessor; reading an unexported field is allowed).
func channelNumber(ch *amqp.Channel) int {
	return int(reflect.ValueOf(ch).Elem().FieldByName("id").Uint())
}

func guard(where string) {
	if r := recover(); r != nil {
		emit(map[string]any{"event": "failure", "type": fmt.Sprintf("panic %T", r), "text": fmt.Sprint(r), "where": where})
	}
}

// watchChannel reports one channel's returns, confirms, cancels and close, in the library's order.
func watchChannel(number int, e *channelEntry) {
	closes := e.ch.NotifyClose(make(chan *amqp.Error, 1))
	returns := e.ch.NotifyReturn(make(chan amqp.Return))
	cancels := e.ch.NotifyCancel(make(chan string))
	confirms := e.ch.NotifyPublish(make(chan amqp.Confirmation))
	go func() {
		defer guard("channel notifications")
		for closes != nil || returns != nil || cancels != nil || confirms != nil {
			select {
			case err, ok := <-closes:
				if !ok {
					closes = nil
					e.goneOnce.Do(func() { close(e.gone) })
					continue
				}
				s.mu.Lock()
				e.state = "closed"
				e.closeErr = err
				connClosed := s.conn == nil || s.conn.IsClosed()
				s.mu.Unlock()
				e.goneOnce.Do(func() { close(e.gone) })
				if !connClosed { // a connection close is reported once, by the connection
					emit(map[string]any{"event": "channel-closed", "channel": number, "code": err.Code, "text": err.Reason})
				}
			case r, ok := <-returns:
				if !ok {
					returns = nil
					continue
				}
				emit(map[string]any{"event": "returned", "channel": number, "reply_code": r.ReplyCode,
					"reply_text": r.ReplyText, "exchange": r.Exchange, "routing_key": r.RoutingKey, "body": r.Body})
			case tag, ok := <-cancels:
				if !ok {
					cancels = nil
					continue
				}
				emit(map[string]any{"event": "cancelled", "channel": number, "consumer_tag": tag})
			case c, ok := <-confirms:
				if !ok {
					confirms = nil
					continue
				}
				emit(map[string]any{"event": "confirmed", "channel": number, "seq": c.DeliveryTag, "ack": c.Ack,
					"multiple": nil})
			}
		}
	}()
}

func watchConnection(conn *amqp.Connection) {
	closes := conn.NotifyClose(make(chan *amqp.Error, 1))
	blocks := conn.NotifyBlocked(make(chan amqp.Blocking))
	go func() {
		defer guard("connection notifications")
		for closes != nil || blocks != nil {
			select {
			case err, ok := <-closes:
				if !ok {
					closes = nil
					continue
				}
				emit(map[string]any{"event": "connection-closed", "code": err.Code, "text": err.Reason})
			case b, ok := <-blocks:
				if !ok {
					blocks = nil
					continue
				}
				if b.Active {
					emit(map[string]any{"event": "blocked", "reason": b.Reason})
				} else {
					emit(map[string]any{"event": "unblocked"})
				}
			}
		}
	}()
}

func delivery(number int, d amqp.Delivery, get bool) map[string]any {
	props := map[string]any{}
	for name, value := range map[string]string{"content_type": d.ContentType, "content_encoding": d.ContentEncoding,
		"correlation_id": d.CorrelationId, "reply_to": d.ReplyTo, "expiration": d.Expiration,
		"message_id": d.MessageId, "message_type": d.Type, "user_id": d.UserId, "app_id": d.AppId} {
		if value != "" {
			props[name] = value
		}
	}
	if d.Headers != nil {
		props["headers"] = d.Headers
	}
	if d.DeliveryMode != 0 {
		props["delivery_mode"] = d.DeliveryMode
	}
	if d.Priority != 0 {
		props["priority"] = d.Priority
	}
	if !d.Timestamp.IsZero() {
		props["timestamp"] = d.Timestamp.Unix()
	}
	found := map[string]any{"channel": number, "delivery_tag": d.DeliveryTag, "redelivered": d.Redelivered,
		"exchange": d.Exchange, "routing_key": d.RoutingKey, "body": d.Body, "properties": props,
		"consumer_tag": d.ConsumerTag, "message_count": nil}
	if get {
		found["consumer_tag"] = nil
		found["message_count"] = d.MessageCount
	}
	return found
}

func publishing(a args) amqp.Publishing {
	p := amqp.Publishing{}
	props, _ := a["properties"].(amqp.Table)
	str := func(k string) string { v, _ := props[k].(string); return v }
	p.ContentType, p.ContentEncoding, p.CorrelationId = str("content_type"), str("content_encoding"), str("correlation_id")
	p.ReplyTo, p.Expiration, p.MessageId = str("reply_to"), str("expiration"), str("message_id")
	p.Type, p.UserId, p.AppId = str("message_type"), str("user_id"), str("app_id")
	if h, ok := props["headers"].(amqp.Table); ok {
		p.Headers = h
	}
	if v, ok := props["delivery_mode"].(int64); ok {
		p.DeliveryMode = uint8(v)
	}
	if v, ok := props["priority"].(int64); ok {
		p.Priority = uint8(v)
	}
	if v, ok := props["timestamp"].(int64); ok {
		p.Timestamp = time.Unix(v, 0)
	}
	p.Body, _ = a["body"].([]byte)
	return p
}

func (s *session) connect(a args) (any, error) {
	s.mu.Lock()
	old := s.conn
	s.conn, s.channels = nil, map[int]*channelEntry{}
	s.mu.Unlock()
	if old != nil && !old.IsClosed() {
		go old.Close() // the previous scenario's broker is gone: never wait for it
	}
	config := amqp.Config{Heartbeat: 10 * time.Second, Locale: "en_US"} // amqp.Dial's defaults
	if a.present("heartbeat") {
		config.Heartbeat = time.Duration(a.num("heartbeat")) * time.Second
	}
	if a.present("frame_max") {
		config.FrameSize = int(a.num("frame_max"))
	}
	if a.present("channel_max") {
		config.ChannelMax = int(a.num("channel_max"))
	}
	conn, err := amqp.DialConfig(a.str("url"), config)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.conn = conn
	s.mu.Unlock()
	watchConnection(conn)
	return nil, nil
}

func (s *session) openChannel() (any, error) {
	s.mu.Lock()
	conn := s.conn
	s.mu.Unlock()
	if conn == nil {
		return nil, fmt.Errorf("not connected")
	}
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	number := channelNumber(ch)
	e := newEntry(ch)
	s.mu.Lock()
	s.channels[number] = e
	s.mu.Unlock()
	watchChannel(number, e)
	return number, nil
}

func (s *session) consume(a args) (any, error) {
	e, err := s.entry(a)
	if err != nil {
		return nil, err
	}
	tag := a.str("consumer_tag")
	if tag == "" {
		consumerSeq++ // amqp091-go's own tag for an empty one ("ctag-<command>-<n>"), which it does not return
		tag = fmt.Sprintf("ctag-%s-%d", filepath.Base(os.Args[0]), consumerSeq)
	}
	deliveries, err := e.ch.Consume(a.str("queue"), tag, a.flag("no_ack"), a.flag("exclusive"), false, false,
		a.table("arguments"))
	if err != nil {
		return nil, err
	}
	number := int(a.num("channel"))
	go func() {
		defer guard("consumer")
		for d := range deliveries {
			emit(map[string]any{"event": "delivered", "delivery": delivery(number, d, false)})
		}
	}()
	return tag, nil
}

func (s *session) publish(a args) (any, error) {
	e, err := s.entry(a)
	if err != nil {
		return nil, err
	}
	if err := e.ch.Publish(a.str("exchange"), a.str("routing_key"), a.flag("mandatory"), false, publishing(a)); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.seq < 0 {
		return nil, nil
	}
	e.seq++
	return e.seq, nil
}

func (s *session) get(a args) (any, error) {
	e, err := s.entry(a)
	if err != nil {
		return nil, err
	}
	d, ok, err := e.ch.Get(a.str("queue"), a.flag("no_ack"))
	if err != nil || !ok {
		return nil, err
	}
	return delivery(int(a.num("channel")), d, true), nil
}

func (s *session) state() (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	channels := map[string]any{}
	for number, e := range s.channels {
		state := e.state
		if e.ch.IsClosed() {
			state = "closed"
		}
		channels[fmt.Sprint(number)] = state
	}
	connection := "closed"
	if s.conn != nil && !s.conn.IsClosed() {
		connection = "open"
	}
	return map[string]any{"connection": connection, "channels": channels}, nil
}

// onChannel runs an operation that needs only the channel and returns nothing.
func (s *session) onChannel(a args, op func(*amqp.Channel) error) (any, error) {
	e, err := s.entry(a)
	if err != nil {
		return nil, err
	}
	return nil, op(e.ch)
}

func (s *session) call(op string, a args) (any, error) {
	switch op {
	case "connect":
		return s.connect(a)
	case "close":
		s.mu.Lock()
		conn := s.conn
		s.mu.Unlock()
		if conn == nil || conn.IsClosed() {
			return nil, nil
		}
		return nil, conn.Close()
	case "open_channel":
		return s.openChannel()
	case "close_channel":
		return s.onChannel(a, func(ch *amqp.Channel) error { return ch.Close() })
	case "declare_queue":
		e, err := s.entry(a)
		if err != nil {
			return nil, err
		}
		declare := e.ch.QueueDeclare
		if a.flag("passive") {
			declare = e.ch.QueueDeclarePassive
		}
		q, err := declare(a.str("queue"), a.flag("durable"), a.flag("auto_delete"), a.flag("exclusive"), false,
			a.table("arguments"))
		if err != nil {
			return nil, err
		}
		return q.Name, nil
	case "declare_exchange":
		return s.onChannel(a, func(ch *amqp.Channel) error {
			declare := ch.ExchangeDeclare
			if a.flag("passive") {
				declare = ch.ExchangeDeclarePassive
			}
			return declare(a.str("exchange"), a.str("kind"), a.flag("durable"), false, false, false, nil)
		})
	case "bind_queue":
		return s.onChannel(a, func(ch *amqp.Channel) error {
			return ch.QueueBind(a.str("queue"), a.str("routing_key"), a.str("exchange"), false, nil)
		})
	case "delete_queue":
		return s.onChannel(a, func(ch *amqp.Channel) error {
			_, err := ch.QueueDelete(a.str("queue"), false, false, false)
			return err
		})
	case "qos":
		return s.onChannel(a, func(ch *amqp.Channel) error { return ch.Qos(int(a.num("prefetch_count")), 0, a.flag("global_")) })
	case "publish":
		return s.publish(a)
	case "confirm_select":
		e, err := s.entry(a)
		if err != nil {
			return nil, err
		}
		if err := e.ch.Confirm(false); err != nil {
			return nil, err
		}
		s.mu.Lock()
		e.seq = 0
		s.mu.Unlock()
		return nil, nil
	case "consume":
		return s.consume(a)
	case "cancel":
		return s.onChannel(a, func(ch *amqp.Channel) error { return ch.Cancel(a.str("consumer_tag"), false) })
	case "get":
		return s.get(a)
	case "ack":
		return s.onChannel(a, func(ch *amqp.Channel) error { return ch.Ack(uint64(a.num("delivery_tag")), a.flag("multiple")) })
	case "nack":
		return s.onChannel(a, func(ch *amqp.Channel) error {
			return ch.Nack(uint64(a.num("delivery_tag")), a.flag("multiple"), a.flag("requeue"))
		})
	case "reject":
		return s.onChannel(a, func(ch *amqp.Channel) error { return ch.Reject(uint64(a.num("delivery_tag")), a.flag("requeue")) })
	case "recover":
		return s.onChannel(a, func(ch *amqp.Channel) error { return ch.Recover(a.flag("requeue")) })
	case "tx_select":
		return s.onChannel(a, func(ch *amqp.Channel) error { return ch.Tx() })
	case "tx_commit":
		return s.onChannel(a, func(ch *amqp.Channel) error { return ch.TxCommit() })
	case "tx_rollback":
		return s.onChannel(a, func(ch *amqp.Channel) error { return ch.TxRollback() })
	case "state":
		return s.state()
	}
	return nil, unsupported{fmt.Sprintf("unknown op %q", op)}
}

// softCodes are the channel-level reply codes of 0-9-1 §1.2 (the rest close the connection).
var softCodes = map[int]bool{311: true, 312: true, 313: true, 403: true, 404: true, 405: true, 406: true}

func errorOf(err error) map[string]any {
	if u, ok := err.(unsupported); ok {
		return map[string]any{"kind": "unsupported", "text": u.what, "type": "Unsupported"}
	}
	if e, ok := err.(*amqp.Error); ok && e.Server {
		kind := "connection-closed"
		if softCodes[e.Code] {
			kind = "channel-closed"
		}
		return map[string]any{"kind": kind, "code": e.Code, "text": e.Reason, "class_id": 0, "method_id": 0,
			"type": "*amqp091.Error"}
	}
	return map[string]any{"kind": "exception", "text": err.Error(), "type": fmt.Sprintf("%T", err)}
}

func answer(line []byte) bool {
	decoder := json.NewDecoder(strings.NewReader(string(line)))
	decoder.UseNumber()
	var request map[string]any
	if err := decoder.Decode(&request); err != nil {
		emit(map[string]any{"event": "failure", "type": "ProtocolError", "text": err.Error(), "where": "adapter"})
		return true
	}
	id, op := request["id"], fmt.Sprint(request["op"])
	a := args{}
	if raw, ok := request["args"].(map[string]any); ok {
		for k, v := range raw {
			a[k] = fromJSON(v)
		}
	}
	if op == "bye" {
		s.mu.Lock()
		conn := s.conn
		s.mu.Unlock()
		if conn != nil && !conn.IsClosed() {
			done := make(chan struct{})
			go func() { conn.Close(); close(done) }()
			select {
			case <-done:
			case <-time.After(2 * time.Second):
			}
		}
		emit(map[string]any{"id": id, "ok": true, "value": nil})
		return false
	}
	value, err := func() (value any, err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("panic: %v", r)
			}
		}()
		return s.call(op, a)
	}()
	if err != nil && a.present("channel") {
		s.mu.Lock()
		e := s.channels[int(a.num("channel"))]
		s.mu.Unlock()
		err = brokerClose(e, err)
	}
	if err != nil {
		emit(map[string]any{"id": id, "ok": false, "error": errorOf(err)})
	} else {
		emit(map[string]any{"id": id, "ok": true, "value": value})
	}
	return true
}

func main() {
	version := os.Getenv("AMQPC_CLIENT_VERSION")
	if version == "" {
		version = "unknown"
	}
	// each consumer's deliveries come on a Go channel of its own, read by a goroutine of its own: the
	// application sees no common order across the consumers of one AMQP channel
	features := []string{"deliveries-ordered-per-consumer"}
	emit(map[string]any{"event": "hello", "client": "amqp091-go", "version": version, "language": "go",
		"runtime": runtime.Version(), "api": "amqp091-go Channel API", "features": features})
	scanner := bufio.NewScanner(os.Stdin)
	scanner.Buffer(make([]byte, 1<<20), 64<<20)
	for scanner.Scan() {
		line := scanner.Bytes()
		if len(strings.TrimSpace(string(line))) == 0 {
			continue
		}
		if !answer(append([]byte(nil), line...)) {
			return
		}
	}
}
