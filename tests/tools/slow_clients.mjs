// tests/tools/slow_clients.mjs HOST PORT FROM N: opens N connections to HOST:PORT from the
// local address FROM, each sending the start of a request line and then one header byte
// every few seconds, never finishing; prints "open K" once every attempt settled (K
// connections were accepted and still open), then holds them until killed.
import net from 'node:net';
const [host, port, from, n] = [process.argv[2], +process.argv[3], process.argv[4], +process.argv[5]];
let settled = 0, open = 0;
const socks = [];
for (let i = 0; i < n; i++) {
  const s = net.connect({ host, port, localAddress: from }, () => {
    open++;
    s.write('GET /livez HTTP/1.1\r\nHost: x\r\nX-Slow: ');
    if (++settled === n) console.log(`open ${open}`);
  });
  s.on('error', () => { if (++settled === n) console.log(`open ${open}`); });
  s.on('close', () => { open--; });
  socks.push(s);
}
setInterval(() => { for (const s of socks) if (!s.destroyed) s.write('a'); }, 3000);
