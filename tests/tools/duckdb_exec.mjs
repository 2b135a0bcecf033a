// tests/tools/duckdb_exec.mjs - runs one SQL statement in an in-memory DuckDB (the
// @duckdb/node-api package of this folder) and prints the rows it returns, if any, as JSON
// lines. Benchmarks use it to have DuckDB do the same work as ferry (bench/files.sh).
//
//   node tests/tools/duckdb_exec.mjs "COPY (SELECT * FROM read_csv_auto('x.csv')) TO 'y.parquet' (FORMAT parquet)"
//   DUCKDB_THREADS=1 limits DuckDB to one thread (default: DuckDB's own choice).

const sql = process.argv[2]
if (!sql) {
  console.error('usage: duckdb_exec.mjs "SQL"')
  process.exit(2)
}
const { DuckDBInstance } = await import('@duckdb/node-api')
const opts = {}
if (process.env.DUCKDB_THREADS) opts.threads = String(process.env.DUCKDB_THREADS)
const db = await DuckDBInstance.create(':memory:', opts)
const con = await db.connect()
try {
  const reader = await con.runAndReadAll(sql)
  for (const row of reader.getRowsJson()) process.stdout.write(JSON.stringify(row) + '\n')
} catch (e) {
  console.error(`duckdb_exec: ${e.message}`)
  process.exit(1)
} finally {
  con.closeSync?.()
}
