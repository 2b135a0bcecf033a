// tests/s3/flaky.mjs - a loopback HTTP proxy in front of an S3 endpoint that answers every Nth
// request with 503 SlowDown (after reading its body, as a throttled store would) and forwards
// the others unchanged (N = 0: none fails). Counts go to COUNTFILE on exit: "forwarded failed";
// every request is appended to COUNTFILE.requests as "METHOD /path?query RANGE" (RANGE: the
// Range header, or -), with " 503" after it when this proxy failed it.
// Usage: node flaky.mjs TARGET_PORT N PORTFILE COUNTFILE
import http from 'node:http';
import { writeFileSync, renameSync, appendFileSync } from 'node:fs';
const [targetPort, nth, portFile, countFile] = process.argv.slice(2);
let seen = 0, failed = 0, forwarded = 0;
const server = http.createServer((req, res) => {
  seen++;
  const fail = Number(nth) > 0 && seen % Number(nth) === 0;
  appendFileSync(countFile + '.requests',
                 `${req.method} ${req.url} ${req.headers.range || '-'}${fail ? ' 503' : ''}\n`);
  if (fail) {
    req.resume();
    req.on('end', () => {
      failed++;
      res.writeHead(503, { 'content-type': 'application/xml' });
      res.end('<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>' +
              '<Message>Please reduce your request rate.</Message></Error>');
    });
    return;
  }
  forwarded++;
  const up = http.request({ host: '127.0.0.1', port: Number(targetPort), method: req.method,
                            path: req.url, headers: req.headers }, (ur) => {
    res.writeHead(ur.statusCode, ur.headers);
    ur.pipe(res);
  });
  // (after the answer began, a second head would throw and stop the proxy: cut it instead)
  up.on('error', () => { if (res.headersSent) res.destroy(); else { res.writeHead(502); res.end(); } });
  req.pipe(up);
});
server.listen(0, '127.0.0.1', () => {
  writeFileSync(portFile + '.tmp', String(server.address().port));
  renameSync(portFile + '.tmp', portFile);
});
const stop = () => { writeFileSync(countFile, `${forwarded} ${failed}\n`); process.exit(0); };
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
