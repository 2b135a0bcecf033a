// tests/tools/rest_catalog.mjs - a small Iceberg REST catalog for the tests (a fixture, not a
// reader: the tables it serves are still read back by icebird). Written from the Iceberg REST
// Catalog OpenAPI specification; it implements what ferry's client uses:
//   GET  /v1/config                                     -> {"overrides": {"prefix": PREFIX}}
//   POST /v1/PREFIX/namespaces                          create-namespace (409 when it exists)
//   GET  /v1/PREFIX/namespaces/NS/tables                list-tables
//   POST /v1/PREFIX/namespaces/NS/tables                create-table (404 NoSuchNamespace)
//   GET  /v1/PREFIX/namespaces/NS/tables/T              load-table (404 NoSuchTable)
//   POST /v1/PREFIX/namespaces/NS/tables/T              commit-table: requirements checked
//        (assert-create, assert-table-uuid, assert-ref-snapshot-id, assert-current-schema-id,
//        assert-last-assigned-field-id; 409 CommitFailedException), then updates applied
//        (add-schema, set-current-schema, add-spec, set-default-spec, add-snapshot,
//        set-snapshot-ref, remove-snapshots, remove-snapshot-ref, set-properties,
//        remove-properties), a new NNNNN-<uuid>.metadata.json written next to the table
//        (file:// locations, or s3://BUCKET/... ones when $REST_S3_ENDPOINT is set: a
//        loopback S3 endpoint, path style, requests signed with the `aws4` package with
//        $AWS_ACCESS_KEY_ID / $AWS_SECRET_ACCESS_KEY) and the pointer swapped.
// Every request needs `Authorization: Bearer $REST_TOKEN` (401 otherwise). With
// $REST_CLIENT_ID / $REST_CLIENT_SECRET set, POST /v1/oauth/tokens implements the OAuth2 client
// credentials grant (form-encoded grant_type, client_id, client_secret, scope; 401
// invalid_client otherwise) and issues tokens valid $REST_TOKEN_TTL seconds (default 3600),
// each appended to STATE_DIR/tokens.log; requests then need one of those tokens, unexpired.
// When the file STATE_DIR/revoke-tokens exists, the next request revokes every token issued
// so far (the file is removed) and is answered 401. State (namespaces
// and metadata locations) lives in STATE_DIR/catalog.json, rewritten by rename.
//   node rest_catalog.mjs STATE_DIR PORTFILE        (prints nothing; the port goes to PORTFILE)
// Request lines are appended to STATE_DIR/requests.log ("METHOD PATH STATUS"). Requests are
// handled one at a time (a commit reads, checks and writes without another in between).
// When the file STATE_DIR/lose-next-answer exists, the next commit-table is applied and then
// its connection is cut without an answer (the file is removed): a commit whose answer is lost.
import http from 'node:http'
import { createRequire } from 'node:module'
import { randomUUID } from 'node:crypto'
import { appendFileSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs'
import { dirname, join } from 'node:path'

const [stateDir, portFile] = process.argv.slice(2)
const TOKEN = process.env.REST_TOKEN || ''
const CLIENT_ID = process.env.REST_CLIENT_ID || ''
const CLIENT_SECRET = process.env.REST_CLIENT_SECRET || ''
const TOKEN_TTL = Number(process.env.REST_TOKEN_TTL || 3600)
const issued = new Map() // OAuth2 token -> expiry (ms)
const PREFIX = process.env.REST_PREFIX || 'ferry-test'
const S3_ENDPOINT = process.env.REST_S3_ENDPOINT || ''
const aws4 = createRequire(import.meta.url)('aws4')
const statePath = join(stateDir, 'catalog.json')
mkdirSync(stateDir, { recursive: true })
let state = existsSync(statePath) ? JSON.parse(readFileSync(statePath, 'utf8')) : { namespaces: {}, tables: {} }
const save = () => { writeFileSync(statePath + '.tmp', JSON.stringify(state)); renameSync(statePath + '.tmp', statePath) }

const err = (res, code, type, message) => {
  res.writeHead(code, { 'content-type': 'application/json' })
  res.end(JSON.stringify({ error: { message, type, code } }))
}
const ok = (res, body) => {
  res.writeHead(200, { 'content-type': 'application/json' })
  res.end(stringify(body))
}
// Iceberg locations hold paths verbatim (as Java's HadoopFileIO and pyiceberg read them), not
// percent-encoded URIs: a name with `%` or `#` is that character in the path.
const localPath = (loc) => loc.startsWith('file://') ? loc.slice('file://'.length) : null

// s3://BUCKET/KEY -> [bucket, key] when an S3 endpoint is configured
const s3Path = (loc) => {
  const m = S3_ENDPOINT && loc.match(/^s3:\/\/([^/]+)\/(.+)$/)
  return m ? [m[1], m[2]] : null
}
// CRC32-C, which the tests' S3 front wants on every PUT (as ferry sends it)
const crcTable = new Uint32Array(256).map((_, i) => {
  let c = i
  for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0x82f63b78 : c >>> 1
  return c >>> 0
})
function crc32c(buf) {
  let c = 0xffffffff
  for (const b of buf) c = crcTable[(c ^ b) & 0xff] ^ (c >>> 8)
  const out = Buffer.alloc(4)
  out.writeUInt32BE((c ^ 0xffffffff) >>> 0)
  return out.toString('base64')
}
function s3Request(method, bucket, key, body) {
  const u = new URL(S3_ENDPOINT)
  const headers = body ? { 'x-amz-checksum-crc32c': crc32c(body), 'content-type': 'application/json' } : {}
  const path = `/${bucket}/${key.split('/').map(encodeURIComponent).join('/')}`
  const opts = aws4.sign({ host: u.host, path, method, service: 's3', region: 'us-east-1', body, headers },
    { accessKeyId: process.env.AWS_ACCESS_KEY_ID, secretAccessKey: process.env.AWS_SECRET_ACCESS_KEY })
  opts.hostname = u.hostname
  opts.port = u.port
  return new Promise((resolve, reject) => {
    const r = http.request(opts, (res) => {
      const chunks = []
      res.on('data', (c) => chunks.push(c))
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8')
        if (res.statusCode !== 200) reject(new Error(`${method} s3://${bucket}/${key}: HTTP ${res.statusCode} ${text}`))
        else resolve(text)
      })
    })
    r.on('error', reject)
    r.end(body)
  })
}

async function writeMetadata(meta, version) {
  const name = `${String(version).padStart(5, '0')}-${randomUUID()}.metadata.json`
  const loc = `${meta.location}/metadata/${name}`
  const s3 = s3Path(loc)
  if (s3) {
    await s3Request('PUT', s3[0], s3[1], Buffer.from(stringify(meta, null, 2)))
    return loc
  }
  const dir = localPath(meta.location + '/metadata')
  if (!dir) throw new Error(`only file:// (or s3:// with REST_S3_ENDPOINT) table locations: ${meta.location}`)
  mkdirSync(dir, { recursive: true })
  writeFileSync(join(dir, name), stringify(meta, null, 2))
  return loc
}
const readMetadata = async (loc) => {
  const s3 = s3Path(loc)
  return parse(s3 ? await s3Request('GET', s3[0], s3[1]) : readFileSync(localPath(loc), 'utf8'))
}
const versionOf = (loc) => parseInt(loc.split('/').pop(), 10) || 0

function createTable(ns, req) {
  const schema = { ...req.schema, 'schema-id': 0 }
  const spec = { 'spec-id': 0, fields: (req['partition-spec'] && req['partition-spec'].fields) || [] }
  const order = { 'order-id': 0, fields: [] }
  if (req['write-order'] && req['write-order'].fields && req['write-order'].fields.length)
    Object.assign(order, req['write-order'], { 'order-id': req['write-order']['order-id'] || 1 })
  const maxId = (fields) => fields.reduce((m, f) => Math.max(m, f.id, f.type && f.type.fields ? maxId(f.type.fields) : 0), 0)
  return {
    'format-version': 2,
    'table-uuid': randomUUID(),
    location: req.location,
    'last-sequence-number': 0,
    'last-updated-ms': Date.now(),
    'last-column-id': maxId(schema.fields),
    'current-schema-id': 0,
    schemas: [schema],
    'default-spec-id': 0,
    'partition-specs': [spec],
    'last-partition-id': spec.fields.reduce((m, f) => Math.max(m, f['field-id'] || 999), 999),
    'default-sort-order-id': order['order-id'],
    'sort-orders': [order],
    properties: req.properties || {},
    'current-snapshot-id': null,
    refs: {},
    snapshots: [],
    'snapshot-log': [],
    'metadata-log': [],
  }
}

function check(meta, r) {
  switch (r.type) {
    case 'assert-create': return meta ? 'table exists' : null
    case 'assert-table-uuid': return meta['table-uuid'] === r.uuid ? null : 'table UUID changed'
    case 'assert-ref-snapshot-id': {
      const ref = meta.refs && meta.refs[r.ref]
      if (r['snapshot-id'] === null || r['snapshot-id'] === undefined)
        return ref ? `branch ${r.ref} exists` : null
      return ref && BigInt(ref['snapshot-id']) === BigInt(r['snapshot-id']) ? null
        : `branch ${r.ref} has changed: expected id ${r['snapshot-id']} != ${ref ? ref['snapshot-id'] : 'none'}`
    }
    case 'assert-current-schema-id': return meta['current-schema-id'] === r['current-schema-id'] ? null : 'current schema changed'
    case 'assert-last-assigned-field-id': return meta['last-column-id'] === r['last-assigned-field-id'] ? null : 'last column id changed'
    default: return `unsupported requirement ${r.type}`
  }
}

function apply(meta, u) {
  switch (u.action) {
    case 'add-schema':
      meta.schemas.push(u.schema)
      meta['last-column-id'] = Math.max(meta['last-column-id'], u['last-column-id'] || 0)
      meta._lastSchema = u.schema['schema-id']
      break
    case 'set-current-schema':
      meta['current-schema-id'] = u['schema-id'] === -1 ? meta._lastSchema : u['schema-id']
      break
    case 'add-spec': meta['partition-specs'].push(u.spec); meta._lastSpec = u.spec['spec-id']; break
    case 'set-default-spec': meta['default-spec-id'] = u['spec-id'] === -1 ? meta._lastSpec : u['spec-id']; break
    case 'add-snapshot':
      if (u.snapshot['sequence-number'] <= meta['last-sequence-number'])
        throw Object.assign(new Error(`sequence number ${u.snapshot['sequence-number']} is not after ${meta['last-sequence-number']}`), { status: 400 })
      meta.snapshots.push(u.snapshot)
      meta['last-sequence-number'] = u.snapshot['sequence-number']
      break
    case 'set-snapshot-ref': {
      const id = u['snapshot-id']
      if (!meta.snapshots.some((s) => BigInt(s['snapshot-id']) === BigInt(id)))
        throw Object.assign(new Error(`no snapshot ${id}`), { status: 400 })
      meta.refs[u['ref-name']] = { 'snapshot-id': id, type: u.type }
      if (u['ref-name'] === 'main') {
        meta['current-snapshot-id'] = id
        meta['snapshot-log'].push({ 'snapshot-id': id, 'timestamp-ms': Date.now() })
      }
      break
    }
    case 'remove-snapshots': {
      const gone = new Set(u['snapshot-ids'].map(BigInt))
      meta.snapshots = meta.snapshots.filter((s) => !gone.has(BigInt(s['snapshot-id'])))
      meta['snapshot-log'] = meta['snapshot-log'].filter((s) => !gone.has(BigInt(s['snapshot-id'])))
      break
    }
    case 'remove-snapshot-ref':
      delete meta.refs[u['ref-name']]
      if (u['ref-name'] === 'main') meta['current-snapshot-id'] = null
      break
    case 'set-properties': Object.assign(meta.properties, u.updates); break
    case 'remove-properties': for (const k of u.removals) delete meta.properties[k]; break
    default: throw Object.assign(new Error(`unsupported update ${u.action}`), { status: 400 })
  }
}

// Snapshot ids are 64-bit: parse and print them without losing digits.
// (the remove-snapshots update carries them in an array: "snapshot-ids": [...])
const bigIds = (text) => text.replace(/("snapshot-ids"\s*:\s*\[)([^\]]*)\]/g,
  (m, head, list) => head + list.replace(/-?\d{16,}/g, (d) => `"__big${d}"`) + ']')
const parse = (text) => JSON.parse(bigIds(text).replace(/("(?:snapshot-id|parent-snapshot-id|current-snapshot-id)"\s*:\s*)(-?\d{16,})/g, '$1"__big$2"'),
  (k, v) => typeof v === 'string' && v.startsWith('__big') ? BigInt(v.slice(5)) : v)
const stringify = (o, ...a) => JSON.stringify(o, (k, v) => typeof v === 'bigint' ? `__big${v}` : v, ...a)
  .replace(/"__big(-?\d+)"/g, '$1')

// POST /v1/oauth/tokens (RFC 6749 4.4): the form's client and secret must match.
function oauthToken(req, res, text) {
  const f = new URLSearchParams(text)
  const oerr = (code, error, description) => {
    res.writeHead(code, { 'content-type': 'application/json' })
    res.end(JSON.stringify({ error, error_description: description }))
  }
  if (!String(req.headers['content-type'] || '').startsWith('application/x-www-form-urlencoded'))
    return oerr(400, 'invalid_request', 'the body must be form-encoded')
  if (f.get('grant_type') !== 'client_credentials') return oerr(400, 'unsupported_grant_type', 'client_credentials only')
  if (!f.get('scope')) return oerr(400, 'invalid_scope', 'a scope is required')
  if (f.get('client_id') !== CLIENT_ID || f.get('client_secret') !== CLIENT_SECRET)
    return oerr(401, 'invalid_client', 'unknown client or wrong secret')
  const token = `tok-${issued.size + 1}-${randomUUID()}`
  issued.set(token, Date.now() + TOKEN_TTL * 1000)
  appendFileSync(join(stateDir, 'tokens.log'), `${token} ${f.get('scope')}\n`)
  res.writeHead(200, { 'content-type': 'application/json' })
  res.end(JSON.stringify({ access_token: token, token_type: 'bearer', expires_in: TOKEN_TTL,
    issued_token_type: 'urn:ietf:params:oauth:token-type:access_token' }))
}

function authorized(req) {
  const given = String(req.headers.authorization || '').replace(/^Bearer /, '')
  const revoke = join(stateDir, 'revoke-tokens')
  if (existsSync(revoke)) {
    rmSync(revoke)
    issued.clear()
  }
  if (CLIENT_ID) return issued.has(given) && issued.get(given) > Date.now()
  return !TOKEN || given === TOKEN
}

async function handle(req, res, body) {
  if (!authorized(req))
    return err(res, 401, 'NotAuthorizedException', 'Not authorized: a valid bearer token is required')
  const url = new URL(req.url, 'http://x')
  const parts = url.pathname.split('/').filter(Boolean).map(decodeURIComponent)
  if (req.method === 'GET' && parts.join('/') === 'v1/config')
    return ok(res, { defaults: {}, overrides: { prefix: PREFIX } })
  if (parts[0] !== 'v1' || parts[1] !== PREFIX || parts[2] !== 'namespaces')
    return err(res, 404, 'NoSuchEndpointException', `no route ${req.method} ${url.pathname}`)
  const [ns, what, table] = parts.slice(3)
  if (parts.length === 3 && req.method === 'POST') {
    const name = body.namespace.join('\x1f')
    if (state.namespaces[name]) return err(res, 409, 'AlreadyExistsException', `Namespace already exists: ${name}`)
    state.namespaces[name] = body.properties || {}
    save()
    return ok(res, { namespace: body.namespace, properties: body.properties || {} })
  }
  if (!ns || what !== 'tables') return err(res, 404, 'NoSuchEndpointException', `no route ${req.method} ${url.pathname}`)
  if (!state.namespaces[ns]) return err(res, 404, 'NoSuchNamespaceException', `Namespace does not exist: ${ns}`)
  const key = `${ns}\x1f${table || body && body.name}`
  if (!table && req.method === 'GET')
    return ok(res, { identifiers: Object.keys(state.tables).filter((k) => k.startsWith(ns + '\x1f'))
      .map((k) => ({ namespace: [ns], name: k.split('\x1f')[1] })) })
  if (!table && req.method === 'POST') {
    if (state.tables[key]) return err(res, 409, 'AlreadyExistsException', `Table already exists: ${ns}.${body.name}`)
    const meta = createTable(ns, body)
    const loc = await writeMetadata(meta, 0)
    state.tables[key] = loc
    save()
    return ok(res, { 'metadata-location': loc, metadata: meta, config: {} })
  }
  const loc = state.tables[key]
  if (!loc) return err(res, 404, 'NoSuchTableException', `Table does not exist: ${ns}.${table}`)
  const meta = await readMetadata(loc)
  if (req.method === 'GET') return ok(res, { 'metadata-location': loc, metadata: meta, config: {} })
  for (const r of body.requirements || []) {
    const why = check(meta, r)
    if (why) return err(res, 409, 'CommitFailedException', `Requirement failed: ${why}`)
  }
  const next = structuredClone(meta)
  try {
    for (const u of body.updates || []) apply(next, u)
  } catch (e) {
    return err(res, e.status || 400, 'BadRequestException', e.message)
  }
  delete next._lastSchema
  delete next._lastSpec
  next['metadata-log'].push({ 'metadata-file': loc, 'timestamp-ms': meta['last-updated-ms'] })
  next['last-updated-ms'] = Date.now()
  const nloc = await writeMetadata(next, versionOf(loc) + 1)
  state.tables[key] = nloc
  save()
  const lose = join(stateDir, 'lose-next-answer')
  if (existsSync(lose)) {
    rmSync(lose)
    appendFileSync(join(stateDir, 'requests.log'), `${req.method} ${req.url} lost\n`)
    req.socket.destroy()
    return
  }
  return ok(res, { 'metadata-location': nloc, metadata: next })
}

let queue = Promise.resolve()
const server = http.createServer((req, res) => {
  const chunks = []
  req.on('data', (c) => chunks.push(c))
  req.on('end', () => {
    const text = Buffer.concat(chunks).toString('utf8')
    const end = res.end.bind(res)
    res.end = (data) => {
      appendFileSync(join(stateDir, 'requests.log'), `${req.method} ${req.url} ${res.statusCode}\n`)
      return end(typeof data === 'string' ? data.replace(/"__big(-?\d+)"/g, '$1') : data)
    }
    if (CLIENT_ID && req.method === 'POST' && req.url === '/v1/oauth/tokens') return oauthToken(req, res, text)
    let body = null
    try {
      body = text ? parse(text) : null
    } catch (e) {
      return err(res, 400, 'BadRequestException', `malformed JSON: ${e.message}`)
    }
    queue = queue.then(() => handle(req, res, body)).catch((e) => err(res, 500, 'ServerError', e.message))
  })
})
// keep JSON.stringify of BigInt working through ok()/writeMetadata
BigInt.prototype.toJSON = function () { return `__big${this}` }
server.listen(0, '127.0.0.1', () => {
  writeFileSync(portFile + '.tmp', String(server.address().port))
  renameSync(portFile + '.tmp', portFile)
})
const stop = () => { server.close(); process.exit(0) }
process.on('SIGTERM', stop)
process.on('SIGINT', stop)
