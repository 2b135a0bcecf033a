// tests/tools/otlp_receiver.mjs - an OTLP/HTTP trace receiver for tests/e2e/otel.sh (no
// npm OTLP receiver package is available here; this decodes OTLP/JSON per the
// OpenTelemetry protocol specification, opentelemetry-proto's JSON mapping).
//
// usage: node otlp_receiver.mjs PORTFILE LOG
// Listens on a free loopback port (written to PORTFILE). POST /v1/traces with
// Content-Type application/json: every span is checked (traceId 32 hex, spanId 16 hex,
// parentSpanId empty or 16 hex, times as decimal strings, end >= start) and appended to LOG
// as one JSON line {traceId, spanId, parentSpanId, name, start, end, status, attrs: {k: v},
// service}; a malformed request gets 400 and a line {"invalid": reason}.
import { createServer } from 'node:http';
import { appendFileSync, writeFileSync } from 'node:fs';

const [portFile, log] = process.argv.slice(2);
const hex = (s, n) => typeof s === 'string' && new RegExp(`^[0-9a-f]{${n}}$`).test(s) && !/^0+$/.test(s);
const value = (v) => v.stringValue ?? (v.intValue !== undefined ? Number(v.intValue) : v.doubleValue ?? v.boolValue);

function check(doc) {
  const out = [];
  for (const rs of doc.resourceSpans ?? []) {
    const service = value((rs.resource?.attributes ?? []).find((a) => a.key === 'service.name')?.value ?? {});
    for (const ss of rs.scopeSpans ?? []) {
      for (const s of ss.spans ?? []) {
        if (!hex(s.traceId, 32)) throw new Error(`traceId ${s.traceId}`);
        if (!hex(s.spanId, 16)) throw new Error(`spanId ${s.spanId}`);
        if (s.parentSpanId && !hex(s.parentSpanId, 16)) throw new Error(`parentSpanId ${s.parentSpanId}`);
        if (!/^\d+$/.test(s.startTimeUnixNano) || !/^\d+$/.test(s.endTimeUnixNano)) throw new Error('times');
        if (BigInt(s.endTimeUnixNano) < BigInt(s.startTimeUnixNano)) throw new Error(`span ${s.name} ends before it starts`);
        const attrs = Object.fromEntries((s.attributes ?? []).map((a) => [a.key, value(a.value)]));
        out.push({ traceId: s.traceId, spanId: s.spanId, parentSpanId: s.parentSpanId ?? '', name: s.name,
          start: s.startTimeUnixNano, end: s.endTimeUnixNano, status: s.status?.code ?? 0, attrs, service });
      }
    }
  }
  if (!out.length) throw new Error('no spans');
  return out;
}

const server = createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    try {
      if (req.method !== 'POST' || req.url !== '/v1/traces') throw new Error(`${req.method} ${req.url}`);
      if (!(req.headers['content-type'] ?? '').startsWith('application/json')) throw new Error('content-type');
      const spans = check(JSON.parse(Buffer.concat(chunks).toString('utf8')));
      appendFileSync(log, spans.map((s) => JSON.stringify(s)).join('\n') + '\n');
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"partialSuccess":{}}');
    } catch (e) {
      appendFileSync(log, JSON.stringify({ invalid: String(e.message ?? e) }) + '\n');
      res.writeHead(400).end();
    }
  });
});
server.listen(0, '127.0.0.1', () => writeFileSync(portFile, String(server.address().port)));
