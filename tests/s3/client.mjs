// tests/s3/client.mjs - a signed S3 client the tests use to read what ferry wrote, independent of
// ferry's own signer: SigV4 from the `aws4` npm package (pinned in tests/tools).
// Usage: node client.mjs ENDPOINT BUCKET get KEY       -> the object's bytes on stdout
//        node client.mjs ENDPOINT BUCKET getmany DIR KEY... -> each object into DIR/KEY (folders
//                                                         made); a missing one: its key on stdout,
//                                                         exit 1 (one process for many objects)
//        node client.mjs ENDPOINT BUCKET list PREFIX   -> one key per line (all pages)
//        node client.mjs ENDPOINT BUCKET put KEY FILE
//        node client.mjs ENDPOINT BUCKET delete KEY
//        node client.mjs ENDPOINT BUCKET etag KEY      -> the object's ETag ("...-N" when multipart)
//        node client.mjs ENDPOINT BUCKET uploads PREFIX -> "KEY UPLOAD_ID INITIATED" per unfinished
//                                                         multipart upload (ListMultipartUploads, all pages)
//        node client.mjs ENDPOINT BUCKET mkupload KEY   -> the UPLOAD_ID of a new multipart upload of KEY
//                                                         (CreateMultipartUpload, no part: another writer's)
// Credentials: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (s3rver: S3RVER / S3RVER).
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import { createHash } from 'node:crypto';
const require = createRequire(new URL('../tools/package.json', import.meta.url));
const aws4 = require('aws4');
const [endpoint, bucket, cmd, arg, file] = process.argv.slice(2);
const u = new URL(endpoint);
const creds = { accessKeyId: process.env.AWS_ACCESS_KEY_ID || 'S3RVER',
                secretAccessKey: process.env.AWS_SECRET_ACCESS_KEY || 'S3RVER' };
const enc = (k) => k.split('/').map(encodeURIComponent).join('/');
// XML text as S3 servers escape keys: the five entities and numeric references, &amp; last
const unxml = (t) => t.replace(/&(quot|apos|lt|gt|#x[0-9a-fA-F]+|#[0-9]+);/g, (_, e) =>
  ({ quot: '"', apos: "'", lt: '<', gt: '>' })[e] ??
  String.fromCodePoint(e[1] === 'x' ? parseInt(e.slice(2), 16) : parseInt(e.slice(1), 10)))
  .replace(/&amp;/g, '&');

const CRC_TABLE = new Uint32Array(256).map((_, i) => {
  let c = i;
  for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0x82f63b78 : c >>> 1;
  return c >>> 0;
});
function crc32c(buf) { // base64 of the big-endian CRC32-C, as S3 sends it
  let c = 0xffffffff;
  for (const b of buf) c = CRC_TABLE[(c ^ b) & 0xff] ^ (c >>> 8);
  const out = Buffer.alloc(4);
  out.writeUInt32BE((c ^ 0xffffffff) >>> 0);
  return out.toString('base64');
}

function request(method, path, body) {
  // a body's SHA-256 and CRC32-C, as the test front wants them on every PUT
  const headers = body ? { 'X-Amz-Content-Sha256': createHash('sha256').update(body).digest('hex'),
                           'x-amz-checksum-crc32c': crc32c(body) } : {};
  const opts = aws4.sign({ host: u.host, path, method, service: 's3', region: 'us-east-1',
                           body, headers }, creds);
  opts.hostname = u.hostname; opts.port = u.port;
  return new Promise((resolve, reject) => {
    const req = http.request(opts, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, body: Buffer.concat(chunks) }));
    });
    req.on('error', reject);
    if (body) req.write(body);
    req.end();
  });
}

if (cmd === 'getmany') {
  const { mkdirSync, writeFileSync } = await import('node:fs');
  const { dirname } = await import('node:path');
  for (const key of process.argv.slice(6)) {
    const r = await request('GET', `/${bucket}/${enc(key)}`);
    if (r.status !== 200) { process.stdout.write(key + '\n'); process.exit(1); }
    mkdirSync(dirname(`${arg}/${key}`), { recursive: true });
    writeFileSync(`${arg}/${key}`, r.body);
  }
} else if (cmd === 'get') {
  const r = await request('GET', `/${bucket}/${enc(arg)}`);
  if (r.status !== 200) { process.stderr.write(`GET ${arg}: HTTP ${r.status}\n`); process.exit(1); }
  process.stdout.write(r.body);
} else if (cmd === 'list') {
  let token = null;
  for (;;) {
    const q = new URLSearchParams({ 'list-type': '2', prefix: arg });
    if (token) q.set('continuation-token', token);
    const r = await request('GET', `/${bucket}?${q.toString()}`);
    if (r.status !== 200) { process.stderr.write(`list: HTTP ${r.status}\n`); process.exit(1); }
    const xml = r.body.toString();
    for (const m of xml.matchAll(/<Key>([^<]*)<\/Key>/g))
      process.stdout.write(unxml(m[1]) + '\n');
    const t = xml.match(/<NextContinuationToken>([^<]*)</);
    if (!/<IsTruncated>true/.test(xml) || !t) break;
    token = t[1];
  }
} else if (cmd === 'uploads') {
  let km = null, um = null;
  for (;;) {
    const q = new URLSearchParams({ prefix: arg, uploads: '' });
    if (km) q.set('key-marker', km);
    if (um) q.set('upload-id-marker', um);
    q.sort();
    const r = await request('GET', `/${bucket}?${q.toString()}`);
    if (r.status !== 200) { process.stderr.write(`list uploads: HTTP ${r.status}\n`); process.exit(1); }
    const xml = r.body.toString();
    for (const m of xml.matchAll(/<Upload>(.*?)<\/Upload>/gs)) {
      const f = (t) => unxml((m[1].match(new RegExp(`<${t}>([^<]*)</${t}>`)) || [])[1] || '');
      process.stdout.write(`${f('Key')} ${f('UploadId')} ${f('Initiated')}\n`);
    }
    if (!/<IsTruncated>true/.test(xml)) break;
    km = unxml((xml.match(/<NextKeyMarker>([^<]*)</) || [])[1] || '');
    um = unxml((xml.match(/<NextUploadIdMarker>([^<]*)</) || [])[1] || '');
    if (!km) break;
  }
} else if (cmd === 'etag') {
  const opts = aws4.sign({ host: u.host, path: `/${bucket}/${enc(arg)}`, method: 'HEAD',
                           service: 's3', region: 'us-east-1', headers: {} }, creds);
  opts.hostname = u.hostname; opts.port = u.port;
  const etag = await new Promise((resolve, reject) => {
    const req = http.request(opts, (res) => { res.resume(); resolve(res.statusCode === 200 ? res.headers.etag : null); });
    req.on('error', reject);
    req.end();
  });
  if (!etag) { process.stderr.write(`HEAD ${arg}: not found\n`); process.exit(1); }
  process.stdout.write(etag.replace(/"/g, '') + '\n');
} else if (cmd === 'mkupload') {
  const r = await request('POST', `/${bucket}/${enc(arg)}?uploads`);
  const id = (r.body.toString().match(/<UploadId>([^<]*)<\/UploadId>/) || [])[1];
  if (r.status !== 200 || !id) { process.stderr.write(`create upload ${arg}: HTTP ${r.status}\n`); process.exit(1); }
  process.stdout.write(unxml(id) + '\n');
} else if (cmd === 'put') {
  const r = await request('PUT', `/${bucket}/${enc(arg)}`, readFileSync(file));
  if (r.status !== 200) { process.stderr.write(`PUT ${arg}: HTTP ${r.status} ${r.body}\n`); process.exit(1); }
} else if (cmd === 'delete') {
  const r = await request('DELETE', `/${bucket}/${enc(arg)}`);
  if (r.status !== 204 && r.status !== 200) { process.stderr.write(`DELETE ${arg}: HTTP ${r.status} ${r.body}\n`); process.exit(1); }
} else {
  process.stderr.write('usage: client.mjs ENDPOINT BUCKET get|list|put|etag|uploads|mkupload ...\n');
  process.exit(2);
}
