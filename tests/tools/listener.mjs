// tests/tools/listener.mjs OUT_FILE: a TCP listener on 127.0.0.1 (free port, printed on
// stdout) that appends every byte any client sends, and one line per connection, to
// OUT_FILE. The security tests point hostile pipelines at it and assert the file stays empty.
import net from 'node:net';
import fs from 'node:fs';
const out = process.argv[2];
fs.writeFileSync(out, '');
const srv = net.createServer((s) => {
  fs.appendFileSync(out, `connection from ${s.remoteAddress}\n`);
  s.on('data', (d) => fs.appendFileSync(out, d));
  s.on('error', () => {});
});
srv.listen(0, '127.0.0.1', () => console.log(srv.address().port));
