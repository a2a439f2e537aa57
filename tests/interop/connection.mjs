// What every js peer script here needs: js-libp2p's mplex and multistream-select, and a
// libp2p MultiaddrConnection over a plain net.Socket (libp2p's TCP transport does the
// same; we have no secure channel in between, so we write the small wrapper ourselves).
// Scripts outside this directory import it to find the pinned node_modules beside it.

// @libp2p/utils 7.4 calls Promise.withResolvers, which node 20 lacks.
if (typeof Promise.withResolvers !== 'function') {
  Promise.withResolvers = function () {
    let resolve, reject
    const promise = new Promise((res, rej) => { resolve = res; reject = rej })
    return { promise, resolve, reject }
  }
}

import { once } from 'node:events'
import { AbstractMultiaddrConnection } from '@libp2p/utils'
import { defaultLogger } from '@libp2p/logger'
import { multiaddr } from '@multiformats/multiaddr'

export { mplex } from '@libp2p/mplex'
export * as mss from '@libp2p/multistream-select'

// One socket.write per buffer; stop at the first write that asks for a drain.
export class SocketConnection extends AbstractMultiaddrConnection {
  constructor (socket, direction) {
    super({
      log: defaultLogger().forComponent('interop:conn'),
      direction,
      remoteAddr: multiaddr(`/ip4/127.0.0.1/tcp/${socket.remotePort}`)
    })
    this.socket = socket
    socket.setNoDelay(true)
    socket.on('data', (buf) => this.onData(buf))
    socket.on('drain', () => this.safeDispatchEvent('drain'))
    socket.once('end', () => this.onTransportClosed())
    socket.once('close', () => this.onTransportClosed())
    socket.on('error', (err) => this.abort(err))
  }

  sendData (data) {
    let sentBytes = 0
    let canSendMore = true
    for (const buf of data) {
      sentBytes += buf.byteLength
      canSendMore = this.socket.write(buf)
      if (!canSendMore) break
    }
    return { sentBytes, canSendMore }
  }

  async sendClose () {
    if (this.socket.destroyed) return
    this.socket.end()
    await once(this.socket, 'close')
  }

  sendReset () { this.socket.resetAndDestroy() }
  sendPause () { this.socket.pause() }
  sendResume () { this.socket.resume() }
}

// A pull-style reader over a stream's 'message' events: next() resolves to the next
// chunk, or null at the end (remote close or our close).  After the end, next.error
// holds the error the stream closed with (a StreamResetError when the remote reset
// it), or null for a clean end.
export function reader (stream) {
  const queue = []
  let waiting = null
  let ended = false
  const wake = () => { if (waiting) { const w = waiting; waiting = null; w() } }
  stream.addEventListener('message', (evt) => {
    queue.push(evt.data.subarray ? evt.data.subarray() : evt.data)
    wake()
  })
  const end = (evt) => {
    ended = true
    if (evt?.error != null) next.error = evt.error
    wake()
  }
  stream.addEventListener('remoteCloseWrite', () => end())
  stream.addEventListener('close', end)
  async function next () {
    while (queue.length === 0 && !ended) await new Promise((resolve) => { waiting = resolve })
    return queue.length ? queue.shift() : null
  }
  next.error = null
  return next
}

// Send, waiting for the real 'drain' event when the stream asks for it (stream.onDrain()
// in @libp2p/utils 7.4.1 resolves at once after the first drain).
export async function send (stream, data) {
  if (!stream.send(data)) await once(stream, 'drain')
}
