<?php
// The adapter program for php-amqplib (the adapter protocol: docs/adapter-protocol.md,
// conformance/drivers/wire_json.py).
//
// Reads one JSON request per line on stdin, answers each with one reply line on stdout, and writes
// events as php-amqplib reports them to the application. Run with `php adapter.php` (Debian:
// php-amqplib, php-cli; the library's autoloader is /usr/share/php/PhpAmqpLib/autoload.php, or
// PHP_AMQPLIB_AUTOLOAD). stdout carries only protocol lines; diagnostics go to stderr.
//
// php-amqplib is synchronous: callbacks run inside AbstractChannel::wait(). Between requests the
// adapter runs the library's documented consume loop, `wait(null, false, $timeout)` with a short
// timeout on the connection (channel 0: frames for other channels are queued on them, heartbeats
// go out, a silent broker is detected), then `wait(null, true)` on every channel with queued work.
// php-amqplib's application view, mapped to the protocol's events:
// - basic_consume's callback: "delivered"; an AMQPBasicCancelException out of wait() (how
//   php-amqplib reports a broker basic.cancel): "cancelled";
// - set_ack_handler / set_nack_handler, called once per confirmed publish: "confirmed" (multiple
//   is not shown); set_return_listener: "returned";
// - AMQPProtocolChannelException out of wait(): "channel-closed"; AMQPConnectionClosedException /
//   AMQPHeartbeatMissedException out of wait(): "connection-closed";
// - set_connection_block_handler / set_connection_unblock_handler: "blocked", "unblocked";
// - any other exception out of wait() between requests: "failure" (the library's own code failed).

declare(strict_types=1);

require_once getenv('PHP_AMQPLIB_AUTOLOAD') ?: '/usr/share/php/PhpAmqpLib/autoload.php';

use PhpAmqpLib\Connection\AMQPStreamConnection;
use PhpAmqpLib\Exception\AMQPBasicCancelException;
use PhpAmqpLib\Exception\AMQPChannelClosedException;
use PhpAmqpLib\Exception\AMQPConnectionClosedException;
use PhpAmqpLib\Exception\AMQPHeartbeatMissedException;
use PhpAmqpLib\Exception\AMQPIOException;
use PhpAmqpLib\Exception\AMQPProtocolChannelException;
use PhpAmqpLib\Exception\AMQPProtocolConnectionException;
use PhpAmqpLib\Exception\AMQPSocketException;
use PhpAmqpLib\Exception\AMQPTimeoutException;
use PhpAmqpLib\Message\AMQPMessage;
use PhpAmqpLib\Package;
use PhpAmqpLib\Wire\AMQPAbstractCollection;
use PhpAmqpLib\Wire\AMQPTable;

const IDLE_WAIT = 0.05; // seconds at most between two runs of the library's consume loop

final class Unsupported extends \RuntimeException
{
}

function out(array $obj): void
{
    fwrite(STDOUT, json_encode($obj, JSON_UNESCAPED_SLASHES | JSON_PRESERVE_ZERO_FRACTION) . "\n");
    fflush(STDOUT);
}

function b64(string $bytes): array
{
    return ['$b64' => base64_encode($bytes)];
}

/** A value as php-amqplib gave it, for JSON: strings that are not UTF-8 become bytes. */
function plain($value)
{
    if (is_string($value)) {
        return mb_check_encoding($value, 'UTF-8') ? $value : b64($value);
    }
    if ($value instanceof AMQPAbstractCollection) {
        $value = $value->getNativeData();
    }
    if (is_array($value)) {
        $isList = array_keys($value) === range(0, count($value) - 1) || $value === [];
        $mapped = array_map('plain', $value);
        return $isList ? array_values($mapped) : (object)$mapped;
    }
    if (is_object($value) && method_exists($value, 'asBCvalue')) {
        return (float)$value->asBCvalue();
    }
    if ($value instanceof \DateTimeInterface) {
        return $value->getTimestamp();
    }
    return $value;
}

/** JSON from the harness: {"$b64"} objects become byte strings (decoded arrays, assoc). */
function revive($value)
{
    if (is_array($value)) {
        if (array_keys($value) === ['$b64']) {
            return base64_decode($value['$b64'], true);
        }
        return array_map('revive', $value);
    }
    return $value;
}

const PROPS = ['content_type' => 'content_type', 'content_encoding' => 'content_encoding',
    'headers' => 'application_headers', 'delivery_mode' => 'delivery_mode', 'priority' => 'priority',
    'correlation_id' => 'correlation_id', 'reply_to' => 'reply_to', 'expiration' => 'expiration',
    'message_id' => 'message_id', 'timestamp' => 'timestamp', 'message_type' => 'type', 'user_id' => 'user_id',
    'app_id' => 'app_id', 'cluster_id' => 'cluster_id'];

function from_properties(AMQPMessage $msg): object
{
    $found = [];
    $props = $msg->get_properties();
    foreach (PROPS as $name => $key) {
        if (array_key_exists($key, $props) && $props[$key] !== null) {
            $found[$name] = plain($props[$key]);
        }
    }
    return (object)$found;
}

function delivery(int $channel, AMQPMessage $msg, bool $get): array
{
    return ['channel' => $channel, 'delivery_tag' => (int)$msg->getDeliveryTag(),
        'redelivered' => (bool)$msg->isRedelivered(), 'exchange' => plain((string)$msg->getExchange()),
        'routing_key' => plain((string)$msg->getRoutingKey()), 'body' => b64($msg->getBody()),
        'properties' => from_properties($msg), 'consumer_tag' => $get ? null : plain((string)$msg->getConsumerTag()),
        'message_count' => $get ? $msg->getMessageCount() : null];
}

/** What a close exception says: [code, text, class_id, method_id]. */
function close_of(\Throwable $e): array
{
    if ($e instanceof AMQPProtocolChannelException || $e instanceof AMQPProtocolConnectionException) {
        $sig = $e->amqp_method_sig ?: [0, 0];
        return [(int)$e->amqp_reply_code, (string)$e->amqp_reply_text, (int)($sig[0] ?? 0), (int)($sig[1] ?? 0)];
    }
    return [(int)$e->getCode(), $e->getMessage(), 0, 0];
}

final class Adapter
{
    /** @var AMQPStreamConnection|null */
    private $conn = null;
    /** @var array<int, \PhpAmqpLib\Channel\AMQPChannel> */
    private $channels = [];
    /** @var array<int, int> publishes since confirm.select, per channel */
    private $published = [];
    private $closedReported = false;
    /** @var array<int, AMQPProtocolChannelException> the broker's channel.close, per channel it closed */
    private $brokerCloses = [];

    public function __construct(private float $timeout)
    {
    }

    private function channel(array $a): \PhpAmqpLib\Channel\AMQPChannel
    {
        $ch = $this->channels[$a['channel']] ?? null;
        if ($ch === null) {
            throw new \RuntimeException("no channel {$a['channel']}");
        }
        return $ch;
    }

    public function isOpen(): bool
    {
        return $this->conn !== null && $this->conn->isConnected();
    }

    public function connectionClosed(?int $code, string $text): void
    {
        if (!$this->closedReported) {
            $this->closedReported = true;
            out(['event' => 'connection-closed', 'code' => $code ?: null, 'text' => $text]);
        }
    }

    public function connect(array $a)
    {
        $this->closeQuietly();
        if (($a['frame_max'] ?? null) !== null || ($a['channel_max'] ?? null) !== null) {
            throw new Unsupported('php-amqplib takes the broker\'s frame_max and channel_max; the application cannot ask for others');
        }
        $url = parse_url($a['url']);
        $vhost = rawurldecode(ltrim($url['path'] ?? '', '/'));
        $this->closedReported = false;
        $this->channels = $this->published = $this->brokerCloses = [];
        $this->conn = new AMQPStreamConnection($url['host'], $url['port'] ?? 5672, rawurldecode($url['user'] ?? 'guest'),
            rawurldecode($url['pass'] ?? 'guest'), $vhost === '' ? '/' : $vhost, false, 'AMQPLAIN', null, 'en_US',
            $this->timeout, $this->timeout, null, false, (int)($a['heartbeat'] ?? 0), $this->timeout);
        $this->conn->set_connection_block_handler(function ($reason) {
            out(['event' => 'blocked', 'reason' => plain((string)$reason)]);
        });
        $this->conn->set_connection_unblock_handler(function () {
            out(['event' => 'unblocked']);
        });
        return null;
    }

    public function closeQuietly(): void
    {
        try {
            if ($this->isOpen()) {
                $this->conn->close();
            }
        } catch (\Throwable $e) {
            fwrite(STDERR, 'closing: ' . get_class($e) . ': ' . $e->getMessage() . "\n");
        }
    }

    public function close(array $a)
    {
        $this->closeQuietly();
        return null;
    }

    public function open_channel(array $a)
    {
        $ch = $this->conn->channel();
        $number = $ch->getChannelId();
        $this->channels[$number] = $ch;
        unset($this->published[$number]);
        unset($this->brokerCloses[$number]);
        $ch->set_return_listener(function ($code, $text, $exchange, $key, AMQPMessage $msg) use ($number) {
            out(['event' => 'returned', 'channel' => $number, 'reply_code' => $code, 'reply_text' => plain($text),
                'exchange' => plain($exchange), 'routing_key' => plain($key), 'body' => b64($msg->getBody())]);
        });
        foreach (['set_ack_handler' => true, 'set_nack_handler' => false] as $setter => $ack) {
            $ch->$setter(function (AMQPMessage $msg) use ($number, $ack) {
                out(['event' => 'confirmed', 'channel' => $number, 'seq' => (int)$msg->getDeliveryTag(), 'ack' => $ack,
                    'multiple' => null]);
            });
        }
        return $number;
    }

    public function close_channel(array $a)
    {
        $this->channel($a)->close();
        return null;
    }

    public function declare_queue(array $a)
    {
        $ok = $this->channel($a)->queue_declare($a['queue'], (bool)$a['passive'], (bool)$a['durable'],
            (bool)$a['exclusive'], (bool)$a['auto_delete'], false, new AMQPTable($a['arguments'] ?: []));
        return $ok[0];
    }

    public function declare_exchange(array $a)
    {
        $this->channel($a)->exchange_declare($a['exchange'], $a['kind'] ?? 'direct', (bool)$a['passive'],
            (bool)$a['durable'], false);
        return null;
    }

    public function bind_queue(array $a)
    {
        $this->channel($a)->queue_bind($a['queue'], $a['exchange'], $a['routing_key']);
        return null;
    }

    public function delete_queue(array $a)
    {
        $this->channel($a)->queue_delete($a['queue']);
        return null;
    }

    public function qos(array $a)
    {
        $this->channel($a)->basic_qos(0, (int)$a['prefetch_count'], (bool)$a['global_']);
        return null;
    }

    public function publish(array $a)
    {
        $props = [];
        foreach ($a['properties'] ?: [] as $name => $value) {
            $props[PROPS[$name]] = $name === 'headers' ? new AMQPTable($value) : $value;
        }
        $this->channel($a)->basic_publish(new AMQPMessage((string)$a['body'], $props), $a['exchange'],
            $a['routing_key'], (bool)$a['mandatory']);
        if (!isset($this->published[$a['channel']])) {
            return null;
        }
        return ++$this->published[$a['channel']];
    }

    public function confirm_select(array $a)
    {
        $this->channel($a)->confirm_select();
        $this->published[$a['channel']] = 0;
        return null;
    }

    public function consume(array $a)
    {
        $number = $a['channel'];
        return $this->channel($a)->basic_consume($a['queue'], $a['consumer_tag'], false, (bool)$a['no_ack'],
            (bool)$a['exclusive'], false, function (AMQPMessage $msg) use ($number) {
                out(['event' => 'delivered', 'delivery' => delivery($number, $msg, false)]);
            }, null, new AMQPTable($a['arguments'] ?: []));
    }

    public function cancel(array $a)
    {
        $this->channel($a)->basic_cancel($a['consumer_tag']);
        return null;
    }

    public function get(array $a)
    {
        $msg = $this->channel($a)->basic_get($a['queue'], (bool)$a['no_ack']);
        return $msg === null ? null : delivery($a['channel'], $msg, true);
    }

    public function ack(array $a)
    {
        $this->channel($a)->basic_ack($a['delivery_tag'], (bool)$a['multiple']);
        return null;
    }

    public function nack(array $a)
    {
        $this->channel($a)->basic_nack($a['delivery_tag'], (bool)$a['multiple'], (bool)$a['requeue']);
        return null;
    }

    public function reject(array $a)
    {
        $this->channel($a)->basic_reject($a['delivery_tag'], (bool)$a['requeue']);
        return null;
    }

    public function recover(array $a)
    {
        $this->channel($a)->basic_recover((bool)$a['requeue']);
        return null;
    }

    public function tx_select(array $a)
    {
        $this->channel($a)->tx_select();
        return null;
    }

    public function tx_commit(array $a)
    {
        $this->channel($a)->tx_commit();
        return null;
    }

    public function tx_rollback(array $a)
    {
        $this->channel($a)->tx_rollback();
        return null;
    }

    public function state(array $a)
    {
        $states = [];
        foreach ($this->channels as $number => $ch) {
            $states[(string)$number] = $ch->is_open() ? 'open' : 'closed';
        }
        return ['connection' => $this->isOpen() ? 'open' : 'closed', 'channels' => (object)$states];
    }

    /** What an exception out of the library tells the application, as an event (closes, cancels). */
    public function report(\Throwable $e, int $channel, string $where): void
    {
        if ($e instanceof AMQPBasicCancelException) {
            out(['event' => 'cancelled', 'channel' => $channel, 'consumer_tag' => plain($e->getConsumerTag())]);
        } elseif ($e instanceof AMQPProtocolChannelException) {
            $this->brokerCloses[$channel] = $e;
            [$code, $text] = close_of($e);
            out(['event' => 'channel-closed', 'channel' => $channel, 'code' => $code, 'text' => $text]);
        } elseif ($e instanceof AMQPConnectionClosedException || $e instanceof AMQPProtocolConnectionException) {
            [$code, $text] = close_of($e);
            $this->connectionClosed($code, $text);
        } elseif ($e instanceof AMQPHeartbeatMissedException || $e instanceof AMQPSocketException
            || $e instanceof AMQPIOException) {
            $this->connectionClosed(null, get_class($e) . ': ' . $e->getMessage());
        } elseif ($where !== '') {
            out(['event' => 'failure', 'type' => get_class($e), 'text' => substr($e->getMessage(), 0, 2000),
                'where' => $where]);
        }
    }

    /**
     * What an operation's failure is to the application: on a channel the broker closed (php-amqplib
     * told it by an AMQPProtocolChannelException), the library's AMQPChannelClosedException, which has
     * no reply code, is that close.
     */
    public function outcome(\Throwable $e, int $channel): \Throwable
    {
        if ($e instanceof AMQPProtocolChannelException) {
            $this->brokerCloses[$channel] = $e;
        }
        if ($e instanceof AMQPChannelClosedException && isset($this->brokerCloses[$channel])) {
            return $this->brokerCloses[$channel];
        }
        return $e;
    }

    /** The connection's socket (a stream), or null when there is none to watch. */
    public function socket()
    {
        if (!$this->isOpen()) {
            return null;
        }
        $socket = $this->conn->getIO()->getSocket();
        return is_resource($socket) ? $socket : null;
    }

    /** Run the library's consume loop: up to `$wait` s on the connection, then every channel's queued work. */
    public function pump(float $wait): void
    {
        if (!$this->isOpen()) {
            return;
        }
        try {
            $this->conn->wait(null, $wait <= 0, $wait > 0 ? $wait : 0);
        } catch (AMQPTimeoutException $e) {
            // nothing came within $wait
        } catch (\Throwable $e) {
            $this->report($e, 0, 'the connection\'s wait()');
        }
        foreach ($this->channels as $number => $ch) {
            for ($i = 0; $i < 10000 && $this->isOpen() && $ch->is_open() && $this->queued($ch); $i++) {
                try {
                    $ch->wait(null, true);
                } catch (\Throwable $e) {
                    $this->report($e, $number, "channel {$number}'s wait()");
                }
            }
        }
    }

    /** Whether php-amqplib holds frames or methods for the channel (its frame queue is protected). */
    private function queued(\PhpAmqpLib\Channel\AMQPChannel $ch): bool
    {
        return $ch->hasPendingMethods() || (fn () => !$this->frame_queue->isEmpty())->call($ch);
    }
}

const OPS = ['connect', 'close', 'open_channel', 'close_channel', 'declare_queue', 'declare_exchange', 'bind_queue',
    'delete_queue', 'qos', 'publish', 'confirm_select', 'consume', 'cancel', 'get', 'ack', 'nack', 'reject', 'recover',
    'tx_select', 'tx_commit', 'tx_rollback', 'state'];

function error_of(\Throwable $e): array
{
    $type = get_class($e);
    if ($e instanceof Unsupported) {
        return ['kind' => 'unsupported', 'text' => $e->getMessage(), 'type' => 'Unsupported'];
    }
    if ($e instanceof AMQPProtocolChannelException) {
        [$code, $text, $class, $method] = close_of($e);
        return ['kind' => 'channel-closed', 'code' => $code, 'text' => $text, 'class_id' => $class,
            'method_id' => $method, 'type' => $type];
    }
    if ($e instanceof AMQPProtocolConnectionException
        || ($e instanceof AMQPConnectionClosedException && $e->getCode() > 0)) {
        [$code, $text, $class, $method] = close_of($e);
        return ['kind' => 'connection-closed', 'code' => $code, 'text' => $text, 'class_id' => $class,
            'method_id' => $method, 'type' => $type];
    }
    if ($e instanceof AMQPTimeoutException) {
        return ['kind' => 'no-reply', 'text' => $e->getMessage(), 'type' => $type];
    }
    if ($e instanceof AMQPConnectionClosedException || $e instanceof AMQPHeartbeatMissedException
        || $e instanceof AMQPSocketException || $e instanceof AMQPIOException) {
        return ['kind' => 'connection-lost', 'text' => $e->getMessage(), 'type' => $type];
    }
    return ['kind' => 'exception', 'text' => substr("{$type}: {$e->getMessage()}", 0, 2000), 'type' => $type];
}

function answer(Adapter $adapter, string $line): bool
{
    $request = json_decode($line, true);
    $id = $request['id'] ?? null;
    $op = (string)($request['op'] ?? '');
    $adapter->pump(0); // what already reached the library comes first
    if ($op === 'bye') {
        $adapter->closeQuietly();
        out(['id' => $id, 'ok' => true, 'value' => null]);
        return false;
    }
    try {
        if (!in_array($op, OPS, true)) {
            throw new Unsupported("unknown op {$op}");
        }
        $args = revive($request['args'] ?? []);
        out(['id' => $id, 'ok' => true, 'value' => $adapter->$op($args)]);
    } catch (\Throwable $e) {
        if ($e instanceof AMQPBasicCancelException || $e instanceof AMQPConnectionClosedException) {
            $adapter->report($e, (int)($request['args']['channel'] ?? 0), '');
        }
        out(['id' => $id, 'ok' => false,
            'error' => error_of($adapter->outcome($e, (int)($request['args']['channel'] ?? 0)))]);
    }
    return true;
}

$adapter = new Adapter((float)(getenv('AMQPC_ADAPTER_TIMEOUT') ?: 5));
out(['event' => 'hello', 'client' => 'php-amqplib', 'version' => Package::VERSION, 'language' => 'php',
    'runtime' => 'PHP ' . PHP_VERSION, 'api' => 'AMQPStreamConnection (wait() loop)', 'features' => []]);
stream_set_blocking(STDIN, false);
$buffer = '';
while (true) {
    // stdin and the connection's socket, whichever speaks first: a request is answered at once, and
    // the library's consume loop runs (without blocking) at least every IDLE_WAIT for heartbeats
    $socket = $adapter->socket();
    $read = $socket === null ? [STDIN] : [STDIN, $socket];
    $write = $except = null;
    $ready = stream_select($read, $write, $except, 0, (int)(IDLE_WAIT * 1e6));
    $adapter->pump(0);
    if ($ready === 0 || $ready === false || !in_array(STDIN, $read, true)) {
        continue;
    }
    $chunk = fread(STDIN, 1 << 20);
    if ($chunk === '' && feof(STDIN)) {
        break;
    }
    $buffer .= $chunk;
    while (($nl = strpos($buffer, "\n")) !== false) {
        $line = substr($buffer, 0, $nl);
        $buffer = substr($buffer, $nl + 1);
        if (trim($line) !== '' && !answer($adapter, $line)) {
            exit(0);
        }
    }
}
$adapter->closeQuietly();
