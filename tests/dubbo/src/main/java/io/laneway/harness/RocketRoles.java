package io.laneway.harness;

import java.nio.charset.StandardCharsets;

import io.laneway.demo.Hop;
import io.laneway.lane.MessageOwnership;
import io.laneway.lane.dubbo.DubboMessageOwnership;
import io.laneway.lane.rocketmq.LaneMessageListener;
import io.laneway.lane.rocketmq.LaneMessages;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;

/**
 * RocketMQ pods with laneway's RocketMQ hooks: a producer, and a consumer that handles each message
 * it is given by calling --next's {@link Hop} chain over Dubbo, in the message's lane.
 *
 * <pre>
 * rproducer --namesrv HOST:PORT --topic T [--labels FILE]          (commands: {@link MessageLoop})
 * rconsumer --id ID --namesrv HOST:PORT --topic T --group G --zk HOST:PORT --app APP --next APP [--labels FILE]
 *     joins G (G_&lt;lane&gt; in a lane), reads APP's ownership document from ZooKeeper through Dubbo,
 *     and prints a line for each message handled ({@link MessageLoop})
 * </pre>
 */
final class RocketRoles {
    static void producer(Args args) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer("laneway-producer-" + ProcessHandle.current().pid());
        producer.setNamesrvAddr(args.require("namesrv"));
        LaneMessages.register(producer);
        producer.start();
        String topic = args.require("topic");
        MessageLoop.produce("rproducer",
                value -> producer.send(new Message(topic, value.getBytes(StandardCharsets.UTF_8))), () -> {});
    }

    static void consumer(Args args) throws Exception {
        String id = args.require("id");
        Hop next = MessageLoop.dubbo(args);
        String group = MessageOwnership.group(args.require("group"));
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(args.require("namesrv"));
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(args.require("topic"), "*");
        consumer.registerMessageListener(new LaneMessageListener((messages, context) -> {
            var message = messages.get(0);
            MessageLoop.handled(id, next, new String(message.getBody(), StandardCharsets.UTF_8),
                    LaneMessages.lane(message), message.getBornTimestamp());
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        }, DubboMessageOwnership.of(args.require("app"))));
        consumer.start();
        while (consumer.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable().isEmpty()) {
            Thread.sleep(100);
        }
        Main.OUT.println("READY rconsumer id=" + id + " group=" + group
                + " ms=" + (System.currentTimeMillis() - Main.JVM_START));
        Thread.currentThread().join();
    }

    private RocketRoles() {}
}
