// tests/tools/tcpproxy.mjs - a TCP proxy on loopback for network-fault tests (no dependencies).
//
//   node tcpproxy.mjs TARGET_PORT PORT_FILE CONTROL_PORT_FILE
//
// Listens on 127.0.0.1 (a free port, written to PORT_FILE) and forwards every connection to
// 127.0.0.1:TARGET_PORT. A tiny HTTP control server (its port in CONTROL_PORT_FILE) changes
// what happens to the bytes:
//   GET /pass                    forward everything (the start mode)
//   GET /reset                   reset (RST) every open connection now; new ones still pass
//   GET /refuse                  reset every new connection at once (until /pass)
//   GET /stall                   black hole: open connections and new ones stay open, bytes in
//                                both directions are read and dropped, nothing is answered
//   GET /slow?bps=N              forward at most N bytes per second per direction
//   GET /cut?dir=up|down&hex=H&when=before|after[&skip=K]
//                                one-shot: when the bytes H (hex) pass in direction `up`
//                                (client -> server) or `down`, the connection is cut: `before`
//                                drops the chunk holding them and resets both sides; `after`
//                                forwards it, resets the client side at once and closes the
//                                server side 1 s later (the server acts on it, the client never
//                                hears back). skip=K lets the first K matches pass.
//   GET /stats                   {"connections":N,"open":N,"up":BYTES,"down":BYTES,"resets":N,"cuts":N}
// Every request answers 200 with the stats as JSON.
import net from 'node:net';
import http from 'node:http';
import { writeFileSync } from 'node:fs';

const [targetPort, portFile, controlFile] = process.argv.slice(2);
if (!targetPort || !portFile || !controlFile) {
  process.stderr.write('usage: node tcpproxy.mjs TARGET_PORT PORT_FILE CONTROL_PORT_FILE\n');
  process.exit(2);
}

let mode = 'pass';
let bps = 0;
let cut = null; // {dir, pattern: Buffer, when, skip}
const stats = { connections: 0, open: 0, up: 0, down: 0, resets: 0, cuts: 0 };
const pairs = new Set();

function reset(pair) {
  if (pair.dead) return;
  pair.dead = true;
  for (const s of [pair.client, pair.server]) {
    if (typeof s.resetAndDestroy === 'function') s.resetAndDestroy();
    else s.destroy();
  }
  stats.resets++;
}

// A match may straddle two chunks: keep the tail of the previous chunk of each direction.
function matches(pair, dir, chunk) {
  if (cut === null || cut.dir !== dir) return false;
  const prev = pair.tail[dir];
  const hay = prev.length ? Buffer.concat([prev, chunk]) : chunk;
  const keep = Math.max(0, cut.pattern.length - 1);
  pair.tail[dir] = hay.subarray(Math.max(0, hay.length - keep));
  if (hay.indexOf(cut.pattern) < 0) return false;
  if (cut.skip > 0) { cut.skip--; return false; }
  return true;
}

function pump(pair, dir, from, to) {
  let budgetAt = Date.now(), budget = 0;
  const queue = [];
  let queued = 0; // bytes in queue; above 1 MiB the reading side is paused (backpressure)
  let sending = false;
  const take = (n) => {
    queued -= n;
    if (queued < (1 << 20) && from.isPaused()) from.resume();
  };
  const send = () => {
    if (sending) return;
    sending = true;
    const step = () => {
      if (pair.dead || queue.length === 0) { sending = false; return; }
      if (mode === 'stall') { take(queued); queue.length = 0; sending = false; return; }
      if (bps > 0) {
        const now = Date.now();
        budget = Math.min(bps, budget + ((now - budgetAt) * bps) / 1000);
        budgetAt = now;
        if (budget < 1) { setTimeout(step, 20); return; }
        const n = Math.max(1, Math.min(queue[0].length, Math.floor(budget)));
        const piece = queue[0].subarray(0, n);
        queue[0] = queue[0].subarray(n);
        if (queue[0].length === 0) queue.shift();
        budget -= n;
        take(n);
        to.write(piece);
        setTimeout(step, 0);
        return;
      }
      while (queue.length) { const c = queue.shift(); take(c.length); to.write(c); }
      sending = false;
    };
    step();
  };
  from.on('data', (chunk) => {
    if (pair.dead) return;
    if (mode === 'stall') return; // read and dropped: the peer never hears back
    if (matches(pair, dir, chunk)) {
      const c = cut;
      cut = null;
      stats.cuts++;
      if (c.when === 'before') { reset(pair); return; }
      to.write(chunk, () => {
        const client = pair.client;
        if (typeof client.resetAndDestroy === 'function') client.resetAndDestroy(); else client.destroy();
        pair.dead = true;
        stats.resets++;
        setTimeout(() => pair.server.destroy(), 1000);
      });
      return;
    }
    stats[dir] += chunk.length;
    queue.push(chunk);
    queued += chunk.length;
    if (queued >= (1 << 20)) from.pause();
    send();
  });
}

const server = net.createServer((client) => {
  stats.connections++;
  if (mode === 'refuse') {
    if (typeof client.resetAndDestroy === 'function') client.resetAndDestroy(); else client.destroy();
    stats.resets++;
    return;
  }
  const upstream = net.connect(Number(targetPort), '127.0.0.1');
  const pair = { client, server: upstream, dead: false, tail: { up: Buffer.alloc(0), down: Buffer.alloc(0) } };
  pairs.add(pair);
  stats.open++;
  const gone = () => {
    if (!pairs.has(pair)) return;
    pairs.delete(pair);
    stats.open--;
    pair.dead = true;
    client.destroy();
    upstream.destroy();
  };
  // A black hole tells the client nothing, not even that the server gave up on the
  // connection (ferry serve cuts a request whose headers do not arrive in time).
  const upstreamGone = () => { if (mode === 'stall' && !pair.dead) upstream.destroy(); else gone(); };
  client.on('error', gone);
  client.on('close', gone);
  upstream.on('error', upstreamGone);
  upstream.on('close', upstreamGone);
  pump(pair, 'up', client, upstream);
  pump(pair, 'down', upstream, client);
});
server.listen(0, '127.0.0.1', () => writeFileSync(portFile, String(server.address().port)));

const control = http.createServer((req, res) => {
  const u = new URL(req.url, 'http://x');
  switch (u.pathname) {
    case '/pass': mode = 'pass'; bps = 0; break;
    case '/reset': for (const p of pairs) reset(p); break;
    case '/refuse': mode = 'refuse'; break;
    case '/stall': mode = 'stall'; break;
    case '/slow': mode = 'pass'; bps = Number(u.searchParams.get('bps') || 0); break;
    case '/cut':
      cut = {
        dir: u.searchParams.get('dir') || 'up',
        pattern: Buffer.from(u.searchParams.get('hex') || '', 'hex'),
        when: u.searchParams.get('when') || 'before',
        skip: Number(u.searchParams.get('skip') || 0),
      };
      if (cut.pattern.length === 0) { res.writeHead(400); res.end('hex= is required\n'); return; }
      break;
    case '/stats': break;
    default: res.writeHead(404); res.end('unknown command\n'); return;
  }
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ mode, ...stats }) + '\n');
});
control.listen(0, '127.0.0.1', () => writeFileSync(controlFile, String(control.address().port)));
process.on('SIGTERM', () => process.exit(0));
