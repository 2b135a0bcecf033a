// tests/tools/read_iceberg.mjs - reads an Iceberg table with icebird (an Iceberg reader
// ferry did not write) over HTTP, and prints every row as one JSON line.
//
//   node read_iceberg.mjs WAREHOUSE NAMESPACE TABLE [METADATA_FILE]
//   node read_iceberg.mjs WAREHOUSE NAMESPACE --metadata TABLE [METADATA_FILE]
//   node read_iceberg.mjs WAREHOUSE NAMESPACE --files TABLE [METADATA_FILE]
//
// A static file server on 127.0.0.1 (an ephemeral port) serves WAREHOUSE, with byte
// ranges (hyparquet reads Parquet footers by range). The table's metadata names its
// manifests and data files with absolute file:// URIs, as local Iceberg tables do; fetch
// is wrapped so that file://WAREHOUSE/... is read through the server, and any other
// file:// URI fails. Values: BigInt as a decimal string, bytes as lowercase hex, Date as
// its ISO text. METADATA_FILE (e.g. v2.metadata.json) reads an older version (time
// travel). --metadata prints the table's current metadata JSON instead, --files one line
// per live data file of the current snapshot (its manifest entry).
//
// WAREHOUSE s3://BUCKET/PATH: the table is read from the S3 server at $S3_ENDPOINT (s3rver on
// loopback, tests/s3/server.mjs). The metadata names files s3://BUCKET/KEY, which icebird
// turns into https://BUCKET.s3.amazonaws.com/KEY; fetch is wrapped so that those go to
// $S3_ENDPOINT/BUCKET/KEY instead, signed with SigV4 by the `aws4` package (credentials
// AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY), and nothing leaves loopback.
import { createServer } from 'node:http'
import { createReadStream, statSync } from 'node:fs'
import { resolve, normalize } from 'node:path'
import { createRequire } from 'node:module'

const [warehouse, ns, table, arg4, arg5] = process.argv.slice(2)
// --metadata / --files TABLE [METADATA_FILE]; else TABLE [METADATA_FILE]
const metadataFileName = table && table.startsWith('--') ? arg5 : arg4
if (!warehouse || !ns || !table) {
  console.error('usage: read_iceberg.mjs WAREHOUSE NAMESPACE TABLE [METADATA_FILE]')
  process.exit(2)
}
const s3 = warehouse.startsWith('s3://')
const root = s3 ? '/nonexistent' : resolve(warehouse)

const server = createServer((req, res) => {
  const path = normalize(resolve(root, '.' + decodeURIComponent(new URL(req.url, 'http://x').pathname)))
  if (!path.startsWith(root + '/')) { res.writeHead(403); res.end(); return }
  let st
  try { st = statSync(path) } catch { res.writeHead(404); res.end(); return }
  if (!st.isFile()) { res.writeHead(404); res.end(); return }
  const range = /^bytes=(\d*)-(\d*)$/.exec(req.headers.range || '')
  if (range) {
    let start = range[1] === '' ? st.size - Number(range[2]) : Number(range[1])
    let end = range[1] === '' || range[2] === '' ? st.size - 1 : Number(range[2])
    if (start < 0) start = 0
    if (end >= st.size) end = st.size - 1
    res.writeHead(206, { 'content-length': end - start + 1, 'content-range': `bytes ${start}-${end}/${st.size}`, 'accept-ranges': 'bytes' })
    createReadStream(path, { start, end }).pipe(res)
  } else {
    res.writeHead(200, { 'content-length': st.size, 'accept-ranges': 'bytes' })
    createReadStream(path).pipe(res)
  }
})
await new Promise(ok => server.listen(0, '127.0.0.1', ok))
let base = `http://127.0.0.1:${server.address().port}`

const realFetch = globalThis.fetch
const encPath = (p) => p.split('/').map(encodeURIComponent).join('/')
if (s3) {
  const aws4 = createRequire(import.meta.url)('aws4')
  const ep = new URL(process.env.S3_ENDPOINT)
  if (!['127.0.0.1', 'localhost', '[::1]'].includes(ep.hostname)) throw new Error('S3_ENDPOINT must be on loopback')
  const creds = { accessKeyId: process.env.AWS_ACCESS_KEY_ID || 'S3RVER',
                  secretAccessKey: process.env.AWS_SECRET_ACCESS_KEY || 'S3RVER' }
  base = `${ep.origin}/${warehouse.slice('s3://'.length).replace(/\/+$/, '')}`
  // Every URL icebird fetches here is built by concatenating s3:// locations, which hold
  // object keys verbatim (a key may contain `%`, `?`, `#`): the part after the server is the
  // raw /BUCKET/KEY, encoded segment by segment before it is signed and sent.
  globalThis.fetch = (url, init = {}) => {
    let u = String(url)
    const aws = /^https:\/\/([a-z0-9.-]+)\.s3\.amazonaws\.com(\/.*)$/s.exec(u)
    if (aws) u = `${ep.origin}/${aws[1]}${aws[2]}`
    if (!u.startsWith(ep.origin + '/')) return Promise.reject(new Error(`not on the S3 server: ${url}`))
    const path = encPath(u.slice(ep.origin.length))
    const headers = Object.fromEntries(new Headers(init.headers || {}).entries())
    const signed = aws4.sign({ host: ep.host, path, method: init.method || 'GET', service: 's3',
                               region: 'us-east-1', headers }, creds)
    return realFetch(ep.origin + path, { ...init, headers: signed.headers })
  }
} else globalThis.fetch = (url, init) => {
  let u = String(url)
  if (u.startsWith('file://')) {
    // locations are paths verbatim (as Java's HadoopFileIO and pyiceberg read them)
    const p = u.slice('file://'.length)
    if (!p.startsWith(root + '/')) return Promise.reject(new Error(`outside the warehouse: ${u}`))
    u = base + encPath(p.slice(root.length))
  }
  return realFetch(u, init)
}

function plain(v) {
  if (typeof v === 'bigint') return v.toString()
  if (v instanceof Uint8Array) return Buffer.from(v).toString('hex')
  if (v instanceof Date) return v.toISOString()
  if (Array.isArray(v)) return v.map(plain)
  if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, plain(x)]))
  return v
}

let code = 0
try {
  const { icebergRead, icebergMetadata } = await import('icebird')
  // names as they are (s3: raw keys, encoded by the fetch wrapper); local: URL-encoded for
  // the file server, which decodes them
  const tname = table.startsWith('--') ? arg4 : table
  const tableUrl = s3 ? `${base}/${ns}/${tname}` : `${base}/${encodeURIComponent(ns)}/${encodeURIComponent(tname)}`
  if (table === '--metadata') {
    process.stdout.write(JSON.stringify(await icebergMetadata({ tableUrl, metadataFileName })) + '\n')
  } else if (table === '--files') {
    // the live data files of the current snapshot, as its manifests list them
    const { icebergManifests } = await import('icebird/src/manifest.js')
    const { splitManifestEntries } = await import('icebird/src/manifest.js')
    const metadata = await icebergMetadata({ tableUrl, metadataFileName })
    const { dataEntries } = splitManifestEntries(await icebergManifests(metadata))
    for (const e of dataEntries) process.stdout.write(JSON.stringify(plain(e)) + '\n')
  } else {
    const rows = await icebergRead({ tableUrl, metadataFileName })
    for (const r of rows) process.stdout.write(JSON.stringify(plain(r)) + '\n')
  }
} catch (e) {
  console.error(`read_iceberg: ${e.message}`)
  code = 1
}
// process.exit() would cut stdout short when it is a pipe: let the loop drain instead
server.closeAllConnections()
server.close()
process.exitCode = code
