// tests/tools/json_rows_equal.mjs - compares two files of JSON objects, one row per line, as
// multisets of rows: each row is parsed and rendered canonically (object keys sorted;
// "YYYY-MM-DD hh:mm" timestamps written with a 'T', as DuckDB prints them with a space), so
// that PostgreSQL's row_to_json of what ferry loaded can be compared with DuckDB's to_json of
// the same Parquet file. A line that is a one-element array holding a string (a row as
// duckdb_exec.mjs prints `SELECT to_json(x)::VARCHAR`) stands for the JSON in that string.
// Prints the first differing rows and exits 1 when they differ.
//
//   node tests/tools/json_rows_equal.mjs ferry.jsonl duckdb.jsonl
import { readFileSync } from 'node:fs'

const ts = /^(\d{4}-\d\d-\d\d) (\d\d:\d\d)/
function canon(v) {
  if (Array.isArray(v)) return v.map(canon)
  if (v && typeof v === 'object') {
    const o = {}
    for (const k of Object.keys(v).sort()) o[k] = canon(v[k])
    return o
  }
  if (typeof v === 'string') return v.replace(ts, '$1T$2')
  return v
}
function rows(path) {
  const out = []
  for (const line of readFileSync(path, 'utf8').split('\n')) {
    if (line.trim() === '') continue
    let v = JSON.parse(line)
    if (Array.isArray(v) && v.length === 1 && typeof v[0] === 'string') v = JSON.parse(v[0])
    out.push(JSON.stringify(canon(v)))
  }
  return out.sort()
}
const [a, b] = [rows(process.argv[2]), rows(process.argv[3])]
const bs = new Map()
for (const r of b) bs.set(r, (bs.get(r) || 0) + 1)
const onlyA = []
for (const r of a) {
  const k = bs.get(r) || 0
  if (k === 0) onlyA.push(r)
  else bs.set(r, k - 1)
}
const onlyB = [...bs.entries()].filter(([, k]) => k > 0).map(([r]) => r)
if (a.length !== b.length || onlyA.length || onlyB.length) {
  console.error(`rows: ${a.length} vs ${b.length}; only in ${process.argv[2]}: ${onlyA.length}, only in ${process.argv[3]}: ${onlyB.length}`)
  for (const r of onlyA.slice(0, 3)) console.error(`< ${r}`)
  for (const r of onlyB.slice(0, 3)) console.error(`> ${r}`)
  process.exit(1)
}
console.log(`${a.length} rows equal`)
