// tests/tools/otlp_receiver.mjs - an OTLP/HTTP trace receiver for tests/e2e/otel.sh (no
// npm OTLP receiver package is available here; this decodes OTLP/JSON per the
// OpenTelemetry protocol specification, opentelemetry-proto's JSON mapping).
//
// usage: node otlp_receiver.mjs PORTFILE LOG [METRICSLOG]
// Listens on a free loopback port (written to PORTFILE). POST /v1/metrics (OTLP/JSON
// metrics: sums, gauges, histograms) appends one line per data point to METRICSLOG:
// {metric, kind, unit, temporality, monotonic, attrs, value, count, sum, buckets, bounds,
// start, time, service}, after checking times (decimal strings), sums' temporality, a
// histogram's buckets (one more than its bounds, adding up to its count). POST /v1/traces with
// Content-Type application/json: every span is checked (traceId 32 hex, spanId 16 hex,
// parentSpanId empty or 16 hex, times as decimal strings, end >= start) and appended to LOG
// as one JSON line {traceId, spanId, parentSpanId, name, start, end, status, attrs: {k: v},
// service}; a malformed request gets 400 and a line {"invalid": reason}.
import { createServer } from 'node:http';
import { appendFileSync, writeFileSync } from 'node:fs';

const [portFile, log, metricsLog] = process.argv.slice(2);
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

function checkMetrics(doc) {
  const out = [];
  const nanos = (t, what) => { if (!/^\d+$/.test(t ?? '')) throw new Error(`${what}: time ${t}`); return t; };
  for (const rm of doc.resourceMetrics ?? []) {
    const service = value((rm.resource?.attributes ?? []).find((a) => a.key === 'service.name')?.value ?? {});
    for (const sm of rm.scopeMetrics ?? []) {
      for (const m of sm.metrics ?? []) {
        const kind = ['sum', 'gauge', 'histogram'].find((k) => m[k]);
        if (!kind || typeof m.name !== 'string') throw new Error(`metric ${m.name}: no sum, gauge or histogram`);
        const d = m[kind];
        if (kind !== 'gauge' && ![1, 2].includes(d.aggregationTemporality)) throw new Error(`${m.name}: temporality`);
        for (const p of d.dataPoints ?? []) {
          const row = { metric: m.name, kind, unit: m.unit, temporality: d.aggregationTemporality ?? null,
            monotonic: d.isMonotonic ?? null, service, time: nanos(p.timeUnixNano, m.name),
            start: p.startTimeUnixNano === undefined ? null : nanos(p.startTimeUnixNano, m.name),
            attrs: Object.fromEntries((p.attributes ?? []).map((a) => [a.key, value(a.value)])) };
          if (kind === 'histogram') {
            const buckets = (p.bucketCounts ?? []).map(Number);
            if (buckets.length !== (p.explicitBounds ?? []).length + 1) throw new Error(`${m.name}: buckets vs bounds`);
            if (buckets.reduce((a, b) => a + b, 0) !== Number(p.count)) throw new Error(`${m.name}: buckets vs count`);
            Object.assign(row, { count: Number(p.count), sum: p.sum, buckets, bounds: p.explicitBounds });
          } else {
            if (p.asInt === undefined && p.asDouble === undefined) throw new Error(`${m.name}: no value`);
            row.value = p.asInt !== undefined ? Number(p.asInt) : p.asDouble;
          }
          out.push(row);
        }
      }
    }
  }
  if (!out.length) throw new Error('no data points');
  return out;
}

const server = createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    try {
      if (req.method !== 'POST' || !['/v1/traces', '/v1/metrics'].includes(req.url)) throw new Error(`${req.method} ${req.url}`);
      if (!(req.headers['content-type'] ?? '').startsWith('application/json')) throw new Error('content-type');
      if (req.url === '/v1/metrics') {
        if (!metricsLog) throw new Error('no metrics log');
        const points = checkMetrics(JSON.parse(Buffer.concat(chunks).toString('utf8')));
        appendFileSync(metricsLog, points.map((p) => JSON.stringify(p)).join('\n') + '\n');
        res.writeHead(200, { 'content-type': 'application/json' }).end('{"partialSuccess":{}}');
        return;
      }
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
