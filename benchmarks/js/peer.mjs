// One side of a benchmark run with js-libp2p's @libp2p/mplex 12 over a TCP socket.
// Same protocol as benchmarks/peer.py: the server prints "READY <port>", serves one
// connection (first byte of a stream: S = sink and answer the byte count, E = echo),
// and both sides print their measurements as one JSON line.
//
//   node peer.mjs server
//   node peer.mjs client --port P --case small|fanout|reqresp --size N --count N [--streams N]
//   node peer.mjs client --port P --case conns --conns N --warmup S --seconds S --server-pid PID

import net from 'node:net'
import fs from 'node:fs'
import { once } from 'node:events'
// The shared wrapper lives beside the pinned node_modules, in tests/interop.
import { mplex, reader, send, SocketConnection } from '../../tests/interop/connection.mjs'

// The library's default disconnectThreshold (5 new streams per second) would kill the
// fan-out case; raise it as the library's own compliance tests do.
const factory = mplex({ disconnectThreshold: Infinity })()

function peakRss () { return process.resourceUsage().maxRSS * 1024 }
// CPU seconds (user + system) since `since`, a process.cpuUsage() reading.
function cpuSince (since) { const used = process.cpuUsage(since); return (used.user + used.system) / 1e6 }
function emit (fields) { console.log(JSON.stringify({ ...fields, peak_rss: peakRss() })) }

async function serveStream (stream) {
  const next = reader(stream)
  let first = await next()
  if (first === null) return
  const mode = first[0]
  let rest = first.subarray(1)
  if (mode === 0x53) { // 'S'
    let count = rest.byteLength
    for (let chunk; (chunk = await next()) !== null;) count += chunk.byteLength
    const answer = Buffer.alloc(8)
    answer.writeBigUInt64BE(BigInt(count))
    await send(stream, answer)
  } else {
    if (rest.byteLength) await send(stream, rest)
    for (let chunk; (chunk = await next()) !== null;) await send(stream, chunk)
  }
  await stream.close()
}

// Serves every connection the client opens; done when the last one closes (the client
// opens all of its connections before it closes any).
async function server () {
  let cpu
  let open = 0
  const srv = net.createServer((socket) => {
    open++
    const muxer = factory.createStreamMuxer(new SocketConnection(socket, 'inbound'))
    muxer.addEventListener('stream', (evt) => { serveStream(evt.detail).catch(() => {}) })
    socket.once('close', () => {
      if (--open > 0) return
      srv.close()
      emit({ role: 'server', cpu_seconds: cpuSince(cpu) })
    })
  })
  srv.listen(0, '127.0.0.1', () => {
    console.log(`READY ${srv.address().port}`)
    cpu = process.cpuUsage() // from here on: serving (start-up left out)
  })
}

async function sinkAck (stream, expected) {
  const next = reader(stream)
  await stream.close()
  const parts = []
  for (let chunk; (chunk = await next()) !== null;) parts.push(chunk)
  const count = Number(Buffer.concat(parts).readBigUInt64BE(0))
  if (count !== expected) throw new Error(`server counted ${count}, expected ${expected}`)
}

// A request on a stream of its own: open, the echo mode byte and 32 B, half-close, the
// 32 B reply read to its end.
const REQUEST = new Uint8Array(33).fill(0x71)
REQUEST[0] = 0x45 // 'E'
async function oneRequest (muxer) {
  const stream = await muxer.createStream()
  const next = reader(stream)
  await send(stream, REQUEST)
  await stream.close()
  let got = 0
  for (let chunk; (chunk = await next()) !== null;) got += chunk.byteLength
  if (got !== 32) throw new Error(`a reply of ${got} bytes, expected 32`)
}

// Another process's CPU seconds, from /proc (USER_HZ is 100 on Linux).
function processCpu (pid) {
  const fields = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(')').pop().trim().split(/\s+/)
  return (Number(fields[11]) + Number(fields[12])) / 100
}

const sleep = (seconds) => new Promise((resolve) => setTimeout(resolve, seconds * 1000))

// The many-connections family (mplex/_bench/many_peer.py): a loop of requests per
// connection, a stream per request; warm-up (the JIT's), then the timed phase.
async function manyConnections (opts) {
  const muxers = []
  for (let i = 0; i < opts.conns; i++) {
    const socket = net.connect(opts.port, '127.0.0.1')
    await once(socket, 'connect')
    muxers.push({ socket, muxer: factory.createStreamMuxer(new SocketConnection(socket, 'outbound')) })
  }
  const times = []
  let timing = false
  let stop = false
  const loop = async ({ muxer }) => {
    while (!stop) {
      const start = performance.now()
      await oneRequest(muxer)
      if (timing) times.push(performance.now() - start)
    }
  }
  const loops = Promise.all(muxers.map(loop))
  await sleep(opts.warmup)
  timing = true
  const start = performance.now()
  const cpu = process.cpuUsage()
  const serverCpu = processCpu(opts['server-pid'])
  await sleep(opts.seconds)
  timing = false
  stop = true
  const seconds = (performance.now() - start) / 1000
  const fields = { cpu_seconds: cpuSince(cpu), server_cpu_seconds: processCpu(opts['server-pid']) - serverCpu }
  await loops
  times.sort((a, b) => a - b)
  const at = (q) => times[Math.min(times.length - 1, Math.floor(times.length * q))] * 1000
  emit({ role: 'client', seconds, requests: times.length, connections: opts.conns, p50_us: at(0.5), p99_us: at(0.99), ...fields })
  for (const { muxer, socket } of muxers) { await muxer.close(); socket.destroy() }
}

async function client (opts) {
  if (opts.case === 'conns') return manyConnections(opts)
  const socket = net.connect(opts.port, '127.0.0.1')
  await once(socket, 'connect')
  const muxer = factory.createStreamMuxer(new SocketConnection(socket, 'outbound'))
  const chunk = new Uint8Array(opts.size).fill(0x78)
  const one = async () => {
    const stream = await muxer.createStream()
    await send(stream, new Uint8Array([0x53]))
    for (let i = 0; i < opts.count; i++) await send(stream, chunk)
    await sinkAck(stream, opts.count * opts.size)
  }
  // A stream per request, as libp2p RPC does: open, the echo mode byte and 32 B,
  // half-close, read the reply to its end.
  const worker = async () => {
    for (let i = 0; i < opts.count; i++) await oneRequest(muxer)
  }
  const start = performance.now()
  const cpu = process.cpuUsage()
  if (opts.case === 'reqresp') {
    await Promise.all(Array.from({ length: opts.streams }, worker))
    const seconds = (performance.now() - start) / 1000
    emit({ role: 'client', seconds, requests: opts.streams * opts.count, cpu_seconds: cpuSince(cpu) })
    await muxer.close()
    socket.destroy()
    return
  }
  const streams = opts.case === 'fanout' ? opts.streams : 1
  await Promise.all(Array.from({ length: streams }, one))
  const seconds = (performance.now() - start) / 1000
  emit({ role: 'client', seconds, bytes: opts.count * opts.size * streams })
  await muxer.close()
  socket.destroy()
}

const [role, ...rest] = process.argv.slice(2)
const opts = { port: 0, case: 'small', size: 32, count: 1000, streams: 1 }
for (let i = 0; i < rest.length; i += 2) {
  const key = rest[i].replace(/^--/, '')
  opts[key] = key === 'case' ? rest[i + 1] : Number(rest[i + 1])
}
if (role === 'server') server()
else client(opts).catch((err) => { console.error(err); process.exit(1) })
