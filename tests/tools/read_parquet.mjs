// tests/tools/read_parquet.mjs - reads a Parquet file with a reader ferry did not write and
// prints it as JSON lines, so C tests can compare values exactly.
//
//   node tests/tools/read_parquet.mjs --reader=duckdb|hyparquet FILE
//   node tests/tools/read_parquet.mjs --stats FILE      (hyparquet: column chunk statistics)
//   FERRY_READ_SQL='SELECT ... read_parquet($1)' node tests/tools/read_parquet.mjs FILE
//   (or --sql=...): a DuckDB query of the file instead, FILE bound to $1
//
// Line 1: {"columns":[{"name":..., "type":...}], "rows": n}. The type is the reader's own
// view: DuckDB's type name (BIGINT, DECIMAL(38,10), TIMESTAMP WITH TIME ZONE...) or, for
// hyparquet, "PHYSICAL/LOGICAL" from the footer as hyparquet decoded it.
// Then one JSON array per row; a value is null or a string in one canonical form:
//   bool "true"/"false"; integers, dates (days), times and timestamps (microseconds) as
//   decimal integers; floats as JavaScript's shortest round-trip text ("NaN", "-Infinity");
//   decimals (DuckDB) as the unscaled integer; decimals (hyparquet, which converts them to
//   a double) as that double's text; uuid in 8-4-4-4-12 lower-case hex; text as itself;
//   binary as lower-case hex.

const args = process.argv.slice(2)
let reader = 'duckdb'
let sql = process.env.FERRY_READ_SQL || null
let file = null
for (const a of args) {
  if (a.startsWith('--reader=')) reader = a.slice(9)
  else if (a.startsWith('--sql=')) sql = a.slice(6)
  else if (a === '--stats') reader = 'hyparquet-stats'
  else file = a
}
if (!file) {
  console.error('usage: read_parquet.mjs --reader=duckdb|hyparquet [--sql=...] FILE')
  process.exit(2)
}

const hex = (bytes) => Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('')
const out = (obj) => process.stdout.write(JSON.stringify(obj) + '\n')

async function readDuckdb() {
  const { DuckDBInstance } = await import('@duckdb/node-api')
  const db = await DuckDBInstance.create(':memory:')
  const con = await db.connect()
  const q = sql ?? 'SELECT * FROM read_parquet($1)'
  const res = await con.runAndReadAll(q, sql && !sql.includes('$1') ? [] : [file])
  const names = res.columnNames()
  const types = res.columnTypes().map((t) => t.toString())
  const rows = res.getRows()
  out({ columns: names.map((n, i) => ({ name: n, type: types[i] })), rows: rows.length })
  for (const row of rows) {
    out(row.map((v, i) => duckValue(v, types[i])))
  }
}

function duckValue(v, type) {
  if (v === null || v === undefined) return null
  if (typeof v === 'boolean' || typeof v === 'bigint') return String(v)
  if (typeof v === 'number') return String(v)
  if (typeof v === 'string') return v
  if (type.startsWith('DECIMAL')) return String(v.value)
  if (type === 'DATE') return String(v.days)
  if (type === 'TIME') return String(v.micros)
  if (type.startsWith('TIMESTAMP')) return String(v.micros)
  if (type === 'BLOB') return hex(v.bytes)
  return v.toString()
}

async function readHyparquet() {
  const { asyncBufferFromFile, parquetMetadataAsync, parquetReadObjects } = await import('hyparquet')
  const { compressors } = await import('hyparquet-compressors')
  const buf = await asyncBufferFromFile(file)
  const meta = await parquetMetadataAsync(buf)
  const leaves = meta.schema.slice(1)
  const typeOf = (e) => {
    const lt = e.logical_type
    let l = lt ? lt.type : (e.converted_type ?? '')
    if (lt && lt.type === 'INTEGER') l += `(${lt.bitWidth},${lt.isSigned})`
    if (lt && lt.type === 'DECIMAL') l += `(${lt.precision},${lt.scale})`
    if (lt && (lt.type === 'TIMESTAMP' || lt.type === 'TIME')) l += `(${lt.unit},${lt.isAdjustedToUTC})`
    return `${e.type}${e.type_length ? '(' + e.type_length + ')' : ''}/${l}`
  }
  const decoder = new TextDecoder('utf-8', { fatal: true })
  const parsers = {
    timestampFromMicroseconds: (v) => v,
    timestampFromMilliseconds: (v) => v,
    dateFromDays: (v) => v,
    jsonFromBytes: (b) => b && decoder.decode(b),
    stringFromBytes: (b) => b && decoder.decode(b),
  }
  const rows = await parquetReadObjects({ file: buf, compressors, parsers, utf8: false, metadata: meta })
  out({ columns: leaves.map((e) => ({ name: e.name, type: typeOf(e) })), rows: rows.length })
  for (const r of rows) {
    out(leaves.map((e) => {
      const v = r[e.name]
      if (v === null || v === undefined) return null
      if (v instanceof Uint8Array) return hex(v)
      return String(v)
    }))
  }
}

// --stats: one line per row group and column chunk, as hyparquet decodes the footer:
// [row_group, column, min_value, max_value, null_count] (values as String()).
async function statsHyparquet() {
  const { asyncBufferFromFile, parquetMetadataAsync } = await import('hyparquet')
  const meta = await parquetMetadataAsync(await asyncBufferFromFile(file))
  out({ columns: ['row_group', 'column', 'min_value', 'max_value', 'null_count'], rows: meta.row_groups.length })
  meta.row_groups.forEach((rg, g) => rg.columns.forEach((c) => {
    const st = c.meta_data.statistics ?? {}
    const s = (v) => v === undefined ? null : v instanceof Uint8Array ? hex(v) : String(v)
    out([String(g), c.meta_data.path_in_schema.join('.'), s(st.min_value), s(st.max_value), s(st.null_count)])
  }))
}

try {
  if (reader === 'duckdb') await readDuckdb()
  else if (reader === 'hyparquet') await readHyparquet()
  else if (reader === 'hyparquet-stats') await statsHyparquet()
  else throw new Error(`unknown reader ${reader}`)
} catch (e) {
  console.error(`read_parquet: ${file}: ${e.stack || e}`)
  process.exit(1)
}
