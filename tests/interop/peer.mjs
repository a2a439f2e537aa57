// The js-libp2p side of the interop tests: @libp2p/mplex 12 (and, with --negotiate,
// @libp2p/multistream-select 7) over one TCP connection.  The protocol it speaks is
// described in tests/interop/README.md; tests/interop/pylibp2p_peer.py speaks the same.
//
//   node peer.mjs listen [--negotiate] [--defaults]      prints "READY <port>"
//   node peer.mjs dial --port P [--negotiate] [--defaults]
//
// Either way it serves one connection, prints {"events": [...]} when it ends, and exits.

import net from 'node:net'
import { once } from 'node:events'
import { mplex, mss, reader, send, SocketConnection } from './connection.mjs'

const MPLEX = '/mplex/6.7.0'
const APP = '/interop/1.0.0'

const args = process.argv.slice(2)
const role = args[0]
const flag = (name) => args.includes(name)
const option = (name) => { const i = args.indexOf(name); return i < 0 ? undefined : args[i + 1] }
const negotiate = flag('--negotiate')
// Without --defaults the stream-open rate limit is lifted (5 opens per second by
// default, which any load test exceeds); with it, the library runs as shipped.
const factory = mplex(flag('--defaults') ? {} : { disconnectThreshold: Infinity })()

const events = []
let eventAdded = () => {}
function addEvent (event) { events.push(event); eventAdded() }
let socket

// Byte i of a pattern payload: both sides compute it, so only sizes cross the wire.
function pattern (size) {
  const out = new Uint8Array(size)
  for (let i = 0; i < size; i++) out[i] = (i * 31 + 7) & 0xff
  return out
}

function concat (chunks) { return Buffer.concat(chunks.map((c) => Buffer.from(c.buffer, c.byteOffset, c.byteLength))) }

async function readAll (next) {
  const chunks = []
  for (let c; (c = await next()) !== null;) chunks.push(c)
  return concat(chunks)
}

function endKind (next) {
  if (next.error == null) return 'eof'
  return next.error.name === 'StreamResetError' ? 'reset' : `error: ${next.error.name}`
}

async function sendInPieces (stream, data) {
  for (let i = 0; i < data.byteLength; i += 65536) await send(stream, data.subarray(i, i + 65536))
}

async function answer (stream, object) {
  await send(stream, new TextEncoder().encode(JSON.stringify(object)))
  await stream.close()
}

// A stream we opened: negotiate the application protocol first when asked to.
async function openStream (muxer, mode) {
  const stream = await muxer.createStream()
  if (negotiate) await mss.select(stream, [APP])
  await send(stream, new Uint8Array([mode.charCodeAt(0)]))
  return stream
}

// --- streams the Python side opens: the first byte chooses the behaviour ------------

async function serveStream (stream, muxer) {
  if (negotiate) await mss.handle(stream, [APP])
  const next = reader(stream)
  let first = await next()
  if (first === null) return
  const mode = String.fromCharCode(first[0])
  // The rest of the first chunk, then the remaining chunks.
  let rest = first.subarray(1)
  const more = async () => { if (rest !== null) { const r = rest; rest = null; if (r.byteLength) return r } return next() }
  const body = async () => { const chunks = []; for (let c; (c = await more()) !== null;) chunks.push(c); return concat(chunks) }
  switch (mode) {
    case 'E':
      for (let c; (c = await more()) !== null;) await send(stream, c)
      await stream.close()
      break
    case 'S': {
      const answerBytes = Buffer.alloc(8)
      answerBytes.writeBigUInt64BE(BigInt((await body()).byteLength))
      await send(stream, answerBytes)
      await stream.close()
      break
    }
    case 'R': { // R + 4-byte size: send that many pattern bytes, then reset
      const head = await exactly(more, 4)
      await sendInPieces(stream, pattern(head.readUInt32BE(0)))
      stream.abort(new Error('reset on request'))
      break
    }
    case 'W': { // record how the stream ends
      const data = await body()
      addEvent({ stream: 'W', bytes: data.byteLength, intact: data.equals(Buffer.from(pattern(data.byteLength))), end: endKind(next) })
      break
    }
    case 'N':
      await answer(stream, { name: null, id: stream.id })
      break
    case 'L': { // the event log, once it holds the number of events asked for
      const wanted = Number((await body()).toString() || '0')
      while (events.length < wanted) await new Promise((resolve) => { eventAdded = resolve })
      await answer(stream, { events })
      break
    }
    case 'X': // drop the whole connection, mid-transfer on the other streams
      socket.destroy()
      break
    case 'C':
      await answer(stream, await command(muxer, JSON.parse((await body()).toString())))
      break
    default:
      stream.abort(new Error(`unknown mode ${mode}`))
  }
}

async function exactly (more, n) {
  const chunks = []
  let have = 0
  while (have < n) { const c = await more(); if (c === null) throw new Error('short'); chunks.push(c); have += c.byteLength }
  const all = concat(chunks)
  if (all.byteLength > n) throw new Error('mode header followed by unexpected bytes')
  return all
}

// --- commands: the js side opens streams to the Python side -------------------------

async function command (muxer, cmd) {
  try {
    switch (cmd.do) {
      case 'echo': return { results: await Promise.all(cmd.sizes.map((size) => echoOne(muxer, size))) }
      case 'reset': { // send pattern bytes, then reset: the Python side records what it saw
        const stream = await openStream(muxer, 'T')
        await sendInPieces(stream, pattern(cmd.size))
        stream.abort(new Error('reset by the js peer'))
        return { sent: cmd.size }
      }
      case 'await_reset': { // ask the Python side to send bytes then reset
        const stream = await openStream(muxer, 'R')
        const head = Buffer.alloc(4); head.writeUInt32BE(cmd.size)
        const next = reader(stream)
        await send(stream, head)
        const data = await readAll(next)
        return { bytes: data.byteLength, intact: data.equals(Buffer.from(pattern(data.byteLength))), end: endKind(next) }
      }
      case 'name': { // the Python side answers the name it saw for this stream
        const stream = await openStream(muxer, 'N')
        const next = reader(stream)
        await stream.close()
        return { id: stream.id, answer: (await readAll(next)).toString() }
      }
      case 'select': { // multistream-select on a new stream, with ids the test chooses
        const stream = await muxer.createStream()
        try {
          const selected = await mss.select(stream, cmd.protocols)
          await stream.close()
          return { selected }
        } catch (err) {
          stream.abort(err)
          return { error: err.name, message: err.message }
        }
      }
      default: return { error: `unknown command ${cmd.do}` }
    }
  } catch (err) {
    return { error: err.name, message: err.message }
  }
}

async function echoOne (muxer, size) {
  const stream = await openStream(muxer, 'E')
  const next = reader(stream)
  const data = pattern(size)
  const [, echoed] = await Promise.all([
    sendInPieces(stream, data).then(() => stream.close()),
    readAll(next)
  ])
  return echoed.equals(Buffer.from(data)) ? 'ok' : `echo of ${size} bytes came back as ${echoed.byteLength} bytes`
}

// --- the connection -----------------------------------------------------------------

async function run (sock, direction) {
  socket = sock
  const conn = new SocketConnection(sock, direction)
  if (negotiate) {
    if (direction === 'outbound') await mss.select(conn, [MPLEX])
    else await mss.handle(conn, [MPLEX])
  }
  const muxer = factory.createStreamMuxer(conn)
  muxer.addEventListener('stream', (evt) => {
    serveStream(evt.detail, muxer).catch((err) => {
      addEvent({ error: err.name, message: err.message })
      evt.detail.abort(err) // as an application would: the other side must not wait on us
    })
  })
  if (flag('--greet')) { // open a stream at once, racing the Python side's first open
    openStream(muxer, 'G').then(async (stream) => {
      await send(stream, new TextEncoder().encode(`hello from ${stream.id}`))
      await stream.close()
    }).catch((err) => addEvent({ error: err.name, message: err.message }))
  }
  await once(sock, 'close')
  console.log(JSON.stringify({ events }))
}

if (role === 'listen') {
  const server = net.createServer((sock) => { server.close(); run(sock, 'inbound').then(() => process.exit(0)) })
  server.listen(0, '127.0.0.1', () => console.log(`READY ${server.address().port}`))
} else if (role === 'dial') {
  const sock = net.connect(Number(option('--port')), '127.0.0.1')
  sock.once('connect', () => run(sock, 'outbound').then(() => process.exit(0)))
  sock.once('error', (err) => { console.error(err); process.exit(1) })
} else {
  console.error('usage: node peer.mjs listen|dial [--port P] [--negotiate] [--defaults] [--greet]')
  process.exit(2)
}
