// A js-libp2p node (TCP, noise, mplex or yamux, identify, ping) for the py-libp2p host
// tests and benchmarks.  Driven by JSON lines: it prints {"ready", "id", "addrs"} at
// start, {"identified", "protocols"} when identify completes with a peer, and
// answers commands read from stdin, one JSON object a line:
//   {"dial": multiaddr}       -> {"dialed": peerId}
//   {"ping": peerId}          -> {"pinged": milliseconds}
// It serves /echo/1.0.0 (each chunk sent back; closes after the peer's end) and
// /sink/1.0.0 (reads to the end, then sends the byte count as text and closes).
//
// For the host-level benchmarks (same protocol as benchmarks/libp2p_host_peer.py):
//   node libp2p_node.mjs --bench-server              prints READY <port> <multiaddr>,
//                                                    exits after a /done/1.0.0 stream
//   node libp2p_node.mjs --bench-client --addr A --case small|echo|latency|reqresp
//                        [--size N] [--count N] [--streams N]   prints one JSON line
import './connection.mjs' // the Promise.withResolvers polyfill node 20 needs
import { createInterface } from 'node:readline'
import { createLibp2p } from 'libp2p'
import { tcp } from '@libp2p/tcp'
import { noise } from '@chainsafe/libp2p-noise'
import { mplex } from '@libp2p/mplex'
import { yamux } from '@libp2p/yamux'
import { identify } from '@libp2p/identify'
import { ping } from '@libp2p/ping'
import { peerIdFromString } from '@libp2p/peer-id'
import { multiaddr } from '@multiformats/multiaddr'
import { reader, send } from './connection.mjs'

const muxerName = process.argv.includes('--yamux') ? 'yamux' : 'mplex'
const print = (object) => process.stdout.write(JSON.stringify(object) + '\n')
const option = (name, fallback) => {
  const at = process.argv.indexOf(`--${name}`)
  return at < 0 ? fallback : process.argv[at + 1]
}
const peakRss = () => process.resourceUsage().maxRSS * 1024

const node = await createLibp2p({
  addresses: { listen: ['/ip4/127.0.0.1/tcp/0'] },
  transports: [tcp()],
  connectionEncrypters: [noise()],
  // js mplex closes a connection after 5 stream opens a second by default, and counts
  // identify and ping too: raise it, as js-libp2p's own tests do.
  streamMuxers: [muxerName === 'yamux' ? yamux() : mplex({ disconnectThreshold: 1_000_000 })],
  // A host identifies a new peer on its own; the tests open identify streams too.
  services: { identify: identify({ maxInboundStreams: 16 }), ping: ping({ maxInboundStreams: 16 }) },
  connectionMonitor: { enabled: false }
})

if (!process.argv.some((arg) => arg.startsWith('--bench-'))) {
  node.addEventListener('peer:identify', (evt) => {
    print({ identified: evt.detail.peerId.toString(), protocols: evt.detail.protocols })
  })
}

async function readAll (next) {
  let total = 0
  const chunks = []
  for (let chunk; (chunk = await next()) !== null;) { total += chunk.byteLength; chunks.push(chunk) }
  return { total, chunks }
}

async function readExactly (next, size) {
  let got = 0
  while (got < size) {
    const chunk = await next()
    if (chunk === null) throw new Error(`the stream ended after ${got} of ${size} bytes`)
    got += chunk.byteLength
  }
}

const benchCases = {
  async small (address, size, count) {
    const stream = await node.dialProtocol(address, '/sink/1.0.0')
    const next = reader(stream)
    const chunk = new Uint8Array(size)
    const start = performance.now()
    for (let i = 0; i < count; i++) await send(stream, chunk)
    await stream.close()
    const { chunks } = await readAll(next)
    const seconds = (performance.now() - start) / 1000
    const counted = Number(new TextDecoder().decode(Buffer.concat(chunks.map((c) => Buffer.from(c)))))
    if (counted !== size * count) throw new Error(`the server counted ${counted}, not ${size * count}`)
    return { seconds, bytes: size * count }
  },
  async echo (address, size, count, streams) {
    const one = async () => {
      const stream = await node.dialProtocol(address, '/echo/1.0.0', { maxOutboundStreams: 1024 })
      const next = reader(stream)
      const payload = new Uint8Array(size)
      const reading = readExactly(next, size)
      for (let at = 0; at < size; at += 16384) await send(stream, payload.subarray(at, at + 16384))
      await reading
      await stream.close()
    }
    const start = performance.now()
    await Promise.all(Array.from({ length: streams }, one))
    return { seconds: (performance.now() - start) / 1000, bytes: size * streams }
  },
  async reqresp (address, size, count, streams) {
    // A stream per request: 32 B out, half-close, the 32 B reply read to its end.
    const request = new Uint8Array(32).fill(0x71)
    const worker = async () => {
      for (let i = 0; i < count; i++) {
        const stream = await node.dialProtocol(address, '/echo/1.0.0', { maxOutboundStreams: 1024 })
        const next = reader(stream)
        await send(stream, request)
        await stream.close()
        const { total } = await readAll(next)
        if (total !== 32) throw new Error(`a reply of ${total} bytes, expected 32`)
      }
    }
    const start = performance.now()
    await Promise.all(Array.from({ length: streams }, worker))
    return { seconds: (performance.now() - start) / 1000, requests: streams * count }
  },
  async latency (address, size, count) {
    const stream = await node.dialProtocol(address, '/echo/1.0.0', { maxOutboundStreams: 1024 })
    const next = reader(stream)
    const message = new Uint8Array(size)
    const times = []
    for (let i = 0; i < count; i++) {
      const start = performance.now()
      await send(stream, message)
      await readExactly(next, size)
      times.push((performance.now() - start) * 1000)
    }
    await stream.close()
    times.sort((a, b) => a - b)
    const at = (q) => times[Math.min(times.length - 1, Math.floor(q * times.length))]
    return { seconds: times.reduce((a, b) => a + b, 0) / 1e6, p50_us: at(0.5), p99_us: at(0.99) }
  }
}

await node.handle('/echo/1.0.0', async (stream) => {
  const next = reader(stream)
  for (let chunk; (chunk = await next()) !== null;) await send(stream, chunk)
  await stream.close()
}, { maxInboundStreams: 1024, maxOutboundStreams: 1024, runOnLimitedConnection: true })

await node.handle('/sink/1.0.0', async (stream) => {
  const next = reader(stream)
  let total = 0
  for (let chunk; (chunk = await next()) !== null;) total += chunk.byteLength
  await send(stream, new TextEncoder().encode(String(total)))
  await stream.close()
}, { maxInboundStreams: 1024, maxOutboundStreams: 1024 })

if (process.argv.includes('--bench-server')) {
  const done = Promise.withResolvers()
  await node.handle('/done/1.0.0', async (stream) => { await stream.close(); done.resolve() })
  const address = node.getMultiaddrs()[0]
  process.stdout.write(`READY ${String(address).split('/')[4]} ${address}\n`)
  await done.promise
  await node.stop()
  print({ role: 'server', peak_rss: peakRss() })
  process.exit(0)
}

// Calls `attempt` up to five times, waiting a little longer after each failure, for a
// peer process that only just started.
async function retried (attempt) {
  for (let tries = 1; ; tries++) {
    try {
      return await attempt()
    } catch (err) {
      if (tries === 5) throw err
      await new Promise((resolve) => setTimeout(resolve, 100 * tries))
    }
  }
}

if (process.argv.includes('--bench-client')) {
  const address = multiaddr(option('addr'))
  const size = Number(option('size', 32))
  const count = Number(option('count', 1000))
  const streams = Number(option('streams', 1))
  // The server prints READY once listening, yet a dial right after it was once refused
  // (ECONNREFUSED) in a full `make bench`.
  await retried(() => node.dial(address))
  const result = await benchCases[option('case', 'small')](address, size, count, streams)
  print({ role: 'client', ...result, peak_rss: peakRss() })
  // The server waits for this stream. js-libp2p's multistream-select once failed to
  // negotiate it right after the quick 32 B case (UnexpectedEOFError): try again.
  await retried(async () => { await (await node.dialProtocol(address, '/done/1.0.0')).close() })
  await node.stop()
  process.exit(0)
}

print({ ready: true, id: node.peerId.toString(), addrs: node.getMultiaddrs().map(String) })

for await (const line of createInterface({ input: process.stdin })) {
  if (!line.trim()) continue
  const command = JSON.parse(line)
  try {
    if (command.dial) {
      const connection = await node.dial(multiaddr(command.dial))
      print({ dialed: connection.remotePeer.toString() })
    } else if (command.ping) {
      print({ pinged: await node.services.ping.ping(peerIdFromString(command.ping)) })
    }
  } catch (err) {
    print({ error: String(err?.stack ?? err) })
  }
}
await node.stop()
