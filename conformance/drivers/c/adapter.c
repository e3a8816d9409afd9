/* The adapter program for rabbitmq-c (the adapter protocol: docs/adapter-protocol.md,
 * conformance/drivers/wire_json.py).
 *
 * Build: gcc -O2 -o amqpc-rabbitmq-c adapter.c -lrabbitmq  (Debian: librabbitmq-dev; JSON is
 * json_lines.h, beside this file). Reads one JSON request per line on stdin, answers each with one
 * reply line on stdout, and writes events as rabbitmq-c hands frames to its application. stdout
 * carries only protocol lines; diagnostics go to stderr.
 *
 * rabbitmq-c is synchronous and keeps no channel objects. Its application loop is the documented
 * one: amqp_consume_message() (a basic.deliver and its content), and on
 * AMQP_STATUS_UNEXPECTED_STATE amqp_simple_wait_frame() for the other frame (basic.cancel,
 * basic.ack/nack, basic.return + amqp_read_message, channel.close, connection.close, blocked).
 * Between requests the adapter runs that loop (a poll on stdin and the socket, at most 50 ms
 * apart), so heartbeats go out and events surface while the harness waits. Frames that arrive
 * during an RPC are queued by the library and surface, in order, before the RPC's reply.
 *
 * What rabbitmq-c leaves to the application, and this adapter does as its documentation says an
 * application must: choose channel numbers (the lowest free one within amqp_get_channel_max()),
 * remember which channels are open (an operation on a channel the application knows closed is
 * refused, as the application would not call the library), answer a broker channel.close or
 * connection.close with close-ok (amqp.h, amqp_simple_rpc), and count publishes since
 * confirm.select (a basic.ack/nack names a delivery tag; `multiple` is shown). Nothing else: the
 * client properties are the library's defaults, and a frame the library hands over that the
 * documentation does not ask the application to answer (channel.flow) is only logged.
 */
#include <amqp.h>
#include <amqp_tcp_socket.h>
#include <errno.h>
#include <poll.h>
#include <sys/time.h>
#include <unistd.h>

#include "json_lines.h"

#define MAX_CHANNELS 4096
#define IDLE_POLL_MS 50

enum { CH_NONE = 0, CH_OPEN, CH_CLOSED };
typedef struct {
  int state;
  int confirm;             /* confirm.select done */
  uint64_t published;      /* publishes since confirm.select */
  uint64_t *waiting;       /* their seqs not confirmed yet */
  size_t n_waiting, cap_waiting;
  int close_code, close_class, close_method; /* the broker's channel.close (CH_CLOSED by the broker) */
  char close_text[256];
} channel_t;

typedef struct {
  const char *kind, *type;
  int code, class_id, method_id;
  char text[512];
} error_t_;

static amqp_connection_state_t conn;
static int conn_open;
static channel_t chans[MAX_CHANNELS];
static struct timeval rpc_timeout = {5, 0};

/* -- output ----------------------------------------------------------------------------------- */
static void emit(sb *line) {
  sb_raw(line, "\n", 1);
  fwrite(line->s, 1, line->len, stdout);
  fflush(stdout);
  line->len = 0;
}

static void fail(error_t_ *e, const char *kind, const char *type, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->text, sizeof e->text, fmt, ap);
  va_end(ap);
  e->kind = kind; e->type = type; e->code = e->class_id = e->method_id = 0;
}

/* -- AMQP values to JSON ---------------------------------------------------------------------- */
static void put_table(sb *b, const amqp_table_t *t);

static void put_field(sb *b, const amqp_field_value_t *v) {
  switch (v->kind) {
    case AMQP_FIELD_KIND_BOOLEAN: sb_put(b, v->value.boolean ? "true" : "false"); break;
    case AMQP_FIELD_KIND_I8: sb_fmt(b, "%d", v->value.i8); break;
    case AMQP_FIELD_KIND_U8: sb_fmt(b, "%u", v->value.u8); break;
    case AMQP_FIELD_KIND_I16: sb_fmt(b, "%d", v->value.i16); break;
    case AMQP_FIELD_KIND_U16: sb_fmt(b, "%u", v->value.u16); break;
    case AMQP_FIELD_KIND_I32: sb_fmt(b, "%d", v->value.i32); break;
    case AMQP_FIELD_KIND_U32: sb_fmt(b, "%u", v->value.u32); break;
    case AMQP_FIELD_KIND_I64: sb_fmt(b, "%lld", (long long)v->value.i64); break;
    case AMQP_FIELD_KIND_U64:
    case AMQP_FIELD_KIND_TIMESTAMP: sb_fmt(b, "%llu", (unsigned long long)v->value.u64); break;
    case AMQP_FIELD_KIND_F32: sb_fmt(b, "%.9g", (double)v->value.f32); break;
    case AMQP_FIELD_KIND_F64: sb_fmt(b, "%.17g", v->value.f64); break;
    case AMQP_FIELD_KIND_DECIMAL: {
      double d = v->value.decimal.value;
      for (unsigned k = 0; k < v->value.decimal.decimals; k++) d /= 10;
      sb_fmt(b, "%.17g", d);
      break;
    }
    case AMQP_FIELD_KIND_UTF8: sb_str(b, v->value.bytes.bytes, v->value.bytes.len); break;
    case AMQP_FIELD_KIND_BYTES: sb_bytes(b, v->value.bytes.bytes, v->value.bytes.len); break;
    case AMQP_FIELD_KIND_TABLE: put_table(b, &v->value.table); break;
    case AMQP_FIELD_KIND_ARRAY:
      sb_put(b, "[");
      for (int k = 0; k < v->value.array.num_entries; k++) {
        if (k) sb_put(b, ",");
        put_field(b, &v->value.array.entries[k]);
      }
      sb_put(b, "]");
      break;
    default: sb_put(b, "null"); /* AMQP_FIELD_KIND_VOID */
  }
}

static void put_table(sb *b, const amqp_table_t *t) {
  sb_put(b, "{");
  for (int k = 0; k < t->num_entries; k++) {
    if (k) sb_put(b, ",");
    sb_str(b, t->entries[k].key.bytes, t->entries[k].key.len);
    sb_put(b, ":");
    put_field(b, &t->entries[k].value);
  }
  sb_put(b, "}");
}

static void put_short(sb *b, const char *name, int *first, amqp_bytes_t v) {
  sb_fmt(b, "%s\"%s\":", *first ? "" : ",", name);
  sb_str(b, v.bytes, v.len);
  *first = 0;
}

static void put_properties(sb *b, const amqp_basic_properties_t *p) {
  int first = 1;
  sb_put(b, "{");
  if (p->_flags & AMQP_BASIC_CONTENT_TYPE_FLAG) put_short(b, "content_type", &first, p->content_type);
  if (p->_flags & AMQP_BASIC_CONTENT_ENCODING_FLAG) put_short(b, "content_encoding", &first, p->content_encoding);
  if (p->_flags & AMQP_BASIC_HEADERS_FLAG) {
    sb_put(b, first ? "\"headers\":" : ",\"headers\":");
    put_table(b, &p->headers);
    first = 0;
  }
  if (p->_flags & AMQP_BASIC_DELIVERY_MODE_FLAG) { sb_fmt(b, "%s\"delivery_mode\":%u", first ? "" : ",", p->delivery_mode); first = 0; }
  if (p->_flags & AMQP_BASIC_PRIORITY_FLAG) { sb_fmt(b, "%s\"priority\":%u", first ? "" : ",", p->priority); first = 0; }
  if (p->_flags & AMQP_BASIC_CORRELATION_ID_FLAG) put_short(b, "correlation_id", &first, p->correlation_id);
  if (p->_flags & AMQP_BASIC_REPLY_TO_FLAG) put_short(b, "reply_to", &first, p->reply_to);
  if (p->_flags & AMQP_BASIC_EXPIRATION_FLAG) put_short(b, "expiration", &first, p->expiration);
  if (p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG) put_short(b, "message_id", &first, p->message_id);
  if (p->_flags & AMQP_BASIC_TIMESTAMP_FLAG) {
    sb_fmt(b, "%s\"timestamp\":%llu", first ? "" : ",", (unsigned long long)p->timestamp);
    first = 0;
  }
  if (p->_flags & AMQP_BASIC_TYPE_FLAG) put_short(b, "message_type", &first, p->type);
  if (p->_flags & AMQP_BASIC_USER_ID_FLAG) put_short(b, "user_id", &first, p->user_id);
  if (p->_flags & AMQP_BASIC_APP_ID_FLAG) put_short(b, "app_id", &first, p->app_id);
  if (p->_flags & AMQP_BASIC_CLUSTER_ID_FLAG) put_short(b, "cluster_id", &first, p->cluster_id);
  sb_put(b, "}");
}

/* A delivery object (basic.deliver, or basic.get-ok when consumer_tag is NULL). */
static void put_delivery(sb *b, int channel, uint64_t tag, int redelivered, amqp_bytes_t exchange,
                         amqp_bytes_t routing_key, const amqp_message_t *m, const amqp_bytes_t *consumer_tag,
                         long long message_count) {
  sb_fmt(b, "{\"channel\":%d,\"delivery_tag\":%llu,\"redelivered\":%s,\"exchange\":", channel,
         (unsigned long long)tag, redelivered ? "true" : "false");
  sb_str(b, exchange.bytes, exchange.len);
  sb_put(b, ",\"routing_key\":");
  sb_str(b, routing_key.bytes, routing_key.len);
  sb_put(b, ",\"body\":");
  sb_bytes(b, m->body.bytes, m->body.len);
  sb_put(b, ",\"properties\":");
  put_properties(b, &m->properties);
  sb_put(b, ",\"consumer_tag\":");
  if (consumer_tag) sb_str(b, consumer_tag->bytes, consumer_tag->len); else sb_put(b, "null");
  if (message_count >= 0) sb_fmt(b, ",\"message_count\":%lld}", message_count); else sb_put(b, ",\"message_count\":null}");
}

/* -- JSON to AMQP values ---------------------------------------------------------------------- */
static amqp_bytes_t bytes_of(const jv *v) {
  amqp_bytes_t b;
  b.bytes = (void *)(v->t == J_STR || v->t == J_BYTES ? v->s : "");
  b.len = v->t == J_STR || v->t == J_BYTES ? v->len : 0;
  return b;
}

static amqp_table_t table_of(arena *a, const jv *obj);

static amqp_field_value_t field_of(arena *a, const jv *v) {
  amqp_field_value_t f;
  memset(&f, 0, sizeof f);
  switch (v->t) {
    case J_BOOL: f.kind = AMQP_FIELD_KIND_BOOLEAN; f.value.boolean = (amqp_boolean_t)v->i; break;
    case J_INT: f.kind = AMQP_FIELD_KIND_I64; f.value.i64 = v->i; break;
    case J_DOUBLE: f.kind = AMQP_FIELD_KIND_F64; f.value.f64 = v->d; break;
    case J_STR: f.kind = AMQP_FIELD_KIND_UTF8; f.value.bytes = bytes_of(v); break;
    case J_BYTES: f.kind = AMQP_FIELD_KIND_BYTES; f.value.bytes = bytes_of(v); break;
    case J_OBJ: f.kind = AMQP_FIELD_KIND_TABLE; f.value.table = table_of(a, v); break;
    case J_ARR:
      f.kind = AMQP_FIELD_KIND_ARRAY;
      f.value.array.num_entries = (int)v->n;
      f.value.array.entries = arena_alloc(a, (v->n + 1) * sizeof(amqp_field_value_t));
      for (size_t k = 0; k < v->n; k++) f.value.array.entries[k] = field_of(a, &v->items[k]);
      break;
    default: f.kind = AMQP_FIELD_KIND_VOID;
  }
  return f;
}

static amqp_table_t table_of(arena *a, const jv *obj) {
  amqp_table_t t = {0, NULL};
  if (obj->t != J_OBJ || obj->n == 0) return t;
  t.num_entries = (int)obj->n;
  t.entries = arena_alloc(a, obj->n * sizeof(amqp_table_entry_t));
  for (size_t k = 0; k < obj->n; k++) {
    t.entries[k].key = amqp_cstring_bytes(obj->keys[k]);
    t.entries[k].value = field_of(a, &obj->items[k]);
  }
  return t;
}

static void short_prop(amqp_basic_properties_t *p, const jv *props, const char *name, amqp_flags_t flag,
                       amqp_bytes_t *field) {
  const jv *v = jget(props, name);
  if (v->t == J_STR) { *field = bytes_of(v); p->_flags |= flag; }
}

static amqp_basic_properties_t properties_of(arena *a, const jv *props) {
  amqp_basic_properties_t p;
  memset(&p, 0, sizeof p);
  short_prop(&p, props, "content_type", AMQP_BASIC_CONTENT_TYPE_FLAG, &p.content_type);
  short_prop(&p, props, "content_encoding", AMQP_BASIC_CONTENT_ENCODING_FLAG, &p.content_encoding);
  if (jget(props, "headers")->t == J_OBJ) { p.headers = table_of(a, jget(props, "headers")); p._flags |= AMQP_BASIC_HEADERS_FLAG; }
  if (jget(props, "delivery_mode")->t == J_INT) { p.delivery_mode = (uint8_t)jint(jget(props, "delivery_mode"), 0); p._flags |= AMQP_BASIC_DELIVERY_MODE_FLAG; }
  if (jget(props, "priority")->t == J_INT) { p.priority = (uint8_t)jint(jget(props, "priority"), 0); p._flags |= AMQP_BASIC_PRIORITY_FLAG; }
  short_prop(&p, props, "correlation_id", AMQP_BASIC_CORRELATION_ID_FLAG, &p.correlation_id);
  short_prop(&p, props, "reply_to", AMQP_BASIC_REPLY_TO_FLAG, &p.reply_to);
  short_prop(&p, props, "expiration", AMQP_BASIC_EXPIRATION_FLAG, &p.expiration);
  short_prop(&p, props, "message_id", AMQP_BASIC_MESSAGE_ID_FLAG, &p.message_id);
  if (jget(props, "timestamp")->t == J_INT) { p.timestamp = (uint64_t)jint(jget(props, "timestamp"), 0); p._flags |= AMQP_BASIC_TIMESTAMP_FLAG; }
  short_prop(&p, props, "message_type", AMQP_BASIC_TYPE_FLAG, &p.type);
  short_prop(&p, props, "user_id", AMQP_BASIC_USER_ID_FLAG, &p.user_id);
  short_prop(&p, props, "app_id", AMQP_BASIC_APP_ID_FLAG, &p.app_id);
  short_prop(&p, props, "cluster_id", AMQP_BASIC_CLUSTER_ID_FLAG, &p.cluster_id);
  return p;
}

/* -- connection and channel bookkeeping (the application's part) ------------------------------- */
static void reset_channel(int ch, int state) {
  free(chans[ch].waiting);
  memset(&chans[ch], 0, sizeof chans[ch]);
  chans[ch].state = state;
}

static void drop_connection(void) {
  if (conn != NULL) amqp_destroy_connection(conn); /* closes the socket; sends nothing */
  conn = NULL;
  conn_open = 0;
  for (int ch = 0; ch < MAX_CHANNELS; ch++) if (chans[ch].state == CH_OPEN) chans[ch].state = CH_CLOSED;
}

static void emit_channel_closed(int ch, int code, amqp_bytes_t text) {
  sb line = {0};
  sb_fmt(&line, "{\"event\":\"channel-closed\",\"channel\":%d,\"code\":%d,\"text\":", ch, code);
  sb_str(&line, text.bytes, text.len);
  sb_put(&line, "}");
  emit(&line);
  free(line.s);
}

static void emit_connection_closed(int code, const char *text, size_t len) {
  sb line = {0};
  if (code >= 0) sb_fmt(&line, "{\"event\":\"connection-closed\",\"code\":%d,\"text\":", code);
  else sb_put(&line, "{\"event\":\"connection-closed\",\"code\":null,\"text\":");
  sb_str(&line, text, len);
  sb_put(&line, "}");
  emit(&line);
  free(line.s);
}

/* The broker closed channel `ch` (amqp.h: the client should send channel.close-ok). */
static void on_channel_close(int ch, const amqp_channel_close_t *m) {
  amqp_channel_close_ok_t ok = {0};
  amqp_send_method(conn, (amqp_channel_t)ch, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok);
  if (ch >= MAX_CHANNELS) return;
  reset_channel(ch, CH_CLOSED);
  chans[ch].close_code = m->reply_code;
  chans[ch].close_class = m->class_id;
  chans[ch].close_method = m->method_id;
  snprintf(chans[ch].close_text, sizeof chans[ch].close_text, "%.*s", (int)m->reply_text.len,
           (const char *)m->reply_text.bytes);
}

/* The broker closed the connection (amqp.h: send connection.close-ok and disconnect). */
static void on_connection_close(void) {
  amqp_connection_close_ok_t ok = {0};
  amqp_send_method(conn, 0, AMQP_CONNECTION_CLOSE_OK_METHOD, &ok);
  drop_connection();
}

/* An RPC's outcome as the protocol's error (and the close-ok an application owes). 1: normal. */
static int rpc_ok(amqp_rpc_reply_t r, int ch, error_t_ *e) {
  if (r.reply_type == AMQP_RESPONSE_NORMAL) return 1;
  if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION && r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
    const amqp_channel_close_t *m = r.reply.decoded;
    fail(e, "channel-closed", "AMQP_RESPONSE_SERVER_EXCEPTION", "%.*s", (int)m->reply_text.len,
         (char *)m->reply_text.bytes);
    e->code = m->reply_code; e->class_id = m->class_id; e->method_id = m->method_id;
    on_channel_close(ch, m);
    return 0;
  }
  if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION && r.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
    const amqp_connection_close_t *m = r.reply.decoded;
    fail(e, "connection-closed", "AMQP_RESPONSE_SERVER_EXCEPTION", "%.*s", (int)m->reply_text.len,
         (char *)m->reply_text.bytes);
    e->code = m->reply_code; e->class_id = m->class_id; e->method_id = m->method_id;
    on_connection_close();
    return 0;
  }
  if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION) {
    int status = r.library_error;
    const char *kind = status == AMQP_STATUS_TIMEOUT ? "no-reply"
                       : (status == AMQP_STATUS_CONNECTION_CLOSED || status == AMQP_STATUS_SOCKET_ERROR
                          || status == AMQP_STATUS_HEARTBEAT_TIMEOUT || status == AMQP_STATUS_SOCKET_CLOSED)
                           ? "connection-lost" : "exception";
    fail(e, kind, "AMQP_RESPONSE_LIBRARY_EXCEPTION", "%s (status %d)", amqp_error_string2(status), status);
    if (strcmp(kind, "exception") != 0) drop_connection(); /* the library closed the socket */
    return 0;
  }
  fail(e, "exception", "AMQP_RESPONSE_NONE", "the library gave no reply (reply_type %d)", (int)r.reply_type);
  return 0;
}

/* A status of a call without a reply (publish, ack, ...). 1: sent. */
static int status_ok(int status, error_t_ *e) {
  if (status == AMQP_STATUS_OK) return 1;
  amqp_rpc_reply_t r;
  memset(&r, 0, sizeof r);
  r.reply_type = AMQP_RESPONSE_LIBRARY_EXCEPTION;
  r.library_error = status;
  return rpc_ok(r, 0, e);
}

/* -- events: what rabbitmq-c hands to its application between requests ------------------------ */
static void on_confirm(int ch, uint64_t tag, int multiple, int ack) {
  if (ch >= MAX_CHANNELS) return;
  channel_t *c = &chans[ch];
  sb line = {0};
  size_t kept = 0;
  for (size_t k = 0; k < c->n_waiting; k++) {
    uint64_t seq = c->waiting[k];
    if (multiple ? (seq <= tag || tag == 0) : seq == tag) {
      sb_fmt(&line, "{\"event\":\"confirmed\",\"channel\":%d,\"seq\":%llu,\"ack\":%s,\"multiple\":%s}", ch,
             (unsigned long long)seq, ack ? "true" : "false", multiple ? "true" : "false");
      emit(&line);
    } else {
      c->waiting[kept++] = seq;
    }
  }
  c->n_waiting = kept;
  free(line.s);
}

static void on_return(int ch, const amqp_basic_return_t *m) {
  amqp_message_t msg;
  sb line = {0};
  amqp_bytes_t text = m->reply_text, exchange = m->exchange, key = m->routing_key;
  int code = m->reply_code;
  char *copy = malloc(text.len + exchange.len + key.len + 1); /* the method lives in a pool read_message may reuse */
  memcpy(copy, text.bytes, text.len);
  memcpy(copy + text.len, exchange.bytes, exchange.len);
  memcpy(copy + text.len + exchange.len, key.bytes, key.len);
  amqp_rpc_reply_t r = amqp_read_message(conn, (amqp_channel_t)ch, &msg, 0);
  error_t_ e;
  if (rpc_ok(r, ch, &e)) {
    sb_fmt(&line, "{\"event\":\"returned\",\"channel\":%d,\"reply_code\":%d,\"reply_text\":", ch, code);
    sb_str(&line, copy, text.len);
    sb_put(&line, ",\"exchange\":");
    sb_str(&line, copy + text.len, exchange.len);
    sb_put(&line, ",\"routing_key\":");
    sb_str(&line, copy + text.len + exchange.len, key.len);
    sb_put(&line, ",\"body\":");
    sb_bytes(&line, msg.body.bytes, msg.body.len);
    sb_put(&line, "}");
    emit(&line);
    amqp_destroy_message(&msg);
  } else {
    fprintf(stderr, "adapter: reading a returned message: %s\n", e.text);
  }
  free(copy);
  free(line.s);
}

static void on_frame(const amqp_frame_t *f) {
  sb line = {0};
  int ch = f->channel;
  if (f->frame_type != AMQP_FRAME_METHOD) {
    fprintf(stderr, "adapter: a frame of type %d on channel %d outside a message, dropped\n", f->frame_type, ch);
    return;
  }
  switch (f->payload.method.id) {
    case AMQP_BASIC_CANCEL_METHOD: {
      const amqp_basic_cancel_t *m = f->payload.method.decoded;
      sb_fmt(&line, "{\"event\":\"cancelled\",\"channel\":%d,\"consumer_tag\":", ch);
      sb_str(&line, m->consumer_tag.bytes, m->consumer_tag.len);
      sb_put(&line, "}");
      emit(&line);
      break;
    }
    case AMQP_BASIC_ACK_METHOD: {
      const amqp_basic_ack_t *m = f->payload.method.decoded;
      on_confirm(ch, m->delivery_tag, m->multiple, 1);
      break;
    }
    case AMQP_BASIC_NACK_METHOD: {
      const amqp_basic_nack_t *m = f->payload.method.decoded;
      on_confirm(ch, m->delivery_tag, m->multiple, 0);
      break;
    }
    case AMQP_BASIC_RETURN_METHOD: on_return(ch, f->payload.method.decoded); break;
    case AMQP_CHANNEL_CLOSE_METHOD: {
      const amqp_channel_close_t *m = f->payload.method.decoded;
      emit_channel_closed(ch, m->reply_code, m->reply_text);
      on_channel_close(ch, m);
      break;
    }
    case AMQP_CONNECTION_CLOSE_METHOD: {
      const amqp_connection_close_t *m = f->payload.method.decoded;
      emit_connection_closed(m->reply_code, m->reply_text.bytes, m->reply_text.len);
      on_connection_close();
      break;
    }
    case AMQP_CONNECTION_BLOCKED_METHOD: {
      const amqp_connection_blocked_t *m = f->payload.method.decoded;
      sb_put(&line, "{\"event\":\"blocked\",\"reason\":");
      sb_str(&line, m->reason.bytes, m->reason.len);
      sb_put(&line, "}");
      emit(&line);
      break;
    }
    case AMQP_CONNECTION_UNBLOCKED_METHOD: sb_put(&line, "{\"event\":\"unblocked\"}"); emit(&line); break;
    default:
      fprintf(stderr, "adapter: rabbitmq-c handed over method 0x%08x on channel %d; not answered\n",
              (unsigned)f->payload.method.id, ch);
  }
  free(line.s);
}

static void on_delivery(const amqp_envelope_t *env) {
  sb line = {0};
  sb_put(&line, "{\"event\":\"delivered\",\"delivery\":");
  put_delivery(&line, env->channel, env->delivery_tag, env->redelivered, env->exchange, env->routing_key,
               &env->message, &env->consumer_tag, -1);
  sb_put(&line, "}");
  emit(&line);
  free(line.s);
}

/* Run the library's application loop until nothing is ready (each wait up to `wait_ms`). */
static void pump(int wait_ms) {
  while (conn_open) {
    struct timeval tv = {wait_ms / 1000, (wait_ms % 1000) * 1000};
    amqp_envelope_t env;
    amqp_maybe_release_buffers(conn);
    amqp_rpc_reply_t r = amqp_consume_message(conn, &env, &tv, 0);
    if (r.reply_type == AMQP_RESPONSE_NORMAL) {
      on_delivery(&env);
      amqp_destroy_envelope(&env);
      continue;
    }
    if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION && r.library_error == AMQP_STATUS_UNEXPECTED_STATE) {
      amqp_frame_t frame;
      int status = amqp_simple_wait_frame(conn, &frame);
      if (status == AMQP_STATUS_OK) { on_frame(&frame); continue; }
      r.library_error = status;
    }
    if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION && r.library_error == AMQP_STATUS_TIMEOUT) return;
    if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION) { /* a close in the middle of a message */
      amqp_frame_t frame = {0};
      frame.frame_type = AMQP_FRAME_METHOD; frame.channel = env.channel; frame.payload.method = r.reply;
      if (r.reply.id == AMQP_CONNECTION_CLOSE_METHOD) frame.channel = 0;
      on_frame(&frame);
      continue;
    }
    const char *why = r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION ? amqp_error_string2(r.library_error) : "?";
    emit_connection_closed(-1, why, strlen(why));
    drop_connection();
  }
}

/* -- operations (one per protocol op; each fills `value` with a JSON value, or `e`) ------------- */
typedef struct { arena *a; const jv *args; sb *value; error_t_ *e; int ch; } op_ctx;

static const jv *arg(op_ctx *c, const char *name) { return jget(c->args, name); }

/* The request's channel, open as far as the application knows; 0 (and `e`) otherwise. */
static int need_channel(op_ctx *c) {
  if (!conn_open) { fail(c->e, "exception", "NotConnected", "the connection is not open"); return 0; }
  int64_t ch = jint(arg(c, "channel"), 0);
  if (ch > 0 && ch < MAX_CHANNELS && chans[ch].state == CH_CLOSED && chans[ch].close_code > 0) {
    /* closed by the broker, and the application was handed that channel.close: that is the outcome */
    fail(c->e, "channel-closed", "ChannelClosedByBroker", "%s", chans[ch].close_text);
    c->e->code = chans[ch].close_code; c->e->class_id = chans[ch].close_class;
    c->e->method_id = chans[ch].close_method;
    return 0;
  }
  if (ch <= 0 || ch >= MAX_CHANNELS || chans[ch].state != CH_OPEN) {
    fail(c->e, "exception", "ChannelNotOpen", "channel %lld is not open (rabbitmq-c leaves it to the application "
         "not to use it)", (long long)ch);
    return 0;
  }
  c->ch = (int)ch;
  return 1;
}

static int rpc(op_ctx *c, const void *ok) {
  if (ok != NULL) return 1;
  return rpc_ok(amqp_get_rpc_reply(conn), c->ch, c->e);
}

static int op_connect(op_ctx *c) {
  struct amqp_connection_info info;
  const jv *url = arg(c, "url");
  char *copy = arena_alloc(c->a, url->len + 1);
  memcpy(copy, jstr(url), url->len + 1);
  if (conn != NULL) { if (conn_open) amqp_connection_close(conn, AMQP_REPLY_SUCCESS); drop_connection(); }
  for (int ch = 0; ch < MAX_CHANNELS; ch++) reset_channel(ch, CH_NONE);
  if (amqp_parse_url(copy, &info) != AMQP_STATUS_OK) {
    fail(c->e, "exception", "AMQP_STATUS_BAD_URL", "cannot parse %s", jstr(url));
    return 0;
  }
  if (info.vhost == NULL || info.vhost[0] == '\0') info.vhost = "/"; /* the harness's amqp://host:port/ names
      the default vhost, as pika and amqplib read it; amqp_parse_url reads it as "" (the URI spec) */
  conn = amqp_new_connection();
  amqp_socket_t *sock = amqp_tcp_socket_new(conn);
  amqp_set_handshake_timeout(conn, &rpc_timeout);
  amqp_set_rpc_timeout(conn, &rpc_timeout);
  int status = amqp_socket_open_noblock(sock, info.host, info.port, &rpc_timeout);
  if (status != AMQP_STATUS_OK) {
    fail(c->e, "connection-lost", "AMQP_STATUS", "%s", amqp_error_string2(status));
    drop_connection();
    return 0;
  }
  conn_open = 1;
  int channel_max = (int)jint(arg(c, "channel_max"), AMQP_DEFAULT_MAX_CHANNELS);
  int frame_max = (int)jint(arg(c, "frame_max"), AMQP_DEFAULT_FRAME_SIZE);
  int heartbeat = (int)jint(arg(c, "heartbeat"), AMQP_DEFAULT_HEARTBEAT);
  return rpc_ok(amqp_login(conn, info.vhost, channel_max, frame_max, heartbeat, AMQP_SASL_METHOD_PLAIN,
                           info.user, info.password), 0, c->e);
}

static int op_close(op_ctx *c) {
  (void)c;
  if (conn_open) amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
  drop_connection();
  return 1;
}

static int op_open_channel(op_ctx *c) {
  if (!conn_open) { fail(c->e, "exception", "NotConnected", "the connection is not open"); return 0; }
  int limit = amqp_get_channel_max(conn), ch = 1;
  while (ch < MAX_CHANNELS && ch <= limit && chans[ch].state == CH_OPEN) ch++;
  if (ch >= MAX_CHANNELS || ch > limit) {
    fail(c->e, "exception", "ChannelMaxReached", "every channel number up to channel_max %d is in use", limit);
    return 0;
  }
  c->ch = ch;
  if (!rpc(c, amqp_channel_open(conn, (amqp_channel_t)ch))) return 0;
  reset_channel(ch, CH_OPEN);
  sb_fmt(c->value, "%d", ch);
  return 1;
}

static int op_close_channel(op_ctx *c) {
  if (!need_channel(c)) return 0;
  if (!rpc_ok(amqp_channel_close(conn, (amqp_channel_t)c->ch, AMQP_REPLY_SUCCESS), c->ch, c->e)) return 0;
  reset_channel(c->ch, CH_CLOSED);
  return 1;
}

static int op_declare_queue(op_ctx *c) {
  if (!need_channel(c)) return 0;
  amqp_queue_declare_ok_t *ok = amqp_queue_declare(conn, (amqp_channel_t)c->ch, bytes_of(arg(c, "queue")),
      jbool(arg(c, "passive")), jbool(arg(c, "durable")), jbool(arg(c, "exclusive")),
      jbool(arg(c, "auto_delete")), table_of(c->a, arg(c, "arguments")));
  if (!rpc(c, ok)) return 0;
  sb_str(c->value, ok->queue.bytes, ok->queue.len);
  return 1;
}

static int op_declare_exchange(op_ctx *c) {
  if (!need_channel(c)) return 0;
  const jv *kind = arg(c, "kind");
  amqp_table_t none = {0, NULL};
  return rpc(c, amqp_exchange_declare(conn, (amqp_channel_t)c->ch, bytes_of(arg(c, "exchange")),
                                      kind->t == J_STR ? bytes_of(kind) : amqp_cstring_bytes("direct"),
                                      jbool(arg(c, "passive")), jbool(arg(c, "durable")), 0, 0, none));
}

static int op_bind_queue(op_ctx *c) {
  if (!need_channel(c)) return 0;
  return rpc(c, amqp_queue_bind(conn, (amqp_channel_t)c->ch, bytes_of(arg(c, "queue")),
                                bytes_of(arg(c, "exchange")), bytes_of(arg(c, "routing_key")), amqp_empty_table));
}

static int op_delete_queue(op_ctx *c) {
  if (!need_channel(c)) return 0;
  return rpc(c, amqp_queue_delete(conn, (amqp_channel_t)c->ch, bytes_of(arg(c, "queue")), 0, 0));
}

static int op_qos(op_ctx *c) {
  if (!need_channel(c)) return 0;
  return rpc(c, amqp_basic_qos(conn, (amqp_channel_t)c->ch, 0, (uint16_t)jint(arg(c, "prefetch_count"), 0),
                               jbool(arg(c, "global_"))));
}

static int op_publish(op_ctx *c) {
  if (!need_channel(c)) return 0;
  amqp_basic_properties_t props = properties_of(c->a, arg(c, "properties"));
  int status = amqp_basic_publish(conn, (amqp_channel_t)c->ch, bytes_of(arg(c, "exchange")),
                                  bytes_of(arg(c, "routing_key")), jbool(arg(c, "mandatory")), 0, &props,
                                  bytes_of(arg(c, "body")));
  if (!status_ok(status, c->e)) return 0;
  channel_t *ch = &chans[c->ch];
  if (!ch->confirm) return 1;
  if (ch->n_waiting == ch->cap_waiting) {
    ch->cap_waiting = ch->cap_waiting ? 2 * ch->cap_waiting : 64;
    ch->waiting = realloc(ch->waiting, ch->cap_waiting * sizeof(uint64_t));
  }
  ch->waiting[ch->n_waiting++] = ++ch->published;
  sb_fmt(c->value, "%llu", (unsigned long long)ch->published);
  return 1;
}

static int op_confirm_select(op_ctx *c) {
  if (!need_channel(c)) return 0;
  if (!rpc(c, amqp_confirm_select(conn, (amqp_channel_t)c->ch))) return 0;
  chans[c->ch].confirm = 1;
  return 1;
}

static int op_consume(op_ctx *c) {
  if (!need_channel(c)) return 0;
  amqp_basic_consume_ok_t *ok = amqp_basic_consume(conn, (amqp_channel_t)c->ch, bytes_of(arg(c, "queue")),
      bytes_of(arg(c, "consumer_tag")), 0, jbool(arg(c, "no_ack")), jbool(arg(c, "exclusive")),
      table_of(c->a, arg(c, "arguments")));
  if (!rpc(c, ok)) return 0;
  sb_str(c->value, ok->consumer_tag.bytes, ok->consumer_tag.len);
  return 1;
}

static int op_cancel(op_ctx *c) {
  if (!need_channel(c)) return 0;
  return rpc(c, amqp_basic_cancel(conn, (amqp_channel_t)c->ch, bytes_of(arg(c, "consumer_tag"))));
}

static int op_get(op_ctx *c) {
  if (!need_channel(c)) return 0;
  amqp_rpc_reply_t r = amqp_basic_get(conn, (amqp_channel_t)c->ch, bytes_of(arg(c, "queue")),
                                      jbool(arg(c, "no_ack")));
  if (!rpc_ok(r, c->ch, c->e)) return 0;
  if (r.reply.id == AMQP_BASIC_GET_EMPTY_METHOD) return 1; /* null: no message */
  amqp_basic_get_ok_t m = *(amqp_basic_get_ok_t *)r.reply.decoded;
  sb fields = {0}; /* the method's strings live in a pool that reading the content may reuse */
  sb_str(&fields, m.exchange.bytes, m.exchange.len);
  size_t split = fields.len;
  sb_str(&fields, m.routing_key.bytes, m.routing_key.len);
  amqp_message_t msg;
  if (!rpc_ok(amqp_read_message(conn, (amqp_channel_t)c->ch, &msg, 0), c->ch, c->e)) { free(fields.s); return 0; }
  sb_fmt(c->value, "{\"channel\":%d,\"delivery_tag\":%llu,\"redelivered\":%s,\"exchange\":", c->ch,
         (unsigned long long)m.delivery_tag, m.redelivered ? "true" : "false");
  sb_raw(c->value, fields.s, split);
  sb_put(c->value, ",\"routing_key\":");
  sb_raw(c->value, fields.s + split, fields.len - split);
  sb_put(c->value, ",\"body\":");
  sb_bytes(c->value, msg.body.bytes, msg.body.len);
  sb_put(c->value, ",\"properties\":");
  put_properties(c->value, &msg.properties);
  sb_fmt(c->value, ",\"consumer_tag\":null,\"message_count\":%u}", m.message_count);
  amqp_destroy_message(&msg);
  free(fields.s);
  return 1;
}

static int op_ack(op_ctx *c) {
  if (!need_channel(c)) return 0;
  return status_ok(amqp_basic_ack(conn, (amqp_channel_t)c->ch, (uint64_t)jint(arg(c, "delivery_tag"), 0),
                                  jbool(arg(c, "multiple"))), c->e);
}

static int op_nack(op_ctx *c) {
  if (!need_channel(c)) return 0;
  return status_ok(amqp_basic_nack(conn, (amqp_channel_t)c->ch, (uint64_t)jint(arg(c, "delivery_tag"), 0),
                                   jbool(arg(c, "multiple")), jbool(arg(c, "requeue"))), c->e);
}

static int op_reject(op_ctx *c) {
  if (!need_channel(c)) return 0;
  return status_ok(amqp_basic_reject(conn, (amqp_channel_t)c->ch, (uint64_t)jint(arg(c, "delivery_tag"), 0),
                                     jbool(arg(c, "requeue"))), c->e);
}

static int op_recover(op_ctx *c) {
  if (!need_channel(c)) return 0;
  return rpc(c, amqp_basic_recover(conn, (amqp_channel_t)c->ch, jbool(arg(c, "requeue"))));
}

static int op_tx_select(op_ctx *c) { return need_channel(c) && rpc(c, amqp_tx_select(conn, (amqp_channel_t)c->ch)); }
static int op_tx_commit(op_ctx *c) { return need_channel(c) && rpc(c, amqp_tx_commit(conn, (amqp_channel_t)c->ch)); }
static int op_tx_rollback(op_ctx *c) {
  return need_channel(c) && rpc(c, amqp_tx_rollback(conn, (amqp_channel_t)c->ch));
}

static int op_state(op_ctx *c) {
  int first = 1;
  sb_fmt(c->value, "{\"connection\":\"%s\",\"channels\":{", conn_open ? "open" : "closed");
  for (int ch = 1; ch < MAX_CHANNELS; ch++) {
    if (chans[ch].state == CH_NONE) continue;
    sb_fmt(c->value, "%s\"%d\":\"%s\"", first ? "" : ",", ch, chans[ch].state == CH_OPEN ? "open" : "closed");
    first = 0;
  }
  sb_put(c->value, "}}");
  return 1;
}

static int op_bye(op_ctx *c) { return op_close(c); }

static const struct { const char *name; int (*run)(op_ctx *); } OPS[] = {
    {"connect", op_connect}, {"close", op_close}, {"open_channel", op_open_channel},
    {"close_channel", op_close_channel}, {"declare_queue", op_declare_queue},
    {"declare_exchange", op_declare_exchange}, {"bind_queue", op_bind_queue}, {"delete_queue", op_delete_queue},
    {"qos", op_qos}, {"publish", op_publish}, {"confirm_select", op_confirm_select}, {"consume", op_consume},
    {"cancel", op_cancel}, {"get", op_get}, {"ack", op_ack}, {"nack", op_nack}, {"reject", op_reject},
    {"recover", op_recover}, {"tx_select", op_tx_select}, {"tx_commit", op_tx_commit},
    {"tx_rollback", op_tx_rollback}, {"state", op_state}, {"bye", op_bye},
};

static int run_op(arena *a, const char *op, const jv *args, sb *value, error_t_ *e) {
  op_ctx c = {a, args, value, e, 0};
  for (size_t k = 0; k < sizeof OPS / sizeof OPS[0]; k++)
    if (strcmp(OPS[k].name, op) == 0) return OPS[k].run(&c);
  fail(e, "unsupported", "Unsupported", "unknown op %s", op);
  return 0;
}

/* -- the request loop ------------------------------------------------------------------------- */
static void put_error(sb *b, const error_t_ *e) {
  sb_fmt(b, "\"error\":{\"kind\":\"%s\",\"type\":\"%s\",\"text\":", e->kind, e->type);
  sb_str(b, e->text, strlen(e->text));
  if (strcmp(e->kind, "channel-closed") == 0 || strcmp(e->kind, "connection-closed") == 0)
    sb_fmt(b, ",\"code\":%d,\"class_id\":%d,\"method_id\":%d", e->code, e->class_id, e->method_id);
  sb_put(b, "}");
}

/* Answer one request line; 0 when it was `bye`. */
static int answer(const char *text, size_t len) {
  arena a = {0};
  sb value = {0}, line = {0};
  error_t_ e;
  memset(&e, 0, sizeof e);
  const jv *req = jparse(&a, text, len);
  long long id = req ? (long long)jint(jget(req, "id"), -1) : -1;
  const char *op = req ? jstr(jget(req, "op")) : "";
  pump(0); /* what already reached the library comes first */
  int ok = req ? run_op(&a, op, jget(req, "args"), &value, &e)
               : (fail(&e, "exception", "ProtocolError", "not a JSON object: %.80s", text), 0);
  if (conn_open) while (amqp_frames_enqueued(conn) && conn_open) pump(0); /* frames queued during the RPC */
  sb_fmt(&line, "{\"id\":%lld,\"ok\":%s,", id, ok ? "true" : "false");
  if (ok) { sb_put(&line, "\"value\":"); sb_put(&line, value.len ? value.s : "null"); }
  else put_error(&line, &e);
  sb_put(&line, "}");
  emit(&line);
  free(value.s); free(line.s);
  arena_free(&a);
  return strcmp(op, "bye") != 0;
}

static void hello(void) {
  sb line = {0};
  sb_fmt(&line, "{\"event\":\"hello\",\"client\":\"rabbitmq-c\",\"version\":\"%s\",\"language\":\"c\","
                "\"runtime\":\"gcc %s\",\"api\":\"amqp_consume_message loop (synchronous API)\",\"features\":[]}",
         amqp_version(), __VERSION__);
  emit(&line);
  free(line.s);
}

int main(void) {
  const char *t = getenv("AMQPC_ADAPTER_TIMEOUT");
  if (t != NULL && atof(t) > 0) {
    double s = atof(t);
    rpc_timeout.tv_sec = (long)s;
    rpc_timeout.tv_usec = (long)((s - (double)(long)s) * 1e6);
  }
  setvbuf(stdout, NULL, _IOFBF, 1 << 16);
  hello();
  sb in = {0};
  for (;;) {
    struct pollfd fds[2] = {{0, POLLIN, 0}, {conn_open ? amqp_get_sockfd(conn) : -1, POLLIN, 0}};
    if (!conn_open || !amqp_frames_enqueued(conn)) poll(fds, conn_open ? 2 : 1, IDLE_POLL_MS);
    if (fds[0].revents) {
      char chunk[65536];
      ssize_t n = read(0, chunk, sizeof chunk);
      if (n <= 0) break; /* stdin closed: the harness is gone */
      sb_raw(&in, chunk, (size_t)n);
      char *nl;
      while ((nl = memchr(in.s, '\n', in.len)) != NULL) {
        size_t used = (size_t)(nl - in.s) + 1;
        int more = used > 1 ? answer(in.s, used - 1) : 1;
        memmove(in.s, in.s + used, in.len - used);
        in.len -= used;
        if (!more) return 0;
      }
    } else {
      pump(0);
    }
  }
  if (conn_open) { amqp_connection_close(conn, AMQP_REPLY_SUCCESS); drop_connection(); }
  return 0;
}
