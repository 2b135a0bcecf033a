// bench/s3_net.mjs - a loopback HTTP proxy that makes an S3 endpoint on this machine behave like
// one across a network: each response's first byte waits LATENCY_MS after the store answered,
// and the bodies of all responses together leave at no more than RATE_MIB MiB/s (one pacing
// clock shared by every connection, so two clients in parallel share the same link).
// bench/lake.sh starts it for S3_NET=RATE_MIB[,LATENCY_MS]; never used by tests.
// Requests are forwarded unchanged (their Host header too, so SigV4 signatures still verify).
// Usage: node s3_net.mjs TARGET_PORT RATE_MIB LATENCY_MS PORTFILE
import http from 'node:http';
import { writeFileSync, renameSync } from 'node:fs';
import { once } from 'node:events';

const [targetPort, rateMib, latencyMs, portFile] = process.argv.slice(2);
const bytesPerMs = Number(rateMib) * 1048576 / 1000;
let linkFreeAt = 0; // performance.now() at which the shared link has sent what it was given

// how long (ms) a chunk of n bytes waits before it is written: after everything queued before it
function pace(n) {
  const now = performance.now();
  linkFreeAt = Math.max(now, linkFreeAt) + n / bytesPerMs;
  return linkFreeAt - now;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// the store's answer, late by the latency and paced by the shared link
async function relay(ur, res) {
  await sleep(Number(latencyMs));
  res.writeHead(ur.statusCode, ur.headers);
  for await (const chunk of ur) {
    await sleep(pace(chunk.length));
    if (!res.write(chunk)) await once(res, 'drain');
  }
  res.end();
}

const server = http.createServer((req, res) => {
  const up = http.request({ host: '127.0.0.1', port: targetPort, method: req.method,
                            path: req.url, headers: req.headers }, (ur) => {
    relay(ur, res).catch(() => res.destroy());
  });
  up.on('error', () => { if (res.headersSent) res.destroy(); else { res.writeHead(502); res.end(); } });
  req.pipe(up);
});
server.listen(0, '127.0.0.1', () => {
  writeFileSync(portFile + '.tmp', String(server.address().port));
  renameSync(portFile + '.tmp', portFile);
});
process.on('SIGTERM', () => process.exit(0));
