// A js-libp2p node (TCP, noise, mplex or yamux, identify, ping) for the py-libp2p host
// tests and benchmarks.  Driven by JSON lines: it prints {"ready", "id", "addrs"} at
// start, {"identified", "protocols"} when identify completes with a peer, and
// answers commands read from stdin, one JSON object a line:
//   {"dial": multiaddr}       -> {"dialed": peerId}
//   {"ping": peerId}          -> {"pinged": milliseconds}
// It serves /echo/1.0.0 (each chunk sent back; closes after the peer's end) and
// /sink/1.0.0 (reads to the end, then sends the byte count as text and closes).
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

const node = await createLibp2p({
  addresses: { listen: ['/ip4/127.0.0.1/tcp/0'] },
  transports: [tcp()],
  connectionEncrypters: [noise()],
  // js mplex closes a connection after 5 stream opens a second by default, and counts
  // identify and ping too: raise it, as js-libp2p's own tests do.
  streamMuxers: [muxerName === 'yamux' ? yamux() : mplex({ disconnectThreshold: 1_000_000 })],
  services: { identify: identify(), ping: ping() },
  connectionMonitor: { enabled: false }
})

node.addEventListener('peer:identify', (evt) => {
  print({ identified: evt.detail.peerId.toString(), protocols: evt.detail.protocols })
})

await node.handle('/echo/1.0.0', async (stream) => {
  const next = reader(stream)
  for (let chunk; (chunk = await next()) !== null;) await send(stream, chunk)
  await stream.close()
}, { maxInboundStreams: 1024, runOnLimitedConnection: true })

await node.handle('/sink/1.0.0', async (stream) => {
  const next = reader(stream)
  let total = 0
  for (let chunk; (chunk = await next()) !== null;) total += chunk.byteLength
  await send(stream, new TextEncoder().encode(String(total)))
  await stream.close()
}, { maxInboundStreams: 1024 })

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
