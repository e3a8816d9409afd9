// The adapter program for Node's amqplib (the adapter protocol: conformance/drivers/wire_json.py).
//
// Reads one JSON request per line on stdin, answers each with one reply line on stdout, and writes
// events (deliveries, broker cancels, confirms, returns, closes, blocked) as amqplib reports them
// to the application. Uses amqplib's promise API (require('amqplib')); NODE_PATH points at the
// node_modules the harness installed. stdout carries only protocol lines.
//
// amqplib's application view, mapped to the protocol's events:
// - a consumer callback called with null is the broker's basic.cancel ("cancelled");
// - a ConfirmChannel publish callback (err or null) is the publish's confirm ("confirmed");
// - channel 'return', 'error' (code), 'close'; connection 'blocked', 'unblocked', 'error', 'close'.
// amqplib picks confirm mode when it creates a channel (createConfirmChannel): confirm_select closes
// the plain channel and creates a ConfirmChannel, which takes the lowest free number, the same one.
'use strict';

const readline = require('node:readline');
const amqp = require('amqplib');
const path = require('node:path');
const fs = require('node:fs');

const pkg = JSON.parse(fs.readFileSync(path.join(path.dirname(require.resolve('amqplib')), 'package.json'), 'utf8'));

const out = (obj) => process.stdout.write(JSON.stringify(obj, replacer) + '\n');
const b64 = (buf) => ({ $b64: Buffer.from(buf).toString('base64') });
function replacer(_key, value) {
  if (value && value.type === 'Buffer' && Array.isArray(value.data)) return b64(Buffer.from(value.data));
  return value;
}
function revive(value) {
  if (Array.isArray(value)) return value.map(revive);
  if (value && typeof value === 'object') {
    if (Object.keys(value).length === 1 && typeof value.$b64 === 'string') return Buffer.from(value.$b64, 'base64');
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, revive(v)]));
  }
  return value;
}
const failure = (err, where) => out({ event: 'failure', type: (err && err.name) || 'Error', text: String(err && err.message || err), where });
process.on('uncaughtException', (err) => failure(err, 'uncaught exception'));
process.on('unhandledRejection', (err) => failure(err, 'unhandled rejection'));

let conn = null;
const channels = new Map(); // number -> { ch, state, seq }

const PROPS = { content_type: 'contentType', content_encoding: 'contentEncoding', headers: 'headers',
  delivery_mode: 'deliveryMode', priority: 'priority', correlation_id: 'correlationId', reply_to: 'replyTo',
  expiration: 'expiration', message_id: 'messageId', timestamp: 'timestamp', message_type: 'type',
  user_id: 'userId', app_id: 'appId', cluster_id: 'clusterId' };

function toOptions(props) {
  const options = {};
  for (const [name, value] of Object.entries(props || {})) options[PROPS[name]] = value;
  return options;
}
function fromProperties(p) {
  const props = {};
  for (const [name, key] of Object.entries(PROPS)) if (p[key] !== undefined && p[key] !== null) props[name] = p[key];
  return props;
}
function delivery(number, msg, isGet) {
  const f = msg.fields;
  return { channel: number, delivery_tag: f.deliveryTag, redelivered: Boolean(f.redelivered), exchange: f.exchange,
    routing_key: f.routingKey, body: b64(msg.content), properties: fromProperties(msg.properties),
    consumer_tag: isGet ? null : f.consumerTag, message_count: isGet ? f.messageCount : null };
}
const closeCode = (err) => (err && typeof err.code === 'number' ? err.code : null);
const SOFT_CODES = new Set([311, 312, 313, 403, 404, 405, 406]); // the channel-level reply codes of 0-9-1 §1.2

function watchChannel(number, ch) {
  ch.on('return', (msg) => out({ event: 'returned', channel: number, reply_code: msg.fields.replyCode,
    reply_text: msg.fields.replyText, exchange: msg.fields.exchange, routing_key: msg.fields.routingKey,
    body: b64(msg.content) }));
  ch.on('error', (err) => { channels.get(number).lastError = err; });
  ch.on('close', () => {
    const entry = channels.get(number);
    if (entry.ch !== ch || entry.quiet) return;
    entry.state = 'closed';
    const err = entry.lastError;
    out({ event: 'channel-closed', channel: number, code: closeCode(err), text: err ? err.message : 'closed' });
  });
}

function settleMessage(tag) {
  return { fields: { deliveryTag: tag } }; // amqplib settles by message.fields.deliveryTag
}

function channelOf(args) {
  const entry = channels.get(args.channel);
  if (!entry) throw Object.assign(new Error(`no channel ${args.channel}`), { name: 'UnknownChannel' });
  return entry;
}

const OPS = {
  async connect(a) {
    const query = new URLSearchParams();
    if (a.heartbeat != null) query.set('heartbeat', a.heartbeat);
    if (a.frame_max != null) query.set('frameMax', a.frame_max);
    if (a.channel_max != null) query.set('channelMax', a.channel_max);
    const url = query.toString() ? `${a.url}?${query}` : a.url;
    conn = await amqp.connect(url);
    channels.clear();
    conn.on('blocked', (reason) => out({ event: 'blocked', reason }));
    conn.on('unblocked', () => out({ event: 'unblocked' }));
    conn.on('error', (err) => { conn.lastError = err; });
    conn.on('close', (err) => {
      const e = err || conn.lastError;
      conn.closed = true;
      out({ event: 'connection-closed', code: closeCode(e), text: e ? e.message : 'closed' });
    });
    return null;
  },
  async close() { if (conn && !conn.closed) await conn.close(); return null; },
  async open_channel() {
    const ch = await conn.createChannel();
    const number = ch.ch;
    channels.set(number, { ch, state: 'open', seq: null });
    watchChannel(number, ch);
    return number;
  },
  async close_channel(a) { await channelOf(a).ch.close(); return null; },
  async declare_queue(a) {
    const ch = channelOf(a).ch;
    const ok = a.passive ? await ch.checkQueue(a.queue) : await ch.assertQueue(a.queue, { durable: a.durable,
      exclusive: a.exclusive, autoDelete: a.auto_delete, arguments: a.arguments || {} });
    return ok.queue;
  },
  async declare_exchange(a) {
    const ch = channelOf(a).ch;
    if (a.passive) await ch.checkExchange(a.exchange);
    else await ch.assertExchange(a.exchange, a.kind, { durable: a.durable });
    return null;
  },
  async bind_queue(a) { await channelOf(a).ch.bindQueue(a.queue, a.exchange, a.routing_key); return null; },
  async delete_queue(a) { await channelOf(a).ch.deleteQueue(a.queue); return null; },
  async qos(a) { await channelOf(a).ch.prefetch(a.prefetch_count, a.global_); return null; },
  async publish(a) {
    const entry = channelOf(a);
    const options = { ...toOptions(a.properties), mandatory: a.mandatory };
    if (entry.seq === null) {
      entry.ch.publish(a.exchange, a.routing_key, a.body, options);
      return null;
    }
    const seq = ++entry.seq;
    entry.ch.publish(a.exchange, a.routing_key, a.body, options, (err) => out({ event: 'confirmed', channel: a.channel,
      seq, ack: !err, multiple: null }));
    return seq;
  },
  async confirm_select(a) {
    const entry = channelOf(a);
    entry.quiet = true; // this close is ours: no channel-closed event
    await entry.ch.close();
    const ch = await conn.createConfirmChannel();
    if (ch.ch !== a.channel) {
      throw Object.assign(new Error(`the confirm channel got number ${ch.ch}, not ${a.channel}`), { name: 'Unsupported' });
    }
    channels.set(a.channel, { ch, state: 'open', seq: 0 });
    watchChannel(a.channel, ch);
    return null;
  },
  async consume(a) {
    const ok = await channelOf(a).ch.consume(a.queue, (msg) => {
      if (msg === null) out({ event: 'cancelled', channel: a.channel, consumer_tag: ok.consumerTag });
      else out({ event: 'delivered', delivery: delivery(a.channel, msg, false) });
    }, { noAck: a.no_ack, exclusive: a.exclusive, arguments: a.arguments || {},
      consumerTag: a.consumer_tag || undefined });
    return ok.consumerTag;
  },
  async cancel(a) { await channelOf(a).ch.cancel(a.consumer_tag); return null; },
  async get(a) {
    const msg = await channelOf(a).ch.get(a.queue, { noAck: a.no_ack });
    return msg === false ? null : delivery(a.channel, msg, true);
  },
  async ack(a) {
    const ch = channelOf(a).ch;
    if (a.delivery_tag === 0 && a.multiple) ch.ackAll(); else ch.ack(settleMessage(a.delivery_tag), a.multiple);
    return null;
  },
  async nack(a) {
    const ch = channelOf(a).ch;
    if (a.delivery_tag === 0 && a.multiple) ch.nackAll(a.requeue);
    else ch.nack(settleMessage(a.delivery_tag), a.multiple, a.requeue);
    return null;
  },
  async reject(a) { channelOf(a).ch.reject(settleMessage(a.delivery_tag), a.requeue); return null; },
  async recover(a) { await channelOf(a).ch.recover(); return null; },
  async tx_select() { throw Object.assign(new Error('amqplib has no transactions API'), { name: 'Unsupported' }); },
  async tx_commit() { throw Object.assign(new Error('amqplib has no transactions API'), { name: 'Unsupported' }); },
  async tx_rollback() { throw Object.assign(new Error('amqplib has no transactions API'), { name: 'Unsupported' }); },
  async state() {
    const state = {};
    for (const [number, entry] of channels) state[number] = entry.state;
    return { connection: conn && !conn.closed ? 'open' : 'closed', channels: state };
  },
};

// An operation on a channel the broker closed: amqplib's IllegalOperationError carries no code, but
// the channel's 'error' event told the application the broker's (its lastError).
function closedBy(err, entry) {
  if (closeCode(err) !== null || !entry || entry.state !== 'closed' || closeCode(entry.lastError) === null) return err;
  return Object.assign(new Error(`Channel closed by server: ${entry.lastError.message} (then: ${err.message})`),
    { code: entry.lastError.code, classId: entry.lastError.classId, methodId: entry.lastError.methodId,
      name: err.name });
}

function errorOf(err) {
  const text = String((err && err.message) || err);
  if (err && err.name === 'Unsupported') return { kind: 'unsupported', text, type: 'Unsupported' };
  const code = closeCode(err);
  // "Operation failed: ..." is the close that answered this operation's own request
  if (code !== null && (/^Channel closed/.test(text) || (/^Operation failed/.test(text) && SOFT_CODES.has(code)))) {
    return { kind: 'channel-closed', code, text, class_id: err.classId || 0, method_id: err.methodId || 0, type: err.name };
  }
  if (code !== null && /^Connection closed/.test(text)) {
    return { kind: 'connection-closed', code, text, class_id: err.classId || 0, method_id: err.methodId || 0, type: err.name };
  }
  return { kind: 'exception', text, type: (err && err.constructor && err.constructor.name) || 'Error' };
}

async function answer(line) {
  const request = JSON.parse(line);
  if (request.op === 'bye') {
    try { if (conn && !conn.closed) await conn.close(); } catch (_) { /* closing anyway */ }
    out({ id: request.id, ok: true, value: null });
    process.exit(0);
  }
  const op = OPS[request.op];
  try {
    if (!op) throw Object.assign(new Error(`unknown op ${request.op}`), { name: 'Unsupported' });
    out({ id: request.id, ok: true, value: await op(revive(request.args || {})) });
  } catch (err) {
    const args = request.args || {};
    out({ id: request.id, ok: false, error: errorOf(closedBy(err, channels.get(args.channel))) });
  }
}

out({ event: 'hello', client: 'amqplib', version: pkg.version, language: 'node', runtime: `node ${process.version}`,
  api: 'amqplib promise API', features: [] });
let queue = Promise.resolve();
readline.createInterface({ input: process.stdin }).on('line', (line) => {
  if (line.trim()) queue = queue.then(() => answer(line)); // one request at a time, in order
}).on('close', () => process.exit(0));
