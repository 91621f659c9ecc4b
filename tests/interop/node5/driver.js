// Drives the official RocketMQ 5 Node.js client (npm rocketmq-client-nodejs) as its README shows,
// for tests/interop/test_rocketmq5_node.py:  node driver.js ENDPOINT TOPIC GROUP COUNT
// Sends COUNT messages, then receives and acks them with a SimpleConsumer; prints one
// "@RESULT@{json}" line per outcome.
'use strict';
const { Producer, SimpleConsumer } = require('rocketmq-client-nodejs');

function emit(fields) {
  console.log('@RESULT@' + JSON.stringify(fields));
}

async function main() {
  const [endpoint, topic, group, countText] = process.argv.slice(2);
  const count = Number(countText);
  const producer = new Producer({ endpoints: endpoint });
  await producer.startup();
  for (let i = 0; i < count; i++) {
    const receipt = await producer.send({ topic, tag: 'node', keys: [`node-${i}`], body: Buffer.from(`node-${i}`) });
    emit({ event: 'sent', body: `node-${i}`, message_id: receipt.messageId });
  }
  const consumer = new SimpleConsumer({
    consumerGroup: group,
    endpoints: endpoint,
    subscriptions: new Map().set(topic, '*'),
    awaitDuration: 5000,
  });
  await consumer.startup();
  const deadline = Date.now() + 30000;
  let acked = 0;
  while (acked < count && Date.now() < deadline) {
    const messages = await consumer.receive(16, 15000);
    for (const message of messages) {
      emit({ event: 'received', body: message.body.toString(), message_id: message.messageId, tag: message.tag });
      await consumer.ack(message);
      acked++;
    }
  }
  await consumer.shutdown();
  await producer.shutdown(); // last: the client's logger closes with the first shutdown
  emit({ event: 'done' });
}

main().then(() => process.exit(0), (error) => {
  console.error(error);
  process.exit(1);
});
