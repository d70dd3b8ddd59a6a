// jsp-raknet (npm, protocol 10), a third-party RakNet client with quirks official RakNet
// tolerates: its ConnectionRequest (0x09) goes in an unreliable frame, it cannot read an
// open-connection-reply-1 with the security flag (a cookie) set, and its
// disconnection notification is unreliable too.
//
//   node jsp_raknet_client.js HOST PORT COUNT SIZE [TIMEOUT_MS]
//
// Connects, prints CONNECTED, sends COUNT reliable-ordered messages of SIZE bytes (0x86, the
// index, filler: split when SIZE exceeds the MTU), waits for every echo and prints
// `ECHOED n IN_ORDER yes|no`, closes and exits 0. Exits 1 (TIMEOUT n) after TIMEOUT_MS
// (20 s), and when its stdin closes.
const { Client, EncapsulatedPacket, Reliability } = require('jsp-raknet')

const [host, port, count, size, timeout] = process.argv.slice(2)
const n = Number(count)
const len = Number(size)
const client = new Client(host, Number(port))
const echoed = []

const done = (code, line) => {
  console.log(line)
  try { client.close('done') } catch (_) {}
  process.exit(code)
}

process.stdin.on('end', () => done(1, 'STDIN CLOSED'))
process.stdin.resume()
setTimeout(() => done(1, `TIMEOUT ${echoed.length}`), Number(timeout || 20000))
client.on('error', (e) => done(1, `ERROR ${e}`))

client.on('connected', (connection) => {
  console.log('CONNECTED')
  for (let i = 0; i < n; i++) {
    const buffer = Buffer.alloc(len, 0x55)
    buffer[0] = 0x86
    buffer.writeUInt16BE(i, 1)
    const pk = new EncapsulatedPacket()
    pk.reliability = Reliability.ReliableOrdered
    pk.orderChannel = 0
    pk.buffer = buffer
    connection.addEncapsulatedToQueue(pk)
  }
})

client.on('encapsulated', (pk) => {
  const b = pk.buffer
  if (b[0] !== 0x86 || b.length !== len) return
  echoed.push(b.readUInt16BE(1))
  if (echoed.length === n) {
    const inOrder = echoed.every((v, i) => v === i)
    done(0, `ECHOED ${echoed.length} IN_ORDER ${inOrder ? 'yes' : 'no'}`)
  }
})

client.connect()
