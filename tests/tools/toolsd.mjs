// tests/tools/toolsd.mjs - runs the tests' short-lived node tools (the signed S3 client, DuckDB,
// the Iceberg and Parquet readers, the JSON row comparison) inside one node process per test.
// On the test machines starting node costs 0.1-0.5 s of CPU, more than most calls do, and a
// test calls these tools up to hundreds of times; the modules they import (DuckDB, icebird,
// hyparquet, aws4) load once here.
//
//   node --expose-gc toolsd.mjs DIR OWNER_PID
//
// Listens on 127.0.0.1 (an ephemeral port, written to DIR/port once listening) and exits when
// OWNER_PID (the test's shell) is gone. tests/tools/nodetool.bash is the client: a test calls
// `nodetool SCRIPT ARGS...`; which scripts come here is decided there (its one list).
//
// A request: NUL-terminated fields: "toolsd1", cwd, the file for stdout, the file for stderr,
// the number of environment entries and each ("NAME=VALUE", or "NAME" when unset: the
// variables the tools read, named by the client), the script's path, the number of
// arguments and each. The answer is the exit status and a newline. Requests run one at a time: a tool sees its own argv, cwd,
// environment and stdout, as in a process of its own. Each run evaluates the script afresh
// (a new module instance); process.exit() ends the run, not this process; what the script
// changed of globalThis.fetch is put back.
import { createServer } from 'node:net'
import { openSync, writeSync, closeSync, renameSync, writeFileSync } from 'node:fs'
import { resolve } from 'node:path'
import { pathToFileURL } from 'node:url'

const [dir, ownerArg] = process.argv.slice(2)
const owner = Number(ownerArg)
if (!dir || !owner) {
  console.error('usage: toolsd.mjs DIR OWNER_PID')
  process.exit(2)
}

// the process state a run may change, as it was before the first run
const base = {
  fetch: globalThis.fetch, stdout: process.stdout.write, stderr: process.stderr.write,
  exit: process.exit, argv: process.argv, cwd: process.cwd(),
}
let current = null // the run in progress: { out, err, exited, code }
let runs = 0

class ToolExit extends Error {}

// process.exit() inside a run: the first call sets the status; the run's output stops there
function toolExit(code) {
  if (current && current.code === null) {
    current.code = code ?? process.exitCode ?? 0
    current.exited = true
  }
  throw new ToolExit('process.exit')
}

function writer(fd) {
  return function (chunk, enc, cb) {
    if (typeof enc === 'function') { cb = enc; enc = undefined }
    if (current && !current.exited) {
      writeSync(fd, typeof chunk === 'string' ? Buffer.from(chunk, enc || 'utf8') : chunk)
    }
    if (cb) process.nextTick(cb)
    return true
  }
}

// an error a run did not catch, thrown in a callback or left as a rejected promise: the run
// fails with it, as the process would have
function stray(e) {
  if (e instanceof ToolExit) return
  if (current && !current.exited) {
    writeSync(current.err, `${e && e.stack || e}\n`)
    current.code = 1
    current.exited = true
  } else {
    writeSync(2, `toolsd: outside a run: ${e && e.stack || e}\n`)
  }
}
process.on('uncaughtException', stray)
process.on('unhandledRejection', stray)

async function run(req) {
  const out = openSync(req.out, 'w')
  const err = openSync(req.err, 'w')
  current = { out, err, exited: false, code: null }
  try {
    process.chdir(req.cwd)
    for (const e of req.env) { // "NAME=VALUE", or "NAME": unset
      const i = e.indexOf('=')
      if (i < 0) delete process.env[e]
      else process.env[e.slice(0, i)] = e.slice(i + 1)
    }
    const script = resolve(req.cwd, req.script)
    process.argv = [base.argv[0], script, ...req.args]
    process.exitCode = undefined
    process.stdout.write = writer(out)
    process.stderr.write = writer(err)
    process.exit = toolExit
    try {
      await import(`${pathToFileURL(script).href}?run=${++runs}`)
    } catch (e) {
      stray(e)
    }
    if (current.code === null) current.code = process.exitCode ?? 0
    return current.code
  } finally {
    globalThis.fetch = base.fetch
    process.stdout.write = base.stdout
    process.stderr.write = base.stderr
    process.exit = base.exit
    process.argv = base.argv
    process.exitCode = undefined
    process.chdir(base.cwd)
    current = null
    closeSync(out)
    closeSync(err)
    globalThis.gc?.() // DuckDB instances and their threads go with their last reference
  }
}

// parse the NUL-terminated fields of one request; null while incomplete
function parse(buf) {
  const f = []
  let at = 0
  const next = () => {
    const i = buf.indexOf(0, at)
    if (i < 0) return null
    const s = buf.subarray(at, i).toString('utf8')
    at = i + 1
    f.push(s)
    return s
  }
  if (next() === null) return null
  if (f[0] !== 'toolsd1') throw new Error('not a toolsd request')
  for (let k = 0; k < 4; k++) if (next() === null) return null
  const nenv = Number(f[4])
  for (let k = 0; k < nenv; k++) if (next() === null) return null
  if (next() === null || next() === null) return null
  const nargs = Number(f[f.length - 1])
  for (let k = 0; k < nargs; k++) if (next() === null) return null
  const env = f.slice(5, 5 + nenv)
  const script = f[5 + nenv]
  return { cwd: f[1], out: f[2], err: f[3], env, script, args: f.slice(7 + nenv) }
}

let queue = Promise.resolve()
const server = createServer((sock) => {
  let buf = Buffer.alloc(0)
  let taken = false
  sock.on('data', (d) => {
    if (taken) return
    buf = Buffer.concat([buf, d])
    let req
    try { req = parse(buf) } catch (e) { sock.end(`2 ${e.message}\n`); taken = true; return }
    if (!req) return
    taken = true
    queue = queue.then(() => run(req)).then((code) => sock.end(`${code}\n`),
      (e) => sock.end(`2 toolsd: ${e && e.message}\n`))
  })
  sock.on('error', () => {})
})
server.listen(0, '127.0.0.1', () => {
  writeFileSync(`${dir}/port.tmp`, `${server.address().port}\n`)
  renameSync(`${dir}/port.tmp`, `${dir}/port`)
})
// the test's shell gone: nothing can call any more
setInterval(() => {
  try { process.kill(owner, 0) } catch { base.exit(0) }
}, 100)
