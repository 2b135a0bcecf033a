// tests/s3/server.mjs - s3rver (pinned in tests/tools) on loopback behind a front that checks
// every request's Signature V4, for the s3 tests.
// Usage: node server.mjs DIR PORTFILE BUCKET...  Writes the front's port to PORTFILE once
// listening. The only account is S3RVER / S3RVER.
//
// s3rver 3.7.1 parses SigV4 Authorization headers but does not verify them, so the front does:
// it recomputes the signature with the `aws4` npm package (an implementation ferry did not
// write) from the headers the request says it signed, and answers 403 SignatureDoesNotMatch
// when they differ. It also checks x-amz-content-sha256 and x-amz-checksum-crc32c against the
// body (400 XAmzContentSHA256Mismatch / BadDigest), as S3 does.
//
// s3rver ignores conditional writes. For the buckets named in $S3_CONDITIONAL_BUCKETS (comma
// separated) the front honours `If-None-Match: *` on PUT the way S3 does: 412
// PreconditionFailed when the key exists; such PUTs are serialised per key so that two writers
// racing for one key cannot both succeed. Other buckets behave like s3rver (the condition is
// ignored), which is what ferry must detect and refuse for the Iceberg filesystem catalog.
// The shared front (tests/fixture.sh s3) learns such buckets while it runs: with
// $S3_FLAGS_DIR set, a bucket B is conditional too when the file $S3_FLAGS_DIR/B.conditional
// exists (tests/s3/s3.sh makes it for a test's bucket named in that test's
// S3_CONDITIONAL_BUCKETS).
//
// s3rver answers ListMultipartUploads with 501 NotImplemented and AbortMultipartUpload with 405,
// like the stores that leave unfinished uploads to a lifecycle rule. For the buckets named in
// $S3_UPLOAD_BUCKETS the front answers both itself, from s3rver's own record of the uploads in
// progress (DIR/BUCKET/._S3rver_uploads/ID/key, created by CreateMultipartUpload, removed by
// CompleteMultipartUpload): Initiated is the mtime of that `key` file (a test may backdate it),
// pages hold $S3_MAX_UPLOADS uploads (default 1000) with S3's key / upload-id markers; an abort
// removes the record and its parts (204), an unknown one is 404 NoSuchUpload.
import { createRequire } from 'node:module';
import { existsSync, writeFileSync, renameSync, statfsSync, readdirSync, readFileSync, statSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { createHash } from 'node:crypto';
import http from 'node:http';
const require = createRequire(new URL('../tools/package.json', import.meta.url));
// s3rver seals ListObjectsV2 continuation tokens with DES, which OpenSSL 3 (Node >= 17) no
// longer has: every truncated listing answered 500. The token only has to be opaque to the
// client, so 'des' becomes the identity here (other ciphers untouched).
{
  const crypto = require('node:crypto');
  const plain = { update: (d, enc) => Buffer.from(d, typeof d === 'string' ? enc : undefined),
                  final: () => Buffer.alloc(0) };
  for (const f of ['createCipheriv', 'createDecipheriv']) {
    const orig = crypto[f];
    crypto[f] = (alg, ...rest) => (alg === 'des' ? plain : orig.call(crypto, alg, ...rest));
  }
}
const S3rver = require('s3rver');
const aws4 = require('aws4');
const [dir, portFile, ...buckets] = process.argv.slice(2);
const SECRETS = { S3RVER: 'S3RVER' };

const s3 = new S3rver({
  address: '127.0.0.1', port: 0, directory: dir, silent: true,
  configureBuckets: buckets.map((name) => ({ name })),
});
const { port: innerPort } = await s3.run();

const table = new Uint32Array(256).map((_, i) => {
  let c = i;
  for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0x82f63b78 : c >>> 1;
  return c >>> 0;
});
function crc32c(buf) {
  let c = 0xffffffff;
  for (const b of buf) c = table[(c ^ b) & 0xff] ^ (c >>> 8);
  const out = Buffer.alloc(4);
  out.writeUInt32BE((c ^ 0xffffffff) >>> 0);
  return out.toString('base64');
}

function fail(res, status, code, message) {
  // The inner s3rver failing after its answer began (a malformed or cut response): the
  // headers are gone, so the client sees a cut connection, as from a store that fails mid-way.
  // Writing a second head would throw and stop the whole front (every test on it with it).
  if (res.headersSent) {
    res.destroy();
    return;
  }
  res.writeHead(status, { 'content-type': 'application/xml' });
  res.end(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>${code}</Code>` +
          `<Message>${message}</Message></Error>`);
}

function verify(req, body) {
  const auth = req.headers.authorization || '';
  const m = auth.match(/^AWS4-HMAC-SHA256 Credential=([^/]+)\/(\d{8})\/([^/]+)\/([^/]+)\/aws4_request, ?SignedHeaders=([^,]+), ?Signature=([0-9a-f]{64})$/);
  if (!m) return [403, 'AccessDenied', 'missing or malformed SigV4 Authorization'];
  const [, akid, , region, service, signedNames, sig] = m;
  if (!(akid in SECRETS)) return [403, 'InvalidAccessKeyId', 'unknown access key'];
  const names = signedNames.split(';');
  for (const need of ['host', 'x-amz-date', 'x-amz-content-sha256'])
    if (!names.includes(need)) return [403, 'AccessDenied', `${need} is not signed`];
  const headers = {};
  for (const n of names) headers[n] = req.headers[n] ?? '';
  const include = Object.fromEntries(names.map((n) => [n, true]));
  const signed = aws4.sign({ host: req.headers.host, path: req.url, method: req.method, service,
                             region, headers, extraHeadersToInclude: include },
                           { accessKeyId: akid, secretAccessKey: SECRETS[akid] });
  const want = signed.headers.Authorization.match(/Signature=([0-9a-f]{64})/)[1];
  if (want !== sig)
    return [403, 'SignatureDoesNotMatch',
            'The request signature we calculated does not match the signature you provided.'];
  if (createHash('sha256').update(body).digest('hex') !== req.headers['x-amz-content-sha256'])
    return [400, 'XAmzContentSHA256Mismatch', 'body hash differs'];
  const crc = req.headers['x-amz-checksum-crc32c'];
  if (crc !== undefined && crc !== crc32c(body))
    return [400, 'BadDigest', 'The CRC32C you specified did not match the calculated checksum.'];
  if (req.method === 'PUT' && crc === undefined)
    return [400, 'InvalidRequest', 'ferry sends x-amz-checksum-crc32c on every PUT (test check)'];
  return null;
}

const uploadBuckets = new Set((process.env.S3_UPLOAD_BUCKETS || '').split(',').filter(Boolean));
const MAX_UPLOADS = Number(process.env.S3_MAX_UPLOADS || 1000);
const xml = (t) => String(t).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;')
  .replace(/"/g, '&quot;').replace(/'/g, '&apos;');

// s3rver's uploads in progress of a bucket, sorted as S3 lists them: by key, then initiation.
function uploadsOf(bucket) {
  const d = join(dir, bucket, '._S3rver_uploads');
  let ids = [];
  try { ids = readdirSync(d); } catch { return []; }
  const out = [];
  for (const id of ids) {
    try {
      const f = join(d, id, 'key');
      out.push({ key: readFileSync(f, 'utf8'), id, initiated: statSync(f).mtime });
    } catch { /* completed or aborted meanwhile */ }
  }
  return out.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : a.initiated - b.initiated ||
                                                  (a.id < b.id ? -1 : 1)));
}

function listUploads(res, bucket, q) {
  const prefix = q.get('prefix') || '', km = q.get('key-marker') || '', um = q.get('upload-id-marker') || '';
  const max = Math.min(Number(q.get('max-uploads') || 1000), MAX_UPLOADS);
  let all = uploadsOf(bucket).filter((u) => u.key.startsWith(prefix));
  if (km) {
    const at = um ? all.findIndex((u) => u.key === km && u.id === um) : -1;
    all = at >= 0 ? all.slice(at + 1) : all.filter((u) => u.key > km);
  }
  const page = all.slice(0, max), more = all.length > page.length, last = page[page.length - 1];
  res.writeHead(200, { 'content-type': 'application/xml' });
  res.end('<?xml version="1.0" encoding="UTF-8"?><ListMultipartUploadsResult>' +
    `<Bucket>${xml(bucket)}</Bucket><KeyMarker>${xml(km)}</KeyMarker>` +
    `<UploadIdMarker>${xml(um)}</UploadIdMarker><Prefix>${xml(prefix)}</Prefix>` +
    (more ? `<NextKeyMarker>${xml(last.key)}</NextKeyMarker><NextUploadIdMarker>${xml(last.id)}</NextUploadIdMarker>` : '') +
    `<MaxUploads>${max}</MaxUploads><IsTruncated>${more}</IsTruncated>` +
    page.map((u) => `<Upload><Key>${xml(u.key)}</Key><UploadId>${xml(u.id)}</UploadId>` +
      '<Initiator><ID>S3RVER</ID></Initiator><Owner><ID>S3RVER</ID></Owner>' +
      `<StorageClass>STANDARD</StorageClass><Initiated>${u.initiated.toISOString()}</Initiated></Upload>`).join('') +
    '</ListMultipartUploadsResult>');
}

function abortUpload(res, bucket, key, id) {
  const d = join(dir, bucket, '._S3rver_uploads', id);
  let have = null;
  try { have = readFileSync(join(d, 'key'), 'utf8'); } catch { /* none */ }
  if (!/^[0-9a-f]+$/.test(id) || have !== key)
    return fail(res, 404, 'NoSuchUpload', 'The specified upload does not exist.');
  rmSync(d, { recursive: true, force: true });
  res.writeHead(204);
  res.end();
}

const conditional = new Set((process.env.S3_CONDITIONAL_BUCKETS || '').split(',').filter(Boolean));
const flagsDir = process.env.S3_FLAGS_DIR || '';
const isConditional = (bucket) => conditional.has(bucket) ||
  (flagsDir !== '' && bucket !== '' && !bucket.includes('/') && !bucket.startsWith('.') &&
   existsSync(join(flagsDir, bucket + '.conditional')));
const keyLocks = new Map(); // path -> promise of the last conditional PUT on it

function forward(req, res, body, done) {
  const up = http.request({ host: '127.0.0.1', port: innerPort, method: req.method,
                            path: req.url, headers: req.headers }, (ur) => {
    res.writeHead(ur.statusCode, ur.headers);
    ur.pipe(res);
    ur.on('end', done);
  });
  up.on('error', () => { fail(res, 502, 'BadGateway', 'inner s3rver unreachable'); done(); });
  up.end(body);
}

function exists(path) {
  return new Promise((resolve) => {
    const h = http.request({ host: '127.0.0.1', port: innerPort, method: 'HEAD', path }, (r) => {
      r.resume();
      resolve(r.statusCode === 200);
    });
    h.on('error', () => resolve(false));
    h.end();
  });
}

const front = http.createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    const body = Buffer.concat(chunks);
    const bad = verify(req, body);
    if (bad) return fail(res, ...bad);
    // A full disk under DIR (s3_disk_full.sh mounts a small tmpfs there): s3rver itself dies
    // on ENOSPC (an unhandled stream error), so the front refuses a write that cannot fit
    // the way S3-compatible stores do, 507 InsufficientStorage, before s3rver writes a byte.
    if (body.length > 0 && (req.method === 'PUT' || req.method === 'POST')) {
      const fs = statfsSync(dir);
      if (fs.bavail * fs.bsize < body.length + (1 << 20))
        return fail(res, 507, 'InsufficientStorage', 'Insufficient storage: the disk under the store is full');
    }
    const path = req.url.split('?')[0];
    const bucket = decodeURIComponent(path.split('/')[1] || '');
    if (uploadBuckets.has(bucket)) {
      const q = new URLSearchParams(req.url.split('?')[1] || '');
      const key = path.split('/').slice(2).map(decodeURIComponent).join('/');
      if (req.method === 'GET' && key === '' && q.has('uploads')) return listUploads(res, bucket, q);
      if (req.method === 'DELETE' && key !== '' && q.has('uploadId'))
        return abortUpload(res, bucket, key, q.get('uploadId'));
    }
    if (req.method !== 'PUT' || req.headers['if-none-match'] !== '*' || !isConditional(bucket))
      return forward(req, res, body, () => {});
    const prev = keyLocks.get(path) || Promise.resolve();
    const mine = prev.then(async () => {
      if (await exists(path)) {
        fail(res, 412, 'PreconditionFailed', 'At least one of the pre-conditions you specified did not hold');
        return;
      }
      await new Promise((done) => forward(req, res, body, done));
    });
    keyLocks.set(path, mine);
    mine.finally(() => { if (keyLocks.get(path) === mine) keyLocks.delete(path); });
  });
});
front.listen(0, '127.0.0.1', () => {
  writeFileSync(portFile + '.tmp', String(front.address().port));
  renameSync(portFile + '.tmp', portFile);
});
const stop = async () => { front.close(); await s3.close(); process.exit(0); };
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
