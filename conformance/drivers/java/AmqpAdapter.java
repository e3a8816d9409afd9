// The adapter program for the RabbitMQ Java client (com.rabbitmq:amqp-client; the adapter
// protocol: docs/adapter-protocol.md, conformance/drivers/wire_json.py).
//
// Reads one JSON request per line on stdin, answers each with one reply line on stdout, and writes
// the events the Java client gives its application: deliveries and broker cancels (a Consumer's
// handleDelivery / handleCancel, on the client's consumer work pool), confirms (ConfirmListener:
// the broker's tag and multiple flag, expanded here to one event per publish with "multiple"
// shown), returns (ReturnListener), closes (ShutdownListener) and connection.blocked
// (BlockedListener). The client runs its own I/O thread, so frames are read between requests.
//
// Automatic connection recovery (on by default since 5.0) is switched off: a reconnect would hide
// the close the scenario judges. The library's logging goes to stderr (slf4j-simple).
// Built by conformance/drivers/build.py: javac against /usr/share/java/amqp-client.jar.

import com.rabbitmq.client.AMQP;
import com.rabbitmq.client.AlreadyClosedException;
import com.rabbitmq.client.BlockedListener;
import com.rabbitmq.client.Channel;
import com.rabbitmq.client.ConfirmListener;
import com.rabbitmq.client.Connection;
import com.rabbitmq.client.ConnectionFactory;
import com.rabbitmq.client.DefaultConsumer;
import com.rabbitmq.client.Envelope;
import com.rabbitmq.client.GetResponse;
import com.rabbitmq.client.Method;
import com.rabbitmq.client.ShutdownSignalException;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.Date;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentSkipListSet;

public final class AmqpAdapter {
    private static final PrintStream OUT = new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out),
            false, StandardCharsets.UTF_8);
    private static volatile Connection conn;
    private static final Map<Integer, Entry> CHANNELS = new ConcurrentHashMap<>();

    /** One channel: its publishes awaiting a confirm (null when not in confirm mode). */
    private static final class Entry {
        final Channel ch;
        volatile ConcurrentSkipListSet<Long> unconfirmed;
        volatile long seq;

        Entry(Channel ch) {
            this.ch = ch;
        }
    }

    /** An operation the Java client cannot express. */
    private static final class Unsupported extends Exception {
        Unsupported(String what) {
            super(what);
        }
    }

    static synchronized void emit(Map<String, Object> obj) {
        OUT.print(Json.write(obj));
        OUT.print('\n');
        OUT.flush();
    }

    static Map<String, Object> map(Object... kv) {
        Map<String, Object> m = new LinkedHashMap<>();
        for (int i = 0; i < kv.length; i += 2) m.put((String) kv[i], kv[i + 1]);
        return m;
    }

    // -- requests --------------------------------------------------------------------------------

    @SuppressWarnings("unchecked")
    static Map<String, Object> table(Object value) {
        return value instanceof Map ? (Map<String, Object>) value : new LinkedHashMap<>();
    }

    static String str(Map<String, Object> a, String k) {
        Object v = a.get(k);
        return v == null ? "" : v.toString();
    }

    static boolean flag(Map<String, Object> a, String k) {
        return Boolean.TRUE.equals(a.get(k));
    }

    static long num(Map<String, Object> a, String k) {
        Object v = a.get(k);
        return v instanceof Number ? ((Number) v).longValue() : 0;
    }

    static Entry entry(Map<String, Object> a) throws Exception {
        Entry e = CHANNELS.get((int) num(a, "channel"));
        if (e == null) throw new IllegalStateException("no channel " + num(a, "channel"));
        return e;
    }

    static AMQP.BasicProperties properties(Map<String, Object> p) {
        AMQP.BasicProperties.Builder b = new AMQP.BasicProperties.Builder();
        if (p.containsKey("content_type")) b.contentType(str(p, "content_type"));
        if (p.containsKey("content_encoding")) b.contentEncoding(str(p, "content_encoding"));
        if (p.containsKey("headers")) b.headers(table(p.get("headers")));
        if (p.containsKey("delivery_mode")) b.deliveryMode((int) num(p, "delivery_mode"));
        if (p.containsKey("priority")) b.priority((int) num(p, "priority"));
        if (p.containsKey("correlation_id")) b.correlationId(str(p, "correlation_id"));
        if (p.containsKey("reply_to")) b.replyTo(str(p, "reply_to"));
        if (p.containsKey("expiration")) b.expiration(str(p, "expiration"));
        if (p.containsKey("message_id")) b.messageId(str(p, "message_id"));
        if (p.containsKey("timestamp")) b.timestamp(new Date(num(p, "timestamp") * 1000));
        if (p.containsKey("message_type")) b.type(str(p, "message_type"));
        if (p.containsKey("user_id")) b.userId(str(p, "user_id"));
        if (p.containsKey("app_id")) b.appId(str(p, "app_id"));
        if (p.containsKey("cluster_id")) b.clusterId(str(p, "cluster_id"));
        return b.build();
    }

    static Map<String, Object> fromProperties(AMQP.BasicProperties p) {
        Map<String, Object> m = new LinkedHashMap<>();
        Object[] pairs = {"content_type", p.getContentType(), "content_encoding", p.getContentEncoding(),
            "headers", p.getHeaders(), "delivery_mode", p.getDeliveryMode(), "priority", p.getPriority(),
            "correlation_id", p.getCorrelationId(), "reply_to", p.getReplyTo(), "expiration", p.getExpiration(),
            "message_id", p.getMessageId(), "timestamp", p.getTimestamp(), "message_type", p.getType(),
            "user_id", p.getUserId(), "app_id", p.getAppId(), "cluster_id", p.getClusterId()};
        for (int i = 0; i < pairs.length; i += 2) if (pairs[i + 1] != null) m.put((String) pairs[i], pairs[i + 1]);
        return m;
    }

    static Map<String, Object> delivery(int number, Envelope env, AMQP.BasicProperties props, byte[] body,
                                        String consumerTag, Integer messageCount) {
        return map("channel", number, "delivery_tag", env.getDeliveryTag(), "redelivered", env.isRedeliver(),
                "exchange", env.getExchange(), "routing_key", env.getRoutingKey(), "body", body,
                "properties", fromProperties(props), "consumer_tag", consumerTag, "message_count", messageCount);
    }

    static void connect(Map<String, Object> a) throws Exception {
        if (conn != null && conn.isOpen()) {
            Connection old = conn;
            new Thread(() -> { try { old.abort(1000); } catch (Exception ignored) { } }).start();
        }
        CHANNELS.clear();
        ConnectionFactory factory = new ConnectionFactory();
        factory.setUri(str(a, "url"));
        if (new java.net.URI(str(a, "url")).getRawPath().equals("/")) {
            factory.setVirtualHost("/"); // the harness's "amqp://host:port/" means vhost "/"; the AMQP URI spec reads ""
        }
        factory.setAutomaticRecoveryEnabled(false);
        factory.setTopologyRecoveryEnabled(false);
        if (a.get("heartbeat") != null) factory.setRequestedHeartbeat((int) num(a, "heartbeat"));
        if (a.get("frame_max") != null) factory.setRequestedFrameMax((int) num(a, "frame_max"));
        if (a.get("channel_max") != null) factory.setRequestedChannelMax((int) num(a, "channel_max"));
        Connection c = factory.newConnection();
        c.addShutdownListener(cause -> {
            if (cause.isInitiatedByApplication() || c != conn) return; // the application's own close, or an old one
            Method reason = cause.getReason();
            Object code = reason instanceof AMQP.Connection.Close ? ((AMQP.Connection.Close) reason).getReplyCode() : null;
            Object text = reason instanceof AMQP.Connection.Close ? ((AMQP.Connection.Close) reason).getReplyText()
                    : String.valueOf(cause.getMessage());
            emit(map("event", "connection-closed", "code", code, "text", text));
        });
        c.addBlockedListener(new BlockedListener() {
            public void handleBlocked(String reason) { emit(map("event", "blocked", "reason", reason)); }
            public void handleUnblocked() { emit(map("event", "unblocked")); }
        });
        conn = c;
    }


    static int openChannel() throws Exception {
        Channel ch = conn.createChannel();
        if (ch == null) throw new IllegalStateException("no channel number is free (createChannel returned null)");
        int number = ch.getChannelNumber();
        Entry e = new Entry(ch);
        CHANNELS.put(number, e);
        ch.addShutdownListener(cause -> {
            if (cause.isHardError() || cause.isInitiatedByApplication()) return; // the connection reports its own
            Method reason = cause.getReason();
            Object code = reason instanceof AMQP.Channel.Close ? ((AMQP.Channel.Close) reason).getReplyCode() : null;
            Object text = reason instanceof AMQP.Channel.Close ? ((AMQP.Channel.Close) reason).getReplyText() : "closed";
            emit(map("event", "channel-closed", "channel", number, "code", code, "text", text));
        });
        ch.addReturnListener((replyCode, replyText, exchange, routingKey, props, body) ->
                emit(map("event", "returned", "channel", number, "reply_code", replyCode, "reply_text", replyText,
                        "exchange", exchange, "routing_key", routingKey, "body", body)));
        ch.addConfirmListener(new ConfirmListener() {
            public void handleAck(long tag, boolean multiple) { confirmed(number, e, tag, multiple, true); }
            public void handleNack(long tag, boolean multiple) { confirmed(number, e, tag, multiple, false); }
        });
        return number;
    }

    /** One confirmed event per publish the broker's ack or nack settles (the client shows `multiple`). */
    static void confirmed(int number, Entry e, long tag, boolean multiple, boolean ack) {
        ConcurrentSkipListSet<Long> waiting = e.unconfirmed;
        if (waiting == null) return;
        List<Long> settled = multiple ? List.copyOf(waiting.headSet(tag, true)) : List.of(tag);
        for (long seq : settled) {
            waiting.remove(seq);
            emit(map("event", "confirmed", "channel", number, "seq", seq, "ack", ack, "multiple", multiple));
        }
    }

    static String consume(Map<String, Object> a) throws Exception {
        Entry e = entry(a);
        int number = (int) num(a, "channel");
        return e.ch.basicConsume(str(a, "queue"), flag(a, "no_ack"), str(a, "consumer_tag"), false,
                flag(a, "exclusive"), table(a.get("arguments")), new DefaultConsumer(e.ch) {
                    @Override
                    public void handleDelivery(String tag, Envelope env, AMQP.BasicProperties props, byte[] body) {
                        emit(map("event", "delivered", "delivery", delivery(number, env, props, body, tag, null)));
                    }

                    @Override
                    public void handleCancel(String tag) {
                        emit(map("event", "cancelled", "channel", number, "consumer_tag", tag));
                    }
                });
    }

    static Object publish(Map<String, Object> a) throws Exception {
        Entry e = entry(a);
        Object seq = null;
        if (e.unconfirmed != null) {
            long next = e.ch.getNextPublishSeqNo();
            e.unconfirmed.add(next);
            seq = next;
        }
        Object body = a.get("body");
        e.ch.basicPublish(str(a, "exchange"), str(a, "routing_key"), flag(a, "mandatory"),
                properties(table(a.get("properties"))), body instanceof byte[] ? (byte[]) body : new byte[0]);
        return seq;
    }

    static Object get(Map<String, Object> a) throws Exception {
        GetResponse r = entry(a).ch.basicGet(str(a, "queue"), flag(a, "no_ack"));
        if (r == null) return null;
        return delivery((int) num(a, "channel"), r.getEnvelope(), r.getProps(), r.getBody(), null, r.getMessageCount());
    }

    static Object state() {
        Map<String, Object> channels = new TreeMap<>();
        for (Map.Entry<Integer, Entry> e : CHANNELS.entrySet()) {
            channels.put(e.getKey().toString(), e.getValue().ch.isOpen() ? "open" : "closed");
        }
        return map("connection", conn != null && conn.isOpen() ? "open" : "closed", "channels", channels);
    }

    static Object call(String op, Map<String, Object> a) throws Exception {
        switch (op) {
            case "connect": connect(a); return null;
            case "close": if (conn != null && conn.isOpen()) conn.close(); return null;
            case "open_channel": return openChannel();
            case "close_channel": entry(a).ch.close(); return null;
            case "declare_queue":
                if (flag(a, "passive")) return entry(a).ch.queueDeclarePassive(str(a, "queue")).getQueue();
                return entry(a).ch.queueDeclare(str(a, "queue"), flag(a, "durable"), flag(a, "exclusive"),
                        flag(a, "auto_delete"), table(a.get("arguments"))).getQueue();
            case "declare_exchange":
                if (flag(a, "passive")) entry(a).ch.exchangeDeclarePassive(str(a, "exchange"));
                else entry(a).ch.exchangeDeclare(str(a, "exchange"), str(a, "kind"), flag(a, "durable"));
                return null;
            case "bind_queue": entry(a).ch.queueBind(str(a, "queue"), str(a, "exchange"), str(a, "routing_key")); return null;
            case "delete_queue": entry(a).ch.queueDelete(str(a, "queue")); return null;
            case "qos": entry(a).ch.basicQos((int) num(a, "prefetch_count"), flag(a, "global_")); return null;
            case "publish": return publish(a);
            case "confirm_select": {
                Entry e = entry(a);
                e.ch.confirmSelect();
                e.unconfirmed = new ConcurrentSkipListSet<>();
                return null;
            }
            case "consume": return consume(a);
            case "cancel": entry(a).ch.basicCancel(str(a, "consumer_tag")); return null;
            case "get": return get(a);
            case "ack": entry(a).ch.basicAck(num(a, "delivery_tag"), flag(a, "multiple")); return null;
            case "nack": entry(a).ch.basicNack(num(a, "delivery_tag"), flag(a, "multiple"), flag(a, "requeue")); return null;
            case "reject": entry(a).ch.basicReject(num(a, "delivery_tag"), flag(a, "requeue")); return null;
            case "recover": entry(a).ch.basicRecover(flag(a, "requeue")); return null;
            case "tx_select": entry(a).ch.txSelect(); return null;
            case "tx_commit": entry(a).ch.txCommit(); return null;
            case "tx_rollback": entry(a).ch.txRollback(); return null;
            case "state": return state();
            default: throw new Unsupported("unknown op " + op);
        }
    }

    /** The protocol's error object: a broker close keeps its code and class/method (also when it is the
     *  AlreadyClosedException of an operation on a channel the broker closed); the rest name their type. */
    static Map<String, Object> errorOf(Throwable err) {
        if (err instanceof Unsupported) return map("kind", "unsupported", "text", err.getMessage(), "type", "Unsupported");
        Throwable t = err;
        while (t != null && !(t instanceof ShutdownSignalException)) t = t.getCause();
        if (t != null && !(err instanceof AlreadyClosedException && ((ShutdownSignalException) t).isInitiatedByApplication())) {
            Method reason = ((ShutdownSignalException) t).getReason();
            if (reason instanceof AMQP.Channel.Close) {
                AMQP.Channel.Close c = (AMQP.Channel.Close) reason;
                return map("kind", "channel-closed", "code", c.getReplyCode(), "text", c.getReplyText(),
                        "class_id", c.getClassId(), "method_id", c.getMethodId(), "type", err.getClass().getSimpleName());
            }
            if (reason instanceof AMQP.Connection.Close) {
                AMQP.Connection.Close c = (AMQP.Connection.Close) reason;
                return map("kind", "connection-closed", "code", c.getReplyCode(), "text", c.getReplyText(),
                        "class_id", c.getClassId(), "method_id", c.getMethodId(), "type", err.getClass().getSimpleName());
            }
        }
        return map("kind", "exception", "text", String.valueOf(err.getMessage()), "type", err.getClass().getSimpleName());
    }

    @SuppressWarnings("unchecked")
    public static void main(String[] argv) throws Exception {
        String version = System.getenv().getOrDefault("AMQPC_CLIENT_VERSION", com.rabbitmq.client.impl.ClientVersion.VERSION);
        emit(map("event", "hello", "client", "rabbitmq-java", "version", version, "language", "java",
                "runtime", "Java " + System.getProperty("java.version"), "api", "com.rabbitmq.client Channel API",
                "features", List.of()));
        Thread.setDefaultUncaughtExceptionHandler((thread, err) -> emit(map("event", "failure",
                "type", err.getClass().getSimpleName(), "text", String.valueOf(err.getMessage()), "where", thread.getName())));
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) continue;
            Map<String, Object> request = (Map<String, Object>) Json.parse(line);
            Object id = request.get("id");
            String op = String.valueOf(request.get("op"));
            Map<String, Object> args = table(request.get("args"));
            if (op.equals("bye")) {
                try { if (conn != null && conn.isOpen()) conn.close(2000); } catch (Exception ignored) { }
                emit(map("id", id, "ok", true, "value", null));
                break;
            }
            try {
                Object value = call(op, args);
                emit(map("id", id, "ok", true, "value", value));
            } catch (Exception | Error err) {
                emit(map("id", id, "ok", false, "error", errorOf(err)));
            }
        }
        System.exit(0);
    }
}
