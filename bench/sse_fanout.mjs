// bench/sse_fanout.mjs - N clients follow one run's event stream of `ferry serve` at once;
// reports events delivered per client and the delivery delay (receipt time minus the
// event's time, both wall clock on this machine). For bench/serve.sh.
// usage: node sse_fanout.mjs BASE TOKEN RUN_ID CLIENTS SECONDS AFTER_SEQ
const [base, token, run, clients, seconds, after] = process.argv.slice(2);
const n = Number(clients), until = Date.now() + Number(seconds) * 1000;
const delays = [];
const counts = new Array(n).fill(0);
let errors = 0;
async function client(i) {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), until - Date.now());
  try {
    const r = await fetch(`${base}/v1/runs/${run}/events?after=${after}`, { headers: { Authorization: `Bearer ${token}` }, signal: ctl.signal });
    if (!r.ok) { errors++; return; }
    const reader = r.body.getReader();
    const dec = new TextDecoder();
    let buf = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let k;
      while ((k = buf.indexOf('\n\n')) >= 0) {
        const block = buf.slice(0, k);
        buf = buf.slice(k + 2);
        const line = block.split('\n').find((l) => l.startsWith('data: '));
        if (!line) continue;
        const ev = JSON.parse(line.slice(6));
        counts[i]++;
        delays.push(Date.now() - ev.time_us / 1000);
      }
    }
  } catch (e) {
    if (e.name !== 'AbortError') errors++;
  } finally {
    clearTimeout(timer);
  }
}
await Promise.all(Array.from({ length: n }, (_, i) => client(i)));
delays.sort((a, b) => a - b);
const q = (p) => delays.length ? delays[Math.min(delays.length - 1, Math.floor(p * delays.length))].toFixed(1) : 'n/a';
const total = counts.reduce((a, b) => a + b, 0);
console.log(JSON.stringify({ clients: n, errors, events_total: total, events_min: Math.min(...counts), events_max: Math.max(...counts), delay_ms_p50: q(0.5), delay_ms_p95: q(0.95), delay_ms_max: q(1) }));
