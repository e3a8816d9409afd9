# The adapter program for Bunny (Ruby) (the adapter protocol: docs/adapter-protocol.md,
# conformance/drivers/wire_json.py).
#
# Reads one JSON request per line on stdin, answers each with one reply line on stdout, and writes
# events as Bunny reports them to the application. Run with `ruby adapter.rb` (Debian: ruby-bunny).
# stdout carries only protocol lines (a mutex keeps lines whole: Bunny calls back from its reader
# loop and consumer work pool threads); Bunny's logger writes to stderr.
#
# Bunny's application view, mapped to the protocol's events:
# - Bunny::Consumer#on_delivery / #on_cancellation (a broker basic.cancel): "delivered", "cancelled";
# - the confirm_select callback, called per tag of a confirm's range: "confirmed" (Bunny's own multiple
#   argument, which it always passes as false after expanding a multiple confirm; the range starts at
#   its lowest unconfirmed tag, so a tag confirmed out of order is called again: findings-clients.md 17);
# - Bunny::Exchange#on_return of the exchange object a publish went through: "returned" (Bunny drops
#   a return whose exchange it has no object for, so every publish goes through one, as its API has it);
# - Channel#on_error (a channel.close Bunny cannot give to a waiting operation): "channel-closed";
#   Bunny gives it only there when the close answers a settle (a 406 whose text says "unknown delivery
#   tag"), and an operation waiting on the channel then hangs: the hello's feature
#   "settle-close-only-as-event" says so (the suite's machines wait for the event instead);
# - the session_error_handler option (an object that responds to #raise; Bunny's default raises in
#   the thread that created the session): connection closes and network failures, "connection-closed";
# - Session#on_blocked / #on_unblocked: "blocked", "unblocked";
# - an exception that ends Bunny's reader loop thread (which Bunny reports to no one): "failure".
# Bunny runs its own I/O threads, so nothing needs pumping between requests. Automatic recovery is
# off, for network failures and for a broker connection.close alike (a scenario judges one connection).
require "base64"
require "bigdecimal"
require "bunny"
require "json"
require "logger"
require "time"

$stdout.sync = true
OUT_LOCK = Mutex.new

def out(obj)
  line = JSON.generate(obj)
  OUT_LOCK.synchronize { $stdout.write(line + "\n") }
end

def b64(str)
  { "$b64" => Base64.strict_encode64(str.to_s.b) }
end

# A string as Bunny gave it: text when it is UTF-8, bytes otherwise (amq-protocol decodes field
# table strings and byte arrays alike to binary Strings).
def plain(value)
  case value
  when String
    text = value.dup.force_encoding(Encoding::UTF_8)
    text.valid_encoding? ? text : b64(value)
  when Hash then value.to_h { |k, v| [k.to_s, plain(v)] }
  when Array then value.map { |v| plain(v) }
  when Time then value.to_i
  when Symbol then value.to_s
  when BigDecimal then value.to_f
  else value
  end
end

# JSON from the harness to Ruby values ({"$b64"} objects become binary Strings).
def revive(value)
  case value
  when Hash
    return Base64.decode64(value["$b64"]) if value.keys == ["$b64"]
    value.to_h { |k, v| [k, revive(v)] }
  when Array then value.map { |v| revive(v) }
  else value
  end
end

PROPS = { "content_type" => :content_type, "content_encoding" => :content_encoding, "headers" => :headers,
          "delivery_mode" => :delivery_mode, "priority" => :priority, "correlation_id" => :correlation_id,
          "reply_to" => :reply_to, "expiration" => :expiration, "message_id" => :message_id,
          "timestamp" => :timestamp, "message_type" => :type, "user_id" => :user_id, "app_id" => :app_id,
          "cluster_id" => :cluster_id }.freeze

def from_properties(props)
  found = {}
  PROPS.each do |name, key|
    value = props.respond_to?(key) ? props.public_send(key) : props[key]
    found[name] = plain(value) unless value.nil?
  end
  found
end

def delivery(number, info, props, body, get: false)
  { "channel" => number, "delivery_tag" => info.delivery_tag.to_i, "redelivered" => info.redelivered ? true : false,
    "exchange" => plain(info.exchange), "routing_key" => plain(info.routing_key), "body" => b64(body),
    "properties" => from_properties(props), "consumer_tag" => get ? nil : plain(info.consumer_tag),
    "message_count" => get ? info.message_count : nil }
end

class Unsupported < StandardError; end

# What Bunny raises into the application's thread by default: here, events.
class SessionErrors
  def initialize(adapter)
    @adapter = adapter
  end

  def raise(exc, *_rest)
    close = exc.respond_to?(:connection_close) ? exc.connection_close : nil
    @adapter.connection_closed(close ? close.reply_code : nil, close ? close.reply_text : "#{exc.class}: #{exc.message}")
    nil # what Thread#raise returns to Bunny's thread (its transport reads on with the value)
  end
end

class Adapter
  def initialize(timeout)
    @timeout = timeout
    @conn = nil
    @channels = {}
    @closed_reported = false
  end

  def connection_closed(code, text)
    return if @closed_reported

    @closed_reported = true
    out({ "event" => "connection-closed", "code" => code, "text" => text.to_s })
  end

  def channel(args)
    ch = @channels[args["channel"]]
    raise Bunny::ChannelAlreadyClosed.new("no channel #{args['channel']}", nil) if ch.nil?

    ch[:ch]
  end

  def connect(a)
    close_quietly
    @closed_reported = false
    uri = URI.parse(a["url"])
    vhost = uri.path.to_s.sub(%r{\A/}, "")
    opts = { host: uri.host, port: uri.port || 5672, user: URI.decode_www_form_component(uri.user || "guest"),
             pass: URI.decode_www_form_component(uri.password || "guest"),
             vhost: vhost.empty? ? "/" : URI.decode_www_form_component(vhost), automatically_recover: false,
             recover_from_connection_close: false,
             session_error_handler: SessionErrors.new(self), continuation_timeout: (@timeout * 1000).to_i,
             connection_timeout: @timeout, logger: Logger.new($stderr, level: Logger::WARN) }
    opts[:heartbeat] = a["heartbeat"] unless a["heartbeat"].nil?
    opts[:frame_max] = a["frame_max"] unless a["frame_max"].nil?
    opts[:channel_max] = a["channel_max"] unless a["channel_max"].nil?
    @conn = Bunny.new(opts)
    @conn.on_blocked { |m| out({ "event" => "blocked", "reason" => plain(m.reason) }) }
    @conn.on_unblocked { out({ "event" => "unblocked" }) }
    @channels = {}
    @conn.start
    watch_reader_loop(@conn)
    nil
  end

  # Bunny's reader loop rescues `Exception` inside `module Bunny`, which is Bunny::Exception: any
  # other exception out of its frame handling ends the thread, and Bunny tells the application
  # nothing (the connection stays "open"). Joining the thread re-raises what ended it: a failure.
  def watch_reader_loop(conn)
    thread = conn.instance_variable_get(:@reader_loop)&.instance_variable_get(:@thread)
    return if thread.nil?

    Thread.new do
      thread.join
    rescue ::Exception => e # rubocop:disable Lint/RescueException -- whatever ended Bunny's thread
      out({ "event" => "failure", "type" => e.class.name, "text" => e.message.to_s[0, 2000],
            "where" => "Bunny's reader loop (the thread ended; the connection reads nothing more)" })
    end
  end

  def close_quietly
    @conn.close if @conn&.open?
  rescue StandardError => e
    warn "closing: #{e.class}: #{e.message}"
  end

  def close(_a)
    close_quietly
    nil
  end

  # Bunny calls Channel#on_error before its reader thread unregisters the closed channel, and
  # unregisters by number: a channel opened in between under the same number is unregistered instead,
  # and its channel.open-ok is dropped (the open times out). So a new channel waits, bounded, until
  # every channel the broker closed is gone from the session's table (Bunny signals nothing: polled;
  # docs/findings-clients.md 19).
  def await_unregistered
    table = @conn.instance_variable_get(:@channels) || {}
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + @timeout
    @channels.each_value do |entry|
      next if entry[:close].nil?

      while table[entry[:ch].number].equal?(entry[:ch]) &&
            Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
        sleep(0.001)
      end
    end
  end

  def open_channel(_a)
    await_unregistered
    ch = @conn.create_channel
    number = ch.number
    @channels[number] = { ch: ch, exchanges: {} }
    ch.on_error do |_c, close|
      @channels[number][:close] = close
      out({ "event" => "channel-closed", "channel" => number, "code" => close.reply_code, "text" => close.reply_text })
    end
    ch.on_uncaught_exception do |e, _consumer|
      out({ "event" => "failure", "type" => e.class.name, "text" => e.message, "where" => "consumer callback" })
    end
    number
  end

  # The broker's channel.close that Bunny gave the application (Channel#on_error, or the error of
  # the operation it answered), for an operation that failed on a channel the broker closed: Bunny
  # refuses it (ChannelAlreadyClosed, no reply code), or, when the close answered a basic.ack / nack /
  # reject (Bunny tells those only to on_error), an operation sent meanwhile waits for a reply that
  # never comes (Timeout::Error). Either is that close to the application.
  def broker_close(args, exc)
    entry = @channels[args["channel"]]
    return nil if entry.nil? || !(exc.is_a?(Bunny::ChannelAlreadyClosed) || exc.is_a?(Timeout::Error))

    entry[:close] || entry[:ch].instance_variable_get(:@last_channel_error)&.channel_close
  end

  def close_channel(a)
    channel(a).close
    nil
  end

  def declare_queue(a)
    ok = channel(a).queue_declare(a["queue"], durable: a["durable"], exclusive: a["exclusive"],
                                               auto_delete: a["auto_delete"], passive: a["passive"],
                                               arguments: a["arguments"] || {})
    ok.queue
  end

  def declare_exchange(a)
    channel(a).exchange_declare(a["exchange"], a["kind"] || "direct", passive: a["passive"], durable: a["durable"])
    nil
  end

  def bind_queue(a)
    channel(a).queue_bind(a["queue"], a["exchange"], routing_key: a["routing_key"])
    nil
  end

  def delete_queue(a)
    channel(a).queue_delete(a["queue"])
    nil
  end

  def qos(a)
    channel(a).basic_qos(a["prefetch_count"], a["global_"] ? true : false)
    nil
  end

  # The exchange object publishes go through (its on_return is where Bunny reports returns).
  def exchange_object(number, name)
    entry = @channels[number]
    entry[:exchanges][name] ||= begin
      ch = entry[:ch]
      x = name.empty? ? ch.default_exchange : Bunny::Exchange.new(ch, :direct, name, no_declare: true)
      x.on_return do |info, _props, body|
        out({ "event" => "returned", "channel" => number, "reply_code" => info.reply_code,
              "reply_text" => plain(info.reply_text), "exchange" => plain(info.exchange),
              "routing_key" => plain(info.routing_key), "body" => b64(body) })
      end
      x
    end
  end

  def publish(a)
    ch = channel(a)
    opts = { routing_key: a["routing_key"], mandatory: a["mandatory"] ? true : false }
    (a["properties"] || {}).each { |name, value| opts[PROPS.fetch(name)] = value }
    seq = ch.using_publisher_confirmations? ? ch.next_publish_seq_no : nil
    exchange_object(a["channel"], a["exchange"]).publish(a["body"], opts)
    seq
  end

  def confirm_select(a)
    number = a["channel"]
    channel(a).confirm_select(lambda do |tag, multiple, nack|
      out({ "event" => "confirmed", "channel" => number, "seq" => tag, "ack" => !nack, "multiple" => multiple })
    end)
    nil
  end

  def consume(a)
    ch = channel(a)
    number = a["channel"]
    tag = a["consumer_tag"].to_s.empty? ? ch.generate_consumer_tag : a["consumer_tag"]
    consumer = Bunny::Consumer.new(ch, a["queue"], tag, a["no_ack"] ? true : false, a["exclusive"] ? true : false,
                                   a["arguments"] || {})
    consumer.on_delivery do |info, props, body|
      out({ "event" => "delivered", "delivery" => delivery(number, info, props, body) })
    end
    consumer.on_cancellation do |cancel|
      out({ "event" => "cancelled", "channel" => number, "consumer_tag" => plain(cancel.consumer_tag) })
    end
    ch.basic_consume_with(consumer)
    consumer.consumer_tag
  end

  def cancel(a)
    channel(a).basic_cancel(a["consumer_tag"])
    nil
  end

  def get(a)
    info, props, body = channel(a).basic_get(a["queue"], manual_ack: !a["no_ack"])
    info.nil? ? nil : delivery(a["channel"], info, props, body, get: true)
  end

  def ack(a)
    channel(a).basic_ack(a["delivery_tag"], a["multiple"] ? true : false)
    nil
  end

  def nack(a)
    channel(a).basic_nack(a["delivery_tag"], a["multiple"] ? true : false, a["requeue"] ? true : false)
    nil
  end

  def reject(a)
    channel(a).basic_reject(a["delivery_tag"], a["requeue"] ? true : false)
    nil
  end

  def recover(a)
    channel(a).basic_recover(a["requeue"] ? true : false)
    nil
  end

  def tx_select(a)
    channel(a).tx_select
    nil
  end

  def tx_commit(a)
    channel(a).tx_commit
    nil
  end

  def tx_rollback(a)
    channel(a).tx_rollback
    nil
  end

  def state(_a)
    states = @channels.to_h { |n, e| [n.to_s, e[:ch].open? ? "open" : "closed"] }
    { "connection" => @conn&.open? ? "open" : "closed", "channels" => states }
  end
end

OPS = %w[connect close open_channel close_channel declare_queue declare_exchange bind_queue delete_queue qos publish
         confirm_select consume cancel get ack nack reject recover tx_select tx_commit tx_rollback state].freeze

def error_of(exc)
  text = exc.message.to_s
  if exc.is_a?(Unsupported)
    { "kind" => "unsupported", "text" => text, "type" => "Unsupported" }
  elsif exc.is_a?(Bunny::ChannelLevelException) && exc.channel_close
    c = exc.channel_close
    { "kind" => "channel-closed", "code" => c.reply_code, "text" => c.reply_text, "class_id" => c.class_id,
      "method_id" => c.method_id, "type" => exc.class.name }
  elsif exc.is_a?(Bunny::ConnectionLevelException) && exc.connection_close
    c = exc.connection_close
    { "kind" => "connection-closed", "code" => c.reply_code, "text" => c.reply_text, "class_id" => c.class_id,
      "method_id" => c.method_id, "type" => exc.class.name }
  elsif exc.is_a?(Timeout::Error)
    { "kind" => "no-reply", "text" => text, "type" => exc.class.name }
  elsif exc.is_a?(Bunny::NetworkFailure) || exc.is_a?(Bunny::TCPConnectionFailed) || exc.is_a?(IOError) ||
        exc.is_a?(SystemCallError)
    { "kind" => "connection-lost", "text" => text, "type" => exc.class.name }
  else
    { "kind" => "exception", "text" => "#{exc.class.name}: #{text}"[0, 2000], "type" => exc.class.name }
  end
end

def answer(adapter, line)
  request = JSON.parse(line)
  op = request["op"]
  if op == "bye"
    adapter.close_quietly
    out({ "id" => request["id"], "ok" => true, "value" => nil })
    return false
  end
  begin
    raise Unsupported, "unknown op #{op}" unless OPS.include?(op)

    out({ "id" => request["id"], "ok" => true, "value" => adapter.public_send(op, revive(request["args"] || {})) })
  rescue StandardError, Timeout::Error => e
    close = adapter.broker_close(request["args"] || {}, e)
    error = if close
              { "kind" => "channel-closed", "code" => close.reply_code, "text" => close.reply_text,
                "class_id" => close.class_id, "method_id" => close.method_id, "type" => e.class.name }
            else
              error_of(e)
            end
    out({ "id" => request["id"], "ok" => false, "error" => error })
  end
  true
end

adapter = Adapter.new(Float(ENV.fetch("AMQPC_ADAPTER_TIMEOUT", "5")))
out({ "event" => "hello", "client" => "bunny", "version" => Bunny::VERSION, "language" => "ruby",
      "runtime" => "ruby #{RUBY_VERSION}", "api" => "Bunny::Session (threaded)",
      "features" => ["settle-close-only-as-event"] })
$stdin.each_line do |line|
  next if line.strip.empty?
  break unless answer(adapter, line)
end
exit!(0) # Bunny's threads may still be winding down: nothing else is owed to the harness
